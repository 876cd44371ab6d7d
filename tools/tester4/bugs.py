"""Outside tester, round 4: realistic batching bugs, each a monkeypatch (the engine's source
stays clean). ``BUGS[name]()`` applies one and returns its undo; ``REGIME[name]`` says
where it sits and what the change is; ``HINTS[name]`` lists cell-id fragments to try
first (speed only).

    python -m tools.tester4.measure NAME [NAME...]       # the default matrix, first catch
    python -m tools.tester4.measure NAME --matrix tools/tester4/proof.toml --live --all

Most bugs are one string replaced in one function's source (``src``: the function is
recompiled in its module's namespace and rebound wherever it was imported by name);
methods that call ``super()`` are replaced by hand-written twins.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Callable

Undo = Callable[[], None]


def _rebind(old, new) -> Undo:
    """Put ``new`` wherever a module or class attribute is ``old``; return the undo."""
    spots = []
    for mod in list(sys.modules.values()):
        if mod is None or not getattr(mod, "__name__", "").startswith("batchlab"):
            continue
        for holder in [mod, *[v for v in vars(mod).values() if inspect.isclass(v)]]:
            for k, v in list(vars(holder).items()):
                if v is old:
                    spots.append((holder, k))
    if not spots:
        raise RuntimeError(f"{old!r} is bound nowhere")
    for holder, k in spots:
        setattr(holder, k, new)

    def undo() -> None:
        for holder, k in spots:
            setattr(holder, k, old)

    return undo


def src(module: str, qualname: str, old: str, new: str) -> Callable[[], Undo]:
    """A bug that replaces ``old`` (once) by ``new`` in the source of ``qualname``."""

    def apply() -> Undo:
        mod = __import__(module, fromlist=["_"])
        owner, _, name = qualname.rpartition(".")
        target = getattr(mod, owner) if owner else mod
        raw = inspect.getattr_static(target, name)
        fn = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
        text = textwrap.dedent(inspect.getsource(fn))
        if text.count(old) != 1:
            raise RuntimeError(f"{old!r} occurs {text.count(old)} times in {qualname}")
        ns = dict(mod.__dict__)
        text = text.replace(old, new)
        if owner:  # compiled in a class body, so a zero-arg super() has its __class__ cell
            text = "class _BugHolder:\n" + textwrap.indent(text, "    ")
        exec(compile(text, f"<bug {qualname}>", "exec"), ns)
        made = vars(ns["_BugHolder"])[name] if owner else ns[name]
        if isinstance(raw, (classmethod, staticmethod)) and not isinstance(made, type(raw)):
            made = type(raw)(made)
        func = getattr(made, "__func__", made)
        for var, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
            if var == "__class__":
                cell.cell_contents = target  # super() then reads the real class
        if owner:
            setattr(target, name, made)
            return lambda: setattr(target, name, raw)
        return _rebind(raw, made)

    return apply


def attr(module: str, qualname: str, make: Callable) -> Callable[[], Undo]:
    """A bug that sets ``qualname`` to ``make(original)``."""

    def apply() -> Undo:
        mod = __import__(module, fromlist=["_"])
        owner, _, name = qualname.rpartition(".")
        target = getattr(mod, owner) if owner else mod
        raw = inspect.getattr_static(target, name)
        setattr(target, name, make(raw))
        return lambda: setattr(target, name, raw)

    return apply


# -- hand-written twins (methods that call super()) -------------------------------------

def _padded_offsets_memo_by_pad(raw):
    from batchlab.engine.caches.rowints import RowIntsAttribute
    from batchlab.engine.paths.invariant.path import _PaddedRowInts

    def __get__(self, obj, owner=None):
        dev = RowIntsAttribute.__get__(self, obj, owner)
        if obj is None or not obj.pad_rows:
            return dev
        last = _PaddedRowInts._last
        # BUG: the padded offsets are remembered per pad width only ("the pad changes
        # only when B does"), so a step that moves every offset keeps the last step's
        if last is None or last[1] != obj.pad_rows:
            last = _PaddedRowInts._last = (dev, obj.pad_rows, mx_pad(dev, obj.pad_rows))
        return last[2]

    return __get__


def mx_pad(dev, n):
    import mlx.core as mx

    return mx.pad(dev, (0, n))


def _align_joiner_only(raw):
    def _align_format(self, other) -> None:
        if self.quantized == other.quantized:
            return
        # BUG: only the joining side is switched ("the running batch is the quantized one")
        other.switch_to_quantized()
        dims = self._dims or other._dims
        self._dims = other._dims = dims

    return _align_format


def _remove_skips_prompt(raw):
    def remove(self, names, keep_history=False):
        # BUG: rows still in the prompt batch are left there (only the queue and the
        # decode batch are searched): "a row is either waiting or decoding"
        kept = raw(self, [n for n in names if n not in {s.name for s in self.prompt.seqs}],
                   keep_history)
        return kept

    return remove


def _extend_logprobs_swapped(raw):
    import mlx.core as mx

    from batchlab.engine.core import layers

    def extend(self, other) -> None:
        self.seqs += other.seqs
        self.caches = layers.extend_layers(self.caches, other.caches)
        self.inputs = mx.concatenate([self.inputs, other.inputs])
        # BUG: the joiners' logprob rows go first
        self.input_logprobs = mx.concatenate([other.input_logprobs, self.input_logprobs])

    return extend


def _paged_extend_reversed(raw):
    import numpy as np

    def extend(self, other) -> None:
        idx = max(self._idx, other._idx)
        self.left_padding = np.concatenate([self.left_padding_host + (idx - self._idx),
                                            other.left_padding_host + (idx - other._idx)])
        self._idx = idx
        self.offset = np.concatenate([self.offset_host, other.offset_host])
        # BUG: the joiners' block tables are put in front ("newest first")
        self.rows = other.rows + self.rows
        other.rows = ()
        self.pending_ids = None

    return extend


def _kv_extract_growth_tail(raw):
    from batchlab.engine.caches.single import kv_row

    def extract(self, idx: int):
        pad = int(self.left_padding_host[idx])
        # BUG: the row is cut from its padding to the end of the buffer, the unused
        # columns of the 256-column growth included
        return kv_row(self.keys[idx : idx + 1, :, pad:], self.values[idx : idx + 1, :, pad:])

    return extract


def _qring_history_ring_order(raw):
    from batchlab.engine.paths.quantized.kv import pack
    from batchlab.engine.paths.quantized.ring import QuantizedRingRow

    def _temporal_packed(r, quant):
        if r.keys is None:
            return None
        if isinstance(r, QuantizedRingRow):
            return r.keys, r.values
        # BUG: an mlx-lm RotatingKVCache row packed as it lies (ring order), its used
        # columns cut from the front: "a prompt cache is already in temporal order"
        n = min(r.offset, r.keys.shape[2])
        return pack(r.keys[..., :n, :], quant), pack(r.values[..., :n, :], quant)

    return _temporal_packed


# -- the bugs ------------------------------------------------------------------------

KV = "batchlab.engine.caches.kv"
RING = "batchlab.engine.caches.ring"
MASK = "batchlab.engine.caches.mask"
STATE = "batchlab.engine.caches.state"
SCHED = "batchlab.engine.core.scheduler"

BUGS: dict[str, Callable[[], Undo]] = {
    # 1 growth across 256 columns: the decode mask memo is rebuilt only when the
    # left padding changes, not when the key width passes the memo's 256 columns
    "decode-mask-memo-ignores-width": src(
        MASK, "DecodeMasks.__call__", " or memo[1].shape[-1] < width", ""),
    # 2 MLA (keys 32 wide, values 8): an empty side of an extend gets zero values of
    # the keys' width
    "extend-empty-values-keys-width": src(
        KV, "pad_for_extend", "ref.values.shape[1], 0, ref.values.shape[3]",
        "ref.values.shape[1], 0, ref.keys.shape[3]"),
    # 3 MLA with history: merged values allocated with the keys' width
    "merge-values-keys-width": src(
        KV, "LeftPaddedKV._merged", "Dv = max(v.shape[3] for _, v in rows)",
        "Dv = Dk"),
    # 4 newest families: every state cache made with two arrays (conv + SSM)
    "state-two-arrays": src(
        "batchlab.engine.core.layers", "batch_cache_for",
        "BatchState(len(template.cache), left_padding)", "BatchState(2, left_padding)"),
    # 5 row cost on MLA: a token's bytes counted as twice its keys' (K and V "alike")
    "token-bytes-keys-twice": src(
        KV, "LeftPaddedKV.token_bytes", "(self.keys.nbytes + self.values.nbytes)",
        "(2 * self.keys.nbytes)"),
    # 6 prefix-cache statistics: a block shared at admission is a hit but no query
    "share-prefix-no-query": src(
        "batchlab.engine.paths.paged.block_manager", "BlockManager.share_prefix",
        "        self.num_queries += 1\n", ""),
    # 7 quantized KV with history at a start > 0: only the joiner is switched
    "qkv-align-switches-joiner-only": attr(
        "batchlab.engine.paths.quantized.kv", "QuantizedMode._align_format",
        _align_joiner_only),
    # 8 greedy beside sampled rows: the first row's sampler decides "all greedy"
    "sample-rows-first-row-greedy": src(
        "batchlab.engine.core.sampler", "sample_rows",
        "if all(s.params.greedy for s in samplers):", "if samplers[0].params.greedy:"),
    # 9 the invariant path's padded decode block: padded offsets memoized by pad width
    "invariant-pad-offsets-memo-by-pad": attr(
        "batchlab.engine.paths.invariant.path", "_PaddedRowInts.__get__",
        _padded_offsets_memo_by_pad),
    # 10 left padding at B=1: a ring of one row is taken as unpadded at decode
    "ring-mask-lone-row-unpadded": src(
        MASK, "ring_mask", "if N == 1 and offset < window and left_padding_max - dropped <= 0:",
        "if N == 1 and offset < window and (len(left_padding) == 1 "
        "or left_padding_max - dropped <= 0):"),
    # 11 processors: a joiner's first decode step runs without its processors
    "join-first-step-unprocessed": src(
        SCHED, "Scheduler._join_prefilled",
        "self._processed_logprobs(last, first.caches, first.seqs)",
        "self._forward_logprobs(last, first.caches)"),
    # 12 logprobs of each row: a join puts the joiners' logprob rows first
    "extend-logprobs-swapped": attr(
        "batchlab.engine.core.batch", "DecodeBatch.extend", _extend_logprobs_swapped),
    # 13 quantized ring join with history: a prompt-cache ring packed in ring order
    "qkv-ring-history-ring-order": attr(
        "batchlab.engine.paths.quantized.ring", "_temporal_packed",
        _qring_history_ring_order),
    # 14 a prefill chunk exactly the window: the ring trims only past max_size
    "ring-prefill-trim-past-window": src(
        RING, "BatchRing._append", "        if trim > 0:\n",
        "        if trim > 1:\n"),
    # 15 growth: one 256-column step whatever the chunk's length
    "grow-one-step": src(
        KV, "BatchKV._grow", "cols = (n + self.step - 1) // self.step * self.step",
        "cols = self.step"),
    # 16 row cost of a ring: a row costs its whole window from its first token
    "cost-ring-full-window": src(
        "batchlab.engine.core.cost", "RowCost.ring_bytes", "min(window, tokens) * cost",
        "window * cost"),
    # 17 rows evicted while in the prompt batch stay there
    "remove-skips-prompt-batch": attr(SCHED, "Scheduler.remove", _remove_skips_prompt),
    # 18 paged block tables after extend: the joiners' tables first
    "paged-extend-tables-reversed": attr(
        "batchlab.engine.paths.paged.cache", "PagedKV.extend", _paged_extend_reversed),
    # 20 the step a ring first wraps (pointer at max_size, not yet 'rotated'): no roll
    "ring-first-wrap-not-rolled": src(
        MASK, "ring_mask", "wraps = N == 1 and (rotated or idx >= max_size)",
        "wraps = N == 1 and rotated"),
    # 21 history: a parked row extracted with the buffer's unused growth columns
    "kv-extract-growth-tail": attr(KV, "BatchKV.extract", _kv_extract_growth_tail),
    # 22 history: the ids a joined row's caches hold, its history's left out
    "cache-tokens-drop-history": src(
        "batchlab.engine.core.batch", "Sequence.cache_tokens",
        "return self.history_tokens + prompt + tuple(self.emitted)",
        "return prompt + tuple(self.emitted)"),
    # 24 ring extend: rings at equal pointers but different _offset joined unrolled
    "ring-extend-offset-kept": src(
        RING, "BatchRing.extend", "self._offset = max(self._offset, other._offset)",
        "self._offset = self._offset if self.keys is not None else other._offset"),
    # 25 window cache (invariant) prefill: the view reads one column less
    "window-prefill-view-narrow": src(
        "batchlab.engine.caches.window", "WindowKV.view_start",
        "max(0, self._idx - (self.max_size - 1))", "max(0, self._idx - (self.max_size - 2))"),
    # 27 prefix-cache statistics: a seal that finds its block cached keeps its own copy
    "seal-hit-keeps-own-block": src(
        "batchlab.engine.paths.paged.block_manager", "BlockManager.seal",
        "            self._decref(own.id)\n", ""),
    # 28 quantized KV history: a row extracted from a quantized batch starts at offset 0
    "qkv-extract-offset-zero": src(
        "batchlab.engine.paths.quantized.kv", "BatchQuantizedKV.extract",
        "cache.offset = row.offset", "cache.offset = 0"),
    # 29 a row greedy by its own setting takes the batch's sampler
    "row-greedy-setting-shared-sampler": src(
        "batchlab.engine.core.batch", "Sequence.start", "if request.sampling else None",
        "if request.sampling and not request.sampling.greedy else None"),
}

# Written as bugs, then found equivalent (no cell can tell): name -> (apply, why).
EQUIVALENT: dict[str, tuple[Callable[[], Undo], str]] = {
    "logit-bias-model-dtype": (src(
        "batchlab.engine.core.processors", "_logit_bias",
        "return logits.at[:, indices].add(values)",
        "return logits.at[:, indices].add(values.astype(logits.dtype))"),
        "MLX's scatter-add casts the float32 updates to the array's dtype itself: bf16 "
        "logits plus biases 0.3 / -1.37 / 0.71 gave equal bits either way (probed; the "
        "proof cell fine-bias PASSES with the bug on llama and gemma3)"),
    "compiled-grow-first-layer-width": (src(
        "batchlab.engine.paths.compiled", "CompiledScheduler._decode_logprobs",
        "if c._idx + 1 > c.keys.shape[2]:", "if c._idx + 1 >= c.keys.shape[2]:"),
        "the traced step attends over the whole buffer behind a mask; a buffer grown one "
        "column early only adds a masked column, which the CPU's attention ignores bit "
        "for bit (all 2141 default cells PASS with it, the compiled ones included)"),
    "state-merge-content-padding-zeros": (src(
        STATE, "BatchState.merge", "    for e in range(len(merged.cache)):",
        "    merged.left_padding = [0] * n\n    for e in range(len(merged.cache)):"),
        "on the CPU backend an all-True SSM mask array changes no bit against None (the "
        "models select or multiply by it), and a decode mask that keeps every row is "
        "dropped there anyway (all 2141 default cells PASS with it)"),
    "invariant-burst-admits-one": (src(
        "batchlab.engine.paths.invariant.path", "InvariantScheduler._prefill_chunk",
        "        self._admit()  # admits nothing once the decode batch is full\n", ""),
        "the invariant path promises each row its tokens and bits, not the step it is "
        "admitted on (matrix/solo.py and matrix/second.py set steps aside on purpose): a "
        "burst admitted one prompt a step emits the same tokens later (all 2141 PASS)"),
    "qkv-ring-merge-offset-is-position": (src(
        "batchlab.engine.paths.quantized.ring", "BatchQuantizedRing.merge_quantized",
        "cache._idx = cache._offset = max(sizes)",
        "cache._idx, cache._offset = max(sizes), max(r.offset for r in rows)"),
        "a ring row's size is min(offset, window), so the merged ring's columns and its "
        "rows' largest position differ only once some row has wrapped, and then the ring "
        "is already a window wide: every read of _offset (the served width, the decode "
        "mask's min(window - 1, _offset), the growth test) gives the same answer "
        "(proof.toml's short-histories cells PASS with it)"),
    "ring-merge-offset-is-position": (src(
        RING, "BatchRing.merge", "cache._idx = cache._offset = max(sizes)",
        "cache._idx, cache._offset = max(sizes), max(c.offset for c in caches)"),
        "as qkv-ring-merge-offset-is-position, in l1's BatchRing.merge"),
}

REGIME: dict[str, tuple[str, str]] = {
    "logit-bias-model-dtype": (
        "logit bias on bf16 logits",
        "_logit_bias adds the biases cast to the logits' dtype (mlx-lm adds float32)"),
    "decode-mask-memo-ignores-width": (
        "decode key width crossing 256 columns with padded rows",
        "DecodeMasks rebuilds its host mask only when the left padding changes"),
    "extend-empty-values-keys-width": (
        "MLA (keys and values of different widths), a prompt batch extended by fresh rows",
        "pad_for_extend gives an empty side zero values of the keys' width"),
    "merge-values-keys-width": (
        "MLA with history (a parked row merged back)",
        "LeftPaddedKV._merged allocates values with the keys' width (Dv = Dk)"),
    "state-two-arrays": (
        "the newest state families (kimi-linear's 4 arrays, rwkv7's 3)",
        "batch_cache_for makes every BatchState with 2 arrays (conv + SSM)"),
    "token-bytes-keys-twice": (
        "serve's row cost on MLA (keys 32 wide, values 8 wide)",
        "LeftPaddedKV.token_bytes counts 2 x the keys' bytes instead of keys + values"),
    "share-prefix-no-query": (
        "prefix-cache statistics (hit rate's divisor)",
        "BlockManager.share_prefix counts a hit but no query"),
    "qkv-align-switches-joiner-only": (
        "quantized KV at start 8: a quantized joiner meets a bf16 batch (aimed at history)",
        "QuantizedMode._align_format switches only the joining side"),
    "sample-rows-first-row-greedy": (
        "greedy rows beside sampled rows, the first row greedy",
        "sample_rows takes the batch as all-greedy when its first row is"),
    "invariant-pad-offsets-memo-by-pad": (
        "the invariant path's padded decode block (invariant-blocked)",
        "_PaddedRowInts memoizes the padded RoPE offsets by pad width only"),
    "ring-mask-lone-row-unpadded": (
        "left padding at B=1: a ring batch filtered to one padded row",
        "ring_mask returns no mask for a one-row ring"),
    "join-first-step-unprocessed": (
        "logits processors on a joiner's first decode step",
        "_join_prefilled runs the first step without the rows' processors"),
    "extend-logprobs-swapped": (
        "logprobs of each row after a join (tokens unchanged)",
        "DecodeBatch.extend puts the joiners' logprob rows first"),
    "qkv-ring-history-ring-order": (
        "quantized ring join of a prompt cache that wrapped",
        "_temporal_packed packs an mlx-lm RotatingKVCache in ring order"),
    "ring-prefill-trim-past-window": (
        "a prefill chunk that ends exactly at the window (8-id chunks, window 8)",
        "BatchRing._append trims only when more than max_size columns are held"),
    "grow-one-step": (
        "a prefill chunk longer than 256 ids (growth step)",
        "BatchKV._grow adds one 256-column step whatever the chunk's length"),
    "cost-ring-full-window": (
        "serve's row cost of ring layers before they fill",
        "RowCost.ring_bytes charges the whole window from a row's first token"),
    "remove-skips-prompt-batch": (
        "rows evicted while in the prompt batch (prefilled or mid chunked prefill)",
        "Scheduler.remove searches only the queue and the decode batch"),
    "paged-extend-tables-reversed": (
        "paged block tables after extend",
        "PagedKV.extend puts the joiners' block tables first"),
    "ring-first-wrap-not-rolled": (
        "the step a ring first wraps (pointer at max_size, not yet rotated)",
        "ring_mask rolls the mask only once the ring is marked rotated"),
    "kv-extract-growth-tail": (
        "history: a parked / finished row extracted",
        "BatchKV.extract cuts the row to the buffer's end, growth columns included"),
    "cache-tokens-drop-history": (
        "the ids a joined row with history holds (row cost, parked rows' histories)",
        "Sequence.cache_tokens leaves the history's ids out once the row joined"),
    "state-merge-content-padding-zeros": (
        "SSM state merged from rows with content (history)",
        "BatchState.merge keeps zero left padding (an all-True mask) instead of None"),
    "ring-extend-offset-kept": (
        "a ring joiner that has written more columns than the running ring",
        "BatchRing.extend keeps the running ring's _offset"),
    "window-prefill-view-narrow": (
        "the invariant path's window cache (WindowKV)",
        "WindowKV.view_start reads max_size - 2 old columns, one too few"),
    "compiled-grow-first-layer-width": (
        "the compiled path's trace across a width change",
        "CompiledScheduler grows the key buffers one column early"),
    "seal-hit-keeps-own-block": (
        "prefix-cache statistics and the pool (a seal that hits the cache)",
        "BlockManager.seal takes the cached block but never frees the row's own copy"),
    "qkv-extract-offset-zero": (
        "quantized KV with history: a row parked or finished on a quantized batch",
        "BatchQuantizedKV.extract hands back a QuantizedKVCache at offset 0"),
    "qkv-ring-merge-offset-is-position": (
        "quantized ring join of a prompt cache shorter than the window",
        "BatchQuantizedRing.merge_quantized sets _offset (columns written) to the rows' "
        "RoPE position"),
    "ring-merge-offset-is-position": (
        "l1 ring merge of prompt caches shorter than the window (history)",
        "BatchRing.merge sets _offset (columns written) to the rows' RoPE position"),
    "row-greedy-setting-shared-sampler": (
        "a row greedy by its own setting in a batch sampled at temperature > 0",
        "Sequence.start gives a row with greedy settings no sampler (the batch's then)"),
    "invariant-burst-admits-one": (
        "the invariant path's bursts (each prompt prefilled alone, several a step)",
        "InvariantScheduler._prefill_chunk no longer admits the next prompt in its loop"),
}

HINTS: dict[str, tuple[str, ...]] = {
    "decode-mask-memo-ignores-width": ("ctx-grow",),
    "extend-empty-values-keys-width": ("deepseek-v3", "kimi-linear"),
    "merge-values-keys-width": ("deepseek-v3/B3/ragged/park-resume", "deepseek-v3"),
    "state-two-arrays": ("kimi-linear", "rwkv7"),
    "token-bytes-keys-twice": ("row-cost",),
    "share-prefix-no-query": ("row-cost-prefix", "prefix-share"),
    "qkv-align-switches-joiner-only": ("kv8-s8", "kv4-s8"),
    "sample-rows-first-row-greedy": ("rs-",),
    "invariant-pad-offsets-memo-by-pad": ("invariant-blocked/llama", "invariant-blocked/"),
    "ring-mask-lone-row-unpadded": ("row-cost-longest-leaves", "gemma3/B2/"),
    "join-first-step-unprocessed": ("lp-",),
    "extend-logprobs-swapped": ("/join/",),
    "qkv-ring-history-ring-order": ("gemma3-hd64/B3/explicit", "gemma3-hd64"),
    "ring-prefill-trim-past-window": ("gemma3/B3/ragged/static/ctx-wrap/ps8", "ps8"),
    "grow-one-step": ("ctx-long", "ctx-grow"),
    "cost-ring-full-window": ("row-cost",),
    "remove-skips-prompt-batch": ("evict-early",),
    "paged-extend-tables-reversed": ("paged/llama/B4/ragged/join-evict",),
    "logit-bias-model-dtype": ("lp-b", "lp-"),
    "ring-first-wrap-not-rolled": ("gemma3/B3/ragged",),
    "kv-extract-growth-tail": ("park-resume",),
    "cache-tokens-drop-history": ("row-cost", "history"),
    "state-merge-content-padding-zeros": ("mamba2/B3/ragged/history", "prefix-join"),
    "ring-extend-offset-kept": ("gemma3",),
    "window-prefill-view-narrow": ("invariant/gemma3",),
    "compiled-grow-first-layer-width": ("compiled/",),
    "seal-hit-keeps-own-block": ("row-cost-prefix", "prefix-share"),
    "qkv-extract-offset-zero": ("kv-history", "kv-continue", "park-queued"),
    "invariant-burst-admits-one": ("invariant-blocked/gemma3", "invariant-blocked/"),
    "qkv-ring-merge-offset-is-position": ("gemma3-hd64",),
    "ring-merge-offset-is-position": ("gemma3/B3/ragged/prefix-join", "gemma3"),
    "row-greedy-setting-shared-sampler": ("rs-t0", "rs-"),
}
