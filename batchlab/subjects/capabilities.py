"""Which cells a subject can run, from what it declares: a refusal is the UNSUPPORTED
line of the cell, with the reason, never a FAIL and never a silent skip.

    paths=("l1",)           l1/llama/B4/...     runs
                            kv8/llama/B4/...    "subject mlx-lm runs paths l1; ..."
    history=False           .../prefix-share    "the cell gives rows a prefix ..."
    controls_join=True      .../B4/...          "the subject decides when rows join ..."
    validates=False         a refusal cell      "subject mlx-lm declares no validation ..."
"""

from __future__ import annotations

from batchlab.cells.cell import Cell
from batchlab.engine.core.config import MLX_LM_DEFAULTS
from batchlab.subjects.protocol import SCHEDULE_SETTINGS, Capabilities


def refusal(name: str, caps: Capabilities, cell: Cell) -> str | None:
    """Why subject ``name`` cannot run ``cell`` (None: it can)."""
    who = f"subject {name}"
    if caps.paths is not None and cell.path not in caps.paths:
        return (f"{who} runs paths {', '.join(caps.paths)}; this cell asks for path "
                f"{cell.path}")
    uses_history = any(r.prefix for r in cell.rows) or any(
        e.action in ("park", "resume", "continue") for e in cell.events)
    if uses_history and not caps.history:
        return f"{who} declares no history (prefix, park/resume, continue); this cell uses it"
    sampled = not cell.sampling.greedy or any(
        r.sampling is not None and not r.sampling.greedy for r in cell.rows)
    if sampled and not caps.sampling:
        return f"{who} declares no sampling; this cell samples at temperature > 0"
    if any(r.processors is not None for r in cell.rows) and not caps.processors:
        return f"{who} declares no logits processors; this cell's rows have some"
    for setting in SCHEDULE_SETTINGS:
        value = getattr(cell.schedule, setting)
        if value != getattr(MLX_LM_DEFAULTS, setting) and setting not in caps.schedule:
            return (f"{who} does not honour {setting} (this cell sets {value}); the "
                    "reference's bits depend on it")
    if cell.refusals and not caps.validates:
        return (f"{who} declares no validation of requests (capability 'validates', "
                "answered with a refusal); this cell sends requests it must refuse")
    if caps.controls_join and cell.batch > 1:
        return (f"{who} decides itself when a queued row joins; the batch oracle's bits "
                "depend on the step each row joins at, so only B=1 cells are judged")
    return None
