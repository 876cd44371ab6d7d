"""The frozen records a matrix expands to: rows, script events and cells.

A cell is everything needed to run one batched-decoding scenario twice (oracle and
engine) and compare the bits. Its canonical id, e.g. ``l1/gemma3/B4/ragged/join-evict/
ctx-wrap``, is the filter key, the golden's file name and the report key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from batchlab.engine.core.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.core.processors import ProcessorParams
from batchlab.engine.core.sampler import GREEDY, SamplingParams

# park: remove keeping the row's caches (``remove(uids, return_prompt_caches=True)``);
# resume: insert it again with those caches and its ``resume`` ids as the new prompt.
Action = Literal["insert", "remove", "park", "resume", "continue"]
ACTIONS = ("insert", "remove", "park", "resume", "continue")
# how a subject may turn a request down (subjects/protocol.py's ``Refused``): invalid (the
# request is wrong), unsupported (valid, but not on this engine), capacity (not now)
REFUSAL_KINDS = ("invalid", "unsupported", "capacity")


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One request: its prompt ids and how many tokens it may generate (per insert).

    The rest is optional history and per-row settings: ``prefix`` (ids the row's caches
    already hold when it is inserted, built by the single-stream path: a cached system
    prompt), ``resume`` (the new ids it brings when a ``resume`` event re-inserts it),
    ``sampling`` (its own sampler; None: the cell's shared one) and ``processors``."""

    name: str
    prompt: tuple[int, ...]
    max_tokens: int
    prefix: tuple[int, ...] = ()
    resume: tuple[int, ...] = ()
    sampling: SamplingParams | None = None
    processors: ProcessorParams | None = None

    def definition(self) -> dict:
        """The row as the golden's digest sees it; the optional fields only when set, so
        rows without them define what they always did."""
        out = {"name": self.name, "prompt": list(self.prompt), "max_tokens": self.max_tokens}
        if self.prefix:
            out["prefix"] = list(self.prefix)
        if self.resume:
            out["resume"] = list(self.resume)
        if self.sampling is not None:
            out["sampling"] = self.sampling.as_dict()
        if self.processors is not None:
            out["processors"] = asdict(self.processors)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Rows inserted or removed just before decode step ``step`` runs."""

    step: int
    action: Action
    rows: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.action} {','.join(self.rows)} at {self.step}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A request a refusal cell sends raw (the wire's ROW, kept as JSON text) just before
    decode step ``step``, after that step's events; the subject must refuse it with kind
    ``expect`` and run on. The oracle never sees it: the golden holds the other rows."""

    step: int
    expect: str
    request: str  # json.dumps(row, sort_keys=True): as the cell gives it, unchecked

    def row(self) -> dict:
        return json.loads(self.request)

    def definition(self) -> dict:
        return {"at": self.step, "expect": self.expect, "request": self.row()}


# The values a cell id leaves out; any other value is named in the id (``Cell.extras``).
DEFAULT_STEPS = 12
DEFAULT_SEED = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CellKey:
    """What names a cell: a ``Cell`` is one (its model a zoo name or a path), and
    ``CellResult`` carries one (its model the label reports show)."""

    FIELDS = ("model", "path", "batch", "padding", "script", "context")

    model: str
    path: str
    batch: int
    padding: str
    script: str
    context: str

    @property
    def scenario(self) -> str:
        """The report's column key: everything but model and path."""
        return f"B{self.batch}/{self.padding}/{self.script}/ctx-{self.context}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell(CellKey):
    """One point of a matrix. ``batch`` is the most rows alive at once (rows waiting in
    the queue count: they were inserted and not removed)."""

    rows: tuple[Row, ...]
    events: tuple[Event, ...]
    steps: int = DEFAULT_STEPS  # the tokens each row may generate
    seed: int = DEFAULT_SEED  # prompt ids are drawn from (seed, row name, length)
    schedule: ScheduleConfig = MLX_LM_DEFAULTS
    sampling: SamplingParams = GREEDY  # the batch's shared sampler; seed = MLX's global seed
    refusals: tuple[Refusal, ...] = ()  # a refusal cell's bad requests (docs/subjects.md)
    # the id, built once: selection, pins, reports and the self-test read it thousands of
    # times per run (one self-test selection over the default matrix: 630,000 reads)
    _id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = [self.path, model_label(self.model), f"B{self.batch}", self.padding,
                 self.script, f"ctx-{self.context}"]
        extras = self.extras
        object.__setattr__(self, "_id", "/".join(parts + ([extras] if extras else [])))

    @property
    def key(self) -> CellKey:
        return CellKey(model=model_label(self.model), path=self.path, batch=self.batch,
                       padding=self.padding, script=self.script, context=self.context)

    @property
    def id(self) -> str:
        return self._id

    @property
    def extras(self) -> str:
        """Everything else that changes the bits, named when it is not the default:
        ``steps40_seed1_pb2_cb4_ps16_t0.7_k5_p0.9_m0.05_x0.5_xt0.2_r3`` (pb / cb / ps:
        prefill batch, completion batch, prefill step; t k p m x xt r: temperature, top-k,
        top-p, min-p, XTC probability and threshold, seed),
        then the per-row settings by position, round robin (``cyclic``), ``0`` for a row
        without: ``rs-t0.7k5+0`` (samplers, ``sampling_tag``), ``lp-rp1.3+0+b5x2``
        (processors, ``ProcessorParams.tag``)."""
        out = []
        if self.steps != DEFAULT_STEPS:
            out.append(f"steps{self.steps}")
        if self.seed != DEFAULT_SEED:
            out.append(f"seed{self.seed}")
        s, d = self.schedule, MLX_LM_DEFAULTS
        for tag, have, want in (("pb", s.prefill_batch_size, d.prefill_batch_size),
                                ("cb", s.completion_batch_size, d.completion_batch_size),
                                ("ps", s.prefill_step_size, d.prefill_step_size)):
            if have != want:
                out.append(f"{tag}{have}")
        p = self.sampling
        if not p.greedy:
            out.append(f"t{p.temperature:g}")
            for tag, have, off in (("k", p.top_k, 0), ("p", p.top_p, 1.0),
                                   ("m", p.min_p, 0.0), ("x", p.xtc_probability, 0.0),
                                   ("xt", p.xtc_threshold if p.xtc_probability else 0.1, 0.1),
                                   ("r", p.seed, 0)):
                if have != off:
                    out.append(f"{tag}{have:g}")
        rs = cyclic([sampling_tag(r.sampling) if r.sampling else "0" for r in self.rows])
        if any(t != "0" for t in rs):
            out.append("rs-" + "+".join(rs))
        lp = cyclic([r.processors.tag if r.processors else "0" for r in self.rows])
        if any(t != "0" for t in lp):
            out.append("lp-" + "+".join(lp))
        return "_".join(out)

    @property
    def scenario_id(self) -> str:
        """The id without the path: what the oracle runs, shared by every path. A
        quantized-KV path has an oracle of its own (mlx-lm's serial QuantizedKVCache
        run at its bits): its scenario keeps the path."""
        from batchlab.judging.judging import judging_for

        if judging_for(self.path).scenario_keeps_path:
            return self.id
        return self.id.split("/", 1)[1]

    @property
    def golden_stem(self) -> str:
        """The scenario id as one file name: goldens/<backend>/<golden_stem>.json."""
        return self.scenario_id.replace("/", "__")

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"cell {self.id} has no row {name!r}")

    def definition(self) -> dict:
        """What the bits depend on apart from the path; the golden stores its digest. The
        schedule and the sampler appear only when they are not the defaults, so the
        definitions (and goldens) of cells that use neither stay what they were."""
        out = {
            "model": self.model,
            "rows": [r.definition() for r in self.rows],
            "events": [str(e) for e in self.events],
        }
        if self.schedule != MLX_LM_DEFAULTS:
            out["schedule"] = self.schedule.as_dict()
        if self.sampling != GREEDY:
            out["sampling"] = self.sampling.as_dict()
        if self.refusals:
            out["refusals"] = [r.definition() for r in self.refusals]
        return out

    def definition_digest(self) -> str:
        text = json.dumps(self.definition(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def sampling_tag(p: SamplingParams) -> str:
    """A per-row sampler in a cell id: ``t0.7k5p0.9m0.05`` (``t0``: greedy)."""
    out = f"t{p.temperature:g}"
    if not p.greedy:
        for tag, have, off in (("k", p.top_k, 0), ("p", p.top_p, 1.0), ("m", p.min_p, 0.0),
                               ("x", p.xtc_probability, 0.0),
                               ("xt", p.xtc_threshold if p.xtc_probability else 0.1, 0.1)):
            if have != off:
                out += f"{tag}{have:g}"
    return out


def cyclic(tags: list[str]) -> list[str]:
    """The shortest period of a per-row list: rows take these by position, round robin
    (``[a, 0, a, 0, a]`` -> ``[a, 0]``), so a setting written once names every B alike."""
    for n in range(1, len(tags) + 1):
        if all(t == tags[i % n] for i, t in enumerate(tags)):
            return tags[:n]
    return tags


def model_label(model: str) -> str:
    """Zoo names stay; a model directory is named by its last component in ids."""
    return Path(model).name if ("/" in model or model.startswith(".")) else model
