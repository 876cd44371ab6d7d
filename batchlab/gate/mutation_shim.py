"""mutmut 3.8's trampoline without mutmut: run a generated mutants tree where mutmut is absent.

Every function mutmut mutates is rewritten to call ``wrap_in_trampoline`` from
``mutmut.mutation.trampoline``, which picks the original or one mutant per call from the
``MUTANT_UNDER_TEST`` environment variable. mutmut itself needs libcst, textual and click;
a machine with no package registry (the H200 box) need not carry them to *run* mutants
that were generated elsewhere. ``install()`` registers this module under mutmut's name
before the mutants tree is imported; the choice it makes is mutmut's own (its
``trampoline.py``: the variable names ``module.mutant``, anything else runs the original),
without the ``stats`` and ``fail`` modes this campaign does not use.

``recording()`` notes which mutated functions run while it is open: the campaign runner
opens it around its imports, so it knows the functions that run at import (a descriptor's
``__set_name__``, a table built by calling a factory). A child forked after those imports
cannot switch such a mutant on (the import already ran the original); the runner gives
them a fresh interpreter instead (gate/mutation_run.py).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import types
from collections.abc import Callable
from functools import wraps
from typing import Any

MutantDict = dict  # mutmut's is an Annotated dict; only the name is imported

_RECORD: list[set[str] | None] = [None]  # the open recording's set; None: not recording


def stem(name: str) -> str:
    """A mutant's function: ``pkg.mod.xǁCǁf__mutmut_3`` -> ``pkg.mod.xǁCǁf``."""
    return name.rpartition("__mutmut_")[0]


@contextlib.contextmanager
def recording():
    """Collect the stems (``module.mangled_name``) of the mutated functions called inside."""
    called: set[str] = set()
    _RECORD[0] = called
    try:
        yield called
    finally:
        _RECORD[0] = None


def wrap_in_trampoline(mutants_dict: dict[str, Callable[..., Any]],
                       is_classmethod: bool = False) -> Callable:
    def mutmut_mutated(decorated_func: Callable) -> Callable:
        def trampoline(*args: Any, **kwargs: Any) -> Any:
            orig_func = mutants_dict["_mutmut_orig"]
            if _RECORD[0] is not None:  # a list lookup per call; the set only while recording
                _RECORD[0].add(f"{decorated_func.__module__}.{stem(orig_func.__name__)}")
            call_args = list(args)
            if is_classmethod:
                call_args = list(args[1:])
                orig_func = getattr(args[0], orig_func.__name__)
            module, _, mutant_name = os.environ.get("MUTANT_UNDER_TEST", "").rpartition(".")
            if module != decorated_func.__module__:
                return orig_func(*call_args, **kwargs)
            mutated_func = mutants_dict.get(mutant_name)
            if mutated_func is None:
                return orig_func(*call_args, **kwargs)
            if is_classmethod:
                mutated_func = getattr(args[0], mutated_func.__name__)
            return mutated_func(*call_args, **kwargs)

        if inspect.isgeneratorfunction(decorated_func):  # as mutmut: inspect sees a generator

            @wraps(decorated_func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return (yield from trampoline(*args, **kwargs))

            return wrapper
        return wraps(decorated_func)(trampoline)

    return mutmut_mutated


def install(*, force: bool = False) -> bool:
    """Register this shim as ``mutmut.mutation.trampoline`` unless mutmut is installed
    (``force``: even then; the campaign runner needs ``recording()``, which only the shim
    has, and the choice of mutant is the same). True when the shim is in use."""
    if not force:
        try:
            import mutmut.mutation.trampoline  # noqa: F401 - the real one wins where it exists
            return False
        except ImportError:
            pass
    for name in ("mutmut", "mutmut.mutation"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["mutmut.mutation.trampoline"] = sys.modules[__name__]
    return True
