"""Which goldens of a matrix are missing, stale or corrupt, without running anything."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from batchlab.backend import backend_key, versions
from batchlab.cells.cell import Cell
from batchlab.golden.store import GoldenError, Stamp, golden_path, read_golden
from batchlab.judging.judging import judging_for


@dataclass(frozen=True, slots=True, kw_only=True)
class GoldenProblem:
    scenario_id: str
    status: str  # NO-GOLDEN, STALE or CORRUPT
    message: str


def goldens_flag(goldens: Path | None) -> str:
    """`` --goldens DIR`` unless DIR is the default (then the flag is noise)."""
    from batchlab.defaults import DEFAULT_GOLDENS
    from batchlab.display import shown

    if goldens is None or Path(goldens).resolve() == DEFAULT_GOLDENS:
        return ""
    return f" --goldens {shown(goldens)}"


def regen_command(matrix: str | Path, scenario_id: str, goldens: Path | None = None) -> str:
    return f"batchlab golden regen --matrix {matrix}{goldens_flag(goldens)} --filter '{scenario_id}'"


def expected_stamp(cell: Cell, fingerprint: str) -> Stamp:
    """What a golden for ``cell`` made by this process would be stamped with."""
    return Stamp(
        cell_id=cell.scenario_id,
        definition_digest=cell.definition_digest(),
        backend=backend_key(),
        versions=versions(),
        fingerprint=fingerprint,
        schedule=cell.schedule.as_dict(),
    )


def has_golden(cell: Cell) -> bool:
    """Whether the cell is judged against an oracle's golden (not by its solo runs)."""
    return judging_for(cell.path).has_golden


def unique_scenarios(cells: list[Cell]) -> list[Cell]:
    """One cell per golden (cells that share a scenario share its golden): a cell with a
    second judge where there is one, since its golden may need the logprobs kept; of two,
    one whose second judge is a KL gate (``invariant-blocked`` beside an exact
    ``invariant`` on kimi-linear: the first one seen kept no logprobs, and the KL judge
    then read the golden as STALE)."""
    seen: dict[str, Cell] = {}
    for cell in cells:
        if not has_golden(cell):
            continue
        have = seen.get(cell.scenario_id)
        if have is None or _keeps_more(cell, have):
            seen[cell.scenario_id] = cell
    return list(seen.values())


def _keeps_more(cell: Cell, have: Cell) -> bool:
    """Whether ``cell``'s golden needs more kept than ``have``'s (same scenario)."""
    new, old = judging_for(cell.path), judging_for(have.path)
    if new.second is None:
        return False
    if old.second is None:
        return True
    return _second_needs_values(cell) and not _second_needs_values(have)


def _second_needs_values(cell: Cell) -> bool:
    from batchlab.zoo import load

    return not judging_for(cell.path).second_is_exact(load(cell.model).model)


@functools.cache
def model_fingerprint(model: str) -> str:
    """Weights fingerprint plus a digest of config.json: a config-only change (say the
    sliding window) changes the bits without touching a weight, so it must stale too."""
    import hashlib
    import json

    from batchlab.zoo import fingerprint, resolve

    path = resolve(model)
    config = json.dumps(json.loads((path / "config.json").read_text()), sort_keys=True)
    return f"{fingerprint(path)}+cfg{hashlib.sha256(config.encode()).hexdigest()[:8]}"


def load_checked(cell: Cell, root: Path, matrix: str | Path):
    """The golden for ``cell`` or a GoldenError naming the file and the regen command."""
    path = golden_path(root, backend_key(), cell.golden_stem)
    stamp = expected_stamp(cell, model_fingerprint(cell.model))
    return read_golden(path, stamp, regen_command(matrix, cell.scenario_id, root))


def check_goldens(cells: list[Cell], root: Path, matrix: str | Path) -> list[GoldenProblem]:
    problems = []
    for cell in unique_scenarios(cells):
        try:
            load_checked(cell, root, matrix)
        except GoldenError as err:
            problems.append(
                GoldenProblem(scenario_id=cell.scenario_id, status=err.status, message=str(err))
            )
    return problems
