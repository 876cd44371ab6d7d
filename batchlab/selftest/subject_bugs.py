"""Seeded bugs of a subject, not of batchlab's engine: the bookkeeping an adapter between
an engine and the protocol gets wrong. Each is a wrapper over ANY subject (batchlab's,
mlx-lm's BatchGenerator, a ``module:factory`` object), so ``batchlab selftest --engine E``
shows the gate sees it on that subject; a process peer plays it by name
(``BATCHLAB_PEER_BUG``: ``selftest/peer.py``, ``oracles/peers/mlx_lm_peer.py``).

    subject-step-late              a row's first token is reported one step late
    subject-drops-parked-history   a resumed row starts fresh (its parked caches dropped)
    subject-ignores-remove         an evicted row goes on decoding
    subject-stale-logprobs         each token carries the logprob row of the row's last one

In-process the wrapper goes around what ``matrix/engine_run`` gets from ``subject_for``
(one ``Patch``, undone like every seeded bug).
"""

from __future__ import annotations

from dataclasses import replace

from batchlab.matrix import engine_run
from batchlab.selftest.inject import Patch, wrapped
from batchlab.subjects.protocol import Emission


class _Wrapper:
    """Forwards the protocol to ``inner``; a bug overrides one call."""

    def __init__(self, inner, bug: str):
        self.inner, self.bug = inner, bug
        self.name = f"{inner.name}+{bug}"
        self.capabilities = inner.capabilities

    def open(self, setup):
        return self.inner.open(setup)

    def insert(self, rows):
        self.inner.insert(rows)

    def submit(self, row: dict) -> None:  # through this wrapper's own insert
        from batchlab.subjects.refusal import submit_row

        submit_row(self, row)

    def remove(self, names, park=False):
        self.inner.remove(names, park=park)

    def step(self):
        return self.inner.step()

    @property
    def num_active(self) -> int:
        return self.inner.num_active

    def close(self):
        self.inner.close()


def _plain(e) -> Emission:
    return Emission(name=e.name, token=int(e.token), logprobs=e.logprobs,
                    record=getattr(e, "record", None))


class StepLate(_Wrapper):
    """A row's first token is reported at the next step, beside its second: the adapter
    labels emissions with the step it reports them at, not the step that emitted them."""

    def open(self, setup):
        self.seen, self.held = set(), []
        return super().open(setup)

    def step(self):
        out, held = list(self.held), []
        for e in self.inner.step():
            if e.name in self.seen:
                out.append(_plain(e))
            else:
                self.seen.add(e.name)
                held.append(_plain(e))
        self.held = held
        return out

    @property
    def num_active(self) -> int:
        return self.inner.num_active + len(self.held)


class DropsParkedHistory(_Wrapper):
    """A parked row resumes as a fresh row of its resume ids: the caches it was parked
    with are dropped (the adapter forgot to hand them back to the engine)."""

    def insert(self, rows):
        self.inner.insert([replace(r, history="none") if r.history == "parked" else r
                           for r in rows])


class IgnoresRemove(_Wrapper):
    """``remove`` without park does nothing: an evicted row goes on decoding to its
    max_tokens (the adapter removed it from its own table only)."""

    def remove(self, names, park=False):
        if park:
            self.inner.remove(names, park=True)


class StaleLogprobs(_Wrapper):
    """Each token carries the logprob row its row emitted one step earlier (the first its
    own): the adapter reads a buffer that the engine had not refreshed yet."""

    def open(self, setup):
        self.last = {}
        return super().open(setup)

    def step(self):
        out = []
        for e in self.inner.step():
            e = _plain(e)
            previous = self.last.get(e.name, e.logprobs)
            self.last[e.name] = e.logprobs
            out.append(replace(e, logprobs=previous))
        return out


WRAPPERS = {"subject-step-late": StepLate, "subject-drops-parked-history": DropsParkedHistory,
            "subject-ignores-remove": IgnoresRemove, "subject-stale-logprobs": StaleLogprobs}


def wrap(bug: str, subject):
    """``subject`` with subject bug ``bug`` (a process peer calls this)."""
    return WRAPPERS[bug](subject, bug)


def _injector(bug: str):
    def inject() -> list[Patch]:
        return [wrapped(engine_run, "subject_for",
                        lambda clean: lambda spec, *a, **kw: wrap(bug, clean(spec, *a, **kw)))]

    inject.__doc__ = WRAPPERS[bug].__doc__
    return inject


step_late = _injector("subject-step-late")
drops_parked_history = _injector("subject-drops-parked-history")
ignores_remove = _injector("subject-ignores-remove")
stale_logprobs = _injector("subject-stale-logprobs")
