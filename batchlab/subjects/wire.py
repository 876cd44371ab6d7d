"""The wire protocol's records as JSON: one encoding for the process peer, the exported
scripts and the trajectory files (``docs/wire-protocol.md`` is the spec).

A logprob row travels as the raw bytes of the (V,) vector in the model dtype, base64:
``{"dtype": "bfloat16", "b64": "..."}``; the harness takes the digest itself. A compact
form, ``{"digest": "<16 hex of sha256(bytes)>", "top": [[id, value], ...]}``, serves
trajectory files that must stay small (only the digest is gated bit for bit).
"""

from __future__ import annotations

import base64
from dataclasses import asdict

import mlx.core as mx
import numpy as np

from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.processors import ProcessorParams
from batchlab.engine.core.sampler import SamplingParams
from batchlab.subjects.protocol import RowRequest, Setup
from batchlab.trajectory import TOP_K, Step, array_bytes, digest, top_k

PROTOCOL = "batchlab-subject/1"
_DTYPES = {"bfloat16": (np.uint16, mx.bfloat16), "float16": (np.float16, mx.float16),
           "float32": (np.float32, mx.float32)}


def sampling_dict(p: SamplingParams | None) -> dict | None:
    return None if p is None else p.as_dict()


def sampling_of(d: dict | None) -> SamplingParams | None:
    return None if d is None else SamplingParams(**d)


def processors_dict(p: ProcessorParams | None) -> dict | None:
    return None if p is None else asdict(p)


def processors_of(d: dict | None) -> ProcessorParams | None:
    if d is None:
        return None
    bias = tuple((int(t), float(b)) for t, b in d.get("logit_bias", ()))
    return ProcessorParams(**{**d, "logit_bias": bias})


def setup_dict(s: Setup) -> dict:
    return {"cell": s.cell, "model": s.model, "model_dir": s.model_dir, "path": s.path,
            "schedule": s.schedule.as_dict(), "sampling": s.sampling.as_dict(),
            "keeps_finished": s.keeps_finished, "digest": s.digest}


def setup_of(d: dict) -> Setup:
    return Setup(cell=d["cell"], model=d["model"], model_dir=d.get("model_dir", ""),
                 path=d.get("path", "l1"), schedule=ScheduleConfig(**d["schedule"]),
                 sampling=SamplingParams(**d["sampling"]),
                 keeps_finished=bool(d.get("keeps_finished", False)),
                 digest=str(d.get("digest", "")))


def row_dict(r: RowRequest) -> dict:
    out = {"name": r.name, "prompt": list(r.prompt), "max_tokens": r.max_tokens,
           "history": r.history}
    if r.prefix:
        out["prefix"] = list(r.prefix)
    if r.sampling is not None:
        out["sampling"] = sampling_dict(r.sampling)
    if r.processors is not None:
        out["processors"] = processors_dict(r.processors)
    return out


def row_of(d: dict) -> RowRequest:
    return RowRequest(name=d["name"], prompt=tuple(d["prompt"]), max_tokens=d["max_tokens"],
                      history=d.get("history", "none"), prefix=tuple(d.get("prefix", ())),
                      sampling=sampling_of(d.get("sampling")),
                      processors=processors_of(d.get("processors")))


def logprobs_dict(x: mx.array) -> dict:
    dtype = str(x.dtype).removeprefix("mlx.core.")
    return {"dtype": dtype, "b64": base64.b64encode(array_bytes(x)).decode("ascii")}


def logprobs_of(d: dict) -> mx.array:
    """The (V,) vector a ``logprobs_dict`` carries, in its own dtype."""
    if d.get("dtype") not in _DTYPES:
        raise ValueError(f"logprobs dtype {d.get('dtype')!r}: give one of {sorted(_DTYPES)}")
    raw, dtype = _DTYPES[d["dtype"]]
    array = mx.array(np.frombuffer(base64.b64decode(d["b64"]), dtype=raw))
    return array.view(dtype) if raw is np.uint16 else array


def compact_dict(x: mx.array) -> dict:
    values = np.array(x.astype(mx.float32))
    return {"digest": digest(x), "top": [[i, v] for i, v in top_k(values, TOP_K)]}


def step_of(step: int, token: int, d: dict, keep_values: bool = False) -> Step:
    """A recorded emission: either form of the logprob row."""
    if "b64" in d:
        from batchlab.trajectory import make_step

        return make_step(step, token, logprobs_of(d), keep_values)
    values = None
    if "values" in d:  # float32 bytes of the row, for the KL gate of lab paths
        values = np.frombuffer(base64.b64decode(d["values"]), dtype=np.float32).copy()
    return Step(step=step, token=int(token), digest=str(d["digest"]),
                top=tuple((int(i), float(v)) for i, v in d["top"]), values=values)
