"""The l1 scheduler: one ``step()`` is one tick of continuous batching.

The schedule reproduces mlx-lm 0.32's BatchGenerator, because on sliding-window models
(and on every GPU) the bits depend on which rows share a forward and how their caches
are laid out. One step, in order:

1. decode: one forward for every running row; each row emits the token it fed in,
   with the logprobs it was sampled from one step earlier (a pipelined loop: the
   forward of step n is queued before step n-1's tokens are read). Rows that reach
   ``max_tokens`` leave after this forward.
2. admit: up to ``prefill_batch_size`` queued requests join the prompt batch (with
   fresh, empty caches), unless ``completion_batch_size`` rows are already decoding.
3. join: prompt-batch rows whose prompt is prefilled up to its last token are split
   off and take their FIRST decode step alone, as their own batch (B = the joiners),
   then are appended to the END of the running batch. A length-1 prompt has nothing
   to prefill, so it joins in the step it is admitted and decodes before the others.
4. prefill: the next chunk (``prefill_step_size``) of every remaining prompt row, in
   one right-padded forward; the caches then roll each row right-justified.

Worked example (docs/schedule.md traces it with the cache layout): A (5 tokens) and
B (1 token) inserted before step 0, C (3 tokens) before step 3, A removed before step 8:

    step 0: admit A,B; B joins (solo first step); prefill A[:4]
    step 1: decode [B]: B emits its token 1; A joins (solo first step) -> [B, A]
    step 2: decode [B, A]: B emits token 2, A emits token 1
    step 3: decode [B, A]; admit C; prefill C[:2]
    step 4: decode [B, A]; C joins (solo first step) -> [B, A, C]
    step 8: A removed, then decode [B, C] (filter trims the shared left padding)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.core import layers
from batchlab.engine.core.batch import DecodeBatch, PromptBatch, Request, Sequence
from batchlab.engine.core.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.core.history import History, fresh_history
from batchlab.engine.core.processors import process_rows
from batchlab.engine.core.sampler import GREEDY, BatchSampler, SamplingParams, sample_rows

# BatchGenerator frees MLX's buffer cache every 512 decode steps of its lifetime. The
# engine frees at the same points: on CUDA the bits of some kernels depend on where
# buffers land, so allocation must follow the oracle's (see ``prefill``).
CLEAR_CACHE_EVERY = 512


@dataclass(slots=True, kw_only=True)  # not frozen: a frozen init is slower, B times a step
class Emission:
    """A token a row emitted. ``logprobs`` is the (V,) vector it was sampled from,
    sliced from the step's (B, V) array only if someone reads it."""

    name: str
    token: int
    finished: bool
    step_logprobs: mx.array
    row: int
    history: History | None = None  # a finished row's caches, if the scheduler keeps them

    @property
    def logprobs(self) -> mx.array:
        return self.step_logprobs[self.row]


class Scheduler:
    """The l1 path. A path's subclass brings its own ``caches`` (``core/factory.py``)."""

    caches: BatchCaches = BatchCaches()
    # the sampler of a row with its own settings, unless the caller names one: a path
    # whose rows must not depend on B (invariant) draws from each row's own key
    row_sampler_default: type = BatchSampler
    # serving's prompt cache: a row that finishes hands back its caches on its Emission
    # (extracted before the filter drops it, as BatchGenerator's Response.prompt_cache)
    keep_finished_histories: bool = False

    def __init__(self, model: nn.Module, config: ScheduleConfig = MLX_LM_DEFAULTS,
                 sampling: SamplingParams = GREEDY, row_sampler: type | None = None):
        """``row_sampler`` makes the sampler of a request with its own settings:
        BatchSampler (MLX's global key, drawn per row in batch order: what BatchGenerator
        does with per-row samplers, so the gate's rule) or the server's own-key
        ``RowSampler``."""
        self.model = model
        self.config = config
        # rows without their own sampler share this one, as BatchGenerator(sampler=...)
        self.shared_sampler = BatchSampler(sampling)
        self.row_sampler = row_sampler or self.row_sampler_default
        self.max_decoding = max(config.completion_batch_size, config.prefill_batch_size)
        self.queue: list[Sequence] = []
        self.prompt = PromptBatch()
        self.decode = DecodeBatch()
        self.num_decode_steps = 0

    @property
    def num_active(self) -> int:
        return len(self.queue) + len(self.prompt) + len(self.decode)

    def insert(self, requests: list[Request]) -> None:
        names = {s.name for s in self._all_seqs()}
        for request in requests:
            if request.name in names:
                raise ValueError(f"row {request.name!r} is already in flight; names are unique")
            names.add(request.name)
            self.queue.append(Sequence.start(request, self.row_sampler))

    def remove(self, names: list[str], keep_history: bool = False) -> dict[str, History]:
        """Evict rows wherever they are; unknown or finished names are ignored. Runs on the
        caller's stream, outside ``step``'s, as mlx-lm's ``BatchGenerator.remove`` does.
        ``keep_history``: also return each row's caches and the ids they hold, as
        ``remove(uids, return_prompt_caches=True)`` does (a queued row gives back what it
        came with; the token it sampled last and never fed is lost, in mlx-lm too)."""
        gone = set(names)
        kept: dict[str, History] = {}
        if keep_history:
            for seq in self.queue:
                if seq.name in gone:
                    kept[seq.name] = seq.request.history or fresh_history(self.model)
            for batch in (self.prompt, self.decode):
                for i, seq in enumerate(batch.seqs):
                    if seq.name in gone:
                        kept[seq.name] = History(caches=layers.extract_layers(batch.caches, i),
                                                 tokens=seq.cache_tokens())
        self.queue = [s for s in self.queue if s.name not in gone]
        for batch in (self.prompt, self.decode):
            keep = [i for i, s in enumerate(batch.seqs) if s.name not in gone]
            if len(keep) < len(batch):
                batch.filter(keep)
        return kept

    def step(self) -> list[Emission]:
        with mx.stream(engine_stream()):
            emitted = []
            if len(self.decode):
                emitted = self._decode_step()
                self.num_decode_steps += 1
                if self.num_decode_steps % CLEAR_CACHE_EVERY == 0:
                    mx.clear_cache()  # where BatchGenerator frees: see CLEAR_CACHE_EVERY
            if len(self.decode) >= self.max_decoding:
                return emitted
            self._admit()
            self._join_prefilled()
            self._prefill_chunk()
            return emitted

    def _all_seqs(self):
        return [*self.queue, *self.prompt.seqs, *self.decode.seqs]

    def _forward_logprobs(self, inputs: mx.array, caches: list) -> mx.array:
        logits = self.model(inputs[:, None], cache=caches)[:, -1, :]
        return log_softmax(logits)

    def _processed_logprobs(self, inputs: mx.array, caches: list, seqs: list) -> mx.array:
        """A decode forward whose rows may carry logits processors: they run on each row's
        raw logits first (BatchGenerator's order: processors, then the logsumexp)."""
        if not any(s.processors for s in seqs):
            return self._forward_logprobs(inputs, caches)
        logits = self.model(inputs[:, None], cache=caches)[:, -1, :]
        logits = process_rows(logits, inputs, seqs)
        return log_softmax(logits)

    def _decode_logprobs(self, inputs: mx.array, caches: list) -> mx.array:
        """The decode forward of the running batch (a path may replace it)."""
        return self._forward_logprobs(inputs, caches)

    def _sample(self, batch: DecodeBatch, logprobs: mx.array) -> None:
        shared = self.shared_sampler
        batch.inputs = sample_rows(logprobs, [s.sampler or shared for s in batch.seqs])
        batch.input_logprobs = logprobs
        mx.async_eval(batch.inputs, logprobs)

    def _fed_tokens(self, batch: DecodeBatch, fed: mx.array) -> list[int]:
        """The host's copy of the tokens this step fed (its own method so that
        tools/h200/host_read_probe.py can time the step with the read changed)."""
        return fed.tolist()  # already computed: the previous step queued it

    def _decode_step(self) -> list[Emission]:
        batch = self.decode
        fed, fed_logprobs = batch.inputs, batch.input_logprobs
        if any(s.processors for s in batch.seqs):
            logprobs = self._processed_logprobs(fed, batch.caches, batch.seqs)
        else:
            logprobs = self._decode_logprobs(fed, batch.caches)
        self._sample(batch, logprobs)
        tokens = self._fed_tokens(batch, fed)
        emitted, keep = [], []
        for i, seq in enumerate(batch.seqs):
            seq.num_emitted += 1
            seq.emitted.append(tokens[i])
            finished = seq.num_emitted >= seq.request.max_tokens
            emission = Emission(name=seq.name, token=tokens[i], finished=finished,
                                step_logprobs=fed_logprobs, row=i)
            emitted.append(emission)
            if not finished:
                keep.append(i)
            elif self.keep_finished_histories:
                emission.history = History(caches=layers.extract_layers(batch.caches, i),
                                           tokens=seq.cache_tokens())
        if len(keep) < len(batch):
            batch.filter(keep)
        return emitted

    def _admit(self) -> None:
        n = min(self.config.prefill_batch_size - len(self.prompt),
                self.max_decoding - len(self.decode), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            self.prompt.extend(fresh)
        else:
            self.prompt = fresh

    def _admitted_caches(self, seqs: list[Sequence]) -> list:
        """The caches of rows admitted together (a path may seed them otherwise). Rows
        with history: every row's single caches merged, fresh ones for the rest, as
        BatchGenerator merges whatever each row came with (left-padded to the longest)."""
        if any(s.request.history for s in seqs):
            return self.caches.merged(self.model, [
                (s.request.history or fresh_history(self.model)).caches for s in seqs])
        return self.caches.fresh(self.model, len(seqs))

    def _join_prefilled(self) -> None:
        ready = [i for i, s in enumerate(self.prompt.seqs) if not s.unprefilled]
        if not ready:
            return
        joiners = self.prompt.split(ready)
        for seq in joiners.seqs:
            seq.joined = True
            seq.start_context()
        last = mx.array([s.request.prompt[-1] for s in joiners.seqs])
        first = DecodeBatch(seqs=joiners.seqs, caches=joiners.caches)
        self._sample(first, self._processed_logprobs(last, first.caches, first.seqs))
        if len(self.decode):
            self.decode.extend(first)
        else:
            self.decode = first

    def _prefill_chunk(self) -> None:
        if not len(self.prompt):
            return
        chunks = []
        for seq in self.prompt.seqs:
            n = min(len(seq.unprefilled), self.config.prefill_step_size)
            chunks.append(seq.unprefilled[:n])
            seq.unprefilled = seq.unprefilled[n:]
        prefill(self.model, self.prompt.caches, chunks, self.config.prefill_step_size)


def log_softmax(logits: mx.array) -> mx.array:
    """Log-probabilities over the last axis, as BatchGenerator forms them."""
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


@functools.cache
def engine_stream() -> mx.Stream:
    """The stream the engine computes on: mlx-lm's ``generation_stream`` (a public
    helper, not a batch cache), as its own loops use. On the CPU backend the default
    stream is slower per decode step, and a stream of our own beside mlx-lm's (one more
    CPU worker thread) slows every engine in the process."""
    from mlx_lm.generate import generation_stream

    return generation_stream


def prefill(model: nn.Module, caches: list, chunks: list[list[int]], step_size: int) -> None:
    """One right-padded batched forward over ``chunks`` (one per row); the caches end
    with every row right-justified (left padding), ready to decode."""
    lengths = [len(c) for c in chunks]
    width = max(lengths)
    right_padding = [width - n for n in lengths]
    padded = any(right_padding)
    if padded:
        layers.prepare_layers(caches, lengths=lengths, right_padding=right_padding)
    tokens = mx.array([c + [0] * (width - len(c)) for c in chunks])
    # mx.clear_cache() where mlx-lm's prefill calls it: on CUDA the bits of some kernels
    # depend on where buffers land (alignment picks the kernel), so the engine must free
    # and allocate at the same points as the oracle. Seen on the H200: gpt-oss B4 ragged
    # wrap was bit-exact in a fresh process but not after other cells had run.
    while tokens.shape[1] > 0:
        model(tokens[:, :step_size], cache=caches)
        mx.eval(layers.layer_state(caches))
        mx.clear_cache()
        tokens = tokens[:, step_size:]
    if padded:
        layers.finalize_layers(caches)
        mx.eval(layers.layer_state(caches))
        mx.clear_cache()
