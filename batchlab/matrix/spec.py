"""Read a TOML matrix and expand it to cells.

    [defaults]              # optional; these are the defaults
    path = "l1"
    steps = 12              # tokens each row generates
    seed = 0                # prompt ids are drawn from (seed, row name, length)

    [contexts]              # optional; prompt length of each named context
    short = 5
    wrap = 26

    [[sweep]]               # the cross product of its lists
    models = ["llama", "gemma3"]     # zoo names or mlx-lm model directories
    batch = [1, 2, 4]
    padding = ["equal", "ragged"]
    scripts = ["static", "join-evict"]
    contexts = ["short", "wrap"]
    paths = ["l1"]                   # optional, else defaults.path

    [[cell]]                # one explicit scenario
    model = "llama"
    script = "abc"                   # its name in the cell id
    prompts = { A = [1, 2, 3], B = "hello", C = { length = 9, seed = 3 } }
    events = ["insert A,B at 0", "insert C at 3", "remove A at 8"]
    steps = 12                       # optional

Expansion is deterministic and duplicates (same id) are an error, so an id names
exactly one scenario.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from batchlab.matrix.cell import Cell, Row, parse_event, validate_events
from batchlab.matrix.scenarios import (
    DEFAULT_CONTEXTS,
    scenario_rows,
    script_events,
    seeded_prompt,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SWEEP_KEYS = {"models", "batch", "padding", "scripts", "contexts", "paths", "steps", "seed"}
CELL_KEYS = {"model", "script", "prompts", "events", "steps", "path", "context"}


def load_matrix(path: str | Path) -> list[Cell]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"matrix file {path} does not exist; see matrices/ for examples")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"matrix file {path} is not valid TOML: {err}") from None
    return expand(data, where=str(path))


def expand(data: dict, where: str = "matrix") -> list[Cell]:
    unknown = set(data) - {"defaults", "contexts", "sweep", "cell", "description"}
    if unknown:
        raise ValueError(f"{where}: unknown top-level keys {sorted(unknown)}")
    defaults = {"path": "l1", "steps": 12, "seed": 0} | data.get("defaults", {})
    contexts = DEFAULT_CONTEXTS | data.get("contexts", {})
    cells: list[Cell] = []
    for i, sweep in enumerate(data.get("sweep", [])):
        cells += _expand_sweep(sweep, defaults, contexts, f"{where} [[sweep]] #{i + 1}")
    for i, explicit in enumerate(data.get("cell", [])):
        cells.append(_explicit_cell(explicit, defaults, f"{where} [[cell]] #{i + 1}"))
    seen: set[str] = set()
    for cell in cells:
        if cell.id in seen:
            raise ValueError(f"{where}: cell {cell.id} appears twice; ids must be unique")
        seen.add(cell.id)
    return cells


def _listed(sweep: dict, key: str, where: str) -> list:
    if key not in sweep:
        raise ValueError(f"{where}: missing key {key!r}")
    value = sweep[key]
    return value if isinstance(value, list) else [value]


def _expand_sweep(sweep: dict, defaults: dict, contexts: dict, where: str) -> list[Cell]:
    unknown = set(sweep) - SWEEP_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(SWEEP_KEYS)}")
    steps = int(sweep.get("steps", defaults["steps"]))
    seed = int(sweep.get("seed", defaults["seed"]))
    paths = sweep.get("paths", [defaults["path"]])
    axes = [_listed(sweep, k, where) for k in ("models", "batch", "padding", "scripts", "contexts")]
    cells = []
    for path, (model, batch, padding, script, context) in itertools.product(
        paths, itertools.product(*axes)
    ):
        if context not in contexts:
            raise ValueError(f"{where}: unknown context {context!r}; known {sorted(contexts)}")
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"{where}: batch sizes must be positive integers, got {batch!r}")
        if batch == 1 and script != "static":
            continue  # joins and evictions need two rows
        rows = scenario_rows(padding, int(contexts[context]), batch, steps, seed)
        events = script_events(script, [r.name for r in rows])
        cells.append(
            Cell(model=str(model), path=path, batch=batch, padding=padding, script=script,
                 context=context, rows=rows, events=events)
        )
    return cells


def _explicit_cell(spec: dict, defaults: dict, where: str) -> Cell:
    unknown = set(spec) - CELL_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(CELL_KEYS)}")
    for key in ("model", "script", "prompts", "events"):
        if key not in spec:
            raise ValueError(f"{where}: missing key {key!r}")
    steps = int(spec.get("steps", defaults["steps"]))
    rows = tuple(
        Row(name=name, prompt=_prompt(spec["model"], name, value, where), max_tokens=steps)
        for name, value in spec["prompts"].items()
    )
    events = tuple(parse_event(text, where) for text in spec["events"])
    validate_events(rows, events, where)
    return Cell(
        model=spec["model"], path=spec.get("path", defaults["path"]),
        batch=_max_alive(events), padding="explicit", script=spec["script"],
        context=spec.get("context", "explicit"), rows=rows, events=events,
    )


def _prompt(model: str, name: str, value, where: str) -> tuple[int, ...]:
    if isinstance(value, list):
        return tuple(int(t) for t in value)
    if isinstance(value, dict):
        return seeded_prompt(name, int(value["length"]), int(value.get("seed", 0)))
    if isinstance(value, str):
        from batchlab.zoo.text import encode_text

        return tuple(encode_text(model, value))
    raise ValueError(f"{where}: prompt {name!r} must be ids, text or {{length, seed}}")


def _max_alive(events) -> int:
    alive = best = 0
    for event in sorted(events, key=lambda e: (e.step, e.action == "insert")):
        alive += len(event.rows) if event.action == "insert" else -len(event.rows)
        best = max(best, alive)
    return best
