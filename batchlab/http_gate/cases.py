"""What the checks send: the golden cases of one zoo model, and the needle's fillers.

A case is a B=1 cell of ``matrices/http.toml`` (or another matrix): one row, greedy, no
processors or history, one insert. Its golden gives per step the token and the oracle's
top-5 (id, logprob), logprobs exact as the model dtype made them (JSON keeps a bf16 or
f32 value exactly). A missing, stale or corrupt golden raises ``GoldenError``: the check
is ERROR, never a pass.

``text`` is the prompt as text where the model's tokenizer encodes it back to exactly the
case's ids (with and without special tokens), for servers that take only text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.cells.cell import Cell
from batchlab.cells.spec import load_matrix
from batchlab.golden.check import load_checked

FILLER_LENGTHS = (1, 9, 40, 3, 23, 64, 5, 17, 31, 2, 48, 12)  # prompt tokens
FILLER_STEPS = (4, 24, 9, 16, 2, 30, 12, 7, 20, 5, 14, 26)  # max_tokens: rows come and go
ASCII = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ.,0123456789", dtype=np.uint8)


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    cell_id: str
    prompt: tuple[int, ...]
    text: str | None  # None: no text encodes to exactly these ids
    tokens: tuple[int, ...]  # the golden's greedy tokens
    top: tuple[tuple[tuple[int, float], ...], ...]  # the golden's top-5 per step

    @property
    def logprobs(self) -> tuple[float, ...]:
        """The golden's logprob of each of its tokens (greedy: in its top-5)."""
        return tuple(dict(t)[tok] for tok, t in zip(self.tokens, self.top))


def lone_cells(matrix: Path, model: str) -> list[Cell]:
    """The cells of ``matrix`` for ``model`` that a lone greedy request reproduces."""
    out = []
    for cell in load_matrix(matrix):
        row = cell.rows[0]
        if (cell.model == model and len(cell.rows) == 1 and len(cell.events) == 1
                and cell.sampling.greedy and row.sampling is None and row.processors is None
                and not row.prefix and not row.resume):
            out.append(cell)
    if not out:
        raise ValueError(f"{matrix} has no B=1 greedy cell for model {model!r}; add one "
                         "(see matrices/http.toml) or pass --matrix")
    return out


def load_cases(matrix: Path, goldens: Path, model: str, tokenizer) -> list[Case]:
    cases = []
    for cell in lone_cells(matrix, model):
        golden = load_checked(cell, goldens, matrix)
        steps = golden.trajectory.rows[cell.rows[0].name]
        prompt = cell.rows[0].prompt
        cases.append(Case(cell_id=cell.id, prompt=prompt, text=as_text(tokenizer, prompt),
                          tokens=tuple(s.token for s in steps),
                          top=tuple(tuple(s.top) for s in steps)))
    return cases


def as_text(tokenizer, ids) -> str | None:
    if tokenizer is None:
        return None
    text = tokenizer.decode(list(ids))
    plain = list(tokenizer.encode(text, add_special_tokens=False))
    special = list(tokenizer.encode(text))
    return text if plain == list(ids) == special else None


def fillers(count: int, trial: int, tokenizer) -> list[tuple[tuple[int, ...], str | None, int]]:
    """``count`` (ids, text, max_tokens) of mixed lengths, ASCII so text works, different
    per trial (seeded: the same on every machine)."""
    rng = np.random.default_rng(1000 + trial)
    out = []
    for i in range(count):
        k = (i + trial) % len(FILLER_LENGTHS)
        ids = tuple(int(b) for b in rng.choice(ASCII, size=FILLER_LENGTHS[k]))
        out.append((ids, as_text(tokenizer, ids), FILLER_STEPS[k]))
    return out
