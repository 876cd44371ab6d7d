"""One run: load the cases, probe the server once, run the checks asked for.

A check that meets no usable answer (``ServerError``) or an untrusted golden
(``GoldenError``) is ERROR with the message; the other checks still run. The probe
failing (server down, garbage answers) makes every check ERROR with its message.
"""

from __future__ import annotations

from pathlib import Path

from batchlab.golden.store import GoldenError
from batchlab.http_gate.alone import check_alone
from batchlab.http_gate.cases import load_cases
from batchlab.http_gate.consistency import check_consistency
from batchlab.http_gate.dialect import probe, served_model
from batchlab.http_gate.needle import check_needle
from batchlab.http_gate.result import CheckResult
from batchlab.http_gate.session import Session
from batchlab.http_gate.wire import Api, ServerError
from batchlab.status import Status

CHECKS = ("alone", "needle", "consistency")


def run_checks(api: Api, *, model: str, served: str | None, checks: tuple[str, ...],
               matrix: Path, goldens: Path, trials: int = 4,
               fillers: int = 6) -> tuple[list[CheckResult], str]:
    """The checks' results and a line saying how the server was asked."""
    from batchlab.zoo.text import tokenizer_for

    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown}; choose from {', '.join(CHECKS)}")
    tokenizer = tokenizer_for(model)
    try:
        cases = load_cases(matrix, goldens, model, tokenizer)
        probe_case = cases[0]
        dialect = probe(api, served_model(api, served), probe_case.prompt, probe_case.text)
    except (ServerError, GoldenError) as err:
        return [CheckResult(check=c, status=Status.ERROR, compared="", difference=str(err))
                for c in checks], "no dialect: the probe failed"
    session = Session(api=api, dialect=dialect, cases=cases, tokenizer=tokenizer,
                      eos_ids=frozenset(getattr(tokenizer, "eos_token_ids", None) or ()))
    runners = {"alone": lambda: check_alone(session),
               "needle": lambda: check_needle(session, trials=trials, num_fillers=fillers),
               "consistency": lambda: check_consistency(session)}
    results = []
    for name in checks:
        try:
            results.append(runners[name]())
        except ServerError as err:
            results.append(CheckResult(check=name, status=Status.ERROR, compared="",
                                       difference=str(err)))
    return results, dialect.why
