"""Hold a running OpenAI-compatible server to what it can be held to without controlling
its schedule (issue 25, deliverable 4): each request alone against the B=1 goldens; the
needle test of batch invariance; what the server says about itself. ``batchlab http
check`` drives it (docs/subjects.md, section 4).

    wire.py         HTTP: one JSON request, one SSE stream, errors that say what broke
    reply.py        an answer in any of the dialects as one record (ids, logprobs, usage)
    dialect.py      how this server wants the prompt and the logprobs asked for (probed)
    cases.py        the golden cases (matrices/http.toml) and the needle's fillers
    result.py       a check's result record and the table / JUnit printers
    alone.py        (a) each request alone against its B=1 golden
    needle.py       (b) one prompt alone, then among concurrent fillers
    consistency.py  (c) logprobs, usage, finish reasons, stop strings, streaming
    run.py          probe once, run the checks asked for
"""
