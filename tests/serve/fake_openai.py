"""A fake OpenAI completions server that answers from the goldens, with seeded faults.

It serves the zoo llama's cases of matrices/http.toml exactly as their goldens say
(token_ids, logprobs and top-5 named ``token_id:N``, usage, finish reasons, stop
strings, streaming), and any other prompt (a needle filler) a fixed answer; each fault
breaks one thing a check of ``batchlab http check`` must catch:

    token      step 3 of every golden answer is another token
    logprob    each token's reported logprob is its second alternative's
    usage      completion_tokens counts one token too many
    batch      a golden answer given while another request is in flight has its
               logprobs one float step lower (a batch-variant server)
    stop       stop strings are ignored
    garbage    every completion is answered with bytes that are not JSON
    mlx-naming (dialect "mlx") each logprob entry names its first alternative

and three say whom a request decoded beside, as ``batchlab serve`` does
(``choices[0].batchlab.peak_decode_rows``): ``peaks`` truthfully (2 where another request
was in flight, else 1), ``serial`` always 1 (a server that decodes one request at a time),
``bad-peaks`` a value that is not a count.

``dialect="mlx"`` answers as mlx_lm.server does: token-id prompts refused (404), logprobs
asked as ``logprobs: true, top_logprobs: K``, ids only in ``logprobs.content``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from batchlab.commands.http import DEFAULT_HTTP_MATRIX
from batchlab.defaults import DEFAULT_GOLDENS
from batchlab.http_gate.cases import load_cases
from batchlab.zoo.text import tokenizer_for

MODEL = "llama"
STEP_S = 0.001  # a token's time: concurrent requests overlap


class FakeServer:
    def __init__(self, faults: frozenset[str] = frozenset(), dialect: str = "openai"):
        self.faults, self.dialect = faults, dialect
        self.tokenizer = tokenizer_for(MODEL)
        self.cases = {c.prompt: c for c in load_cases(DEFAULT_HTTP_MATRIX, DEFAULT_GOLDENS,
                                                      MODEL, self.tokenizer)}
        self.in_flight = 0
        self.started = 0  # requests begun so far
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, body: dict):
        """(prompt tokens, tokens, logprobs, alternatives as (id, logprob), text pieces,
        finish_reason, crowded) of a completion."""
        prompt = body["prompt"]
        ids = tuple(prompt) if isinstance(prompt, list) else tuple(
            self.tokenizer.encode(prompt, add_special_tokens=False))
        max_tokens = body["max_tokens"]
        # crowded: another request was in flight at some point of this one's life (here
        # at its start, or one started during it), not only at its end: on a loaded
        # machine the fillers may all finish before the needle does
        with self.lock:
            self.in_flight += 1
            crowded = self.in_flight > 1
            started = self.started = self.started + 1
        try:
            time.sleep(STEP_S * max_tokens)
            with self.lock:
                crowded = crowded or self.in_flight > 1 or self.started != started
        finally:
            with self.lock:
                self.in_flight -= 1
        case = self.cases.get(ids)
        if case is None:  # a filler
            tokens = [(sum(ids) + i) % 200 for i in range(max_tokens)]
            tops = [((t, -1.0), (t + 1, -2.0)) for t in tokens]
        else:
            tokens, tops = list(case.tokens[:max_tokens]), list(case.top[:max_tokens])
            if "token" in self.faults and len(tokens) > 3:
                tokens[3] = (tokens[3] + 1) % 256
        logprobs = [dict(top)[t] if t in dict(top) else top[0][1] for t, top in zip(tokens, tops)]
        if "logprob" in self.faults:
            logprobs = [top[1][1] for top in tops]
        if "batch" in self.faults and crowded and case is not None:
            logprobs = [float(np.nextafter(np.float32(v), np.float32(-np.inf))) for v in logprobs]
        pieces = [self.tokenizer.decode([t]) for t in tokens]
        finish = "length"
        stops = body.get("stop") or []
        if stops and "stop" not in self.faults:
            text = ""
            for i, piece in enumerate(pieces):
                hit = min((j for j in ((text + piece).find(s) for s in stops) if j >= 0),
                          default=-1)
                if hit >= 0:
                    tokens, logprobs, tops = tokens[:i + 1], logprobs[:i + 1], tops[:i + 1]
                    pieces = [*pieces[:i], (text + piece)[len(text):hit]]
                    finish = "stop"
                    break
                text += piece
        return (len(ids), tokens, logprobs, [list(top) for top in tops], pieces, finish,
                crowded)


def _handler(fake: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, payload: bytes, kind: str = "application/json"):
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):
            self._send(200, json.dumps({"data": [{"id": MODEL}]}).encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if "garbage" in fake.faults:
                return self._send(200, b"<html>not json</html>", "text/html")
            if fake.dialect == "mlx" and isinstance(body["prompt"], list):
                return self._send(404, b'{"error": "text input must be of type `str`"}')
            if fake.dialect == "mlx" and type(body.get("logprobs", False)) is not bool:
                return self._send(400, b'{"error": "logprobs must be of type bool"}')
            prompt, tokens, logprobs, tops, pieces, finish, crowded = fake.answer(body)
            completion = len(tokens) + ("usage" in fake.faults)
            usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}
            answer = _mlx_answer if fake.dialect == "mlx" else _openai_answer
            choices, events = answer(body, fake.faults, tokens, logprobs, tops, pieces, finish)
            peaks = {"peaks": 2 if crowded else 1, "serial": 1, "bad-peaks": "many"}
            for fault, peak in peaks.items():
                if fault in fake.faults:
                    choices[0]["batchlab"] = {"peak_decode_rows": peak}
            if not body.get("stream"):
                return self._send(200, json.dumps({"choices": choices, "usage": usage}).encode())
            events.append({"choices": [], "usage": usage})
            payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            self._send(200, payload.encode(), "text/event-stream")

    return Handler


def _openai_answer(body, faults, tokens, logprobs, tops, pieces, finish):
    """batchlab serve's shape: token_ids, OpenAI's completions logprobs named token_id:N."""
    top = body.get("logprobs")

    def logprobs_of(i, j):
        if top is None:
            return None
        return {"tokens": [f"token_id:{t}" for t in tokens[i:j]],
                "token_logprobs": logprobs[i:j],
                "top_logprobs": [{f"token_id:{t}": v for t, v in d[:top]} for d in tops[i:j]]}

    choices = [{"index": 0, "text": "".join(pieces), "finish_reason": finish,
                "token_ids": tokens, "logprobs": logprobs_of(0, len(tokens))}]
    events = [{"choices": [{"index": 0, "text": p, "token_ids": [t], "finish_reason": None,
                            "logprobs": logprobs_of(i, i + 1)}]}
              for i, (t, p) in enumerate(zip(tokens, pieces))]
    events.append({"choices": [{"index": 0, "text": "", "token_ids": [],
                                "finish_reason": finish, "logprobs": None}]})
    return choices, events


def _mlx_answer(body, faults, tokens, logprobs, tops, pieces, finish):
    """mlx_lm.server 0.32.2's shape: logprobs.content entries with ids, no token_ids, streams
    of text only. Fault ``mlx-naming``: its bug, each entry is the first alternative of an
    unordered top-k (here the list turned by one), not the generated token."""
    k = body.get("top_logprobs", -1)
    content = None
    if k > 0:
        content = []
        for t, v, top in zip(tokens, logprobs, tops):
            alternatives = [{"id": i, "token": None, "logprob": lp} for i, lp in top[:k]]
            if "mlx-naming" in faults:
                alternatives = alternatives[1:] + alternatives[:1]
                content.append(dict(alternatives[0], top_logprobs=alternatives))
            else:
                content.append({"id": t, "token": None, "logprob": v,
                                "top_logprobs": alternatives})
    elif body.get("logprobs"):
        content = [{"id": t, "logprob": v} for t, v in zip(tokens, logprobs)]
    choices = [{"index": 0, "text": "".join(pieces), "finish_reason": finish,
                "logprobs": None if content is None else {"content": content}}]
    events = [{"choices": [{"index": 0, "text": "".join(pieces), "finish_reason": None}]},
              {"choices": [{"index": 0, "text": "", "finish_reason": finish}]}]
    return choices, events
