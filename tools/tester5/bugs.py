"""Outside tester round 5: realistic batching bugs, each a monkeypatch that returns its undo.

Each entry of ``BUGS`` is a small change an engineer could plausibly make while changing
batched decoding; the engine's source stays clean. Driven by tools/tester_common/measure.py
(``python -m tools.tester5.measure BUG``). ``HINTS`` lists cell-id fragments to try first
(speed only: a miss means every default cell passed).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np


def _patch(owner, name, value):
    """Set ``owner.name = value``; return the undo."""
    missing = object()
    old = owner.__dict__.get(name, missing) if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)

    def undo():
        if old is missing:  # inherited: drop the override
            delattr(owner, name)
        else:
            setattr(owner, name, old)

    return undo


def _many(*undos):
    def undo():
        for u in reversed(undos):
            u()
    return undo


# 1. The decode-mask memo rebuilt only when its shape no longer fits ("left padding only
# changes with B"): an eviction and a join in one step keep B and change the padding.
def decode_mask_memo_by_shape():
    from batchlab.engine.caches import mask

    def call(self, offset, left_padding):
        width = offset + 1
        memo = self._memo
        if (memo is None or memo[1].shape[0] != len(left_padding)
                or memo[1].shape[-1] < width):
            columns = -(-width // mask.MASK_COLUMNS_STEP) * mask.MASK_COLUMNS_STEP
            memo = self._memo = (left_padding,
                                 mask.causal_mask_host(1, columns - 1, left_padding))
        return mx.array(memo[1][..., :width])

    return _patch(mask.DecodeMasks, "__call__", call)


# 2. Rows whose samplers have EQUAL parameters drawn in one batched call, as if they
# shared a sampler (mlx-lm draws each own-sampler row in its own call).
def equal_params_one_draw():
    from batchlab.engine.core import sampler, scheduler

    orig = sampler.sample_rows

    def sample_rows(logprobs, samplers):
        if all(s.params == samplers[0].params for s in samplers) and not samplers[0].params.greedy:
            return samplers[0](logprobs)
        return orig(logprobs, samplers)

    return _many(_patch(sampler, "sample_rows", sample_rows),
                 _patch(scheduler, "sample_rows", sample_rows))


# 3. extend's offsets recomputed from the write column and the new padding
# (offset = _idx - left_padding: true for BatchKV, not for a ring that has wrapped).
def extend_offset_from_padding():
    from batchlab.engine.caches import kv, ring

    orig = kv.extend_aligned

    def extend_aligned(cache, other):
        orig(cache, other)
        if cache.keys is not None:
            cache.offset = cache._idx - cache.left_padding_host

    return _many(_patch(kv, "extend_aligned", extend_aligned),
                 _patch(ring, "extend_aligned", extend_aligned))


# 4. A joiner's first (solo) decode step skips the logits processors ("the first token
# has no context yet"); its context still starts at the join.
def join_first_step_no_processors():
    from batchlab.engine.core.scheduler import Scheduler

    def _join_prefilled(self):
        ready = [i for i, s in enumerate(self.prompt.seqs) if not s.unprefilled]
        if not ready:
            return
        joiners = self.prompt.split(ready)
        for seq in joiners.seqs:
            seq.joined = True
            seq.start_context()
        last = mx.array([s.request.prompt[-1] for s in joiners.seqs])
        from batchlab.engine.core.batch import DecodeBatch
        first = DecodeBatch(seqs=joiners.seqs, caches=joiners.caches)
        for s in first.seqs:  # the context still takes the fed token
            if s.processors:
                s.context = mx.concatenate([s.context, mx.array([s.request.prompt[-1]],
                                                                dtype=mx.int32)])
        self._sample(first, self._forward_logprobs(last, first.caches))
        if len(self.decode):
            self.decode.extend(first)
        else:
            self.decode = first

    return _patch(Scheduler, "_join_prefilled", _join_prefilled)


# 5. The processors' context starts from the new prompt only, without the history's ids.
def context_without_history():
    from batchlab.engine.core.batch import Sequence

    def start_context(self):
        if self.processors:
            self.context = mx.array(list(self.request.prompt[:-1]), dtype=mx.int32)

    return _patch(Sequence, "start_context", start_context)


# 6. DecodeBatch.filter keeps the first len(keep) logprob rows instead of gathering them
# ("the logprobs are only read for emitted rows").
def filter_logprobs_truncate():
    from batchlab.engine.core.batch import DecodeBatch

    orig = DecodeBatch.filter

    def filter(self, keep):
        lp = self.input_logprobs
        orig(self, keep)
        if keep:
            self.input_logprobs = lp[: len(keep)]

    return _patch(DecodeBatch, "filter", filter)


# 7. Admission counts only the decode batch's room, not the rows already prefilling.
def admit_ignores_prompt_rows():
    from batchlab.engine.core.batch import PromptBatch
    from batchlab.engine.core.scheduler import Scheduler

    def _admit(self):
        n = min(self.config.prefill_batch_size,
                self.max_decoding - len(self.decode), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            self.prompt.extend(fresh)
        else:
            self.prompt = fresh

    return _patch(Scheduler, "_admit", _admit)


# 8. BatchKV.merge gives every merged row the longest history's offset.
def merge_offset_longest():
    from batchlab.engine.caches.kv import BatchKV

    orig = BatchKV.__dict__["merge"].__func__

    def merge(cls, caches):
        cache = orig(cls, caches)
        if cache.keys is not None:
            cache.offset = [cache._idx] * len(caches)
        return cache

    return _patch(BatchKV, "merge", classmethod(merge))


# 9. BatchKV.extract slices from the row's padding to the end of the buffer, not to the
# write column: a parked row comes back with the buffer's unused zero columns.
def extract_to_buffer_end():
    from batchlab.engine.caches.kv import BatchKV
    from batchlab.engine.caches.single import kv_row

    def extract(self, idx):
        pad = int(self.left_padding_host[idx])
        return kv_row(self.keys[idx : idx + 1, :, pad:], self.values[idx : idx + 1, :, pad:])

    return _patch(BatchKV, "extract", extract)


# 10. The quantized start reached when EVERY row has passed it (min offset), not any.
def quant_start_all_rows():
    from batchlab.engine.paths.quantized import kv as qkv

    owner = next(c for c in vars(qkv).values()
                 if isinstance(c, type) and "passed_start" in c.__dict__)

    def passed_start(self):
        return self.offset_ints.bounds()[0] >= max(self.quant.start, 1)

    return _patch(owner, "passed_start", passed_start)


# 11. The decode cap compared strictly: admission stops only once MORE than
# completion_batch_size rows decode.
def decode_cap_strict():
    from batchlab.engine.core.scheduler import Scheduler

    def step(self):
        from batchlab.engine.core.scheduler import CLEAR_CACHE_EVERY, engine_stream
        with mx.stream(engine_stream()):
            emitted = []
            if len(self.decode):
                emitted = self._decode_step()
                self.num_decode_steps += 1
                if self.num_decode_steps % CLEAR_CACHE_EVERY == 0:
                    mx.clear_cache()
            if len(self.decode) > self.max_decoding:
                return emitted
            self._admit()
            self._join_prefilled()
            self._prefill_chunk()
            return emitted

    return _patch(Scheduler, "step", step)


# 12. A ring joining a ring unrolls both to temporal order only when one has wrapped and
# the other not ("same state, same layout"), not when both wrapped at other pointers.
def ring_extend_same_rotation():
    from batchlab.engine.caches import kv
    from batchlab.engine.caches.ring import BatchRing

    def extend(self, other):
        if self.keys is None and other.keys is None:
            kv.extend_aligned(self, other)
            return
        if self.rotated != other.rotated:
            self._temporal_order()
            other._temporal_order()
        kv.extend_aligned(self, other)
        self._offset = max(self._offset, other._offset)

    return _patch(BatchRing, "extend", extend)


# 13. The sliding-window bound of a prefill mask taken inclusively (a query sees
# window + 1 keys): only a chunk longer than the window can tell.
def window_inclusive():
    from batchlab.engine.caches import mask

    def causal_mask_host(N, offset, left_padding, window=None):
        cols = np.arange(offset + N)[None]
        rows = np.arange(offset, offset + N)[:, None]
        m = rows >= cols
        if window is not None:
            m = m & (rows <= cols + window)
        return m & (np.asarray(left_padding).reshape(-1, 1, 1, 1) <= cols)

    return _patch(mask, "causal_mask_host", causal_mask_host)


# 14. A prompt batch's split leaves the rows that stay with the twin's mask memo... no:
# the per-row ints of the split-off rows share the original's pending shift object.
# (Realistic shortcut: ``twin`` skips copying RowInts, so filtering the twin re-binds
# the original's ints.)
def twin_shares_row_ints():
    from batchlab.engine.caches import split
    from batchlab.engine.caches.mask import DecodeMasks

    def twin(cache):
        import copy
        out = copy.copy(cache)
        for name, value in vars(cache).items():
            if isinstance(value, DecodeMasks):
                setattr(out, name, DecodeMasks())
            elif isinstance(value, list):
                setattr(out, name, list(value))
            elif isinstance(value, tuple) and value and hasattr(value[0], "filter"):
                setattr(out, name, tuple(twin(c) for c in value))
        return out

    return _patch(split, "twin", twin)


BUGS = {
    "decode-mask-memo-by-shape": decode_mask_memo_by_shape,
    "equal-params-one-draw": equal_params_one_draw,
    "extend-offset-from-padding": extend_offset_from_padding,
    "join-first-step-no-processors": join_first_step_no_processors,
    "context-without-history": context_without_history,
    "filter-logprobs-truncate": filter_logprobs_truncate,
    "admit-ignores-prompt-rows": admit_ignores_prompt_rows,
    "merge-offset-longest": merge_offset_longest,
    "extract-to-buffer-end": extract_to_buffer_end,
    "quant-start-all-rows": quant_start_all_rows,
    "decode-cap-strict": decode_cap_strict,
    "ring-extend-same-rotation": ring_extend_same_rotation,
    "window-inclusive": window_inclusive,
    "twin-shares-row-ints": twin_shares_row_ints,
}

HINTS = {
    "decode-mask-memo-by-shape": ("join-evict", "evict"),
    "equal-params-one-draw": ("row-sampl", "sampl"),
    "extend-offset-from-padding": ("wrap",),
    "join-first-step-no-processors": ("proc", "bias"),
    "context-without-history": ("hist", "proc"),
    "filter-logprobs-truncate": ("evict", "logprob"),
    "admit-ignores-prompt-rows": ("queue", "cap", "chunk"),
    "merge-offset-longest": ("hist",),
    "extract-to-buffer-end": ("park", "hist", "remove"),
    "quant-start-all-rows": ("s8",),
    "decode-cap-strict": ("cap", "queue"),
    "ring-extend-same-rotation": ("wrap",),
    "window-inclusive": ("wrap",),
    "twin-shares-row-ints": ("join", "staggered"),
}


# 15. Paged prefix cache: a block hashed by its own ids alone, not chained from its
# parent's hash ("a block is its ids"): a block whose ids follow another prefix hits the
# cached block of the first, whose keys were computed in another context.
def seal_hash_unchained():
    from batchlab.engine.paths.paged import block, block_manager

    orig = block.block_hash

    def block_hash(parent, ids):
        return orig(-1, ids)

    return _patch(block_manager, "block_hash", block_hash)


# 16. The fast path drops its decode mask when SOME row is unpadded (min padding 0), not
# when every row is.
def fast_mask_min_padding():
    from batchlab.engine.paths.fast.path import UnmaskedDecodeKV

    orig = UnmaskedDecodeKV.make_mask

    def make_mask(self, N, return_array=False, window_size=None):
        if (N == 1 and window_size is None and not return_array
                and self.left_padding_ints.bounds()[0] <= 0):
            return None
        return orig(self, N, return_array=return_array, window_size=window_size)

    return _patch(UnmaskedDecodeKV, "make_mask", make_mask)


BUGS["seal-hash-unchained"] = seal_hash_unchained
BUGS["fast-mask-min-padding"] = fast_mask_min_padding
HINTS["seal-hash-unchained"] = ("paged",)
HINTS["fast-mask-min-padding"] = ("fast",)


# 17. min-p's floor taken from the batch's top logprob, not each row's (a dropped axis):
# a shared min-p sampler over rows whose top tokens differ in probability.
def min_p_batch_max():
    import math
    from functools import partial

    from batchlab.engine.core import sampler

    @partial(mx.compile, inputs=mx.random.state, outputs=mx.random.state)
    def _min_p(logprobs, min_p):
        floor = mx.max(logprobs) + math.log(min_p)
        return mx.where(logprobs < floor, -float("inf"), logprobs)

    return _patch(sampler, "_min_p", _min_p)


# 18. A row parked mid-prefill reports the ids its caches hold one too many (the prompt
# up to its unprefilled tail, forgetting the last id is never prefilled).
def parked_prefill_tokens_plus_one():
    from batchlab.engine.core.batch import Sequence

    orig = Sequence.cache_tokens

    def cache_tokens(self):
        if self.joined:
            return orig(self)
        prompt = self.request.prompt
        return self.history_tokens + prompt[: len(prompt) - len(self.unprefilled)]

    return _patch(Sequence, "cache_tokens", cache_tokens)


# 19. A finished row's history (serving's prompt cache) extracted after the filter, at its
# old index: the caches of whichever row now sits there.
def finished_history_after_filter():
    from batchlab.engine.core import layers
    from batchlab.engine.core.history import History
    from batchlab.engine.core.scheduler import Emission, Scheduler

    def _decode_step(self):
        batch = self.decode
        fed, fed_logprobs = batch.inputs, batch.input_logprobs
        if any(s.processors for s in batch.seqs):
            logprobs = self._processed_logprobs(fed, batch.caches, batch.seqs)
        else:
            logprobs = self._decode_logprobs(fed, batch.caches)
        self._sample(batch, logprobs)
        tokens = fed.tolist()
        emitted, keep, done = [], [], []
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
                done.append((i, seq, emission))
        if len(keep) < len(batch):
            batch.filter(keep)
        for i, seq, emission in done:
            if batch.caches:
                j = min(i, len(batch) - 1)
                emission.history = History(caches=layers.extract_layers(batch.caches, j),
                                           tokens=seq.cache_tokens())
        return emitted

    return _patch(Scheduler, "_decode_step", _decode_step)


# 20. BatchRing.filter trims the columns every kept row pads, as BatchKV.filter does
# ("free the padding"), while the ring has not wrapped.
def ring_filter_trims():
    from batchlab.engine.caches.ring import BatchRing

    orig = BatchRing.filter

    def filter(self, indices):
        orig(self, indices)
        if self.keys is None or self.rotated or self._lengths is not None:
            return
        lp = self.left_padding_host
        trim = int(lp.min()) if len(lp) else 0
        if trim > 0 and trim < self._idx:
            self.keys = self.keys[..., trim:, :]
            self.values = self.values[..., trim:, :]
            self._idx -= trim
            self._offset -= trim
            self.left_padding = lp - trim

    return _patch(BatchRing, "filter", filter)


BUGS.update({
    "min-p-batch-max": min_p_batch_max,
    "parked-prefill-tokens-plus-one": parked_prefill_tokens_plus_one,
    "finished-history-after-filter": finished_history_after_filter,
    "ring-filter-trims": ring_filter_trims,
})
HINTS.update({
    "min-p-batch-max": ("m0.", "t1.3"),
    "parked-prefill-tokens-plus-one": ("park-prefilling", "park"),
    "finished-history-after-filter": ("finish-continue",),
    "ring-filter-trims": ("gemma3", "evict"),
})


# 21. Paged prefix hits taken whenever blocks are cached, without the guard that the row
# still prefills in as many chunks as the oracle's (which has no prefix cache): a row
# with a cached prefix under chunked prefill joins earlier than BatchGenerator's.
def paged_hit_fewer_chunks():
    from batchlab.engine.paths.paged.path import PagedScheduler

    orig = PagedScheduler._cached_ids

    def _cached_ids(self, seq):
        saved = self.config
        try:  # the guard compares chunk counts: a huge step makes them always equal
            from dataclasses import replace
            self.config = replace(saved, prefill_step_size=1 << 30)
            return orig(self, seq)
        finally:
            self.config = saved

    return _patch(PagedScheduler, "_cached_ids", _cached_ids)


# 22. Rows on the batch's shared sampler drawn in one call, own-sampler rows one by one
# ("fewer calls"): mlx-lm draws every row in its own call once any row has its own.
def shared_rows_one_draw():
    from batchlab.engine.core import sampler, scheduler

    orig = sampler.sample_rows

    def sample_rows(logprobs, samplers):
        counts = {}
        for s in samplers:
            counts[id(s)] = counts.get(id(s), 0) + 1
        common = max(samplers, key=lambda s: counts[id(s)])  # the shared one
        shared = [i for i, s in enumerate(samplers) if s is common]
        if len(shared) < 2 or len(shared) == len(samplers) or common.params.greedy:
            return orig(logprobs, samplers)
        out = [None] * len(samplers)
        together = common(logprobs[mx.array(shared)])
        for k, i in enumerate(shared):
            out[i] = together[k : k + 1]
        for i, s in enumerate(samplers):
            if out[i] is None:
                out[i] = s(logprobs[i : i + 1])
        return mx.concatenate(out, axis=0)

    return _many(_patch(sampler, "sample_rows", sample_rows),
                 _patch(scheduler, "sample_rows", sample_rows))


# 23. Admission counts the rows still prefilling against the decode cap too.
def admit_counts_prompt_rows():
    from batchlab.engine.core.batch import PromptBatch
    from batchlab.engine.core.scheduler import Scheduler

    def _admit(self):
        n = min(self.config.prefill_batch_size - len(self.prompt),
                self.max_decoding - len(self.decode) - len(self.prompt), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            self.prompt.extend(fresh)
        else:
            self.prompt = fresh

    return _patch(Scheduler, "_admit", _admit)


BUGS.update({
    "paged-hit-fewer-chunks": paged_hit_fewer_chunks,
    "shared-rows-one-draw": shared_rows_one_draw,
    "admit-counts-prompt-rows": admit_counts_prompt_rows,
})
HINTS.update({
    "paged-hit-fewer-chunks": ("paged", "prefix"),
    "shared-rows-one-draw": ("rs-",),
    "admit-counts-prompt-rows": ("pb", "cb"),
})


# 24. The ring's decode mask told the SMALLEST left padding as its maximum (the memo's
# other end): a ragged batch whose least padded row has none decodes unmasked.
def ring_mask_min_as_max():
    from batchlab.engine.caches import ring
    from batchlab.engine.caches.ring import BatchRing

    def make_mask(self, N, window_size=None, return_array=False):
        return ring.ring_mask(
            N, max_size=self.max_size, seen=self._offset, idx=self._idx,
            rotated=self.rotated, left_padding=self.left_padding_host, window=window_size,
            all_true_as_none=not return_array and self.drops_all_true_decode_mask(),
            left_padding_max=self.left_padding_ints.bounds()[0],
            decode_masks=self._decode_masks)

    return _patch(BatchRing, "make_mask", make_mask)


# 25. RowInts.bounds forgets the pending shift ("the memo is per host array"): after
# decode steps, a batch's extremes are those of the last upload.
def bounds_ignore_pending():
    from batchlab.engine.caches.rowints import RowInts

    def bounds(self):
        base, memo = self._base, self._bounds
        if memo is None or memo[0] is not base:
            low, high = (int(base.min()), int(base.max())) if base.size else (0, 0)
            memo = self._bounds = (base, low, high)
        return memo[1], memo[2]

    return _patch(RowInts, "bounds", bounds)


BUGS.update({
    "ring-mask-min-as-max": ring_mask_min_as_max,
    "bounds-ignore-pending": bounds_ignore_pending,
})
HINTS.update({
    "ring-mask-min-as-max": ("gemma3", "ragged"),
    "bounds-ignore-pending": ("s8", "gemma3"),
})


# 26. The decode cap taken as completion_batch_size alone, not raised to the prefill
# batch's size as BatchGenerator raises it.
def decode_cap_not_raised():
    from batchlab.engine.core.scheduler import Scheduler

    orig = Scheduler.__init__

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        self.max_decoding = self.config.completion_batch_size

    return _patch(Scheduler, "__init__", __init__)


# 27. Rows admitted while others prefill put in FRONT of the prompt batch ("newest
# first"): the order rows join in, hence their decode-batch order, changes.
def admit_prepends():
    from batchlab.engine.core.batch import PromptBatch
    from batchlab.engine.core.scheduler import Scheduler

    def _admit(self):
        n = min(self.config.prefill_batch_size - len(self.prompt),
                self.max_decoding - len(self.decode), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            fresh.extend(self.prompt)
        self.prompt = fresh

    return _patch(Scheduler, "_admit", _admit)


# 28. Joiners put in FRONT of the running batch.
def joiners_prepended():
    from batchlab.engine.core.batch import DecodeBatch
    from batchlab.engine.core.scheduler import Scheduler

    def _join_prefilled(self):
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
            first.extend(self.decode)
        self.decode = first

    return _patch(Scheduler, "_join_prefilled", _join_prefilled)


BUGS.update({
    "decode-cap-not-raised": decode_cap_not_raised,
    "admit-prepends": admit_prepends,
    "joiners-prepended": joiners_prepended,
})
HINTS.update({
    "decode-cap-not-raised": ("cb2", "cb1"),
    "admit-prepends": ("pb", "_t"),
    "joiners-prepended": ("join", "_t"),
})


# 29. Eviction by swap-remove (the last row moved into the hole, O(1) in a slot table):
# the running batch's order changes on every eviction or finish that is not the last row.
def swap_remove():
    from batchlab.engine.core.batch import DecodeBatch

    orig = DecodeBatch.filter

    def filter(self, keep):
        gone = sorted(set(range(len(self.seqs))) - set(keep))
        rows = list(range(len(self.seqs)))
        for r in gone:
            pos = rows.index(r)
            last = rows.pop()
            if pos < len(rows):
                rows[pos] = last
        orig(self, rows if keep else keep)

    return _patch(DecodeBatch, "filter", filter)


BUGS["swap-remove"] = swap_remove
HINTS["swap-remove"] = ("evict_t", "join-evict/ctx-short/t")


# 30. An admission that brings prompt caches puts the rows WITH history first ("merge
# the cached rows, then append the fresh ones"), not in queue order.
def history_rows_first():
    from batchlab.engine.core.batch import PromptBatch
    from batchlab.engine.core.scheduler import Scheduler

    def _admit(self):
        n = min(self.config.prefill_batch_size - len(self.prompt),
                self.max_decoding - len(self.decode), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        seqs = sorted(seqs, key=lambda s: s.request.history is None)
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            self.prompt.extend(fresh)
        else:
            self.prompt = fresh

    return _patch(Scheduler, "_admit", _admit)


BUGS["history-rows-first"] = history_rows_first
HINTS["history-rows-first"] = ("history", "park")
