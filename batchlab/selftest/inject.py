"""How a seeded bug gets into the engine at run time: attribute patches, always undone.

A bug is a list of ``Patch`` (owner, attribute name, replacement), built by one of the
functions in ``cache_bugs``, ``schedule_bugs`` or ``model_bugs``. ``applied`` sets them
and restores every original in a ``finally``, so an exception, a Ctrl-C or a failing
assert inside the block never leaves the engine (or a memoised zoo model's class) broken.
The engine source itself carries no fault switches.

Replacements wrap the real attribute where they can (``wrapped`` reads it when the bug is
built, before anything is patched), so a bug keeps tracking the engine as it changes
instead of freezing a copy of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


class InjectionError(Exception):
    """A bug cannot be injected: the engine no longer has what it patches."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Patch:
    owner: object  # a class or a module
    name: str
    value: object


def original(owner: object, name: str) -> object:
    """The raw attribute as stored on ``owner`` (a descriptor, not its bound form).

    Only attributes ``owner`` defines itself: a patch that ADDED an attribute (say the
    engine renamed the method) would inject nothing and the bug would look uncaught.
    """
    try:
        return vars(owner)[name]
    except KeyError:
        label = getattr(owner, "__qualname__", getattr(owner, "__name__", repr(owner)))
        raise InjectionError(f"{label} has no attribute {name!r} of its own; the engine "
                             "changed: update the bug in batchlab/selftest/") from None


@contextmanager
def applied(patches: Sequence[Patch]) -> Iterator[None]:
    """Set ``patches`` for the block; restore the originals in reverse order, always."""
    saved = []
    try:
        for p in patches:
            saved.append((p.owner, p.name, original(p.owner, p.name)))
            setattr(p.owner, p.name, p.value)
        yield
    finally:
        for owner, name, old in reversed(saved):
            setattr(owner, name, old)


def wrapped(owner: object, name: str, make) -> Patch:
    """A patch whose value is ``make(the original)``."""
    return Patch(owner=owner, name=name, value=make(original(owner, name)))


def during(owner: object, name: str, attribute: str, value) -> Patch:
    """A patch of method ``name`` that runs the original with ``self.<attribute>`` set to
    ``value(self)`` for the call: a bug that is one limit read wrong."""
    clean = original(owner, name)

    def patched(self, *args, **kwargs):
        saved = getattr(self, attribute)
        setattr(self, attribute, value(self))
        try:
            return clean(self, *args, **kwargs)
        finally:
            setattr(self, attribute, saved)

    return Patch(owner=owner, name=name, value=patched)
