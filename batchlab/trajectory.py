"""What a run of a cell produced: per row, per emitted token, the exact bits.

Both the oracle and the engine record the log-probabilities the sampler saw
(``logits - logsumexp(logits)`` in the model dtype, the vector mlx-lm's BatchGenerator
returns). A step keeps a sha256 of those bytes (the bit-exact check) and the top-k
entries (the diagnostics: which token, by how much). The engine also keeps the full
vector in memory, so a failure can report max |d logprob| over the golden's top-k ids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

TOP_K = 5
_UINT_OF_SIZE = {2: mx.uint16, 4: mx.uint32, 8: mx.uint64}


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One emitted token. ``step`` is the scheduler tick that emitted it."""

    step: int
    token: int
    digest: str
    top: tuple[tuple[int, float], ...]
    values: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Trajectory:
    """Per row name, the steps in emission order."""

    rows: dict[str, tuple[Step, ...]]
    dtype: str

    def tokens(self, name: str) -> list[int]:
        return [s.token for s in self.rows[name]]

    def has_values(self) -> bool:
        """Whether every step keeps its full logprob row (what a KL gate reads)."""
        return all(s.values is not None for steps in self.rows.values() for s in steps)


def array_bytes(x: mx.array) -> bytes:
    """The raw bytes of ``x`` in its own dtype (bfloat16 has no numpy dtype)."""
    if x.dtype in (mx.bfloat16, mx.float16):
        x = x.view(_UINT_OF_SIZE[x.dtype.size])
    return np.array(x, copy=False).tobytes()


def digest(x: mx.array) -> str:
    return hashlib.sha256(array_bytes(x)).hexdigest()[:16]


def top_k(values: np.ndarray, k: int = TOP_K) -> tuple[tuple[int, float], ...]:
    # stable sort on -value: ties keep the lower id first, like argmax
    order = np.argsort(-values, kind="stable")[:k]
    return tuple((int(i), float(values[i])) for i in order)


def make_step(step: int, token: int, logprobs: mx.array, keep_values: bool) -> Step:
    """Record one row's emitted token and the logprobs vector (shape (V,)) it came from."""
    values = np.array(logprobs.astype(mx.float32))
    return Step(
        step=step,
        token=int(token),
        digest=digest(logprobs),
        top=top_k(values),
        values=values if keep_values else None,
    )


class TrajectoryBuilder:
    """Collects steps by row name while a scheduler runs."""

    def __init__(self, dtype: str, keep_values: bool = False):
        self.dtype = dtype
        self.keep_values = keep_values
        self._rows: dict[str, list[Step]] = {}

    def start(self, name: str) -> None:
        self._rows.setdefault(name, [])

    def add(self, name: str, step: int, token: int, logprobs: mx.array) -> None:
        self._rows[name].append(make_step(step, token, logprobs, self.keep_values))

    def build(self) -> Trajectory:
        return Trajectory(rows={k: tuple(v) for k, v in self._rows.items()}, dtype=self.dtype)
