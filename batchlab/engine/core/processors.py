"""Per-row logits processors: logit bias and the three repetition penalties.

The ops are mlx-lm's ``make_logits_processors`` (M/sample_utils.py) written out one for
one, because the gate compares the processed logits bit for bit: the bias is a scatter-add
of float32 values, the repetition penalty a gather / where / scatter over the last
``context`` tokens, the presence penalty a scatter of ``x - p`` (a token seen twice is
penalised once), the frequency penalty a scatter-subtract (penalised once per sighting).
They run in that order, on the raw logits of one row (shape (1, V)), before the logsumexp.

A row's context is every token its cache holds (history, prompt, tokens fed since) plus
the token fed in this step, as an int32 array: mlx-lm's ``TokenBuffer``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx

Processor = Callable[[mx.array, mx.array], mx.array]
DEFAULT_CONTEXT = 20  # mlx-lm's default context size for each penalty


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessorParams:
    """One row's processors; 0 switches a penalty off (mlx-lm skips penalty 0 too)."""

    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias), in the given order
    repetition_penalty: float = 0.0
    repetition_context_size: int = DEFAULT_CONTEXT
    presence_penalty: float = 0.0
    presence_context_size: int = DEFAULT_CONTEXT
    frequency_penalty: float = 0.0
    frequency_context_size: int = DEFAULT_CONTEXT

    def __post_init__(self):
        if self.repetition_penalty < 0:
            raise ValueError(f"repetition_penalty must be >= 0 (mlx-lm refuses a negative "
                             f"one), got {self.repetition_penalty}")
        ids = [t for t, _ in self.logit_bias]
        if len(set(ids)) != len(ids):
            raise ValueError(f"logit_bias names a token twice: {ids}; give each id once")
        for size in (self.repetition_context_size, self.presence_context_size,
                     self.frequency_context_size):
            if size < 1:
                raise ValueError(f"penalty context sizes must be >= 1, got {size}")

    @property
    def active(self) -> bool:
        return bool(self.logit_bias or self.repetition_penalty or self.presence_penalty
                    or self.frequency_penalty)

    @property
    def tag(self) -> str:
        """The row's part of a cell id: ``b5x2rp1.3fp0.5fc8``; ``0`` when none is on."""
        out = [f"b{t}x{v:g}" for t, v in self.logit_bias]
        for name, penalty, size in (("r", self.repetition_penalty, self.repetition_context_size),
                                    ("p", self.presence_penalty, self.presence_context_size),
                                    ("f", self.frequency_penalty, self.frequency_context_size)):
            if penalty:
                out.append(f"{name}p{penalty:g}")
                if size != DEFAULT_CONTEXT:
                    out.append(f"{name}c{size}")
        return "".join(out) or "0"


NO_PROCESSORS = ProcessorParams()


def make_processors(p: ProcessorParams) -> list[Processor]:
    """The row's processors in mlx-lm's order: bias, repetition, presence, frequency."""
    out: list[Processor] = []
    if p.logit_bias:
        out.append(_logit_bias([t for t, _ in p.logit_bias], [v for _, v in p.logit_bias]))
    if p.repetition_penalty:
        out.append(_repetition(p.repetition_penalty, p.repetition_context_size))
    if p.presence_penalty:
        out.append(_presence(p.presence_penalty, p.presence_context_size))
    if p.frequency_penalty:
        out.append(_frequency(p.frequency_penalty, p.frequency_context_size))
    return out


def _logit_bias(ids: list[int], biases: list[float]) -> Processor:
    indices, values = mx.array(ids), mx.array(biases)  # int32 and float32, as mlx-lm builds

    def apply(_context: mx.array, logits: mx.array) -> mx.array:
        return logits.at[:, indices].add(values)

    return apply


def _repetition(penalty: float, size: int) -> Processor:
    def apply(context: mx.array, logits: mx.array) -> mx.array:
        if len(context) > 0:  # one way: context
            recent = context[-size:]
            seen = logits[:, recent]
            logits[:, recent] = mx.where(seen < 0, seen * penalty, seen / penalty)
        return logits

    return apply


def _presence(penalty: float, size: int) -> Processor:
    def apply(context: mx.array, logits: mx.array) -> mx.array:
        if len(context) > 0:  # one way: context
            recent = context[-size:]
            logits[:, recent] -= penalty
        return logits

    return apply


def _frequency(penalty: float, size: int) -> Processor:
    def apply(context: mx.array, logits: mx.array) -> mx.array:
        if len(context) > 0:  # one way: context
            logits = logits.at[:, context[-size:]].subtract(penalty)
        return logits

    return apply


def process_rows(logits: mx.array, inputs: mx.array, seqs: list) -> mx.array:
    """Apply each row's processors to its row of (B, V) ``logits``, as BatchGenerator does:
    one (1, V) slice per row, the fed token appended to the row's context first (only rows
    with processors keep one), then the rows concatenated back."""
    rows = []
    for e, seq in enumerate(seqs):
        row = logits[e : e + 1]
        if seq.processors:
            seq.context = mx.concatenate([seq.context, inputs[e : e + 1].astype(mx.int32)])
            for processor in seq.processors:
                row = processor(seq.context, row)
        rows.append(row)
    return mx.concatenate(rows, axis=0)
