"""The typed values of a matrix file: tables, counts, and the schedule, sampler and
processor settings of a sweep, a cell or a row, each checked with the place it came from.

``batchlab/cells/spec.py`` expands a matrix with these; every function raises a
ValueError that names ``where`` (the file and its ``[[sweep]]`` / ``[[cell]]``) and what
to write instead.
"""

from __future__ import annotations

from batchlab.cells.cell import Cell
from batchlab.cells.validate import check_name, vocab_size
from batchlab.engine.core.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.core.processors import ProcessorParams
from batchlab.engine.core.sampler import SamplingParams

SCHEDULE_KEYS = set(MLX_LM_DEFAULTS.as_dict())
SAMPLING_KEYS = {"temperature", "top_k", "top_p", "min_p", "seed", "xtc_probability",
                 "xtc_threshold"}
SAMPLING_FLOATS = ("temperature", "top_p", "min_p", "xtc_probability", "xtc_threshold")
PROCESSOR_KEYS = {"logit_bias", "repetition_penalty", "repetition_context_size",
                  "presence_penalty", "presence_context_size", "frequency_penalty",
                  "frequency_context_size"}


def _table(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a table, got {type(value).__name__}")
    return value


def _tables(value, where: str) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{where} must be an array of tables (write [[...]] headers)")
    return value


def _no_unknown(table: dict, allowed: set[str], where: str) -> None:
    unknown = set(table) - allowed
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")


def _contexts(table, where: str) -> dict:
    for name, length in _table(table, where).items():
        check_name(name, "context name", where)
        _positive_int(length, f"context {name!r}", where)
    return table


def _positive_int(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {what} must be an integer >= 1, got {value!r}")
    return value


def _int(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: {what} must be an integer >= 0, got {value!r}")
    return value


def _listed(table: dict, key: str, where: str, default=None) -> list:
    if key not in table:
        if default is None:
            raise ValueError(f"{where}: missing key {key!r}")
        return default
    value = table[key]
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError(f"{where}: {key!r} is an empty list; give at least one value")
    return items


def schedule_of(value, where: str) -> ScheduleConfig:
    """A ``schedule`` table: any of BatchGenerator's three knobs, the rest its defaults."""
    table = _table(value, f"{where} schedule")
    _no_unknown(table, SCHEDULE_KEYS, f"{where} schedule")
    for key, v in table.items():
        _positive_int(v, f"schedule {key}", where)
    return ScheduleConfig(**(MLX_LM_DEFAULTS.as_dict() | table))


def sampling_of(value, where: str) -> SamplingParams:
    """A ``sampling`` table: mlx-lm's make_sampler settings plus MLX's global seed."""
    table = _table(value, f"{where} sampling")
    _no_unknown(table, SAMPLING_KEYS, f"{where} sampling")
    for key in SAMPLING_FLOATS:
        if key in table and (isinstance(table[key], bool)
                             or not isinstance(table[key], (int, float))):
            raise ValueError(f"{where}: sampling {key} must be a number, got {table[key]!r}")
    for key in ("top_k", "seed"):
        if key in table:
            _int(table[key], f"sampling {key}", where)
    try:
        return SamplingParams(**{k: (float(v) if k in SAMPLING_FLOATS else v)
                                 for k, v in table.items()})
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def row_sampling_of(value, where: str) -> SamplingParams | None:
    """A row's own sampler: ``{}`` is none (the shared one). No seed: every sampler of a
    batch draws from MLX's one global key, seeded by the cell's ``sampling`` seed."""
    table = _table(value, f"{where} row sampling")
    if "seed" in table:
        raise ValueError(f"{where}: a row's sampling takes no seed (per-row samplers draw "
                         "from MLX's global key, as BatchGenerator's do); set the seed in "
                         "the cell's sampling table")
    return sampling_of(table, where) if table else None


def processors_of(value, where: str) -> ProcessorParams | None:
    """A row's processors (``{}``: none): mlx-lm's make_logits_processors arguments, with
    ``logit_bias = { 5 = 2.0 }`` keyed by token id."""
    table = _table(value, f"{where} processors")
    _no_unknown(table, PROCESSOR_KEYS, f"{where} processors")
    if not table:
        return None
    args = {}
    for key, v in table.items():
        if key == "logit_bias":
            bias = _table(v, f"{where} processors logit_bias")
            pairs = []
            for token, b in bias.items():
                if (not str(token).isdigit() or isinstance(b, bool)
                        or not isinstance(b, (int, float))):
                    raise ValueError(f"{where}: logit_bias maps token ids to numbers, e.g. "
                                     f"{{ 5 = 2.0 }}; got {token!r} = {b!r}")
                pairs.append((int(token), float(b)))
            args[key] = tuple(pairs)
        elif key.endswith("_size"):
            args[key] = _positive_int(v, f"processors {key}", where)
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{where}: processors {key} must be a number >= 0, got {v!r}")
        else:
            args[key] = float(v)
    try:
        params = ProcessorParams(**args)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return params if params.active else None


def _row_settings(table: dict, key: str, parse, where: str) -> list:
    """A sweep's ``row_sampling`` / ``row_processors``: a list of tables, by position."""
    if key not in table:
        return [None]
    value = table[key]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: {key!r} must be a non-empty list of tables, row i "
                         "taking entry i % len, e.g. [{ temperature = 0.9 }, {}]")
    return [parse(v, f"{where} {key}[{i}]") for i, v in enumerate(value)]


def check_row_settings(cell: Cell, where: str) -> None:
    """Ids a row brings (prefix, resume, logit bias) and per-row top-k fit the vocabulary."""
    size = vocab_size(cell.model)
    if size is None:
        return
    for row in cell.rows:
        bias = [t for t, _ in row.processors.logit_bias] if row.processors else []
        bad = [t for t in (*row.prefix, *row.resume, *bias) if not 0 <= t < size]
        if bad:
            raise ValueError(f"{where}: row {row.name} of {cell.id} names ids {bad[:5]} "
                             f"outside 0..{size - 1} (the vocabulary of {cell.model})")
        if row.sampling and row.sampling.top_k >= size:
            raise ValueError(f"{where}: row {row.name}'s top_k {row.sampling.top_k} must be "
                             f"below the vocabulary size {size} of {cell.model}")
