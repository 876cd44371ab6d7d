"""Round 6 of the outside tester's measurement: bugs seeded into batchlab's engine.

Written from the engine's source (batchlab/engine/, batchlab/subjects/engine.py), docs/
and ../shared/FACTS.md only, before reading any earlier round's bugs or reports or the
seeded-bug catalog. Each entry of ``BUGS`` is a small change an engineer could make while
working on batched decoding; ``apply()`` monkeypatches it in and returns an undo. Nothing
under batchlab/ is edited.

    python -m tools.tester6.measure BUG [--out FILE] [--matrix M] [--live] [--all]
"""

from __future__ import annotations

import math  # noqa: F401  (kept for patched bodies that mirror the originals)
from functools import partial

import mlx.core as mx
import numpy as np


def _patch(owner, name, new):
    """Set ``owner.name = new``; return the undo (class attributes restored raw)."""
    old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, new)
    return lambda: setattr(owner, name, old)


def _undo_all(*undos):
    def undo():
        for u in reversed(undos):
            u()
    return undo


# --- 1. per-row RoPE offsets after a right-padded prefill ------------------------------
def kv_finalize_offset():
    """BatchKV.finalize right-justifies the rows and raises left_padding, but the line that
    lowers ``offset`` by the right padding is dropped: a short row of a ragged prompt batch
    then rotates its later keys/queries at the batch's width, not its own length."""
    from batchlab.engine.caches import kv

    def finalize(self):
        if self._right_padding is None:
            return
        pad = self._right_padding
        if self.keys is not None:
            self.keys = kv.roll_rows(self.keys, pad)
            self.values = kv.roll_rows(self.values, pad)
        self.left_padding = self.left_padding_host + pad
        self._right_padding = None

    return _patch(kv.BatchKV, "finalize", finalize)


# --- 2. the roll that right-justifies right-padded prompts -----------------------------
def roll_rows_sign():
    """roll_rows builds its gather index with ``+ shifts`` (a left roll) instead of
    ``- shifts``: right padding is rolled the wrong way (wraps real keys to the end)."""
    from batchlab.engine.caches import kv, ring

    def roll_rows(x, shifts):
        n = x.shape[2]
        if n == 0 or not np.any(shifts % n):
            return x
        idx = (np.arange(n)[None, :] + np.asarray(shifts)[:, None]) % n
        return mx.take_along_axis(x, mx.array(idx, dtype=mx.int32)[:, None, :, None], axis=2)

    return _undo_all(_patch(kv, "roll_rows", roll_rows), _patch(ring, "roll_rows", roll_rows))


# --- 3. SSM mask of a right-padded prefill: min / max confused ---------------------------
def ssm_keep_mask_max_length():
    """BatchState._rows_if_every_step_kept asks the LONGEST row's length (bounds()[1]) where
    it needs the shortest: a ragged prompt batch's padded steps count as real, so short
    rows' SSM/conv state runs through their right padding."""
    from batchlab.engine.caches import state as st

    def rows_if(self, N):
        lp, lengths = self.left_padding_ints, self.lengths_ints
        tracked = [ints for ints in (lp, lengths) if ints.is_set]
        if not tracked:
            return None
        lp_max = lp.bounds()[1] if lp.is_set else None
        lengths_min = lengths.bounds()[1] if lengths.is_set else None  # BUG: max
        if not st.ssm_keeps_every_step(N, lp_max, lengths_min):
            return None
        return len(tracked[0])

    return _patch(st.BatchState, "_rows_if_every_step_kept", rows_if)


# --- 4. XTC's coin under batching --------------------------------------------------------
def xtc_coin_per_row():
    """XTC tosses one coin per ROW ((B, 1) uniforms) instead of one scalar per sampler call
    (mlx-lm's apply_xtc): it takes other turns of the global key and decides per row."""
    from batchlab.engine.core import sampler

    @partial(mx.compile, inputs=mx.random.state, outputs=mx.random.state)
    def _xtc(logits, xtc_probability, xtc_threshold):
        probs = mx.softmax(logits, -1)
        mask = probs > mx.where(probs > xtc_threshold, probs, mx.inf).min(axis=-1, keepdims=True)
        coin = mx.random.uniform(0, 1, shape=(*logits.shape[:-1], 1))
        return mx.where(coin > xtc_probability, logits, mx.where(mask, -mx.inf, logits))

    return _patch(sampler, "_xtc", _xtc)


# --- 5. fast path: the fused projection's memo ------------------------------------------
def fused_memo_shape():
    """The fused q/k/v (gate/up) group's product is memoized on the input's SHAPE instead of
    its identity: the same layer's next one-row decode step (same shape) reuses the stale
    product of the step before."""
    from batchlab.engine.paths.fast import fused_projections as fp

    def product(self, x):
        if self.last_x is None or tuple(x.shape) != tuple(self.last_x.shape):
            if self.bias is not None:
                y = mx.addmm(self.bias, x, self.weight.T)
            else:
                y = x @ self.weight.T
            self.last_x, self.last_product = x, y
            self.last_parts = [y[..., a:b] for a, b in self.ranges]
        return self.last_product

    return _patch(fp._Group, "product", product)


# --- 6. fast path's flat decode: RoPE of the queries after the cache write ---------------
def flat_query_rope_after_update():
    """flat_decode's attention (multi-row / qwen3 branch) rotates the queries after
    ``cache.update_and_fetch``, which has already advanced the offsets: queries sit one
    position ahead of their keys."""
    from batchlab.engine.paths.fast import flat_decode, fused_projections

    def _attention(attn, x, mask, cache, attention, head_norms):
        rows = x.shape[0]
        q_and_k = (None if head_norms or rows > 1
                   else fused_projections.columns(attn.q_proj, x, 0, 1))
        if q_and_k is not None:
            heads = q_and_k.reshape(rows, attn.n_heads + attn.n_kv_heads, 1, -1)
            heads = attn.rope(heads, offset=cache.offset)
            queries, keys = heads[:, :attn.n_heads], heads[:, attn.n_heads:]
            values = attn.v_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
            keys, values = cache.update_and_fetch(keys, values)
        else:
            queries = attn.q_proj(x).reshape(rows, attn.n_heads, 1, -1)
            keys = attn.k_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
            if head_norms:
                queries, keys = attn.q_norm(queries), attn.k_norm(keys)
            keys = attn.rope(keys, offset=cache.offset)
            values = attn.v_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
            keys, values = cache.update_and_fetch(keys, values)
            queries = attn.rope(queries, offset=cache.offset)  # BUG: after the write
        output = attention(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
        return attn.o_proj(output.reshape(rows, -1))

    return _patch(flat_decode, "_attention", _attention)


# --- 7. paged pool: a split's forked tables take no references ---------------------------
def paged_fork_no_incref():
    """BlockManager.fork copies the table but does not add a reference to its blocks, so when
    a prompt batch splits (joiners leave) both sides' filters release the same blocks: the
    joiners' live blocks go back to the free list and are handed out again."""
    from batchlab.engine.paths.paged.block_manager import BlockManager
    from batchlab.engine.paths.paged.table import BlockTable

    def fork(self, table):
        return BlockTable(blocks=list(table.blocks), num_tokens=table.num_tokens,
                          ids=list(table.ids), num_sealed=table.num_sealed)

    return _patch(BlockManager, "fork", fork)


# --- 8. paged pool: a reused free block keeps its prefix hash ----------------------------
def paged_allocate_keeps_hash():
    """BlockManager._allocate hands out a free block that still holds a cached prefix
    without forgetting its hash: the prefix cache keeps pointing at a block now rewritten
    by another row, and a later row with that prefix reads the other row's keys."""
    from batchlab.engine.paths.paged.block_manager import BlockManager, OutOfBlocks

    def _allocate(self):
        if not self.free:
            if not self.growable:
                raise OutOfBlocks("out of blocks")
            self._add_blocks(len(self.blocks) - 1)
        block_id, _ = self.free.popitem(last=False)
        self.blocks[block_id].ref_count = 1
        return block_id

    return _patch(BlockManager, "_allocate", _allocate)


# --- 9. invariant path's depthwise conv stand-in: taps reversed --------------------------
def tapconv_flipped():
    """TapConv1d sums the taps with the kernel flipped (w[:, K-1-k], convolution vs
    cross-correlation confusion): every SSM/conv model on invariant-blocked."""
    from batchlab.engine.paths.invariant.modules import TapConv1d

    def call(self, x):
        taps = self.weight.shape[1]
        steps = x.shape[1] - taps + 1
        w = self.weight[:, :, 0].astype(mx.float32)
        xs = x.astype(mx.float32)
        y = xs[:, 0:steps] * w[:, taps - 1]
        for k in range(1, taps):
            y = y + xs[:, k : k + steps] * w[:, taps - 1 - k]
        if "bias" in self:
            y = y + self.bias.astype(mx.float32)
        return y.astype(x.dtype)

    return _patch(TapConv1d, "__call__", call)


# --- 10. invariant path's unsorted MoE: activation operands swapped ----------------------
def unsorted_glu_swapped():
    """UnsortedSwitchGLU calls ``activation(gate, up)``; SwitchGLU calls
    ``activation(x_up, x_gate)``: the MoE experts' SwiGLU gates the wrong projection."""
    from batchlab.engine.paths.invariant.modules import UnsortedSwitchGLU

    def call(self, x, indices):
        x = mx.expand_dims(x, (-2, -3))
        indices = mx.stop_gradient(indices)
        up = self.up_proj(x, indices)
        gate = self.gate_proj(x, indices)
        return self.down_proj(self.activation(gate, up), indices).squeeze(-2)

    return _patch(UnsortedSwitchGLU, "__call__", call)


# --- 11. attention sinks in the row attention dispatch -----------------------------------
def dispatch_drops_sinks():
    """The dispatch's decode branch (caches that attend by rows) calls row_attention without
    the model's ``sinks``: gpt-oss's attention sinks vanish on the invariant paths."""
    from batchlab.engine.kernels import attention_dispatch as ad

    original = ad.row_attention

    def row_attention(queries, keys, values, first_keys, scale, sinks=None, scores=None):
        return original(queries, keys, values, first_keys, scale, None, scores=scores)

    return _patch(ad, "row_attention", row_attention)


# --- 12. the per-step upload of row ints keyed on the wrong thing ------------------------
def rowuploads_memo_shape():
    """RowUploads.upload memoizes the device array on the host array's SHAPE (cheaper than
    its bytes): after an evict + join that keeps B, or a finalize, layers read the old
    offsets / left padding."""
    from batchlab.engine.caches.rowints import RowUploads

    def upload(self, host):
        key = host.shape
        if self.last is None or self.last[0] != key:
            self.last = (key, mx.array(host, dtype=mx.int32))
        return self.last[1]

    return _patch(RowUploads, "upload", upload)


# --- 13. invariant prefill spans: one past the last key ---------------------------------
def prefill_spans_end():
    """RowKV.prefill_spans gives each row's LAST key column where row_prefill wants one past
    it: every prefill query of every row loses its own (newest) key."""
    from batchlab.engine.paths.invariant.path import RowKV

    def prefill_spans(self, n):
        pad = self._right_padding
        right = [0] * len(self.left_padding_host) if pad is None else pad.tolist()
        first = tuple(int(x) for x in self.left_padding_host.tolist())
        return (first, tuple(self._idx - r - 1 for r in right), tuple(n - r for r in right))

    return _patch(RowKV, "prefill_spans", prefill_spans)


# --- 14. the causal mask's left-padding bound -------------------------------------------
def causal_mask_lp_strict():
    """causal_mask_host hides key j when ``left_padding >= j`` (``<`` where ``<=`` is
    right): every row's first real key column is masked (decode and prefill masks)."""
    from batchlab.engine.caches import mask, window

    def causal_mask_host(N, offset, left_padding, window=None):
        cols = np.arange(offset + N)[None]
        rows = np.arange(offset, offset + N)[:, None]
        m = rows >= cols
        if window is not None:
            m = m & (rows < cols + window)
        return m & (np.asarray(left_padding).reshape(-1, 1, 1, 1) < cols)

    return _undo_all(_patch(mask, "causal_mask_host", causal_mask_host),
                     _patch(window, "causal_mask_host", causal_mask_host))


# --- 15. extend of a side that has no keys yet (admission into a prefilling batch) -------
def extend_empty_side_no_shift():
    """pad_for_extend, for a side with no keys yet (fresh caches admitted into a prompt
    batch that is mid chunked prefill), returns its left padding unshifted: its rows get the
    zero columns in front of their keys unmasked."""
    from batchlab.engine.caches import kv

    def pad_for_extend(c, ref, idx, width):
        k, v = c.keys, c.values
        empty = k is None
        if empty:
            B = len(c.offset_host)
            k = mx.zeros((B, ref.keys.shape[1], 0, ref.keys.shape[3]), ref.keys.dtype)
            v = mx.zeros((B, ref.values.shape[1], 0, ref.values.shape[3]), ref.keys.dtype)
        left = idx - c._idx
        right = width - k.shape[2] - left
        lp = c.left_padding_host if empty else c.left_padding_host + left  # BUG
        return kv.pad_columns(k, left, right), kv.pad_columns(v, left, right), lp

    return _patch(kv, "pad_for_extend", pad_for_extend)


# --- 16. the id used for right padding in a ragged prefill -------------------------------
def prefill_pad_last_token():
    """prefill() right-pads short chunks with each row's last id instead of 0 (the oracle's
    pad): invisible where padding is masked, but a state that reads no mask (baichuan-m1's
    key/value conv, rwkv7) keeps the pad id."""
    from batchlab.engine.core import layers
    from batchlab.engine.core import scheduler as sch

    def prefill(model, caches, chunks, step_size):
        lengths = [len(c) for c in chunks]
        width = max(lengths)
        right_padding = [width - n for n in lengths]
        padded = any(right_padding)
        if padded:
            layers.prepare_layers(caches, lengths=lengths, right_padding=right_padding)
        tokens = mx.array([c + [c[-1] if c else 0] * (width - len(c)) for c in chunks])
        while tokens.shape[1] > 0:
            model(tokens[:, :step_size], cache=caches)
            mx.eval(layers.layer_state(caches))
            mx.clear_cache()
            tokens = tokens[:, step_size:]
        if padded:
            layers.finalize_layers(caches)
            mx.eval(layers.layer_state(caches))
            mx.clear_cache()

    return _patch(sch, "prefill", prefill)


# --- 17. one step's phases: prefill before the join -------------------------------------
def step_prefill_before_join():
    """Scheduler.step prefills the next chunk before joining the rows prefilled so far: a
    row whose prompt finishes this step joins in the same step (one step early)."""
    from batchlab.engine.core.scheduler import CLEAR_CACHE_EVERY, Scheduler, engine_stream

    def step(self):
        with mx.stream(engine_stream()):
            emitted = []
            if len(self.decode):
                emitted = self._decode_step()
                self.num_decode_steps += 1
                if self.num_decode_steps % CLEAR_CACHE_EVERY == 0:
                    mx.clear_cache()
            if len(self.decode) >= self.max_decoding:
                return emitted
            self._admit()
            self._prefill_chunk()
            self._join_prefilled()
            return emitted

    return _patch(Scheduler, "step", step)


# --- 18. invariant decode block padding on the wrong side --------------------------------
def invariant_pad_front():
    """InvariantScheduler pads its decode batch to a whole GEMM block at the FRONT (token-0
    rows before the batch's own) while the caches and logits assume the padding at the end."""
    from batchlab.engine.core.scheduler import Scheduler, log_softmax
    from batchlab.engine.paths.invariant import path as ip

    def _decode_logprobs(self, inputs, caches):
        rows = len(inputs)
        pad = -rows % self.rows_per_gemm if self.pads_decode else 0
        if not pad:
            return Scheduler._decode_logprobs(self, inputs, caches)
        for cache in caches:
            cache.pad_rows = pad
        try:
            padded = mx.pad(inputs, (pad, 0))  # BUG: in front
            with ip.decoding_by_rows():
                logits = self.model(padded[:, None], cache=caches)[:rows, -1, :]
        finally:
            for cache in caches:
                cache.pad_rows = 0
        return log_softmax(logits)

    return _patch(ip.InvariantScheduler, "_decode_logprobs", _decode_logprobs)


# --- 19. top-p's total mass over the whole batch -----------------------------------------
def top_p_total_over_batch():
    """_top_p's total mass is summed over every element (the whole (B, V) batch) instead of
    per row: at B > 1 the threshold is B times too high, so top-p drops nothing (B=1 is
    unchanged)."""
    from batchlab.engine.core import sampler

    def _top_p(logprobs, top_p):
        ascending = mx.sort(logprobs, axis=-1)
        probs = mx.exp(ascending.astype(mx.float32))
        above = mx.cumsum(probs, axis=-1, reverse=True, inclusive=False)
        total = mx.sum(probs)  # BUG: no axis
        num_dropped = (above >= top_p * total).sum(axis=-1, keepdims=True)
        threshold = mx.take_along_axis(ascending, num_dropped, axis=-1)
        return mx.where(logprobs < threshold, -float("inf"), logprobs)

    return _patch(sampler, "_top_p", _top_p)


# --- 20. paged: offsets of rows admitted on cached prefixes ------------------------------
def paged_prefix_offset_width():
    """PagedCaches.fresh_with_prefix sets every admitted row's offset to the widest cached
    prefix (``width``) instead of its own prefix length: a row with a shorter (or no)
    cached prefix, admitted beside one with a longer prefix, gets RoPE positions too far."""
    from batchlab.engine.core import layers
    from batchlab.engine.paths.paged.caches import PagedCaches

    def fresh_with_prefix(self, model, prefixes):
        caches = self.fresh(model, len(prefixes))
        width = max(len(p) for p in prefixes)
        sizes = np.array([len(p) for p in prefixes], dtype=np.int64)
        for cache in layers.leaves(caches):
            for table, prefix in zip(cache.rows, prefixes):
                cache.manager.share_prefix(table, prefix)
            cache.left_padding = width - sizes
            cache.offset = np.full(len(prefixes), width, dtype=np.int64)  # BUG
            cache._idx = width
        return caches

    return _patch(PagedCaches, "fresh_with_prefix", fresh_with_prefix)


# --- 21. split twin of a multi-part (CacheList) layer -----------------------------------
def twin_shares_list_parts():
    """caches/split.twin drops the branch that twins a BatchList's part caches: the taken
    rows' twin shares the parts with the prompt batch, so splitting joiners off (filter on
    both sides) filters the same part caches twice (hybrid conv + KV layers)."""
    import copy

    from batchlab.engine.caches import split
    from batchlab.engine.caches.mask import DecodeMasks
    from batchlab.engine.caches.rowints import RowInts

    def twin(cache):
        out = copy.copy(cache)
        for name, value in vars(cache).items():
            if isinstance(value, RowInts):
                setattr(out, name, value.copy())
            elif isinstance(value, DecodeMasks):
                setattr(out, name, DecodeMasks())
            elif isinstance(value, list):
                setattr(out, name, list(value))
        return out

    return _patch(split, "twin", twin)


# --- 22. paged eviction: the shared-padding trim leaves left_padding as it was -----------
def paged_filter_trim_keeps_padding():
    """PagedKV.filter lowers the write column by the padding every kept row shares but not
    their left_padding: after an eviction that trims, each kept row's mask hides its first
    real keys (BatchKV.filter lowers both)."""
    from batchlab.engine.caches.kv import as_rows
    from batchlab.engine.paths.paged.cache import PagedKV

    def filter(self, indices):
        rows = as_rows(indices)
        keep = set(rows)
        for i, t in enumerate(self.rows):
            if i not in keep:
                self.manager.release(t)
        self.rows = tuple(self.rows[i] for i in rows)
        self.pending_ids = None
        self.offset = self.offset_host[rows]
        self.left_padding = self.left_padding_host[rows]
        if self._right_padding is not None:
            self._right_padding = self._right_padding[rows]
        trim = int(self.left_padding_host.min()) if rows else 0
        if trim > 0:
            self._idx -= trim  # BUG: left_padding not lowered with it

    return _patch(PagedKV, "filter", filter)


# --- 23. the subject adapter builds prefix histories at the default chunk size -----------
def subject_prefix_default_step():
    """BatchlabSubject builds a row's prefix history with mlx-lm's default prefill step
    (2048) instead of the cell's schedule: a prefix longer than a chunk is prefilled in one
    forward where the oracle runs it in prefill_step_size chunks."""
    from batchlab.engine.core.config import MLX_LM_DEFAULTS
    from batchlab.engine.core.history import prefix_history
    from batchlab.subjects.engine import BatchlabSubject

    def _history(self, row):
        if row.history == "parked":
            return self.parked.pop(row.name)
        if row.history == "finished":
            if row.name not in self.finished:
                raise RuntimeError(f"row {row.name!r} is continued before it finished")
            return self.finished.pop(row.name)
        if row.prefix:
            return prefix_history(self.model, row.prefix, MLX_LM_DEFAULTS.prefill_step_size)
        return None

    return _patch(BatchlabSubject, "_history", _history)


# --- 24. fast path: one-row fusion extended to biased q/k/v groups -----------------------
def fast_one_row_fuses_biased():
    """FastScheduler's one-row step enters ``fused(ONE_ROW_GROUPS, biased=True)``: biased
    q/k/v groups (gpt-oss) then take one ``addmm`` over the concatenated weights, whose
    rounding is not the separate projection plus bias."""
    from batchlab.engine.paths.fast import path as fast
    from batchlab.engine.paths.fast.fused_projections import ONE_ROW_GROUPS, fused

    original = fast.FastScheduler.__dict__["_decode_logprobs"]

    def _decode_logprobs(self, inputs, caches):
        if inputs.shape[0] == 1 and self._fuse_one_row:
            with fused(ONE_ROW_GROUPS, biased=True):
                return self._unfused_decode_logprobs(inputs, caches)
        return original(self, inputs, caches)

    return _patch(fast.FastScheduler, "_decode_logprobs", _decode_logprobs)


# --- 25. the CPU's on-device advance of the row ints ------------------------------------
def rowints_device_add_cumulative():
    """RowInts._make_device, advancing the last step's device array by a lazy add (the CPU
    backend), adds the whole pending shift instead of its change since that array was
    made: from the second decode step on, RoPE offsets run ahead."""
    from batchlab.engine.caches import rowints as ri

    def _make_device(self):
        base, pending, uploads = self._base, self._pending, self.uploads
        memo = uploads.shifted
        if memo is not None and memo[0] is not base and memo[1] == pending \
                and np.array_equal(memo[0], base):
            base = self._base = memo[0]
        if memo is None or memo[0] is not base or memo[1] != pending:
            if memo is not None and memo[0] is base and ri._adds_offsets_on_device():
                dev = memo[2] + pending  # BUG: not (pending - memo[1])
            else:
                dev = uploads.upload(ri.host_ints(base + pending) if pending else base)
            memo = uploads.shifted = (base, pending, dev)
        return memo[2]

    return _patch(ri.RowInts, "_make_device", _make_device)


# --- 26. invariant path: prompts of state / window models prefilled together ------------
def invariant_prefill_together_on_state():
    """InvariantScheduler's blocked branch (``row_block`` set: the GPU, invariant-blocked)
    drops the two lines that make models with rings or SSM / conv state prefill each prompt
    alone (prefill_batch_size 1, prompts_per_step): their prompts are prefilled in one
    right-padded batch, whose padding a ring or a state may see, so a row's bits can
    depend on its neighbours. (The unblocked branch's own lines for rwkv7 stay.)"""
    from batchlab.engine.core.config import MLX_LM_DEFAULTS
    from batchlab.engine.core.sampler import GREEDY
    from batchlab.engine.paths.invariant import path as ip

    original = ip.InvariantScheduler.__dict__["__init__"]

    def __init__(self, model, config=MLX_LM_DEFAULTS, sampling=GREEDY, row_sampler=None):
        original(self, model, config, sampling, row_sampler)
        if self.rows_per_gemm:  # the blocked branch only (the rwkv7 'elif' keeps its lines)
            self.config = config
            self.prompts_per_step = 1
            self.max_decoding = max(config.completion_batch_size, config.prefill_batch_size)

    return _patch(ip.InvariantScheduler, "__init__", __init__)


# --- 27. paged pool: a shared block freed while a row still holds it ---------------------
def paged_decref_off_by_one():
    """BlockManager._decref puts a block on the free list when ``ref_count <= 1`` after the
    decrement (a typo for ``< 1``): a prefix block shared by two rows goes back to the free
    list when one of them leaves, and can be handed out (and rewritten) while the other
    still reads it."""
    from batchlab.engine.paths.paged.block_manager import BlockManager

    def _decref(self, block_id):
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count <= 1:  # BUG: <= 1 where < 1 (== 0) is meant
            self.free[block_id] = None

    return _patch(BlockManager, "_decref", _decref)


# --- 28. invariant path: MLA decode batches padded to a GEMM block -----------------------
def invariant_pads_mla():
    """InvariantScheduler drops ``not latent`` from its decode-padding rule: multi-head
    latent attention models (deepseek-v3) get their decode batch padded with token-0 rows,
    whose RoPE offsets and scores meet the cache's keys outside attention."""
    from batchlab.engine.paths.invariant import path as ip

    original = ip.InvariantScheduler.__dict__["__init__"]

    def __init__(self, model, config=ip.MLX_LM_DEFAULTS, sampling=ip.GREEDY, row_sampler=None):
        original(self, model, config, sampling, row_sampler)
        rows = self.rows_per_gemm
        self.pads_decode = (bool(rows) and ip.prefills_together(self.model, self.caches)
                            and not ip.decodes_all_by_rows(self.model))

    return _patch(ip.InvariantScheduler, "__init__", __init__)


# --- 29. fast path: the one-row q|k RoPE taken on models that norm each head -------------
def flat_one_rope_ignores_head_norms():
    """flat_decode's attention takes the one-row fused q|k slice (one RoPE call) whenever a
    step has one row, dropping ``head_norms or``: on qwen3 the queries and keys are then
    rotated without their q_norm / k_norm."""
    from batchlab.engine.paths.fast import flat_decode, fused_projections

    def _attention(attn, x, mask, cache, attention, head_norms):
        rows = x.shape[0]
        q_and_k = None if rows > 1 else fused_projections.columns(attn.q_proj, x, 0, 1)  # BUG
        if q_and_k is not None:
            heads = q_and_k.reshape(rows, attn.n_heads + attn.n_kv_heads, 1, -1)
            heads = attn.rope(heads, offset=cache.offset)
            queries, keys = heads[:, :attn.n_heads], heads[:, attn.n_heads:]
        else:
            queries = attn.q_proj(x).reshape(rows, attn.n_heads, 1, -1)
            keys = attn.k_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
            if head_norms:
                queries, keys = attn.q_norm(queries), attn.k_norm(keys)
            queries = attn.rope(queries, offset=cache.offset)
            keys = attn.rope(keys, offset=cache.offset)
        values = attn.v_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
        keys, values = cache.update_and_fetch(keys, values)
        output = attention(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
        return attn.o_proj(output.reshape(rows, -1))

    return _patch(flat_decode, "_attention", _attention)


BUGS = {
    "kv-finalize-offset": kv_finalize_offset,
    "roll-rows-sign": roll_rows_sign,
    "ssm-keep-mask-max-length": ssm_keep_mask_max_length,
    "xtc-coin-per-row": xtc_coin_per_row,
    "fused-memo-shape": fused_memo_shape,
    "flat-query-rope-after-update": flat_query_rope_after_update,
    "paged-fork-no-incref": paged_fork_no_incref,
    "paged-allocate-keeps-hash": paged_allocate_keeps_hash,
    "tapconv-flipped": tapconv_flipped,
    "unsorted-glu-swapped": unsorted_glu_swapped,
    "dispatch-drops-sinks": dispatch_drops_sinks,
    "rowuploads-memo-shape": rowuploads_memo_shape,
    "prefill-spans-end": prefill_spans_end,
    "causal-mask-lp-strict": causal_mask_lp_strict,
    "extend-empty-side-no-shift": extend_empty_side_no_shift,
    "prefill-pad-last-token": prefill_pad_last_token,
    "step-prefill-before-join": step_prefill_before_join,
    "invariant-pad-front": invariant_pad_front,
    "top-p-total-over-batch": top_p_total_over_batch,
    "paged-prefix-offset-width": paged_prefix_offset_width,
    "twin-shares-list-parts": twin_shares_list_parts,
    "paged-filter-trim-keeps-padding": paged_filter_trim_keeps_padding,
    "subject-prefix-default-step": subject_prefix_default_step,
    "rowints-device-add-cumulative": rowints_device_add_cumulative,
    "invariant-prefill-together-on-state": invariant_prefill_together_on_state,
    "paged-decref-off-by-one": paged_decref_off_by_one,
    "invariant-pads-mla": invariant_pads_mla,
    "flat-one-rope-ignores-head-norms": flat_one_rope_ignores_head_norms,
}

REGIME = {
    "kv-finalize-offset": "per-row RoPE offsets after a right-padded prefill",
    "roll-rows-sign": "right-justifying right-padded prompt keys",
    "ssm-keep-mask-max-length": "SSM/conv state mask in a ragged prefill",
    "xtc-coin-per-row": "XTC coin under batching",
    "fused-memo-shape": "fast: fused one-row projections",
    "flat-query-rope-after-update": "fast: flat decode forward (RoPE vs cache write order)",
    "paged-fork-no-incref": "paged: block refcounts across a prompt-batch split",
    "paged-allocate-keeps-hash": "paged: reuse of a freed block that holds a cached prefix",
    "tapconv-flipped": "invariant-blocked: depthwise conv stand-in",
    "unsorted-glu-swapped": "invariant-blocked: MoE expert stand-in",
    "dispatch-drops-sinks": "attention sinks through the row-attention dispatch",
    "rowuploads-memo-shape": "per-step device upload of row ints",
    "prefill-spans-end": "invariant: per-row prefill attention spans",
    "causal-mask-lp-strict": "causal mask's left-padding bound",
    "extend-empty-side-no-shift": "admission into a prompt batch mid chunked prefill",
    "prefill-pad-last-token": "right-padding id seen by maskless state (baichuan-m1, rwkv7)",
    "step-prefill-before-join": "phase order of one step (chunk boundary vs join)",
    "invariant-pad-front": "invariant: decode batch padded to a GEMM block",
    "top-p-total-over-batch": "top-p mass over a batch",
    "paged-prefix-offset-width": "paged: offsets of rows admitted on cached prefixes",
    "twin-shares-list-parts": "split of multi-part (CacheList) layers",
    "paged-filter-trim-keeps-padding": "paged: eviction's shared-padding trim",
    "subject-prefix-default-step": "subject adapter: prefix history chunking",
    "fast-one-row-fuses-biased": "fast: one-row fusion of biased projections (gpt-oss)",
    "rowints-device-add-cumulative": "on-device advance of per-row offsets (CPU)",
    "invariant-prefill-together-on-state": "invariant: solo prefill of ring / state models",
    "paged-decref-off-by-one": "paged: refcount of prefix blocks shared by rows",
    "invariant-pads-mla": "invariant-blocked: decode padding on latent attention (MLA)",
    "flat-one-rope-ignores-head-norms": "fast: one-row fused q|k RoPE on per-head-normed models",
}

HINTS = {
    "kv-finalize-offset": ["l1/llama/B3/ragged/static/ctx-short"],
    "roll-rows-sign": ["l1/llama/B3/ragged/static/ctx-short"],
    "ssm-keep-mask-max-length": ["l1/mamba2/B3/ragged/static/ctx-short"],
    "xtc-coin-per-row": ["l1/llama/B4/ragged/static/ctx-short/t0.9_x0.5"],
    "fused-memo-shape": ["fast/llama/B1/"],
    "flat-query-rope-after-update": ["fast/llama/B4/"],
    "paged-fork-no-incref": ["paged/llama/B3/ragged/join-evict"],
    "paged-allocate-keeps-hash": ["paged/"],
    "tapconv-flipped": ["invariant-blocked/mamba2/"],
    "unsorted-glu-swapped": ["invariant-blocked/gpt-oss/", "invariant-blocked/qwen3.5/"],
    "dispatch-drops-sinks": ["invariant-blocked/gpt-oss/"],
    "rowuploads-memo-shape": ["l1/llama/B3/ragged/join-evict/ctx-short"],
    "prefill-spans-end": ["invariant-blocked/llama/B8/ragged"],
    "causal-mask-lp-strict": ["l1/llama/B3/ragged/static/ctx-short"],
    "extend-empty-side-no-shift": ["pb2_ps8"],
    "prefill-pad-last-token": ["l1/baichuan-m1/B3/ragged", "rwkv7"],
    "step-prefill-before-join": ["l1/llama/B3/ragged/static/ctx-short"],
    "invariant-pad-front": ["invariant-blocked/llama/B6/"],
    "top-p-total-over-batch": ["top_p", "tp0"],
    "paged-prefix-offset-width": ["paged/"],
    "twin-shares-list-parts": ["l1/baichuan-m1/B3/ragged", "l1/falcon-h1/B3/ragged"],
    "paged-filter-trim-keeps-padding": ["paged/llama/B3/ragged/evict",
                                        "paged/llama/B3/ragged/join-evict"],
    "subject-prefix-default-step": ["prefix"],
    "fast-one-row-fuses-biased": ["fast/gpt-oss/B1/"],
    "rowints-device-add-cumulative": ["l1/llama/B3/ragged/static/ctx-short"],
    "invariant-prefill-together-on-state": ["invariant-blocked/gemma3/B8/ragged",
                                            "invariant-blocked/qwen3.5/B8/ragged"],
    "paged-decref-off-by-one": ["prefix-share", "prefix-lru", "prefix-evict-reuse"],
    "invariant-pads-mla": ["invariant-blocked/deepseek-v3/"],
    "flat-one-rope-ignores-head-norms": ["fast/qwen3/B1/"],
}

# Bugs that turned out equivalent on this machine (no run changes a bit): measured, kept
# out of the count. name -> (apply, reason)
EQUIVALENT: dict = {
    "fast-one-row-fuses-biased": (
        fast_one_row_fuses_biased,
        "nn.Linear with a bias already runs mx.addmm, and the CPU's addmm over the "
        "concatenated q|k|v weights gives each member's bits (row/column-invariant): a "
        "bf16 llama with attention_bias (zoo llama + seeded biases) decoding one row on "
        "fast took the biased fused group under the bug and gave identical logprobs; on "
        "CUDA it may differ (the docstring's reason), which this machine cannot run",
    ),
}
