"""Read a TOML matrix, validate it whole, and expand it to cells.

    [defaults]              # optional; these are the defaults
    path = "l1"
    steps = 12              # tokens each row generates
    seed = 0                # prompt ids are drawn from (seed, row name, length)
    schedule = { prefill_batch_size = 8, completion_batch_size = 32, prefill_step_size = 2048 }
    sampling = { temperature = 0.0 }     # greedy; else top_k, top_p, min_p, seed,
                                         # xtc_probability, xtc_threshold

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
    window = [4]                     # optional: zoo models with this sliding window instead
                                     # (a variant, e.g. gemma3@w4, with the same weights)
    schedule = [{ prefill_batch_size = 2 }, { prefill_step_size = 8 }]  # optional axis
    sampling = [{ temperature = 0.7, top_k = 5, seed = 3 }]               # optional axis
    row_sampling = [{ temperature = 0.9, top_k = 8 }, {}]   # optional: row i takes entry
                                     # i % len (round robin); {} = the shared sampler
    row_processors = [{ repetition_penalty = 1.3 }, {}, { logit_bias = { 5 = 2.0 } }]
                                     # optional, the same way (mlx-lm make_logits_processors)

    [[cell]]                # one explicit scenario
    model = "llama"                  # or models = [...]: the same scenario on each
    script = "abc"                   # its name in the cell id
    prompts = { A = [1, 2, 3], B = "hello", C = { length = 9, seed = 3 },
                D = { chat = "What is 2 + 2?" }, E = { corpus = 1200, length = 64 } }
    # a row's table may also say: ids = [...] (instead of length), prefix = 20 or [...]
    # (ids its caches hold when it joins), resume = 3 or [...] (its ids when a 'resume'
    # event re-inserts it), sampling = {...} and processors = {...} (its own settings),
    # max_tokens = 4 (its own token budget, per insert; default: steps)
    events = ["insert A,B at 0", "insert C at 3", "remove A at 8"]   # also "park A at 4"
                                     # (remove keeping its caches), "resume A at 7"
    steps = 12                       # optional, as are path, context, schedule, sampling
    refuse = [{ at = 2, expect = "invalid", row = { name = "X", prompt = [1, 2],
                sampling = { top_p = 1.5 } } }]   # optional: a refusal cell (below)

A refusal cell sends every row raw (the wire's ROW: ``name``, ``prompt``, ``max_tokens``,
``sampling``, ``processors``, taken as written, unchecked) and each ``refuse`` entry's
``row`` just before step ``at`` (after that step's events, at most the last event's
step; ``max_tokens`` defaults to ``steps``): the subject must refuse it with the
``expect`` kind (invalid, unsupported, capacity) and keep the other rows bit-exact
against their golden, which the oracle makes without the refused rows.

Everything is checked before anything runs, and every error names the file, the
``[[sweep]]`` or ``[[cell]]`` (1-based) and what to change. Expansion is deterministic;
an id names exactly one scenario (settings off their defaults are part of the id), and
cells that share a scenario (one golden) must define it identically.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace
from pathlib import Path

from batchlab.cells.cell import (
    DEFAULT_SEED,
    DEFAULT_STEPS,
    REFUSAL_KINDS,
    Cell,
    Refusal,
    Row,
)
from batchlab.cells.events import parse_event, validate_events
from batchlab.cells.scenarios import (
    DEFAULT_CONTEXTS,
    scenario_rows,
    script_events,
    seeded_prompt,
    with_history,
)
from batchlab.cells.settings import (
    _contexts,
    _int,
    _listed,
    _no_unknown,
    _positive_int,
    _row_settings,
    _table,
    _tables,
    check_row_settings,
    processors_of,
    row_sampling_of,
    sampling_of,
    schedule_of,
)
from batchlab.cells.validate import check_name, check_prompt_ids

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOP_KEYS = {"defaults", "contexts", "sweep", "cell", "description"}
DEFAULT_KEYS = {"path", "steps", "seed", "schedule", "sampling"}
SWEEP_KEYS = {"models", "batch", "padding", "scripts", "contexts", "paths", "steps", "seed",
              "schedule", "sampling", "window", "row_sampling", "row_processors"}
CELL_KEYS = {"model", "models", "script", "prompts", "events", "steps", "path", "context",
             "schedule", "sampling", "window", "refuse"}
REFUSE_KEYS = {"at", "expect", "row"}
ROW_KEYS = {"length", "seed", "ids", "prefix", "resume", "sampling", "processors",
            "max_tokens"}
# scripts that run with one row (the others join, evict or wait for a second row)
ONE_ROW_SCRIPTS = {"static", "park-resume", "prefix-join"}


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
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown top-level keys {sorted(unknown)}; "
                         f"allowed {sorted(TOP_KEYS)}")
    given = _table(data.get("defaults", {}), f"{where} [defaults]")
    _no_unknown(given, DEFAULT_KEYS, f"{where} [defaults]")
    defaults = {"path": "l1", "steps": DEFAULT_STEPS, "seed": DEFAULT_SEED} | given
    contexts = DEFAULT_CONTEXTS | _contexts(data.get("contexts", {}), f"{where} [contexts]")
    cells: list[Cell] = []
    for i, sweep in enumerate(_tables(data.get("sweep", []), f"{where} [[sweep]]")):
        cells += _expand_sweep(sweep, defaults, contexts, f"{where} [[sweep]] #{i + 1}")
    for i, explicit in enumerate(_tables(data.get("cell", []), f"{where} [[cell]]")):
        cells += _explicit_cells(explicit, defaults, f"{where} [[cell]] #{i + 1}")
    _check_unique(cells, where)
    return cells


def _check_unique(cells: list[Cell], where: str) -> None:
    """One id, one cell; one scenario id, one definition (they share one golden file)."""
    seen: set[str] = set()
    scenarios: dict[str, Cell] = {}
    for cell in cells:
        if cell.id in seen:
            raise ValueError(f"{where}: cell {cell.id} appears twice; ids must be unique")
        seen.add(cell.id)
        first = scenarios.setdefault(cell.scenario_id, cell)
        if first.definition_digest() != cell.definition_digest():
            raise ValueError(
                f"{where}: cells {first.id} and {cell.id} share the scenario (and golden) "
                f"{cell.scenario_id} but define it differently (prompts, events or steps); "
                "give one of them another script, context or steps")


def _settings(table: dict, defaults: dict, where: str):
    """Steps, seed, and the lists of schedules and samplers of a sweep or cell."""
    steps = _positive_int(table.get("steps", defaults["steps"]), "steps", where)
    seed = _int(table.get("seed", defaults["seed"]), "seed", where)
    schedules = [schedule_of(s, where) for s in
                 _listed(table, "schedule", where, [defaults.get("schedule", {})])]
    samplers = [sampling_of(s, where) for s in
                _listed(table, "sampling", where, [defaults.get("sampling", {})])]
    return steps, seed, schedules, samplers


def _expand_sweep(sweep: dict, defaults: dict, contexts: dict, where: str) -> list[Cell]:
    _no_unknown(sweep, SWEEP_KEYS, where)
    steps, seed, schedules, samplers = _settings(sweep, defaults, where)
    paths = _listed(sweep, "paths", where, [defaults["path"]])
    axes = [_listed(sweep, k, where) for k in ("models", "batch", "padding", "scripts", "contexts")]
    for path in paths:
        check_name(path, "path", where)
    axes[0] = _windowed(axes[0], sweep, where)
    for model in axes[0]:
        check_name(str(model), "model", where, model=True)
    for batch in axes[1]:
        _positive_int(batch, "batch size", where)
    for context in axes[4]:
        if context not in contexts:
            raise ValueError(f"{where}: unknown context {context!r}; known {sorted(contexts)} "
                             "(add it under [contexts])")
    row_samplers = _row_settings(sweep, "row_sampling", row_sampling_of, where)
    row_processors = _row_settings(sweep, "row_processors", processors_of, where)
    cells = []
    for path, (model, batch, padding, script, context), schedule, sampling in itertools.product(
        paths, itertools.product(*axes), schedules, samplers
    ):
        if batch == 1 and script not in ONE_ROW_SCRIPTS:
            continue  # joins and evictions need two rows
        try:
            rows = scenario_rows(padding, int(contexts[context]), batch, steps, seed, str(model))
            events = script_events(script, [r.name for r in rows])
            rows = with_history(script, rows, int(contexts[context]), seed)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        rows = tuple(replace(r, sampling=row_samplers[i % len(row_samplers)],
                             processors=row_processors[i % len(row_processors)])
                     for i, r in enumerate(rows))
        cell = Cell(model=str(model), path=path, batch=batch, padding=padding, script=script,
                    context=context, rows=rows, events=events, steps=steps, seed=seed,
                    schedule=schedule, sampling=sampling)
        check_prompt_ids(cell, where)
        check_row_settings(cell, where)
        cells.append(cell)
    return cells


def _explicit_cells(spec: dict, defaults: dict, where: str) -> list[Cell]:
    _no_unknown(spec, CELL_KEYS, where)
    if ("model" in spec) == ("models" in spec):
        raise ValueError(f"{where}: give either 'model' or 'models'")
    for key in ("script", "prompts", "events"):
        if key not in spec:
            raise ValueError(f"{where}: missing key {key!r}")
    check_name(spec["script"], "script", where)
    check_name(spec.get("context", "explicit"), "context", where)
    path = spec.get("path", defaults["path"])
    check_name(path, "path", where)
    steps, seed, schedules, samplers = _settings(spec, defaults, where)
    if len(schedules) > 1 or len(samplers) > 1:
        raise ValueError(f"{where}: a [[cell]] takes one schedule and one sampling table; "
                         "use a [[sweep]] for several")
    prompts = _table(spec["prompts"], f"{where} prompts")
    if not prompts:
        raise ValueError(f"{where}: 'prompts' is empty; give each row a prompt")
    events_text = spec["events"]
    if not isinstance(events_text, list) or not events_text:
        raise ValueError(f"{where}: 'events' must be a non-empty list such as "
                         "[\"insert A,B at 0\", \"remove A at 8\"]")
    events = tuple(parse_event(str(text), where) for text in events_text)
    refusals = _refusals(spec.get("refuse", []), steps, events, path, where)
    cells = []
    for model in _windowed(_listed(spec, "models", where, [spec.get("model")]), spec, where):
        check_name(str(model), "model", where, model=True)
        rows = tuple(_row(str(model), check_name(name, "row name", where), value, steps, where)
                     for name, value in prompts.items())
        validate_events(rows, events, where)
        cell = Cell(model=str(model), path=path, batch=max_alive(events), padding="explicit",
                    script=spec["script"], context=spec.get("context", "explicit"),
                    rows=rows, events=events, steps=steps, seed=seed,
                    schedule=schedules[0], sampling=samplers[0], refusals=refusals)
        check_prompt_ids(cell, where)
        check_row_settings(cell, where)
        cells.append(cell)
    return cells


def _refusals(value, steps: int, events, path: str, where: str) -> tuple[Refusal, ...]:
    """A refusal cell's bad requests, raw: only their form is checked here (a table with a
    name), never their values: the subject under test must find what is wrong."""
    import json

    from batchlab.judging.judging import Reference, judging_for

    entries = _tables(value, f"{where} refuse")
    if entries and judging_for(path).reference is Reference.SOLO:
        raise ValueError(f"{where}: path {path} is judged against its own solo runs, which "
                         "a refusal cell has no golden for; put refuse = [...] on a path "
                         "judged against an oracle (l1, paged, kv*)")
    last = max(e.step for e in events)
    out = []
    for i, entry in enumerate(entries):
        at = f"{where} refuse #{i + 1}"
        _no_unknown(entry, REFUSE_KEYS, at)
        step = _int(entry.get("at"), "at", at)
        if not 0 <= step <= last:
            raise ValueError(f"{at}: at = {step}; give a step from 0 to {last} (the last "
                             "event's), while the other rows run")
        if entry.get("expect") not in REFUSAL_KINDS:
            raise ValueError(f"{at}: expect = {entry.get('expect')!r}; give one of "
                             f"{', '.join(REFUSAL_KINDS)}")
        row = _table(entry.get("row"), f"{at} row")
        if not isinstance(row.get("name"), str) or "prompt" not in row:
            raise ValueError(f"{at}: the row needs a name and a prompt (the wire's ROW), "
                             "e.g. row = { name = \"X\", prompt = [1, 2] }")
        row = {"max_tokens": steps, "history": "none"} | row
        out.append(Refusal(step=step, expect=entry["expect"],
                           request=json.dumps(row, sort_keys=True)))
    return tuple(out)


def _windowed(models: list, table: dict, where: str) -> list:
    """``models`` as zoo variants with each ``window`` of the table (if it has one)."""
    if "window" not in table:
        return models
    from batchlab.zoo.variants import variant_name, variant_spec

    out = []
    for window in _listed(table, "window", where):
        _positive_int(window, "window", where)
        for model in models:
            name = variant_name(str(model), window)
            try:
                variant_spec(name)
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
            out.append(name)
    return out


def _row(model: str, name: str, value, steps: int, where: str) -> Row:
    """A [[cell]] prompt: ids, text, or a table with the row's history and settings."""
    plain = ({"length", "seed"}, {"chat"}, {"corpus", "length"})  # prompt forms, no settings
    if not isinstance(value, dict) or any(set(value) <= form for form in plain):
        return Row(name=name, prompt=_prompt(model, name, value, where), max_tokens=steps)
    _no_unknown(value, ROW_KEYS, f"{where} prompt {name!r}")
    if ("ids" in value) == ("length" in value):
        raise ValueError(f"{where}: prompt {name!r} needs either ids = [...] or a length")
    seed = _int(value.get("seed", 0), f"prompt {name!r} seed", where)
    prompt = (_prompt(model, name, value["ids"], where) if "ids" in value
              else _prompt(model, name, {"length": value["length"], "seed": seed}, where))

    def extra(key: str) -> tuple[int, ...]:
        if key not in value:
            return ()
        v = value[key]
        if isinstance(v, int) and not isinstance(v, bool):
            return seeded_prompt(f"{name}.{key}", _positive_int(v, f"{key} of {name!r}", where),
                                 seed)
        return _prompt(model, f"{name}.{key}", v, where)

    # a row's own token budget (default: the cell's steps), so rows admitted together can
    # finish on different steps
    budget = _positive_int(value.get("max_tokens", steps), f"max_tokens of {name!r}", where)
    return Row(name=name, prompt=prompt, max_tokens=budget, prefix=extra("prefix"),
               resume=extra("resume"),
               sampling=row_sampling_of(value.get("sampling", {}), f"{where} row {name}"),
               processors=processors_of(value.get("processors", {}), f"{where} row {name}"))


def _prompt(model: str, name: str, value, where: str) -> tuple[int, ...]:
    what = f"prompt {name!r}"
    if isinstance(value, list):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            raise ValueError(f"{where}: {what} must be a list of integer token ids")
        ids = tuple(value)
    elif isinstance(value, dict) and "chat" in value:
        _no_unknown(value, {"chat"}, f"{where} {what}")
        from batchlab.zoo.chat import chat_prompt

        try:
            ids = chat_prompt(model, value["chat"])
        except ValueError as err:
            raise ValueError(f"{where}: {what}: {err}") from None
    elif isinstance(value, dict) and "corpus" in value:
        _no_unknown(value, {"corpus", "length"}, f"{where} {what}")
        from batchlab.zoo.corpus import corpus_prompt

        try:
            ids = corpus_prompt(model, _int(value["corpus"], f"{what} corpus offset", where),
                                _positive_int(value.get("length"), f"{what} length", where))
        except ValueError as err:
            raise ValueError(f"{where}: {what}: {err}") from None
    elif isinstance(value, dict):
        _no_unknown(value, {"length", "seed"}, f"{where} {what}")
        if "length" not in value:
            raise ValueError(f"{where}: {what} needs a length, e.g. {{ length = 9, seed = 3 }}")
        ids = seeded_prompt(name, _positive_int(value["length"], f"{what} length", where),
                            _int(value.get("seed", 0), f"{what} seed", where))
    elif isinstance(value, str):
        from batchlab.zoo.text import encode_text

        ids = tuple(encode_text(model, value))
    else:
        raise ValueError(f"{where}: {what} must be ids, text, {{length, seed}}, {{chat}} or "
                         "{corpus, length}")
    if not ids:
        raise ValueError(f"{where}: {what} is empty; a row needs at least one token")
    return ids


def max_alive(events) -> int:
    """The most rows inserted and not yet removed at any step (removals count first)."""
    alive = best = 0
    for event in sorted(events, key=lambda e: (e.step, e.action == "insert")):
        alive += len(event.rows) if event.action == "insert" else -len(event.rows)
        best = max(best, alive)
    return best

