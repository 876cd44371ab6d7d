"""The subject protocol: what an engine under test implements for the matrix to drive it.

One cell's run, seen from the subject (``drive.py`` makes these calls)::

    dtype = subject.open(setup)            # model, path, schedule, shared sampler, seed
    subject.insert([RowRequest(...), ...]) # before step n: new rows, resumed or continued
    subject.remove(["A"], park=False)      # evict (park=True: keep the row's caches)
    emissions = subject.step()             # one decode step: [Emission(name, token, logprobs)]
    subject.num_active                     # rows inserted and not finished or removed
    subject.close()                        # the cell is over (also after an error)
    subject.submit({"name": "X", ...})     # refusal cells only: one raw request (the wire's
                                           # ROW), refused with ``Refused`` or inserted

A subject keeps the caches of parked and finished rows itself: a ``RowRequest`` says
which history a row starts from (``none``, ``parked``, ``finished``; ``prefix`` ids are a
history the subject builds by a single-stream prefill). ``open`` raises ``Unsupported``
when the subject cannot run the cell (the reason becomes the cell's UNSUPPORTED line);
``SubjectError`` says the subject broke (ERROR for that cell). What the cell is judged
against is the harness's business (``batchlab/judging``), never the subject's.

A subject that declares ``validates`` takes requests as they come over the wire
(``submit``: a dict, its sampler and processors not yet built) and refuses a bad one
with ``Refused(kind, message)``, keeping its other rows running; a refusal cell
(``docs/subjects.md``) holds it to that. Others get UNSUPPORTED for those cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import mlx.core as mx

from batchlab.cells.cell import REFUSAL_KINDS
from batchlab.engine.core.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.core.processors import ProcessorParams
from batchlab.engine.core.sampler import GREEDY, SamplingParams
from batchlab.engine.paths.registry import Unsupported
from batchlab.trajectory import Step

History = Literal["none", "parked", "finished"]
SCHEDULE_SETTINGS = ("prefill_batch_size", "completion_batch_size", "prefill_step_size")


class Refused(Exception):
    """A subject turned one request down and keeps serving its other rows. ``kind`` is one
    of ``REFUSAL_KINDS`` (what a refusal cell judges): ``invalid`` (the request is wrong:
    a parameter out of range, a name in flight, an empty prompt, max_tokens < 1),
    ``unsupported`` (valid, but not on this engine: a model or history it refuses),
    ``capacity`` (it would run, but not now: no KV blocks). ``message`` says what to
    change."""

    def __init__(self, kind: str, message: str):
        if kind not in REFUSAL_KINDS:
            raise ValueError(f"refusal kind {kind!r}: use one of {', '.join(REFUSAL_KINDS)}")
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


class SubjectError(RuntimeError):
    """The subject broke: it died, hung, or answered out of protocol. ERROR for its cell."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a subject declares it can run; a cell that needs more is UNSUPPORTED with the
    reason (``capabilities.refusal``), never a FAIL or a silent skip.

    ``paths``: the cell paths it runs (None: any; batchlab's engine has several, mlx-lm's
    batch mode is one, ``l1``). ``schedule``: the schedule settings it honours (the
    golden's bits depend on them). ``controls_join``: the subject, not the script, decides
    at which step a queued row joins (a server): only B=1 cells can then be judged
    against batch-mode goldens. ``validates``: it implements ``submit`` and refuses bad
    requests (``Refused``) while serving the others (refusal cells need it)."""

    paths: tuple[str, ...] | None = None
    history: bool = True  # prefix, park/resume, continue
    sampling: bool = True  # temperature > 0, shared or per row
    processors: bool = True  # per-row logits processors
    schedule: tuple[str, ...] = SCHEDULE_SETTINGS
    controls_join: bool = False
    validates: bool = False

    def as_dict(self) -> dict:
        return {"paths": None if self.paths is None else list(self.paths),
                "history": self.history, "sampling": self.sampling,
                "processors": self.processors, "schedule": list(self.schedule),
                "controls_join": self.controls_join, "validates": self.validates}

    @classmethod
    def from_dict(cls, d: dict) -> Capabilities:
        paths = d.get("paths")
        return cls(paths=None if paths is None else tuple(paths),
                   history=bool(d.get("history", False)), sampling=bool(d.get("sampling", False)),
                   processors=bool(d.get("processors", False)),
                   schedule=tuple(d.get("schedule", ())),
                   controls_join=bool(d.get("controls_join", False)),
                   validates=bool(d.get("validates", False)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """What a cell fixes for its whole run. ``model`` is the zoo name or directory the
    cell names; ``model_dir`` the directory mlx-lm loads (for subjects outside batchlab)."""

    cell: str
    model: str
    model_dir: str
    path: str = "l1"
    schedule: ScheduleConfig = MLX_LM_DEFAULTS
    sampling: SamplingParams = GREEDY  # shared by rows without their own; seeds MLX's key
    keeps_finished: bool = False  # a 'continue' event will come: keep finished rows' caches
    digest: str = ""  # the cell's definition digest: two solo runs may share an id


@dataclass(frozen=True, slots=True, kw_only=True)
class RowRequest:
    name: str
    prompt: tuple[int, ...]  # the new ids (a resumed or continued row: its resume ids)
    max_tokens: int
    history: History = "none"
    prefix: tuple[int, ...] = ()  # ids a fresh row's caches already hold
    sampling: SamplingParams | None = None  # None: the cell's shared sampler
    processors: ProcessorParams | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Emission:
    """One token a row emitted at this step: ``logprobs`` is the (V,) vector in the model
    dtype it was drawn from; a replayed emission carries its recorded ``step`` instead."""

    name: str
    token: int
    logprobs: mx.array | None = field(default=None, repr=False)
    record: Step | None = field(default=None, repr=False)


@runtime_checkable
class Subject(Protocol):
    name: str
    capabilities: Capabilities

    def open(self, setup: Setup) -> str: ...  # returns the model dtype, e.g. "bfloat16"

    def insert(self, rows: list[RowRequest]) -> None: ...

    def remove(self, names: list[str], park: bool = False) -> None: ...

    def step(self) -> list: ...  # objects with name, token, logprobs (or record)

    @property
    def num_active(self) -> int: ...

    def close(self) -> None: ...


__all__ = ["Capabilities", "Emission", "History", "REFUSAL_KINDS", "Refused", "RowRequest",
           "SCHEDULE_SETTINGS", "Setup", "Subject", "SubjectError", "Unsupported"]
