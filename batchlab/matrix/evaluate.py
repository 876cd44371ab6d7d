"""Evaluate one cell: fetch the reference (golden or live oracle), run the engine, compare.

Nothing here raises: every outcome, a crash included, becomes a CellResult, so one bad
cell never stops a run (a crash of the process itself is the runner's: see workers.py).

With ``Reference.repeat`` (``matrix run --repeat``) the subject runs each oracle-gated cell
twice, and two runs that differ FAIL before any comparison with the oracle: a subject
whose bits change from run to run (a race, a memo that outlives its run) would otherwise
pass or fail by chance.

An oracle bug in the golden (mlx-lm's batch mode disagrees with its own serial runs, or
crashes) does not excuse the engine, which must do what batch mode does:

    batch trajectory in the golden, engine equals it     ORACLE-BUG
    batch trajectory in the golden, engine differs        FAIL (the divergence)
    batch trajectory in the golden, engine raises         ERROR
    batch mode crashed, the engine raises too             ORACLE-BUG
    batch mode crashed, the engine runs to the end        FAIL (nothing vouches for its bits)
"""

from __future__ import annotations

import shlex
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from batchlab.cells.cell import Cell
from batchlab.cells.result import CellResult
from batchlab.golden.store import GoldenError
from batchlab.judging.compare import first_divergence
from batchlab.judging.judging import Judging, judging_for
from batchlab.judging.judging import Reference as JudgeReference
from batchlab.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class Reference:
    """Where the expected bits come from."""

    matrix: str
    goldens: Path
    live: bool = False
    engine: str = "batchlab"  # the subject under test (``--engine``, subjects/choose.py)
    repeat: bool = False  # run the subject twice; runs that differ FAIL (``--repeat``)


def rerun_command(cell: Cell, ref: Reference) -> str:
    from batchlab.golden.check import goldens_flag

    live = " --live" if ref.live else goldens_flag(ref.goldens)
    if ref.engine.startswith("files:"):
        folder = ref.engine.removeprefix("files:")
        return (f"batchlab matrix judge --matrix {ref.matrix}{live} --trajectories {folder} "
                f"--filter '{cell.id}'")
    engine = "" if ref.engine == "batchlab" else f" --engine {shlex.quote(ref.engine)}"
    repeat = " --repeat" if ref.repeat else ""
    return (f"batchlab matrix run --matrix {ref.matrix}{live}{engine}{repeat} "
            f"--filter '{cell.id}'")


def _run(cell: Cell, ref: Reference):
    """The subject's trajectory. batchlab's engine, the default, through ``run_cell(cell)``
    itself (tests patch it); any other subject by its ``--engine`` value."""
    from batchlab.matrix import engine_run

    if ref.engine == "batchlab":
        return engine_run.run_cell(cell)
    return engine_run.run_cell(cell, engine=ref.engine)


def _declined(cell: Cell, ref: Reference) -> str | None:
    """The engine's refusal, known before any reference is fetched (None: it may run)."""
    from batchlab.matrix import engine_run

    if ref.engine != "batchlab":
        return None
    return engine_run.engine_refusal(cell)


def _crash(err: Exception) -> str:
    from batchlab.subjects.protocol import SubjectError

    if isinstance(err, SubjectError):
        return f"subject broke: {err}"
    return f"engine crashed: {type(err).__name__}: {err}"


def evaluate_cell(cell: Cell, ref: Reference) -> CellResult:
    start = time.perf_counter()

    def result(status: Status, detail: str, **kw) -> CellResult:
        return CellResult.of(cell, status=status, detail=detail, rerun=rerun_command(cell, ref),
                             seconds=round(time.perf_counter() - start, 3), **kw)

    judging = judging_for(cell.path)
    if judging.reference is JudgeReference.SOLO:
        return _solo_gate(cell, ref, judging, result)

    declined = _declined(cell, ref)
    if declined:
        return result(Status.UNSUPPORTED, declined, tokens=0)
    try:
        golden = _reference(cell, ref, judging)
    except GoldenError as err:
        status = err.status if err.status in (Status.NO_GOLDEN, Status.STALE) else Status.ERROR
        return result(status, str(err), tokens=0)
    except Exception as err:  # noqa: BLE001
        return result(Status.ERROR, f"oracle failed: {type(err).__name__}: {err}", tokens=0,
                      traceback=traceback.format_exc())

    from batchlab.matrix.engine_run import Unsupported
    from batchlab.subjects.refusal import RefusalMismatch
    from batchlab.subjects.row_cost import RowCostMismatch

    try:
        got = _run(cell, ref)
        again = _run(cell, ref) if ref.repeat else None
    except Unsupported as err:
        return result(Status.UNSUPPORTED, str(err), tokens=0)
    except RefusalMismatch as err:
        return result(Status.FAIL, f"refusal: {err}", tokens=0)
    except RowCostMismatch as err:  # the engine ran; its memory accounting is wrong
        return result(Status.FAIL, f"row cost: {err}", tokens=0)
    except Exception as err:  # noqa: BLE001
        if golden.oracle_bug and golden.trajectory is None:
            return result(Status.ORACLE_BUG, _bug_text(golden.oracle_bug) +
                          f" (the engine raises too: {type(err).__name__}; the broken code is "
                          "the shared model module)", tokens=0)
        return result(Status.ERROR, _crash(err), tokens=0, traceback=traceback.format_exc())

    order = [r.name for r in cell.rows]
    tokens = sum(len(v) for v in got.rows.values())
    unrepeated = again is not None and first_divergence(got, again, order)
    if unrepeated:
        return result(Status.FAIL, f"not repeatable: the subject's second run differs from "
                      f"its first, {unrepeated.describe()} (bits that change from run to run "
                      "pass or fail a comparison by chance)", tokens=tokens,
                      divergence=unrepeated.as_dict())
    if golden.oracle_bug and golden.trajectory is None:
        # The engine must do what mlx-lm's batch mode does; there it crashed, here it ran:
        # another code path than the oracle's, whose bits nothing vouches for.
        return result(Status.FAIL, f"{_bug_text(golden.oracle_bug)}; but the engine ran "
                      f"without crashing ({tokens} tokens): on this path it must behave as "
                      "mlx-lm's batch mode does, so these bits are not gated", tokens=tokens)
    divergence = first_divergence(golden.trajectory, got, order)
    if golden.oracle_bug:
        if divergence is None:
            return result(Status.ORACLE_BUG, f"{_bug_text(golden.oracle_bug)} (engine equals "
                          "the oracle's (buggy) batch bits)", tokens=tokens)
        return _lab_gate(cell, judging, golden, got, divergence, result, tokens,
                         note=f"engine differs from the oracle's batch bits, which are "
                              f"self-inconsistent too: {_bug_text(golden.oracle_bug)}")
    if divergence is None:
        return result(Status.PASS, f"{tokens} tokens bit-exact", tokens=tokens)
    exact_rows = _quantized_exact_rows(cell, judging)
    row_divergence = exact_rows and first_divergence(golden.trajectory, got, exact_rows)
    if row_divergence:
        return result(Status.FAIL, f"{row_divergence.describe()} (this row switches to the "
                      "quantized cache on the write it would alone, so it must equal its "
                      "serial run bit for bit)", tokens=tokens,
                      divergence=row_divergence.as_dict())
    return _lab_gate(cell, judging, golden, got, divergence, result, tokens)


def _quantized_exact_rows(cell: Cell, judging: Judging) -> list[str]:
    """The rows of a KL-gated quantized-KV cell that are still gated bit for bit
    (``judging.quantized_exact_rows``)."""
    if judging.kv_scheme is None:
        return []
    from batchlab.backend import backend_key
    from batchlab.engine.core.layers import has_rings
    from batchlab.judging.judging import quantized_exact_rows
    from batchlab.zoo import load

    on_gpu = not backend_key().startswith("cpu-")
    return list(quantized_exact_rows(cell, has_rings=has_rings(load(cell.model).model),
                                     on_gpu=on_gpu))


def _lab_gate(cell: Cell, judging: Judging, golden, got, divergence, result, tokens,
              note: str = ""):
    """Not bit-exact: FAIL on l1; on a lab path, judge its KL statistics (live only).
    ``note`` is appended to the detail (an oracle bug the engine did not reproduce)."""
    from batchlab.judging.kl import kl_stats
    from batchlab.zoo import load

    # l1 has no KL gate on any backend: no model to load for it
    gate = judging.kl_gate and judging.lab_gate(load(cell.model).model)
    where = divergence.describe() + (f"; {note}" if note else "")
    if gate is None:
        return result(Status.FAIL, where, tokens=tokens, divergence=divergence.as_dict())
    if not golden.trajectory.has_values():
        return result(Status.FAIL, f"not bit-exact ({where}); rerun with --live for KL statistics",
                      tokens=tokens, divergence=divergence.as_dict())
    if not got.has_values():
        return result(Status.ERROR, f"not bit-exact ({where}); the subject handed over no "
                      "full logprob rows, which the KL gate of this path needs (a trajectory "
                      "file: give each emission its values)", tokens=tokens,
                      divergence=divergence.as_dict())
    stats = kl_stats(golden.trajectory, got)
    return result(Status.PASS if gate.admits(stats) else Status.FAIL,
                  f"not bit-exact ({where}); {stats.describe()}; {gate.describe()}",
                  tokens=tokens, divergence=divergence.as_dict(), kl=stats.as_dict())


def _solo_gate(cell: Cell, ref: Reference, judging: Judging, result) -> CellResult:
    """A batch-invariant path: every row against its own run alone (``matrix/solo.py``),
    on the same subject, no tolerance; then, where the path has one, the second judge
    against the batch oracle's golden (``matrix/second.py``)."""
    from batchlab.matrix.engine_run import Unsupported
    from batchlab.matrix.solo import refusal, solo_reference

    reason = refusal(cell)
    if reason:
        return result(Status.UNSUPPORTED, f"the solo gate cannot judge this cell: {reason}",
                      tokens=0)
    try:
        got = _run(cell, ref)
        want = solo_reference(cell, got, engine=ref.engine)
    except Unsupported as err:
        return result(Status.UNSUPPORTED, str(err), tokens=0)
    except Exception as err:  # noqa: BLE001
        return result(Status.ERROR, _crash(err), tokens=0, traceback=traceback.format_exc())
    tokens = sum(len(v) for v in got.rows.values())
    divergence = first_divergence(want, got, [r.name for r in cell.rows])
    if divergence is not None:
        return result(Status.FAIL, f"not batch-invariant: {divergence.describe()} (expected "
                      "= the row run alone on this path)", tokens=tokens,
                      divergence=divergence.as_dict())
    solo = f"{tokens} tokens, every row bit-identical to its solo run"
    if judging.second is None:
        return result(Status.PASS, solo, tokens=tokens)
    return _second_gate(cell, ref, judging, got, result, tokens, solo)


def _second_gate(cell, ref, judging, got, result, tokens, solo: str) -> CellResult:
    from batchlab.matrix.second import second_judge
    from batchlab.zoo import load

    try:
        golden = _reference(cell, ref, judging)
    except GoldenError as err:
        status = err.status if err.status in (Status.NO_GOLDEN, Status.STALE) else Status.ERROR
        return result(status, f"{solo}; second judge: {err}", tokens=tokens)
    if golden.trajectory is None:  # not gated: oracle crash
        return result(Status.PASS, f"{solo}; no batch-oracle bits to compare (mlx-lm's batch "
                      f"mode crashed: {_bug_text(golden.oracle_bug)})", tokens=tokens)
    model = load(cell.model).model
    exact = judging.second_is_exact(model)
    verdict = second_judge(cell, judging, exact, golden.trajectory, got,
                           judging.second_gate(model))
    if golden.oracle_bug and not verdict.passed:  # not gated: no zoo oracle bug here
        return result(Status.ORACLE_BUG, f"{solo}; {verdict.detail}; but the oracle's batch "
                      f"bits are self-inconsistent: {_bug_text(golden.oracle_bug)}",
                      tokens=tokens)
    failed = Status.STALE if verdict.stale else Status.FAIL
    return result(Status.PASS if verdict.passed else failed, f"{solo}; {verdict.detail}",
                  tokens=tokens, divergence=verdict.divergence and verdict.divergence.as_dict(),
                  kl=verdict.kl and verdict.kl.as_dict())


def _reference(cell: Cell, ref: Reference, judging: Judging):
    if ref.live:
        from batchlab.oracle.regen import make_golden

        return make_golden(cell, keep_values=judging.keeps_values)
    from batchlab.golden.check import load_checked

    return load_checked(cell, ref.goldens, ref.matrix)


def _bug_text(bug: dict) -> str:
    rows = ",".join(bug["rows"])
    at = "" if bug["first_step"] is None else f" from token #{bug['first_step']}"
    return f"oracle self-inconsistent ({bug['kind']}): rows {rows}{at}: {bug['detail']}"
