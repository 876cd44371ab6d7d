"""The two batches a scheduler owns: rows being prefilled and rows decoding.

Each holds its sequences in batch order and one engine cache per model layer. Every
change of membership goes through ``filter`` / ``extend`` on both at once, so row i of
the sequence list is always row i of every cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx

from batchlab.engine.core import layers
from batchlab.engine.core.history import History
from batchlab.engine.core.processors import Processor, ProcessorParams, make_processors
from batchlab.engine.core.sampler import BatchSampler, SamplingParams


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What a caller asks for. Rows are known by name, never by batch position."""

    name: str
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams | None = None  # None: the scheduler's shared sampler
    processors: ProcessorParams | None = None  # None: no logits processors
    history: History | None = None  # None: the row starts from empty caches

    def __post_init__(self):
        if not self.prompt:
            raise ValueError(f"request {self.name!r} has an empty prompt; give at least one id")
        if self.max_tokens <= 0:
            raise ValueError(f"request {self.name!r}: max_tokens must be > 0")


@dataclass(slots=True, kw_only=True)
class Sequence:
    """A request in flight. ``unprefilled`` excludes the last prompt token, which the
    first decode step feeds (as mlx-lm does). ``emitted`` are the tokens fed since (each
    emitted token was fed by the forward that emitted it); ``context`` is the processors'
    token context (int32, kept only for rows with processors, from the join on)."""

    request: Request
    unprefilled: list[int]
    sampler: object | None  # None: the scheduler's shared sampler
    processors: list[Processor] = field(default_factory=list)
    num_emitted: int = 0
    joined: bool = False
    emitted: list[int] = field(default_factory=list)
    context: mx.array | None = None

    @classmethod
    def start(cls, request: Request, row_sampler: type = BatchSampler) -> Sequence:
        p = request.processors
        return cls(request=request, unprefilled=list(request.prompt[:-1]),
                   sampler=row_sampler(request.sampling) if request.sampling else None,
                   processors=make_processors(p) if p else [])

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def history_tokens(self) -> tuple[int, ...]:
        return self.request.history.tokens if self.request.history else ()

    def cache_tokens(self) -> tuple[int, ...]:
        """The ids this row's caches hold now (mlx-lm's ``tokens`` of the row)."""
        prompt = self.request.prompt
        if self.joined:
            return self.history_tokens + prompt + tuple(self.emitted)
        return self.history_tokens + prompt[: len(prompt) - 1 - len(self.unprefilled)]

    def start_context(self) -> None:
        """At the join: the context is every id prefilled so far (the fed one comes next)."""
        if self.processors:
            self.context = mx.array(list(self.history_tokens + self.request.prompt[:-1]),
                                    dtype=mx.int32)


@dataclass(slots=True, kw_only=True)
class PromptBatch:
    seqs: list[Sequence] = field(default_factory=list)
    caches: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seqs)

    def extend(self, other: PromptBatch) -> None:
        self.seqs += other.seqs
        self.caches = layers.extend_layers(self.caches, other.caches)

    def filter(self, keep: list[int]) -> None:
        self.seqs = [self.seqs[i] for i in keep]
        self.caches = layers.filter_layers(self.caches, keep) if keep else []

    def split(self, take: list[int]) -> PromptBatch:
        """Move rows ``take`` into a new batch. Both sides are filtered, as mlx-lm does,
        so the moved rows' shared left padding is trimmed the same way."""
        taken = PromptBatch(seqs=[self.seqs[i] for i in take],
                            caches=layers.split_layers(self.caches, take))
        self.filter([i for i in range(len(self.seqs)) if i not in set(take)])
        return taken


@dataclass(slots=True, kw_only=True)
class DecodeBatch:
    """Rows decoding. ``inputs`` (B,) are the tokens the next forward feeds;
    ``input_logprobs`` (B, V) the rows they were sampled from, emitted one step later.
    Kept as one array, not B row slices: slicing every row every step is pure overhead
    when nobody reads the logprobs (benchmarks, serving)."""

    seqs: list[Sequence] = field(default_factory=list)
    caches: list = field(default_factory=list)
    inputs: mx.array | None = None
    input_logprobs: mx.array | None = None

    def __len__(self) -> int:
        return len(self.seqs)

    def extend(self, other: DecodeBatch) -> None:
        """Append ``other``'s rows at the END (joiners never displace running rows)."""
        self.seqs += other.seqs
        self.caches = layers.extend_layers(self.caches, other.caches)
        self.inputs = mx.concatenate([self.inputs, other.inputs])
        self.input_logprobs = mx.concatenate([self.input_logprobs, other.input_logprobs])

    def filter(self, keep: list[int]) -> None:
        self.seqs = [self.seqs[i] for i in keep]
        self.caches = layers.filter_layers(self.caches, keep) if keep else []
        rows = mx.array(keep) if keep else None
        self.inputs = self.inputs[rows] if keep else None
        self.input_logprobs = self.input_logprobs[rows] if keep else None
