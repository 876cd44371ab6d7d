"""An outside tester's batching bugs (round 2), each a monkeypatch with an undo.

Written from the engine's source and docs only (not from batchlab/selftest/), as small
changes an engineer could plausibly make while changing batched decoding. ``BUGS`` maps a
name to (regime, one-line description, hint, apply); ``apply()`` patches the engine in
this process and returns the undo. ``hint`` is a list of cell-id fragments the driver
runs first (an ordering for speed only: every default cell still runs before a miss).

The engine's source stays clean: nothing here is imported by batchlab.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class Bug:
    name: str
    regime: str
    change: str
    hint: tuple[str, ...]
    apply: Callable[[], Callable[[], None]]


def _patch(obj, name: str, value) -> Callable[[], None]:
    old = obj.__dict__[name] if isinstance(obj, type) else getattr(obj, name)
    setattr(obj, name, value)
    return lambda: setattr(obj, name, old)


def _undo_all(undos):
    def undo():
        for u in reversed(undos):
            u()
    return undo


BUGS: dict[str, Bug] = {}


def bug(name: str, regime: str, change: str, hint: tuple[str, ...] = ()):
    def register(fn):
        BUGS[name] = Bug(name=name, regime=regime, change=change, hint=hint, apply=fn)
        return fn
    return register


# ---- l1 core: joins, admission, masks ----------------------------------------------------

@bug("extend-offset-shifted", "joins (full attention and rings)",
     "extend_aligned shifts each side's RoPE offsets by its alignment, as it does its padding",
     ("/join",))
def _():
    from batchlab.engine.caches import kv, ring

    orig = kv.extend_aligned

    def extend_aligned(cache, other):
        idx_a, idx_b = cache._idx, other._idx
        oa, ob = cache.offset_host, other.offset_host
        orig(cache, other)
        if cache.keys is not None:
            idx = max(idx_a, idx_b)
            cache.offset = np.concatenate([oa + (idx - idx_a), ob + (idx - idx_b)])

    return _undo_all([_patch(kv, "extend_aligned", extend_aligned),
                      _patch(ring, "extend_aligned", extend_aligned)])


@bug("admit-overfills-prompt-batch", "admission under chunked prefill",
     "_admit takes up to prefill_batch_size new rows even while the prompt batch holds rows",
     ("ps8", "pb2", "pb4"))
def _():
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


@bug("completion-cap-off-by-one", "completion batch limit",
     "step() stops admitting only once MORE than max_decoding rows decode (> for >=)",
     ("cb4", "cb5", "cb2", "B34"))
def _():
    from batchlab.engine.core import scheduler as sch

    def step(self):
        with mx.stream(sch.engine_stream()):
            emitted = []
            if len(self.decode):
                emitted = self._decode_step()
                self.num_decode_steps += 1
                if self.num_decode_steps % sch.CLEAR_CACHE_EVERY == 0:
                    mx.clear_cache()
            if len(self.decode) > self.max_decoding:
                return emitted
            self._admit()
            self._join_prefilled()
            self._prefill_chunk()
            return emitted

    return _patch(sch.Scheduler, "step", step)


@bug("rowints-bounds-stale", "long runs: ring wrap with padded rows (mask drop decision)",
     "RowInts.host applies a pending shift to the ints but keeps the memoized min/max unshifted",
     ("/ragged/", "wrap", "@w"))
def _():
    from batchlab.engine.caches import rowints

    def host(self):
        base, pending = self._base, self._pending
        if pending:
            shifted = self._base = rowints.host_ints(base + pending)
            self._pending = 0
            memo = self._bounds
            if memo is not None and memo[0] is base:
                self._bounds = (shifted, memo[1], memo[2])  # bug: extremes not moved
            base = shifted
        return base

    return _patch(rowints.RowInts, "host", property(host))


# ---- rings --------------------------------------------------------------------------------

@bug("ring-extend-ignores-rotated", "joins into rings (one wrapped, one not)",
     "BatchRing.extend unrolls the rings only when their pointers differ, not when one has wrapped",
     ("late-join", "@w", "gemma3", "gpt-oss", "gemma4"))
def _():
    from batchlab.engine.caches import ring

    def extend(self, other):
        if self._lengths is not None or other._lengths is not None:
            raise ValueError("finalize() both caches before extend()")
        if self.keys is None and other.keys is None:
            ring.extend_aligned(self, other)
            return
        if self._idx != other._idx:
            self._temporal_order()
            other._temporal_order()
        ring.extend_aligned(self, other)
        self._offset = max(self._offset, other._offset)

    return _patch(ring.BatchRing, "extend", extend)


@bug("ring-prefill-trim-one-short", "rings: chunked prefill",
     "BatchRing._append keeps max_size (not max_size - 1) old columns before a chunk",
     ("ps8", "gemma3", "@w"))
def _():
    from batchlab.engine.caches import ring

    def _append(self, keys, values):
        n = keys.shape[2]
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self._temporal_order()
            self.keys = self.keys[..., : self._idx, :]
            self.values = self.values[..., : self._idx, :]
            if self._lengths is not None:
                self._roll_padding_left()
            trim = self._idx - self.max_size  # bug: + 1 dropped
            if trim > 0:
                self.left_padding = self.left_padding_host - trim
                self.keys = self.keys[..., trim:, :]
                self.values = self.values[..., trim:, :]
            self.keys = mx.concatenate([self.keys, keys], axis=2)
            self.values = mx.concatenate([self.values, values], axis=2)
        self.offset_ints.shift(n)
        self._offset += n
        self._idx = self.keys.shape[2]
        return self.keys, self.values

    return _patch(ring.BatchRing, "_append", _append)


@bug("ring-mask-roll-short", "rings: wrapped decode with padded rows",
     "ring_mask rolls the temporal mask into ring order by idx instead of idx + 1",
     ("/ragged/", "wrap", "@w"))
def _():
    from batchlab.engine.caches import mask as m
    from batchlab.engine.caches import ring

    def ring_mask(N, *, max_size, seen, idx, rotated, left_padding, window=None,
                  left_padding_max, all_true_as_none=False, decode_masks=None):
        window = window or max_size
        offset = min(max_size - 1, seen)
        trim = idx - max_size + int(N > 1)
        wraps = N == 1 and (rotated or idx >= max_size)
        dropped = max(trim, 0) + int(wraps)
        if N == 1 and offset < window and left_padding_max - dropped <= 0:
            if all_true_as_none:
                return None
            return m.all_true((len(left_padding), 1, 1, offset + 1))
        if N == 1 and not wraps and dropped == 0 and offset < window and decode_masks is not None:
            return decode_masks(offset, left_padding)
        left_padding = left_padding - dropped
        mask = m.causal_mask_host(N, offset, left_padding=left_padding, window=window)
        if wraps:
            mask = np.roll(mask, shift=(0 if idx >= max_size else idx), axis=-1)  # bug: no +1
        return mx.array(mask)

    return _patch(ring, "ring_mask", ring_mask)


# ---- state (SSM / conv) ---------------------------------------------------------------------

@bug("state-merge-neighbour-state", "hybrid / SSM models with history",
     "BatchState.merge gives a row without state the first present row's state, not zeros",
     ("qwen3.5", "mamba2", "lfm2", "history", "prefix", "resume"))
def _():
    from batchlab.engine.caches import state

    def merge(cls, caches):
        n = len(caches)
        merged = cls(len(caches[0].cache))
        if all(c.cache[0] is None for c in caches):
            merged.left_padding = [0] * n
            return merged
        for e in range(len(merged.cache)):
            present = [c.cache[e] for c in caches if c.cache[e] is not None]
            merged.cache[e] = mx.concatenate(
                [present[0] if c.cache[e] is None else c.cache[e].astype(present[0].dtype)
                 for c in caches])
        return merged

    return _patch(state.BatchState, "merge", classmethod(merge))


@bug("ssm-mask-ignores-lengths", "SSM / conv: ragged right-padded prefill",
     "BatchState's all-kept shortcut looks at left_padding only, not the prefill's lengths",
     ("qwen3.5", "mamba2", "lfm2"))
def _():
    from batchlab.engine.caches import state

    def _rows_if_every_step_kept(self, N):
        lp = self.left_padding_ints
        tracked = [ints for ints in (lp, self.lengths_ints) if ints.is_set]
        if not tracked:
            return None
        lp_max = lp.bounds()[1] if lp.is_set else None
        if not state.ssm_keeps_every_step(N, lp_max, None):
            return None
        return len(tracked[0])

    return _patch(state.BatchState, "_rows_if_every_step_kept", _rows_if_every_step_kept)


# ---- sampling and processors ---------------------------------------------------------------

@bug("top-p-inclusive-cumsum", "sampling at T > 0 with top-p",
     "_top_p counts the mass above a token inclusively (cumsum inclusive=True)",
     ("_p0", "p0."))
def _():
    from batchlab.engine.core import sampler

    def _top_p(logprobs, top_p):
        ascending = mx.sort(logprobs, axis=-1)
        probs = mx.exp(ascending.astype(mx.float32))
        above = mx.cumsum(probs, axis=-1, reverse=True, inclusive=True)
        total = above[..., :1]
        num_dropped = (above >= top_p * total).sum(axis=-1, keepdims=True)
        num_dropped = mx.minimum(num_dropped, logprobs.shape[-1] - 1)
        threshold = mx.take_along_axis(ascending, num_dropped, axis=-1)
        return mx.where(logprobs < threshold, -float("inf"), logprobs)

    return _patch(sampler, "_top_p", _top_p)


@bug("sample-rows-first-row-greedy", "per-row samplers: greedy and sampled rows mixed",
     "sample_rows takes the all-greedy shortcut when the FIRST row is greedy",
     ("rs-", "_rs", "mixed", "greedy"))
def _():
    from batchlab.engine.core import scheduler

    orig = scheduler.sample_rows

    def sample_rows(logprobs, samplers):
        if samplers[0].params.greedy:
            return mx.argmax(logprobs, axis=-1)
        return orig(logprobs, samplers)

    return _patch(scheduler, "sample_rows", sample_rows)


@bug("processor-fed-token-late", "per-row logits processors",
     "process_rows appends the fed token to a row's context after its processors ran",
     ("lp-", "rp", "fp", "pp"))
def _():
    from batchlab.engine.core import scheduler

    def process_rows(logits, inputs, seqs):
        rows = []
        for e, seq in enumerate(seqs):
            row = logits[e : e + 1]
            if seq.processors:
                for processor in seq.processors:
                    row = processor(seq.context, row)
                seq.context = mx.concatenate([seq.context, inputs[e : e + 1].astype(mx.int32)])
            rows.append(row)
        return mx.concatenate(rows, axis=0)

    return _patch(scheduler, "process_rows", process_rows)


@bug("processor-context-no-history", "history + processors",
     "start_context builds a row's context from its prompt only, not its history's tokens",
     ("history", "prefix", "resume", "continue", "park"))
def _():
    from batchlab.engine.core.batch import Sequence

    def start_context(self):
        if self.processors:
            self.context = mx.array(list(self.request.prompt[:-1]), dtype=mx.int32)

    return _patch(Sequence, "start_context", start_context)


@bug("cache-tokens-midprefill-off-by-one", "history from the prompt batch (parked mid-prefill)",
     "cache_tokens of a row not yet joined counts the last prompt id as held",
     ("park", "history", "resume"))
def _():
    from batchlab.engine.core.batch import Sequence

    def cache_tokens(self):
        prompt = self.request.prompt
        if self.joined:
            return self.history_tokens + prompt + tuple(self.emitted)
        return self.history_tokens + prompt[: len(prompt) - len(self.unprefilled)]

    return _patch(Sequence, "cache_tokens", cache_tokens)


# ---- quantized KV -----------------------------------------------------------------------------

@bug("qkv-switch-when-all-rows-pass", "quantized KV start > 0, ragged batches",
     "passed_start waits for the SLOWEST row (min offset) to reach the start, not any row",
     ("kv8-s8", "kv4-s8", "-s8"))
def _():
    from batchlab.engine.paths.quantized import kv

    def passed_start(self):
        return self.offset_ints.bounds()[0] >= max(self.quant.start, 1)

    return _patch(kv.QuantizedMode, "passed_start", passed_start)


@bug("qkv-unpack-default-group", "quantized KV, group 32",
     "unpack splits scales and biases with mlx's default group of 64, not the cache's",
     ("g32", "kv8", "kv4"))
def _():
    from batchlab.engine.paths.quantized import kv

    def unpack(p, q, dim, dtype):
        ints = dim * q.bits // 32
        groups = dim // 64
        sb = mx.contiguous(p[..., ints:]).view(dtype)
        return p[..., :ints], sb[..., :groups], sb[..., groups:]

    return _patch(kv, "unpack", unpack)


# ---- paged KV ------------------------------------------------------------------------------

@bug("paged-hash-unchained", "paged prefix cache",
     "seal hashes each full block from its own ids only (parent hash not chained)",
     ("paged/",))
def _():
    from batchlab.engine.paths.paged import block_manager as bm

    orig = bm.block_hash

    def block_hash(parent, ids):
        return orig(bm.NO_PARENT, ids)

    return _patch(bm, "block_hash", block_hash)


@bug("paged-prefix-skip-hybrid", "paged + prefix sharing on hybrid / ring models",
     "PagedScheduler skips a cached prefix's prefill even when the model has rings or state",
     ("paged/",))
def _():
    from batchlab.engine.paths.paged import path

    orig = path.PagedScheduler._cached_ids

    def _cached_ids(self, seq):
        self._all_paged = True
        return orig(self, seq)

    return _patch(path.PagedScheduler, "_cached_ids", _cached_ids)


@bug("paged-merged-no-offset", "paged + history (merged rows)",
     "PagedKV.merged_into lays the rows out but leaves every RoPE offset at -padding",
     ("paged/",))
def _():
    from batchlab.engine.paths.paged import cache as pc

    orig = pc.PagedKV.merged_into.__func__

    def merged_into(cls, pool, caches):
        out = orig(cls, pool, caches)
        if out._idx:
            out.offset = out.offset_host - out._idx
        return out

    return _patch(pc.PagedKV, "merged_into", classmethod(merged_into))


# ---- compiled ------------------------------------------------------------------------------

@bug("compiled-grow-late", "compiled path: key buffer growth",
     "the compiled decode grows a full key buffer one step late (_idx > width, not _idx + 1 >)",
     ("compiled/",))
def _():
    from batchlab.engine.paths import compiled

    def _decode_logprobs(self, inputs, caches):
        for c in caches:
            if c._idx > c.keys.shape[2]:
                c._grow(c.keys[..., :1, :], c.values[..., :1, :])
        idx = caches[0]._idx
        left_padding = caches[0].left_padding
        buffers = [a for c in caches for a in (c.keys, c.values)]
        logprobs, *buffers = self._traced_step(inputs, mx.array([idx], mx.int32),
                                               left_padding, *buffers)
        for i, c in enumerate(caches):
            c.keys, c.values = buffers[2 * i], buffers[2 * i + 1]
            c._idx += 1
            c.offset_ints.shift(1)
        return logprobs

    return _patch(compiled.CompiledScheduler, "_decode_logprobs", _decode_logprobs)


# ---- invariant --------------------------------------------------------------------------------

@bug("window-cut-keeps-padding", "invariant path: windows past the 32-column cut, padded rows",
     "WindowKV._cut_unread drops columns but does not lower left_padding",
     ("invariant",))
def _():
    from batchlab.engine.caches import window

    def _cut_unread(self):
        cut = self.view_start()
        if cut > 0:
            self.keys = self.keys[..., cut:, :]
            self.values = self.values[..., cut:, :]
            self._idx -= cut

    return _patch(window.WindowKV, "_cut_unread", _cut_unread)


@bug("blocked-skips-quantized-linear", "quantized weights (llama-q4) under row blocking",
     "blocked_model wraps nn.Linear but not nn.QuantizedLinear (not a subclass of Linear)",
     ("llama-q4", "invariant-blocked"))
def _():
    from mlx import nn

    from batchlab.engine.paths.invariant import rowblock

    orig = rowblock._blocked

    def _blocked(value, rows, swap):
        # orig recurses through the module global, so children come back here too
        if isinstance(value, nn.QuantizedLinear):
            return value
        return orig(value, rows, swap)

    return _patch(rowblock, "_blocked", _blocked)


# ---- added after the first pass: two more in regimes the first pass reached least ---------

@bug("ring-merge-offset-is-size", "rings + history (a prefix longer than the window)",
     "BatchRing.merge sets each row's RoPE offset to the keys it holds, not its own offset",
     ("gemma3", "gpt-oss", "gemma4", "history", "prefix"))
def _():
    from batchlab.engine.caches import ring

    orig = ring.BatchRing.merge.__func__

    def merge(cls, caches):
        out = orig(cls, caches)
        if out._idx:
            out.offset = [c.size() for c in caches]
        return out

    return _patch(ring.BatchRing, "merge", classmethod(merge))


@bug("decode-masks-memo-by-shape", "decode masks after a join and an evict at equal B",
     "DecodeMasks reuses its host mask while the padding array has the same shape",
     ("/ragged/join-evict/", "staggered"))
def _():
    from batchlab.engine.caches import mask as m

    def __call__(self, offset, left_padding):
        width = offset + 1
        memo = self._memo
        if memo is None or memo[0].shape != left_padding.shape or memo[1].shape[-1] < width:
            columns = -(-width // m.MASK_COLUMNS_STEP) * m.MASK_COLUMNS_STEP
            memo = self._memo = (left_padding, m.causal_mask_host(1, columns - 1, left_padding))
        return mx.array(memo[1][..., :width])

    return _patch(m.DecodeMasks, "__call__", __call__)


@bug("xtc-before-min-p", "sampling: XTC together with min-p",
     "filtered_logits runs XTC before min-p (the chain reordered), so min-p's floor sees XTC's cut",
     ("xtc", "_x"))
def _():
    from batchlab.engine.core import sampler as s

    def filtered_logits(logprobs, p):
        x = logprobs
        if 0 < p.top_p < 1:
            x = s._top_p(x, p.top_p)
        if p.xtc_probability > 0.0:
            x = s._xtc(x, p.xtc_probability, p.xtc_threshold)
        if p.min_p != 0.0:
            x = s._min_p(x, p.min_p)
        if 0 < p.top_k < x.shape[-1]:
            x = s._top_k(x, p.top_k)
        return x * (1.0 / p.temperature)

    return _patch(s, "filtered_logits", filtered_logits)


@bug("window-first-keys-absolute", "invariant-blocked: decode attention by rows over a window",
     "WindowKV.first_keys gives each row's left padding as is, not relative to the served view",
     ("invariant-blocked",))
def _():
    from batchlab.engine.caches import window

    def first_keys(self):
        return mx.maximum(self.left_padding, 0)

    return _patch(window.WindowKV, "first_keys", first_keys)


@bug("presence-counts-repeats", "per-row processors: presence penalty",
     "the presence penalty is a scatter-subtract (a token seen twice is penalised twice)",
     ("pp",))
def _():
    from batchlab.engine.core import processors as pr

    def _presence(penalty, size):
        def apply(context, logits):
            if len(context) > 0:
                logits = logits.at[:, context[-size:]].subtract(penalty)
            return logits
        return apply

    return _patch(pr, "_presence", _presence)


# ---- round 2b: five more, written after the first 27 were measured (measured against the
# default matrix as it was at 6668188, before this branch's cells) --------------------------

@bug("kvmix-plan-least-sensitive", "quantized KV, mixed bits (kvmix)",
     "KVScheme.plan ranks layers by ascending sensitivity: the high bits go to the least "
     "sensitive layers", ("kvmix",))
def _():
    import math

    from batchlab.engine.paths.quantized import path

    def plan(self, model):
        from batchlab.engine.paths.quantized.caches import count_attention_caches
        from batchlab.engine.paths.quantized.sensitivity import layer_sensitivity

        n = count_attention_caches(model)
        if not self.mixed:
            return [self.quant(self.bits)] * n
        ranked = sorted(range(n), key=lambda i: layer_sensitivity(model, self)[i])
        high = set(ranked[: max(1, math.ceil(self.high_share * n))])
        return [self.quant(self.high_bits if i in high else self.bits) for i in range(n)]

    return _patch(path.KVScheme, "plan", plan)


@bug("ring-extract-wrapped-end", "rings + history: a row parked after its ring wrapped",
     "BatchRing.extract cuts a wrapped ring at the pointer instead of max_size",
     ("gemma3", "park", "history", "resume", "continue"))
def _():
    from batchlab.engine.caches import ring

    def extract(self, idx):
        pad = max(0, int(self.left_padding_host[idx]))
        keys, values, end = self.keys[idx : idx + 1], self.values[idx : idx + 1], self._idx
        if self.rotated:
            keys, values = mx.roll(keys, -self._idx, axis=2), mx.roll(values, -self._idx, axis=2)
        offset = int(self.offset_host[idx])
        return ring.ring_row(self.max_size, keys[:, :, pad:end], values[:, :, pad:end], offset)

    return _patch(ring.BatchRing, "extract", extract)


@bug("qkv-merge-not-marked", "quantized KV + history",
     "merge_quantized packs the rows but leaves the cache marked unquantized",
     ("kv-history", "kv8/", "kv4/"))
def _():
    from batchlab.engine.paths.quantized import kv

    orig = kv.BatchQuantizedKV.merge_quantized.__func__

    def merge_quantized(cls, caches, quant):
        out = orig(cls, caches, quant)
        if out.keys is not None:
            out.quantized = False
        return out

    return _patch(kv.BatchQuantizedKV, "merge_quantized", classmethod(merge_quantized))


@bug("rowkv-prefill-spans-no-right-padding", "invariant-blocked: prompts prefilled together",
     "RowKV.prefill_spans ignores the chunk's right padding (padded rows' spans run to _idx)",
     ("invariant-blocked/llama",))
def _():
    from batchlab.engine.paths.invariant import path

    def prefill_spans(self, n):
        right = [0] * len(self.left_padding_host)
        first = tuple(int(x) for x in self.left_padding_host.tolist())
        return (first, tuple(self._idx - r for r in right), tuple(n - r for r in right))

    return _patch(path.RowKV, "prefill_spans", prefill_spans)


@bug("joiner-first-token-shared-sampler", "per-row samplers: a row's first token at its join",
     "_join_prefilled samples a joiner's first token with the batch's shared sampler",
     ("rs-", "_rs"))
def _():
    from batchlab.engine.core import scheduler as sch

    orig = sch.Scheduler._join_prefilled

    def _join_prefilled(self):
        real = self._sample

        def first_sample(batch, logprobs):
            self._sample = real
            batch.inputs = sch.sample_rows(logprobs, [self.shared_sampler] * len(batch.seqs))
            batch.input_logprobs = logprobs
            mx.async_eval(batch.inputs, logprobs)

        self._sample = first_sample
        try:
            orig(self)
        finally:
            self._sample = real

    return _patch(sch.Scheduler, "_join_prefilled", _join_prefilled)


# ---- round 2c: four more, after round 2b (measured against the matrix at 6668188) ----------

@bug("xtc-uncompiled", "sampling: XTC", "the XTC filter runs eagerly, not compiled with the "
     "random state as mlx-lm's apply_xtc is", ("_x0", "x0.", "xtc"))
def _():
    from batchlab.engine.core import sampler as s

    def _xtc(logits, xtc_probability, xtc_threshold):
        probs = mx.softmax(logits, -1)
        mask = probs > mx.where(probs > xtc_threshold, probs, mx.inf).min(axis=-1, keepdims=True)
        return mx.where(mx.random.uniform(0, 1) > xtc_probability, logits,
                        mx.where(mask, -mx.inf, logits))

    return _patch(s, "_xtc", _xtc)


@bug("ring-prefill-lengths-relative", "rings: ragged chunked prefill (a later chunk)",
     "BatchRing.prepare keeps the chunk's lengths as given, not offset by what each row holds",
     ("ps8", "gemma3", "gpt-oss"))
def _():
    from batchlab.engine.caches import ring

    def prepare(self, *, lengths=None, right_padding=None):
        if right_padding is not None and max(right_padding) > 0:
            self._lengths = ring.host_ints(lengths)

    return _patch(ring.BatchRing, "prepare", prepare)


@bug("ring-extend-offset-not-carried", "joins into rings",
     "BatchRing.extend keeps its own global _offset, not the larger of the two",
     ("late-join", "@w", "gemma3", "gpt-oss"))
def _():
    from batchlab.engine.caches import ring

    orig = ring.BatchRing.extend

    def extend(self, other):
        mine = self._offset
        orig(self, other)
        if self.keys is not None:
            self._offset = mine if mine else self._offset

    return _patch(ring.BatchRing, "extend", extend)


@bug("ring-merge-global-offset-from-rope", "rings + history (merge)",
     "BatchRing.merge sets the global column count _offset to the largest RoPE offset",
     ("gemma3", "history", "prefix", "resume"))
def _():
    from batchlab.engine.caches import ring

    orig = ring.BatchRing.merge.__func__

    def merge(cls, caches):
        out = orig(cls, caches)
        if out._idx:
            out._offset = max(c.offset for c in caches)
        return out

    return _patch(ring.BatchRing, "merge", classmethod(merge))
