"""Outside tester, round 3: realistic batching bugs, each a monkeypatch of the engine.

``BUGS`` maps a bug's name to a function that applies it and returns an undo; ``HINTS``
lives in measure.py (cell-id fragments to try first: speed only, a miss means every
default cell passed). ``REGIME`` says where each bug sits and what it changes. The
engine's source stays clean: every bug is a patch of a function or method, copied from
the engine with one change (the comment ``# BUG`` marks it). ``EQUIVALENT`` holds the
bugs written and then found equivalent (dropped from the rate, with the reason).

    python -m tools.tester3.measure NAME [NAME...]       # the default matrix, first catch
    python -m tools.tester3.measure NAME --matrix tools/tester3/proof.toml --live --all
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import numpy as np

Undo = Callable[[], None]


def _swap(owner, name: str, new) -> Undo:
    """Set ``owner.name`` to ``new``; the undo puts the original back (descriptors too)."""
    had = name in vars(owner)
    old = vars(owner)[name] if had else None
    setattr(owner, name, new)

    def undo() -> None:
        if had:
            setattr(owner, name, old)
        else:
            delattr(owner, name)

    return undo


def _many(*undos: Undo) -> Undo:
    def undo() -> None:
        for u in reversed(undos):
            u()
    return undo


# ---- the scheduler: finishing, admission, joining --------------------------------------

def finish_at_first_rows_budget() -> Undo:
    """A row finishes at the budget of the batch's first row (a 'vectorized' finish
    check that reads one max_tokens for the batch), not at its own."""
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
        budget = batch.seqs[0].request.max_tokens  # BUG: one budget for the batch
        emitted, keep = [], []
        for i, seq in enumerate(batch.seqs):
            seq.num_emitted += 1
            seq.emitted.append(tokens[i])
            finished = seq.num_emitted >= budget
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

    return _swap(Scheduler, "_decode_step", _decode_step)


def cap_counted_before_finish() -> Undo:
    """The completion cap is read before the decode step's finished rows leave: on the
    step a row finishes, a queued row that BatchGenerator admits waits a step."""
    from batchlab.engine.core import scheduler as sched
    from batchlab.engine.core.scheduler import Scheduler

    def step(self):
        with mx.stream(sched.engine_stream()):
            full = len(self.decode) >= self.max_decoding  # BUG: counted before finishing
            emitted = []
            if len(self.decode):
                emitted = self._decode_step()
                self.num_decode_steps += 1
            if full:
                return emitted
            self._admit()
            self._join_prefilled()
            self._prefill_chunk()
            return emitted

    return _swap(Scheduler, "step", step)


def admit_ignores_prompt_batch() -> Undo:
    """Admission fills prefill_batch_size fresh rows each step, forgetting the rows still
    in the prompt batch (mid chunked prefill)."""
    from batchlab.engine.core.batch import PromptBatch
    from batchlab.engine.core.scheduler import Scheduler

    def _admit(self):
        n = min(self.config.prefill_batch_size,  # BUG: - len(self.prompt) dropped
                self.max_decoding - len(self.decode), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            self.prompt.extend(fresh)
        else:
            self.prompt = fresh

    return _swap(Scheduler, "_admit", _admit)


def joiners_longest_first() -> Undo:
    """Rows prefilled in the same step join the running batch longest prompt first
    (someone sorting to make the joiners' padding smaller)."""
    from batchlab.engine.core.batch import DecodeBatch
    from batchlab.engine.core.scheduler import Scheduler

    def _join_prefilled(self):
        ready = [i for i, s in enumerate(self.prompt.seqs) if not s.unprefilled]
        if not ready:
            return
        ready.sort(key=lambda i: -len(self.prompt.seqs[i].request.prompt))  # BUG
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

    return _swap(Scheduler, "_join_prefilled", _join_prefilled)


def finished_history_after_filter() -> Undo:
    """A finished row's caches (kept for a continue) are extracted after the batch drops
    the finished rows, at the row's old index (clamped), while other rows decode on."""
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
                done.append((emission, seq, i))
        if not keep:  # the batch empties: extracted before (no rows left after)
            for emission, seq, i in done:
                emission.history = History(caches=layers.extract_layers(batch.caches, i),
                                           tokens=seq.cache_tokens())
            done = []
        if len(keep) < len(batch):
            batch.filter(keep)
        for emission, seq, i in done:  # BUG: after the filter, row i is another row
            j = min(i, len(batch) - 1)
            emission.history = History(caches=layers.extract_layers(batch.caches, j),
                                       tokens=seq.cache_tokens())
        return emitted

    return _swap(Scheduler, "_decode_step", _decode_step)


def cache_tokens_drop_emitted() -> Undo:
    """The ids a joined row's caches hold leave out the tokens it generated (so a
    continued row's processors see a context without its first turn's answer)."""
    from batchlab.engine.core.batch import Sequence

    def cache_tokens(self):
        prompt = self.request.prompt
        if self.joined:
            return self.history_tokens + prompt  # BUG: + tuple(self.emitted) dropped
        return self.history_tokens + prompt[: len(prompt) - 1 - len(self.unprefilled)]

    return _swap(Sequence, "cache_tokens", cache_tokens)


def prefill_padded_first_row_only() -> Undo:
    """A prefill chunk counts as padded only when its first row is right-padded."""
    from batchlab.engine.core import layers
    from batchlab.engine.core import scheduler as sched

    def prefill(model, caches, chunks, step_size):
        lengths = [len(c) for c in chunks]
        width = max(lengths)
        right_padding = [width - n for n in lengths]
        padded = right_padding[0] > 0  # BUG: any(right_padding)
        if padded:
            layers.prepare_layers(caches, lengths=lengths, right_padding=right_padding)
        tokens = mx.array([c + [0] * (width - len(c)) for c in chunks])
        while tokens.shape[1] > 0:
            model(tokens[:, :step_size], cache=caches)
            mx.eval(layers.layer_state(caches))
            mx.clear_cache()
            tokens = tokens[:, step_size:]
        if padded:
            layers.finalize_layers(caches)
            mx.eval(layers.layer_state(caches))
            mx.clear_cache()

    return _swap(sched, "prefill", prefill)


# ---- full-attention caches -------------------------------------------------------------

def decode_mask_memo_by_shape() -> Undo:
    """The decode-mask memo is found by the padding's shape (B), not by the padding array:
    a batch whose padding changes while B stays (a row finishes as another joins) reads
    the old mask."""
    from batchlab.engine.caches import mask as m

    def __call__(self, offset, left_padding):
        width = offset + 1
        memo = self._memo
        if memo is None or memo[0].shape != left_padding.shape or memo[1].shape[-1] < width:  # BUG
            columns = -(-width // m.MASK_COLUMNS_STEP) * m.MASK_COLUMNS_STEP
            memo = self._memo = (left_padding, m.causal_mask_host(1, columns - 1, left_padding))
        return mx.array(memo[1][..., :width])

    return _swap(m.DecodeMasks, "__call__", __call__)


def kv_filter_trims_first_rows_padding() -> Undo:
    """filter trims the first kept row's padding, not the least padding of the kept rows
    (true when rows are sorted by length, which they are not)."""
    from batchlab.engine.caches import kv

    def filter_(self, indices):
        rows = kv.take_rows(self, indices)
        if self._right_padding is not None:
            self._right_padding = self._right_padding[rows]
        trim = int(self.left_padding_host[0]) if rows else 0  # BUG: .min()
        if trim > 0:
            if self.keys is not None:
                self.keys = self.keys[..., trim:, :]
                self.values = self.values[..., trim:, :]
            self._idx -= trim
            self.left_padding = self.left_padding_host - trim

    return _swap(kv.BatchKV, "filter", filter_)


# ---- sliding-window rings --------------------------------------------------------------

def ring_extend_ignores_rotated() -> Undo:
    """Two rings are put in temporal order before joining only when their pointers differ
    (a wrapped ring and an unwrapped one at the same pointer are joined as they lie)."""
    from batchlab.engine.caches import ring

    def extend(self, other):
        if self._lengths is not None or other._lengths is not None:
            raise ValueError("finalize() both caches before extend()")
        if self.keys is None and other.keys is None:
            ring.extend_aligned(self, other)
            return
        if self._idx != other._idx:  # BUG: self.rotated != other.rotated dropped
            self._temporal_order()
            other._temporal_order()
        ring.extend_aligned(self, other)
        self._offset = max(self._offset, other._offset)

    return _swap(ring.BatchRing, "extend", extend)


def ring_filter_trims_padding() -> Undo:
    """BatchRing.filter trims the columns every kept row pads, as BatchKV.filter does
    (mlx-lm's rotating cache does not), while the ring has not wrapped."""
    from batchlab.engine.caches import ring

    def filter_(self, indices):
        rows = ring.take_rows(self, indices)
        if self._lengths is not None:
            self._lengths = self._lengths[rows]
        trim = int(self.left_padding_host.min()) if rows else 0  # BUG: the whole block
        if trim > 0 and not self.rotated and self.keys is not None and self._lengths is None:
            self.keys = self.keys[..., trim:, :]
            self.values = self.values[..., trim:, :]
            self._idx -= trim
            self._offset -= trim
            self.left_padding = self.left_padding_host - trim

    return _swap(ring.BatchRing, "filter", filter_)


def ring_prefill_keeps_window() -> Undo:
    """A prefill chunk after the first keeps the newest max_size columns (not
    max_size - 1) before the chunk: an off-by-one at the window edge."""
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
            trim = self._idx - self.max_size  # BUG: + 1 dropped
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

    return _swap(ring.BatchRing, "_append", _append)


def ring_chunk_no_padding_roll() -> Undo:
    """Between prefill chunks the right padding of rows whose prompt ended is not rolled
    to the left (only finalize rolls it), so the trim before the next chunk cuts keys."""
    from batchlab.engine.caches import ring

    def _append(self, keys, values):
        n = keys.shape[2]
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self._temporal_order()
            self.keys = self.keys[..., : self._idx, :]
            self.values = self.values[..., : self._idx, :]
            # BUG: self._roll_padding_left() for rows whose prompt ended, dropped
            trim = self._idx - self.max_size + 1
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

    return _swap(ring.BatchRing, "_append", _append)


def ring_merge_offset_is_size() -> Undo:
    """Merging single-row rings sets each row's RoPE offset to the keys it holds (its
    size), not its position: wrong once a row's history passed the window."""
    from batchlab.engine.caches import ring
    from batchlab.engine.caches.single import ring_temporal

    def merge(cls, caches):
        max_size = caches[0].max_size
        sizes = [c.size() for c in caches]
        cache = cls._merged(
            sizes,
            lambda i, s: (ring_temporal(caches[i], caches[i].keys)[..., -s:, :],
                          ring_temporal(caches[i], caches[i].values)[..., -s:, :]),
            lambda pads: cls(max_size, pads))
        if cache is None:
            return cls(max_size, [0] * len(caches))
        cache.offset = sizes  # BUG: [c.offset for c in caches]
        cache._idx = cache._offset = max(sizes)
        return cache

    return _swap(ring.BatchRing, "merge", classmethod(merge))


def ring_mask_forgets_eviction() -> Undo:
    """The decode mask of a full ring forgets that this write evicts every row's oldest
    column (padding - 1), so a padded row hides one real key too many."""
    from batchlab.engine.caches import mask as m
    from batchlab.engine.caches import ring
    orig = m.ring_mask

    def ring_mask(N, **kw):
        if N == 1 and (kw["rotated"] or kw["idx"] >= kw["max_size"]):
            kw = dict(kw, left_padding=kw["left_padding"] + 1,  # BUG: wraps not counted
                      left_padding_max=kw["left_padding_max"] + 1)
        return orig(N, **kw)

    return _swap(ring, "ring_mask", ring_mask)


# ---- SSM / conv state --------------------------------------------------------------------

def state_advance_skips_lengths() -> Undo:
    """advance(S) lowers left_padding but not lengths, so a row whose prompt ended in an
    earlier chunk counts the next chunk's padding as real steps."""
    from batchlab.engine.caches import state

    def advance(self, N):
        self.left_padding_ints.shift(-N)  # BUG: lengths not advanced

    return _swap(state.BatchState, "advance", advance)


def state_merge_zeros_float32() -> Undo:
    """Merging states, a row without one gets float32 zeros (mx.zeros' default dtype):
    a bf16 state beside it becomes float32."""
    from batchlab.engine.caches import state

    def merge(cls, caches):
        n = len(caches)
        merged = cls(len(caches[0].cache))
        if all(c.cache[0] is None for c in caches):
            merged.left_padding = [0] * n
            return merged
        for e in range(len(merged.cache)):
            present = [c.cache[e] for c in caches if c.cache[e] is not None]
            zero = mx.zeros((1, *present[0].shape[1:]))  # BUG: dtype dropped
            merged.cache[e] = mx.concatenate(
                [zero if c.cache[e] is None else c.cache[e] for c in caches])
        return merged

    return _swap(state.BatchState, "merge", classmethod(merge))


def state_filter_keeps_padding_rows() -> Undo:
    """BatchState.filter takes the kept rows of the arrays but leaves left_padding as it
    was (all rows), so a split prompt batch masks by the wrong rows."""
    from batchlab.engine.caches import state
    from batchlab.engine.caches.kv import as_rows

    def filter_(self, indices):
        rows = as_rows(indices)
        take = mx.array(rows, dtype=mx.int32)
        self.cache = [None if c is None else c[take] for c in self.cache]
        if self.left_padding_host is not None:
            lp = self.left_padding_host
            self.left_padding = lp[: len(rows)]  # BUG: lp[rows]
        if self.lengths_host is not None:
            self.lengths = self.lengths_host[rows]

    return _swap(state.BatchState, "filter", filter_)


# ---- sampling and processors -------------------------------------------------------------

def min_p_on_scaled() -> Undo:
    """min-p's floor is taken after the temperature scales the logprobs."""
    from batchlab.engine.core import sampler as s

    def filtered_logits(logprobs, p):
        x = logprobs
        if 0 < p.top_p < 1:
            x = s._top_p(x, p.top_p)
        x = x * (1.0 / p.temperature)  # BUG: temperature before min-p
        if p.min_p != 0.0:
            x = s._min_p(x, p.min_p)
        if p.xtc_probability > 0.0:
            x = s._xtc(x, p.xtc_probability, p.xtc_threshold)
        if 0 < p.top_k < x.shape[-1]:
            x = s._top_k(x, p.top_k)
        return x

    return _swap(s, "filtered_logits", filtered_logits)


def presence_counts_each_sighting() -> Undo:
    """The presence penalty subtracts once per sighting (a scatter-add, as frequency does),
    not once per token."""
    from batchlab.engine.core import processors as pr

    def _presence(penalty, size):
        def apply(context, logits):
            if len(context) > 0:
                logits = logits.at[:, context[-size:]].subtract(penalty)  # BUG
            return logits
        return apply

    return _swap(pr, "_presence", _presence)


def processor_context_no_history() -> Undo:
    """A row's processor context starts at its prompt: the ids its history (prefix,
    parked or finished caches) holds are left out."""
    from batchlab.engine.core.batch import Sequence

    def start_context(self):
        if self.processors:
            self.context = mx.array(list(self.request.prompt[:-1]), dtype=mx.int32)  # BUG

    return _swap(Sequence, "start_context", start_context)


def processor_context_whole_prompt() -> Undo:
    """At the join the processor context takes the whole prompt; the fed last prompt id
    is then appended again (counted twice)."""
    from batchlab.engine.core.batch import Sequence

    def start_context(self):
        if self.processors:
            self.context = mx.array(list(self.history_tokens + self.request.prompt),  # BUG
                                    dtype=mx.int32)

    return _swap(Sequence, "start_context", start_context)


def row_samplers_grouped() -> Undo:
    """Rows on the batch's shared sampler are drawn in one call, then the rows with their
    own samplers (fewer calls; but BatchGenerator draws row by row in batch order)."""
    from batchlab.engine.core import scheduler as sched

    orig = sched.sample_rows

    def sample_rows(logprobs, samplers):
        if all(s.params.greedy for s in samplers) or all(s is samplers[0] for s in samplers):
            return orig(logprobs, samplers)
        shared = max(set(samplers), key=samplers.count)
        rows = [i for i, s in enumerate(samplers) if s is shared]
        out = [None] * len(samplers)
        drawn = shared(logprobs[mx.array(rows)])  # BUG: one call for the shared rows
        for k, i in enumerate(rows):
            out[i] = drawn[k : k + 1]
        for i, s in enumerate(samplers):
            if out[i] is None:
                out[i] = s(logprobs[i : i + 1])
        return mx.concatenate(out, axis=0)

    return _swap(sched, "sample_rows", sample_rows)


# ---- the lab paths -------------------------------------------------------------------------

def compiled_offset_first_row() -> Undo:
    """The compiled decode's RoPE offset is the first row's (a scalar), not per row."""
    from batchlab.engine.paths import compiled as c

    def decode_forward(model, inputs, idx, left_padding, *buffers):
        width = buffers[0].shape[2]
        cols = mx.arange(width)[None, :]
        mask = (cols >= left_padding[:, None]) & (cols <= idx)
        mask = mask[:, None, None, :]
        offset = idx - left_padding[0]  # BUG: one offset
        caches = [c.TracedKV(buffers[i], buffers[i + 1], idx, offset, mask)
                  for i in range(0, len(buffers), 2)]
        logits = model(inputs[:, None], cache=caches)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return (logprobs, *[a for cc in caches for a in (cc.keys, cc.values)])

    c._DECODERS.clear()
    return _many(_swap(c, "decode_forward", decode_forward), c._DECODERS.clear)


def paged_hash_unchained() -> Undo:
    """A sealed block's hash covers its own ids only, not its parent's (no chain): a
    block equal to a cached one after another first block is a false hit."""
    from batchlab.engine.paths.paged import block as bm
    from batchlab.engine.paths.paged.block_manager import BlockManager

    def seal(self, table):
        bs = self.block_size
        for i in range(table.num_sealed, table.num_tokens // bs):
            ids = tuple(table.ids[i * bs : (i + 1) * bs])
            if None in ids:
                return
            h = bm.block_hash(bm.NO_PARENT, ids)  # BUG: parent dropped
            self.num_queries += 1
            own = self.blocks[table.blocks[i]]
            cached = self.hash_to_block.get(h)
            if cached is not None and cached != own.id and self.blocks[cached].ids == ids:
                self.num_hits += 1
                self._incref(cached)
                self._decref(own.id)
                table.blocks[i] = cached
            elif own.hash is None:
                own.hash, own.ids = h, ids
                self.hash_to_block[h] = own.id
            table.num_sealed = i + 1

    def cached_prefix(self, ids):
        bs, n = self.block_size, 0
        while n + bs <= len(ids):
            block_ids = tuple(ids[n : n + bs])
            h = bm.block_hash(bm.NO_PARENT, block_ids)  # BUG: parent dropped
            cached = self.hash_to_block.get(h)
            if cached is None or self.blocks[cached].ids != block_ids:
                break
            n += bs
        return n

    def share_prefix(self, table, ids):
        bs = self.block_size
        for start in range(0, len(ids), bs):
            block_ids = tuple(ids[start : start + bs])
            cached = self.hash_to_block[bm.block_hash(bm.NO_PARENT, block_ids)]
            self._incref(cached)
            self.num_queries += 1
            self.num_hits += 1
            table.blocks.append(cached)
        table.ids.extend(ids)
        table.num_tokens = len(ids)
        table.num_sealed = len(ids) // bs

    M = BlockManager
    return _many(_swap(M, "seal", seal), _swap(M, "cached_prefix", cached_prefix),
                 _swap(M, "share_prefix", share_prefix))


def paged_extend_aligns_only_both_written() -> Undo:
    """PagedKV.extend aligns write columns only when both sides hold keys (``and`` for
    ``or``): fresh rows admitted beside rows mid chunked prefill keep padding 0."""
    from batchlab.engine.paths.paged import cache as pc

    def extend(self, other):
        if other.pool is not self.pool:
            raise ValueError("paged caches of two pools cannot be joined")
        if self.written and other.written:  # BUG: or
            idx = max(self._idx, other._idx)
            self.left_padding = np.concatenate([self.left_padding_host + (idx - self._idx),
                                                other.left_padding_host + (idx - other._idx)])
            self._idx = idx
        else:
            self.left_padding = np.concatenate([self.left_padding_host,
                                                other.left_padding_host])
        self.offset = np.concatenate([self.offset_host, other.offset_host])
        self.rows = self.rows + other.rows
        other.rows = ()
        self.pending_ids = None
        self.written = self.written or other.written

    return _swap(pc.PagedKV, "extend", extend)


def window_view_one_wider() -> Undo:
    """The invariant path's WindowKV lets a query see max_size old keys (window + 1 in
    all), an off-by-one at the window edge."""
    from batchlab.engine.caches import window

    def view_start(self):
        return max(0, self._idx - self.max_size)  # BUG: max_size - 1

    return _swap(window.WindowKV, "view_start", view_start)


def qkv_switch_before_first_forward() -> Undo:
    """Quantized KV at start 0 switches before the first forward (the prompt's keys are
    quantized before its own attention reads them); mlx-lm quantizes after it."""
    from batchlab.engine.paths.quantized import kv as q

    def passed_start(self):
        return self.offset_ints.bounds()[1] >= self.quant.start  # BUG: max(start, 1)

    return _swap(q.QuantizedMode, "passed_start", passed_start)


# ---- added after the first measurement pass (two bugs above proved equivalent) -------

def compiled_shapeless_trace() -> Undo:
    """The compiled decode is traced shapeless (one trace for every B and width, to save
    retracing), so a batch whose key width or B changes replays a trace of other shapes."""
    from functools import partial

    from batchlab.engine.paths import compiled as c

    def traced_decoder(model):
        key = id(model)
        ref, fn = c._DECODERS.get(key, (None, None))
        if ref is None or ref() is not model:
            fn = mx.compile(partial(c.decode_forward, model), shapeless=True)  # BUG
            c._DECODERS[key] = (c.weakref.ref(model), fn)
        return fn

    c._DECODERS.clear()
    return _many(_swap(c, "traced_decoder", traced_decoder), c._DECODERS.clear)


def processor_context_capped() -> Undo:
    """A row's processor context is kept to the last 20 ids (mlx-lm's default context
    size, to bound memory), whatever context size its penalties ask for."""
    from batchlab.engine.core import processors as pr
    from batchlab.engine.core import scheduler as sched

    def process_rows(logits, inputs, seqs):
        rows = []
        for e, seq in enumerate(seqs):
            row = logits[e : e + 1]
            if seq.processors:
                seq.context = mx.concatenate([seq.context, inputs[e : e + 1].astype(mx.int32)])
                seq.context = seq.context[-pr.DEFAULT_CONTEXT :]  # BUG: the row's sizes
                for processor in seq.processors:
                    row = processor(seq.context, row)
            rows.append(row)
        return mx.concatenate(rows, axis=0)

    return _swap(sched, "process_rows", process_rows)


def cache_tokens_prefilling_off_by_one() -> Undo:
    """A row removed while still prefilling reports one id more than its caches hold (the
    next chunk's first id), so its history's tokens run one ahead of its caches."""
    from batchlab.engine.core.batch import Sequence

    def cache_tokens(self):
        prompt = self.request.prompt
        if self.joined:
            return self.history_tokens + prompt + tuple(self.emitted)
        return self.history_tokens + prompt[: len(prompt) - len(self.unprefilled)]  # BUG

    return _swap(Sequence, "cache_tokens", cache_tokens)


def sample_only_surviving_rows() -> Undo:
    """A decode step samples only the rows that stay (a finishing row's next token is never
    read), so at temperature > 0 the batch's draw covers fewer rows on the step rows
    finish; BatchGenerator samples every row, then drops the finished ones."""
    from batchlab.engine.core.scheduler import Emission, Scheduler

    def _decode_step(self):
        batch = self.decode
        fed, fed_logprobs = batch.inputs, batch.input_logprobs
        if any(s.processors for s in batch.seqs):
            logprobs = self._processed_logprobs(fed, batch.caches, batch.seqs)
        else:
            logprobs = self._decode_logprobs(fed, batch.caches)
        tokens = fed.tolist()
        emitted, keep = [], []
        for i, seq in enumerate(batch.seqs):
            seq.num_emitted += 1
            seq.emitted.append(tokens[i])
            finished = seq.num_emitted >= seq.request.max_tokens
            emitted.append(Emission(name=seq.name, token=tokens[i], finished=finished,
                                    step_logprobs=fed_logprobs, row=i))
            if not finished:
                keep.append(i)
        if len(keep) < len(batch):
            batch.filter(keep)
            logprobs = logprobs[mx.array(keep)] if keep else None
        if keep:
            self._sample(batch, logprobs)  # BUG: sampled after the finished rows left
        return emitted

    return _swap(Scheduler, "_decode_step", _decode_step)


def paged_skip_ignores_chunk_count() -> Undo:
    """A queued row whose prompt starts with cached blocks skips their prefill even when
    that leaves it fewer prefill chunks (it then joins earlier than BatchGenerator would
    schedule it): the chunk-count guard of ``_cached_ids`` dropped."""
    from batchlab.engine.core.layers import leaves
    from batchlab.engine.paths.paged import path as pp

    def _cached_ids(self, seq):
        if not (self.skip_cached_prefill and self.share_prefixes) or seq.request.history:
            return 0
        if not self.caches.pools:
            return 0
        if self._all_paged is None:
            self._all_paged = all(isinstance(c, pp.PagedKV)
                                  for c in leaves(self.caches.fresh(self.model, 1)))
        if not self._all_paged:
            return 0
        ids = seq.unprefilled
        bs = self.caches.block_size
        k = min(self.caches.pools[0].manager.cached_prefix(ids), (len(ids) - 1) // bs * bs)
        return max(k, 0)  # BUG: the chunk-count guard dropped

    return _swap(pp.PagedScheduler, "_cached_ids", _cached_ids)


def top_k_one_as_off() -> Undo:
    """top_k = 1 is taken as 'off' (as 0 is), as some samplers spell it, so a row asking
    for top-1 at temperature > 0 draws from the whole vocabulary."""
    from batchlab.engine.core import sampler as s

    def filtered_logits(logprobs, p):
        x = logprobs
        if 0 < p.top_p < 1:
            x = s._top_p(x, p.top_p)
        if p.min_p != 0.0:
            x = s._min_p(x, p.min_p)
        if p.xtc_probability > 0.0:
            x = s._xtc(x, p.xtc_probability, p.xtc_threshold)
        if 1 < p.top_k < x.shape[-1]:  # BUG: 0 < top_k
            x = s._top_k(x, p.top_k)
        return x * (1.0 / p.temperature)

    return _swap(s, "filtered_logits", filtered_logits)


def tapconv_model_dtype() -> Undo:
    """The invariant path's depthwise-conv stand-in sums its taps in the model's dtype
    (bf16), not float32 (to save two casts): still the same for a row at any B, but not
    what mlx-lm's conv computes."""
    from batchlab.engine.paths.invariant import modules

    def __call__(self, x):
        taps = self.weight.shape[1]
        steps = x.shape[1] - taps + 1
        w = self.weight[:, :, 0].astype(x.dtype)  # BUG: float32
        y = x[:, 0:steps] * w[:, 0]
        for k in range(1, taps):
            y = y + x[:, k : k + steps] * w[:, k]
        if "bias" in self:
            y = y + self.bias.astype(x.dtype)
        return y

    return _swap(modules.TapConv1d, "__call__", __call__)


def compiled_grows_on_step_boundary() -> Undo:
    """The compiled decode grows a key buffer when the write column reaches a multiple of
    the 32-column step (as a buffer built here always is), not when it reaches the
    buffer's width: a buffer a filter trimmed or a merge built to another width is
    written past its end."""
    from batchlab.engine.paths import compiled as c

    def _decode_logprobs(self, inputs, caches):
        for cc in caches:
            if cc._idx % cc.step == 0 and cc._idx + 1 > cc.keys.shape[2]:  # BUG
                cc._grow(cc.keys[..., :1, :], cc.values[..., :1, :])
        widths = {cc.keys.shape[2] for cc in caches}
        if len(widths) != 1:
            raise RuntimeError(f"layer key buffers differ in width ({sorted(widths)})")
        idx = caches[0]._idx
        left_padding = caches[0].left_padding
        buffers = [a for cc in caches for a in (cc.keys, cc.values)]
        logprobs, *buffers = self._traced_step(inputs, mx.array([idx], mx.int32),
                                               left_padding, *buffers)
        for i, cc in enumerate(caches):
            cc.keys, cc.values = buffers[2 * i], buffers[2 * i + 1]
            cc._idx += 1
            cc.offset_ints.shift(1)
        return logprobs

    return _swap(c.CompiledScheduler, "_decode_logprobs", _decode_logprobs)


def paged_extend_keeps_other_tables() -> Undo:
    """PagedKV.extend takes the joiners' block tables but leaves them on the joiners'
    cache too (``other.rows = ()`` dropped): when that cache is dropped it releases the
    blocks the batch now reads, and later rows are handed them."""
    from batchlab.engine.paths.paged import cache as pc

    clean = vars(pc.PagedKV)["extend"]

    def extend(self, other):
        rows = other.rows
        clean(self, other)
        other.rows = rows  # BUG: the moved tables stay with ``other``

    return _swap(pc.PagedKV, "extend", extend)


def own_greedy_row_uses_shared_sampler() -> Undo:
    """A row whose own settings are greedy gets no sampler of its own ('greedy needs
    none'), so it takes the batch's shared sampler, which may sample at T > 0."""
    from batchlab.engine.core.batch import Sequence, make_processors

    def start(cls, request, row_sampler=None):
        from batchlab.engine.core.sampler import BatchSampler
        row_sampler = row_sampler or BatchSampler
        p = request.processors
        own = request.sampling is not None and not request.sampling.greedy  # BUG
        return cls(request=request, unprefilled=list(request.prompt[:-1]),
                   sampler=row_sampler(request.sampling) if own else None,
                   processors=make_processors(p) if p else [])

    return _swap(Sequence, "start", classmethod(start))


BUGS: dict[str, Callable[[], Undo]] = {
    "finish-at-first-rows-budget": finish_at_first_rows_budget,
    "cap-counted-before-finish": cap_counted_before_finish,
    "admit-ignores-prompt-batch": admit_ignores_prompt_batch,
    "joiners-longest-first": joiners_longest_first,
    "finished-history-after-filter": finished_history_after_filter,
    "cache-tokens-drop-emitted": cache_tokens_drop_emitted,
    "prefill-padded-first-row-only": prefill_padded_first_row_only,
    "decode-mask-memo-by-shape": decode_mask_memo_by_shape,
    "kv-filter-trims-first-rows-padding": kv_filter_trims_first_rows_padding,
    "ring-extend-ignores-rotated": ring_extend_ignores_rotated,
    "ring-filter-trims-padding": ring_filter_trims_padding,
    "ring-prefill-keeps-window": ring_prefill_keeps_window,
    "ring-merge-offset-is-size": ring_merge_offset_is_size,
    "ring-mask-forgets-eviction": ring_mask_forgets_eviction,
    "state-merge-zeros-float32": state_merge_zeros_float32,
    "min-p-on-scaled": min_p_on_scaled,
    "presence-counts-each-sighting": presence_counts_each_sighting,
    "processor-context-no-history": processor_context_no_history,
    "processor-context-whole-prompt": processor_context_whole_prompt,
    "row-samplers-grouped": row_samplers_grouped,
    "compiled-offset-first-row": compiled_offset_first_row,
    "paged-hash-unchained": paged_hash_unchained,
    "paged-extend-aligns-only-both-written": paged_extend_aligns_only_both_written,
    "window-view-one-wider": window_view_one_wider,
    "qkv-switch-before-first-forward": qkv_switch_before_first_forward,
    "compiled-shapeless-trace": compiled_shapeless_trace,
    "processor-context-capped": processor_context_capped,
    "cache-tokens-prefilling-off-by-one": cache_tokens_prefilling_off_by_one,
    "sample-only-surviving-rows": sample_only_surviving_rows,
    "paged-skip-ignores-chunk-count": paged_skip_ignores_chunk_count,
    "top-k-one-as-off": top_k_one_as_off,
    "tapconv-model-dtype": tapconv_model_dtype,
    "compiled-grows-on-step-boundary": compiled_grows_on_step_boundary,
    "paged-extend-keeps-other-tables": paged_extend_keeps_other_tables,
    "own-greedy-row-uses-shared-sampler": own_greedy_row_uses_shared_sampler,
}

# Written, then found equivalent (no cell can tell them apart from the clean engine):
# the scheduler cuts every prompt into chunks of prefill_step_size before prefill(), so
# each prefill() call is one forward, prepare/finalize around it: between two forwards
# no ring holds right padding and no state's lengths are set. Dropped from the rate.
EQUIVALENT: dict[str, tuple[Callable[[], Undo], str]] = {
    "ring-chunk-no-padding-roll": (
        ring_chunk_no_padding_roll,
        "BatchRing._append's roll of ended rows' right padding runs only inside a "
        "multi-forward prefill() call; the scheduler's calls are one forward each, so the "
        "roll is always 0 (offset - lengths <= 0; instrumented: 87 rolls, 0 nonzero, over "
        "1126 cells)"),
    "state-advance-skips-lengths": (
        state_advance_skips_lengths,
        "BatchState.lengths is set by prepare and cleared by finalize around each "
        "one-forward prefill() call; each layer advances its own cache after its one "
        "use, so a lengths never advanced is never read again (instrumented: 0 reads "
        "of an advanced lengths over 1126 cells)"),
    "state-filter-keeps-padding-rows": (
        state_filter_keeps_padding_rows,
        "BatchState.left_padding starts at zeros (fresh caches; None after finalize or "
        "a merge with content) and only advance() lowers it: the engine never prepares a "
        "state with left padding, so it is never positive and masks nothing, whichever "
        "rows' values a filter keeps (instrumented: 0 positive reads over 1126 cells, "
        "tools/tester3/instrument_equivalent.py)"),
}


# name -> (regime, the one-line change); the README's table is made from it
REGIME: dict[str, tuple[str, str]] = {
    "finish-at-first-rows-budget": (
        "per-row max_tokens (rows of one batch with different budgets)",
        "Scheduler._decode_step: finished = num_emitted >= seqs[0].max_tokens"),
    "cap-counted-before-finish": (
        "completion cap; a row finishing on the step a queued row is admitted",
        "Scheduler.step: 'decode full' read before the decode step drops finished rows"),
    "admit-ignores-prompt-batch": (
        "admission while rows are still in the prompt batch",
        "Scheduler._admit: n = prefill_batch_size (- len(prompt) dropped)"),
    "joiners-longest-first": (
        "several rows joining on one step (order of the running batch)",
        "Scheduler._join_prefilled: joiners sorted longest prompt first"),
    "finished-history-after-filter": (
        "the step a row finishes; its caches kept for a continue",
        "_decode_step: finished rows extracted after filter, at the old index"),
    "cache-tokens-drop-emitted": (
        "finished row continued with processors (context spans two turns)",
        "Sequence.cache_tokens: joined rows leave out their emitted ids"),
    "prefill-padded-first-row-only": (
        "ragged prefill where the first row is the longest",
        "prefill: padded = right_padding[0] > 0 (not any)"),
    "decode-mask-memo-by-shape": (
        "padding changes while B stays (rows finish as others join), B=34",
        "DecodeMasks: memo found by the padding's shape, not the array"),
    "kv-filter-trims-first-rows-padding": (
        "evicting rows (first row's padding not the least)",
        "BatchKV.filter: trim = left_padding[0] (not min)"),
    "ring-extend-ignores-rotated": (
        "joins into rings: one wrapped, one not, same pointer",
        "BatchRing.extend: temporal order only when _idx differ"),
    "ring-filter-trims-padding": (
        "evicts from unwrapped rings (incl. mid chunked prefill)",
        "BatchRing.filter trims shared padding like BatchKV.filter"),
    "ring-prefill-keeps-window": (
        "chunked prefill split exactly at the window (ps8, window 8)",
        "BatchRing._append: trim = _idx - max_size (+ 1 dropped)"),
    "ring-merge-offset-is-size": (
        "history on rings whose prefix passed the window",
        "BatchRing.merge: offset = sizes (not each row's position)"),
    "ring-mask-forgets-eviction": (
        "padded rows on full / wrapping rings",
        "ring_mask: this write's eviction not subtracted from padding"),
    "state-merge-zeros-float32": (
        "SSM/hybrid history merged beside a fresh row (bf16 state)",
        "BatchState.merge: zeros without dtype (float32)"),
    "min-p-on-scaled": (
        "min-p at temperature != 1",
        "filtered_logits: temperature applied before min-p"),
    "presence-counts-each-sighting": (
        "presence penalty with repeated ids in the context",
        "_presence: scatter-subtract per sighting (frequency's op)"),
    "processor-context-no-history": (
        "prefix / parked rows with processors",
        "Sequence.start_context: history ids left out"),
    "processor-context-whole-prompt": (
        "processors at the join (last prompt id fed)",
        "Sequence.start_context: prompt (not prompt[:-1])"),
    "row-samplers-grouped": (
        "shared sampler at T > 0 beside rows with their own samplers",
        "sample_rows: shared rows drawn in one call, then the others"),
    "compiled-offset-first-row": (
        "compiled path, ragged rows",
        "decode_forward: offset = idx - left_padding[0]"),
    "compiled-shapeless-trace": (
        "compiled path's trace with a width / B change",
        "traced_decoder: mx.compile(..., shapeless=True)"),
    "paged-hash-unchained": (
        "prefix cache: equal block after another parent",
        "BlockManager.seal/cached_prefix: hash without the parent"),
    "paged-extend-aligns-only-both-written": (
        "paged: admission beside rows mid chunked prefill",
        "PagedKV.extend: align when both written (and for or)"),
    "window-view-one-wider": (
        "invariant path's window (WindowKV), second judge",
        "WindowKV.view_start: _idx - max_size (not max_size - 1)"),
    "qkv-switch-before-first-forward": (
        "quantized KV at start 0",
        "QuantizedMode.passed_start: >= start (not max(start, 1))"),
    "cache-tokens-prefilling-off-by-one": (
        "a row parked mid chunked prefill, with processors",
        "Sequence.cache_tokens: prompt[:len - len(unprefilled)] (one id ahead)"),
    "sample-only-surviving-rows": (
        "T > 0 on the step rows finish while others decode",
        "_decode_step: sample after dropping finished rows"),
    "paged-skip-ignores-chunk-count": (
        "prefix-cache hit under chunked prefill (row would join early)",
        "PagedScheduler._cached_ids: chunk-count guard dropped"),
    "top-k-one-as-off": (
        "top-k of 1 at temperature > 0",
        "filtered_logits: top-k applied only for top_k > 1"),
    "tapconv-model-dtype": (
        "invariant-blocked conv stand-in (mamba2, lfm2, qwen3.5, nemotron-h)",
        "TapConv1d: taps summed in the model dtype, not float32"),
    "compiled-grows-on-step-boundary": (
        "compiled path: a key buffer of a width not a multiple of 32 (after a trim)",
        "CompiledScheduler._decode_logprobs: grow only when _idx % 32 == 0"),
    "paged-extend-keeps-other-tables": (
        "paged: block tables after extend (ownership of moved tables)",
        "PagedKV.extend: other.rows = () dropped"),
    "own-greedy-row-uses-shared-sampler": (
        "a row greedy by its own setting beside a shared sampler at T > 0",
        "Sequence.start: no own sampler for a greedy request"),
    "processor-context-capped": (
        "penalty context windows wider than 20 ids",
        "process_rows: context kept to the last 20 ids"),
    "ring-chunk-no-padding-roll": (
        "ragged chunked prefill on window models",
        "BatchRing._append: _roll_padding_left dropped"),
    "state-advance-skips-lengths": (
        "ragged chunked prefill on SSM models",
        "BatchState.advance: lengths not lowered"),
    "state-filter-keeps-padding-rows": (
        "SSM rows split / evicted",
        "BatchState.filter: left_padding[:n] (not [rows])"),
}
