"""``--engine``: one flag names every kind of subject.

    batchlab                 batchlab's own engine; the cell's path picks the engine path
    mlx-lm                   mlx-lm's BatchGenerator (the installed mlx-lm, e.g. a fork)
    module:factory           a Python object: ``factory()`` returns a Subject
    process:CMD ARGS...      another process speaking the wire protocol (docs/wire-protocol.md)
    files:DIR                trajectories written offline (``batchlab matrix judge``)

A process subject is started once per worker process and kept across cells; one that
broke is ended and the next cell starts a fresh one.
"""

from __future__ import annotations

import importlib
import shlex
import shutil
from pathlib import Path

from batchlab.subjects.protocol import Subject

DEFAULT_ENGINE = "batchlab"
_METHODS = ("open", "insert", "remove", "step", "close")
_LIVE: dict[str, Subject] = {}  # process subjects, kept per worker process


def check_engine(spec: str) -> None:
    """Fail early, in the parent, on an --engine value no worker could use."""
    kind, _, rest = spec.partition(":")
    if spec in (DEFAULT_ENGINE, "mlx-lm"):
        return
    if kind == "process":
        argv = shlex.split(rest)
        if not argv:
            raise ValueError("--engine 'process:CMD ...' needs a command, e.g. "
                             "--engine 'process:python -m batchlab.subjects.peer'")
        if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
            raise ValueError(f"--engine {spec!r}: no program {argv[0]!r} on PATH")
        return
    if kind == "files":
        if not Path(rest).is_dir():
            raise ValueError(f"--engine {spec!r}: no folder {rest!r}; write the trajectories "
                             "there first (docs/subjects.md)")
        return
    if kind and rest:
        subject_for(spec)  # imports the module and checks the object now
        return
    raise ValueError(_bad(spec))


def _bad(spec: str) -> str:
    return (f"--engine {spec!r}: give batchlab, mlx-lm, module:factory, "
            "'process:CMD ARGS', or files:DIR")


def subject_for(spec: str, timeout: float | None = None) -> Subject:
    """The subject an ``--engine`` value names (a fresh adapter, or the live process)."""
    if spec == DEFAULT_ENGINE:
        from batchlab.subjects.engine import BatchlabSubject

        return BatchlabSubject()
    if spec == "mlx-lm":
        from batchlab.subjects.mlx_lm import BatchGeneratorSubject

        return BatchGeneratorSubject()
    kind, _, rest = spec.partition(":")
    if kind == "process":
        live = _LIVE.get(spec)
        if live is None or not live.alive:
            from batchlab.subjects.process import ProcessSubject

            live = _LIVE[spec] = ProcessSubject(shlex.split(rest), timeout=timeout)
        return live
    if kind == "files":
        from batchlab.subjects.files import ReplaySubject

        return ReplaySubject(Path(rest))
    if not kind or not rest:
        raise ValueError(_bad(spec))
    try:
        factory = getattr(importlib.import_module(kind), rest)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"--engine {spec!r}: cannot import {rest} from {kind}: {err}") from None
    subject = factory()
    missing = [m for m in (*_METHODS, "name", "capabilities", "num_active")
               if not hasattr(type(subject), m) and not hasattr(subject, m)]
    if missing:
        raise ValueError(f"--engine {spec!r}: {kind}.{rest}() returned a "
                         f"{type(subject).__name__} without {', '.join(missing)}; a subject "
                         "implements batchlab.subjects.protocol.Subject")
    return subject


def close_subjects() -> None:
    """End the live process subjects (a worker's last act; tests call it)."""
    for subject in _LIVE.values():
        subject.shutdown()
    _LIVE.clear()
