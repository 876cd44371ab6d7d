"""batchlab's own engine as a subject: a path's Scheduler behind the protocol.

The cell's path picks the engine path (``engine/paths/registry.py``); a path that
refuses the cell's model raises ``Unsupported`` from ``open``. The subject keeps the
caches of parked rows and, when a ``continue`` will come, of finished ones. It validates:
``submit`` builds a raw request's records here, so the engine's own checks
(``SamplingParams``, ``ProcessorParams``, ``Request``, ``Scheduler.insert``) decide.
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.history import History, prefix_history
from batchlab.engine.core.scheduler import Scheduler
from batchlab.subjects.protocol import Capabilities, RowRequest, Setup


class BatchlabSubject:
    """``--engine batchlab``: every path of the registry. ``model``/``scheduler_class``/
    ``config`` pin what ``open`` would otherwise resolve from the cell (tests run a cell
    under another schedule that way)."""

    name = "batchlab"
    capabilities = Capabilities(validates=True)

    def __init__(self, *, model=None, dtype: str | None = None,
                 scheduler_class: type[Scheduler] | None = None,
                 config: ScheduleConfig | None = None):
        self._model, self._dtype = model, dtype
        self._scheduler_class, self._config = scheduler_class, config
        self.scheduler: Scheduler | None = None

    def open(self, setup: Setup) -> str:
        from batchlab.engine.paths.registry import resolve_path

        model, dtype, scheduler_class = self._model, self._dtype, self._scheduler_class
        if model is None:
            from batchlab.zoo import load

            resolve_path(setup.path)  # an unknown path fails before any model loads
            loaded = load(setup.model)
            model, dtype = loaded.model, loaded.dtype
            scheduler_class = resolve_path(setup.path, model, model_name=setup.model).scheduler
        self.model = model
        self.config = self._config or setup.schedule
        self.scheduler = (scheduler_class or Scheduler)(model, self.config,
                                                        sampling=setup.sampling)
        self.scheduler.keep_finished_histories = setup.keeps_finished
        self.parked: dict[str, History] = {}
        self.finished: dict[str, History] = {}
        # the shared sampler draws from MLX's global key, seeded as the oracle seeds it
        mx.random.seed(setup.sampling.seed)
        return dtype

    def _history(self, row: RowRequest) -> History | None:
        if row.history == "parked":
            return self.parked.pop(row.name)
        if row.history == "finished":
            if row.name not in self.finished:
                raise RuntimeError(f"row {row.name!r} is continued before it finished")
            return self.finished.pop(row.name)
        if row.prefix:
            return prefix_history(self.model, row.prefix, self.config.prefill_step_size)
        return None

    def insert(self, rows: list[RowRequest]) -> None:
        self.scheduler.insert([
            Request(name=r.name, prompt=r.prompt, max_tokens=r.max_tokens, sampling=r.sampling,
                    processors=r.processors, history=self._history(r)) for r in rows])

    def submit(self, row: dict) -> None:
        """One request as the wire carries it: inserted, or refused (``Refused``) with
        nothing inserted (``Scheduler.insert`` checks before it queues)."""
        from batchlab.subjects.refusal import submit_row

        submit_row(self, row)

    def remove(self, names: list[str], park: bool = False) -> None:
        kept = self.scheduler.remove(names, keep_history=park)
        self.parked.update(kept)

    def step(self) -> list:
        emitted = self.scheduler.step()
        for e in emitted:
            if e.history is not None:
                self.finished[e.name] = e.history
        return emitted

    @property
    def num_active(self) -> int:
        return 0 if self.scheduler is None else self.scheduler.num_active

    def close(self) -> None:
        self.scheduler = None
        self.parked, self.finished = {}, {}
