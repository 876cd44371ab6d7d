"""Round 7's bugs: each a monkeypatch returning an undo. Written from the engine source
(batchlab/engine/core/*, paths/quantized/*), before reading any seeded-bug catalog."""

from __future__ import annotations

import math

import mlx.core as mx


def _patch(obj, name, new):
    old = getattr(obj, name)
    setattr(obj, name, new)
    return lambda: setattr(obj, name, old)


def _patches(*undos):
    def undo():
        for u in reversed(undos):
            u()
    return undo


# 1. frequency penalty penalises a token once, however often it was seen (a "simplified"
# in-place subtract instead of mlx-lm's scatter-subtract).
def frequency_once():
    from batchlab.engine.core import processors as P

    def _frequency(penalty, size):
        def apply(context, logits):
            if len(context) > 0:
                logits[:, context[-size:]] -= penalty
            return logits
        return apply
    return _patch(P, "_frequency", _frequency)


# 2. processors order: the logit bias applied after the penalties, not first.
def bias_after_penalties():
    from batchlab.engine.core import processors as P
    orig = P.make_processors

    def make_processors(p):
        out = orig(p)
        if p.logit_bias:
            out = out[1:] + out[:1]
        return out
    undo1 = _patch(P, "make_processors", make_processors)
    from batchlab.engine.core import batch as B
    undo2 = _patch(B, "make_processors", make_processors)
    return _patches(undo1, undo2)


# 3. top-k keeps k+1 tokens (argpartition's kth off by one).
def top_k_plus_one():
    from batchlab.engine.core import sampler as S

    def _top_k(logprobs, top_k):
        dropped = mx.argpartition(-logprobs, kth=top_k, axis=-1)[..., top_k + 1:]
        return mx.put_along_axis(logprobs, dropped, mx.array(-float("inf"), logprobs.dtype),
                                 axis=-1)
    return _patch(S, "_top_k", _top_k)


# 4. the filter chain's order: top-k before top-p (mlx-lm: top-p, min-p, XTC, top-k).
def topk_before_topp():
    from batchlab.engine.core import sampler as S

    def filtered_logits(logprobs, p):
        x = logprobs
        if 0 < p.top_k < x.shape[-1]:
            x = S._top_k(x, p.top_k)
        if 0 < p.top_p < 1:
            x = S._top_p(x, p.top_p)
        if p.min_p != 0.0:
            x = S._min_p(x, p.min_p)
        if p.xtc_probability > 0.0:
            x = S._xtc(x, p.xtc_probability, p.xtc_threshold)
        return x * (1.0 / p.temperature)
    return _patch(S, "filtered_logits", filtered_logits)


# 5. top-p's cumulative mass in the logprobs' dtype (the float32 cast dropped).
def top_p_model_dtype():
    from batchlab.engine.core import sampler as S

    def _top_p(logprobs, top_p):
        ascending = mx.sort(logprobs, axis=-1)
        probs = mx.exp(ascending)
        above = mx.cumsum(probs, axis=-1, reverse=True, inclusive=False)
        total = above[..., :1] + probs[..., :1]
        num_dropped = (above >= top_p * total).sum(axis=-1, keepdims=True)
        threshold = mx.take_along_axis(ascending, num_dropped, axis=-1)
        return mx.where(logprobs < threshold, -float("inf"), logprobs)
    return _patch(S, "_top_p", _top_p)


# 6. the temperature applied before the filters (filters see scaled logprobs).
def temperature_first():
    from batchlab.engine.core import sampler as S

    def filtered_logits(logprobs, p):
        x = logprobs * (1.0 / p.temperature)
        if 0 < p.top_p < 1:
            x = S._top_p(x, p.top_p)
        if p.min_p != 0.0:
            x = S._min_p(x, p.min_p)
        if p.xtc_probability > 0.0:
            x = S._xtc(x, p.xtc_probability, p.xtc_threshold)
        if 0 < p.top_k < x.shape[-1]:
            x = S._top_k(x, p.top_k)
        return x
    return _patch(S, "filtered_logits", filtered_logits)


# 7. repetition penalty compounded once per sighting (a scatter-multiply, like the
# frequency penalty's scatter-subtract) instead of mlx-lm's gather/where/assign.
def repetition_compounded():
    from batchlab.engine.core import processors as P

    def _repetition(penalty, size):
        def apply(context, logits):
            if len(context) > 0:
                recent = context[-size:]
                seen = logits[:, recent]
                factor = mx.where(seen < 0, penalty, 1.0 / penalty).astype(logits.dtype)
                logits = logits.at[:, recent].multiply(factor)
            return logits
        return apply
    return _patch(P, "_repetition", _repetition)


# 8. a row emits the logprobs of the step's new forward, not the ones its token was
# sampled from (the pipeline's one-step lag lost).
def emit_current_logprobs():
    from batchlab.engine.core import scheduler as S
    cls = S.Scheduler
    def _decode_step2(self):
        batch = self.decode
        fed = batch.inputs
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
            emission = S.Emission(name=seq.name, token=tokens[i], finished=finished,
                                  step_logprobs=logprobs, row=i)
            emitted.append(emission)
            if not finished:
                keep.append(i)
            elif self.keep_finished_histories:
                emission.history = S.History(caches=S.layers.extract_layers(batch.caches, i),
                                             tokens=seq.cache_tokens())
        if len(keep) < len(batch):
            batch.filter(keep)
        return emitted
    return _patch(cls, "_decode_step", _decode_step2)


# 9. an emission's logprob row is its index in the batch AFTER this step's finished rows
# leave (the kept-row index), not its index in the array it was sampled from.
def emission_row_after_finish():
    from batchlab.engine.core import scheduler as S
    cls = S.Scheduler

    def _decode_step(self):
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
            emission = S.Emission(name=seq.name, token=tokens[i], finished=finished,
                                  step_logprobs=fed_logprobs, row=len(keep))
            emitted.append(emission)
            if not finished:
                keep.append(i)
            elif self.keep_finished_histories:
                emission.history = S.History(caches=S.layers.extract_layers(batch.caches, i),
                                             tokens=seq.cache_tokens())
        if len(keep) < len(batch):
            batch.filter(keep)
        return emitted
    return _patch(cls, "_decode_step", _decode_step)


# 10. log-softmax in float32 (the logits upcast "for precision"): logprobs change dtype
# and rounding on bf16 models.
def logprobs_float32():
    from batchlab.engine.core import scheduler as S

    def log_softmax(logits):
        logits = logits.astype(mx.float32)
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    undos = [_patch(S, "log_softmax", log_softmax)]
    from batchlab.engine.paths import compiled as C
    undos.append(_patch(C, "log_softmax", log_softmax))
    return _patches(*undos)


BUGS = {
    "frequency_once": frequency_once,
    "bias_after_penalties": bias_after_penalties,
    "top_k_plus_one": top_k_plus_one,
    "topk_before_topp": topk_before_topp,
    "top_p_model_dtype": top_p_model_dtype,
    "temperature_first": temperature_first,
    "repetition_compounded": repetition_compounded,
    "emit_current_logprobs": emit_current_logprobs,
    "emission_row_after_finish": emission_row_after_finish,
    "logprobs_float32": logprobs_float32,
}

HINTS = {
    "frequency_once": ("l1/llama/B3/ragged/static",),
    "bias_after_penalties": ("l1/llama/B3/ragged/static",),
    "top_k_plus_one": ("t0.8",),
    "topk_before_topp": ("t0.8",),
}

REGIME = {
    "frequency_once": "frequency penalty with a token repeated in the row's context",
    "bias_after_penalties": "order of one row's processors (bias vs multiplicative penalty)",
    "top_k_plus_one": "top-k > 1 (k-th boundary)",
    "topk_before_topp": "sampler filter chain order with top-k and top-p both on",
    "top_p_model_dtype": "top-p mass precision on bf16 logprobs",
    "temperature_first": "temperature vs filters (top-p/min-p at temperature != 1)",
    "repetition_compounded": "repetition penalty with a token repeated in context",
    "emit_current_logprobs": "emitted logprobs' one-step pipeline lag",
    "emission_row_after_finish": "logprob row of rows after one that finishes this step",
    "logprobs_float32": "logprob dtype / log-softmax precision",
}


# 11. kvmix with history: merging rows that bring caches quantizes every layer by the
# plan's first entry (as for the uniform kv8 / kv4 schemes), not layer by layer.
def kvmix_merge_first_quant():
    import dataclasses

    from batchlab.engine.paths.quantized import caches as QC
    orig = QC.QuantizedCaches.merged

    def merged(self, model, per_row):
        uniform = dataclasses.replace(self, plan=(self.plan[0],) * len(self.plan))
        return orig(uniform, model, per_row)
    return _patch(QC.QuantizedCaches, "merged", merged)


# 12. the processors run on the log-softmaxed row (after normalising), not on the raw
# logits before it.
def processors_after_log_softmax():
    from batchlab.engine.core import scheduler as S

    def _processed_logprobs(self, inputs, caches, seqs):
        if not any(s.processors for s in seqs):
            return self._forward_logprobs(inputs, caches)
        logits = self.model(inputs[:, None], cache=caches)[:, -1, :]
        return S.process_rows(S.log_softmax(logits), inputs, seqs)
    return _patch(S.Scheduler, "_processed_logprobs", _processed_logprobs)


# 13. paged: a row merged from its single-row history takes the LAST s columns of the
# history's key buffer ("newest s keys") rather than the first s (the written ones).
def paged_merge_tail_keys():
    from batchlab.engine.paths.paged import cache as PC
    cls = PC.PagedKV

    def merged_into(klass, pool, caches):
        sizes = [c.size() for c in caches]
        width = max(sizes)
        cache = klass([width - s for s in sizes], pool)
        for t, c, s in zip(cache.rows, caches, sizes):
            if s:
                slots = pool.manager.append(t, [None] * s)
                keys, values = c.keys[..., -s:, :], c.values[..., -s:, :]
                pool.write(slots, keys, values)
        if width:
            cache.offset = cache.offset_host + width
            cache._idx = width
        return cache
    orig = cls.__dict__["merged_into"]
    cls.merged_into = classmethod(merged_into)
    return lambda: setattr(cls, "merged_into", orig)


# 14. the logit bias cast to the logits' dtype before adding (bf16 rows stay bf16 instead
# of promoting to float32 as mlx-lm's float32 bias makes them).
def logit_bias_model_dtype():
    from batchlab.engine.core import processors as P

    def _logit_bias(ids, biases):
        indices, values = mx.array(ids), mx.array(biases)

        def apply(_context, logits):
            return logits.at[:, indices].add(values.astype(logits.dtype))
        return apply
    return _patch(P, "_logit_bias", _logit_bias)


# 15. repetition penalty divides by multiplying with the reciprocal (an "optimisation").
def repetition_reciprocal():
    from batchlab.engine.core import processors as P

    def _repetition(penalty, size):
        inv = 1.0 / penalty

        def apply(context, logits):
            if len(context) > 0:
                recent = context[-size:]
                seen = logits[:, recent]
                logits[:, recent] = mx.where(seen < 0, seen * penalty, seen * inv)
            return logits
        return apply
    return _patch(P, "_repetition", _repetition)


BUGS.update({
    "kvmix_merge_first_quant": kvmix_merge_first_quant,
    "processors_after_log_softmax": processors_after_log_softmax,
    "paged_merge_tail_keys": paged_merge_tail_keys,
    "logit_bias_model_dtype": logit_bias_model_dtype,
    "repetition_reciprocal": repetition_reciprocal,
})
HINTS.update({
    "kvmix_merge_first_quant": ("kvmix",),
    "paged_merge_tail_keys": ("paged",),
    "processors_after_log_softmax": ("lp-",),
    "logit_bias_model_dtype": ("b7x3",),
    "repetition_reciprocal": ("lp-",),
    "frequency_once": ("fp1fc4",),
    "bias_after_penalties": ("b7x3",),
})
REGIME.update({
    "kvmix_merge_first_quant": "kvmix (mixed bits per layer) with prompt-cache history",
    "processors_after_log_softmax": "logits processors vs log-softmax order",
    "paged_merge_tail_keys": "paged path: history caches copied into blocks",
    "logit_bias_model_dtype": "logit bias dtype promotion on bf16 models",
    "repetition_reciprocal": "repetition penalty arithmetic (division rounding)",
})


# 16. parking a row that is still queued gives back fresh (empty) caches even when the
# row came with a prompt-cache history (as if a queued row held nothing yet).
def queued_park_drops_history():
    from batchlab.engine.core import scheduler as S
    cls = S.Scheduler

    def remove(self, names, keep_history=False):
        gone = set(names)
        kept = {}
        if keep_history:
            for seq in self.queue:
                if seq.name in gone:
                    kept[seq.name] = S.fresh_history(self.model)
            for batch in (self.prompt, self.decode):
                for i, seq in enumerate(batch.seqs):
                    if seq.name in gone:
                        kept[seq.name] = S.History(
                            caches=S.layers.extract_layers(batch.caches, i),
                            tokens=seq.cache_tokens())
        self.queue = [s for s in self.queue if s.name not in gone]
        for batch in (self.prompt, self.decode):
            keep = [i for i, s in enumerate(batch.seqs) if s.name not in gone]
            if len(keep) < len(batch):
                batch.filter(keep)
        return kept
    return _patch(cls, "remove", remove)


# 17. SSM / conv state merge: "no row has state yet" tested on the first row only, so a
# fresh row merged ahead of a row with history drops the history row's state.
def ssm_merge_first_row_only():
    from batchlab.engine.caches import state as ST
    cls = ST.BatchState
    orig = cls.__dict__["merge"]

    def merge(klass, caches):
        n = len(caches)
        merged = klass(len(caches[0].cache))
        if caches[0].cache[0] is None:
            merged.left_padding = [0] * n
            return merged
        return orig.__func__(klass, caches)
    cls.merge = classmethod(merge)
    return lambda: setattr(cls, "merge", orig)


BUGS.update({
    "queued_park_drops_history": queued_park_drops_history,
    "ssm_merge_first_row_only": ssm_merge_first_row_only,
})
HINTS.update({
    "queued_park_drops_history": ("park", "resume"),
    "ssm_merge_first_row_only": ("mamba2", "lfm2"),
})
REGIME.update({
    "queued_park_drops_history": "parking a still-queued row that brought a prefix history",
    "ssm_merge_first_row_only": "SSM/conv state merge of a fresh row ahead of a history row",
})


# 18. process_rows writes each processed row back into the batch's logits in place
# instead of concatenating the rows (saves a concat): a row's float32-promoted result is
# cast back to the batch's dtype, and its neighbours are never promoted.
def process_rows_in_place():
    from batchlab.engine.core import processors as P
    from batchlab.engine.core import scheduler as S

    def process_rows(logits, inputs, seqs):
        for e, seq in enumerate(seqs):
            if seq.processors:
                row = logits[e : e + 1]
                seq.context = mx.concatenate([seq.context, inputs[e : e + 1].astype(mx.int32)])
                for processor in seq.processors:
                    row = processor(seq.context, row)
                logits[e : e + 1] = row
        return logits
    return _patches(_patch(P, "process_rows", process_rows),
                    _patch(S, "process_rows", process_rows))


# 19. the decode step asks only the batch's first row whether processors are on.
def processors_first_row_guard():
    from batchlab.engine.core import scheduler as S
    cls = S.Scheduler
    orig_proc = cls._processed_logprobs

    def _processed_logprobs(self, inputs, caches, seqs):
        if not seqs[0].processors:
            return self._forward_logprobs(inputs, caches)
        return orig_proc(self, inputs, caches, seqs)
    return _patch(cls, "_processed_logprobs", _processed_logprobs)


BUGS.update({
    "process_rows_in_place": process_rows_in_place,
    "processors_first_row_guard": processors_first_row_guard,
})
HINTS.update({
    "process_rows_in_place": ("b7x3",),
    "processors_first_row_guard": ("lp-",),
})
REGIME.update({
    "process_rows_in_place": "dtype of unprocessed rows beside a processed (promoted) row",
    "processors_first_row_guard": "processors on rows other than the batch's first",
})


# 20. the row-attention dispatch remembers which cache served a layer's keys only in its
# decode branch, so a KV-shared layer (it reads keys another layer cached, cache=None)
# no longer finds its owner during a batched prefill and runs mlx-lm's padded attention.
def dispatch_prefill_forgets_owner():
    from batchlab.engine.kernels import attention_dispatch as D

    def make_dispatch(original):
        def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
            owner = D._cache_of(keys, cache)
            if queries.shape[2] == 1 and getattr(owner, "attends_rows", False):
                if cache is not None:
                    D._remember(keys, cache)
                return D.row_attention(queries, keys, values, owner.first_keys(), scale, sinks,
                                       scores=D.additive_scores(mask))
            if queries.shape[2] > 1 and getattr(owner, "prefills_rows", False):
                first, ends, counts = owner.prefill_spans(queries.shape[2])
                return D.row_prefill_attention(queries, keys, values, first, ends, counts,
                                               scale, sinks, scores=D.additive_scores(mask))
            return original(queries, keys, values, cache=cache, scale=scale, mask=mask,
                            sinks=sinks)
        scaled_dot_product_attention.original = original
        return scaled_dot_product_attention

    import sys

    from mlx_lm.models import base
    original = getattr(base.scaled_dot_product_attention, "original",
                       base.scaled_dot_product_attention)
    buggy = make_dispatch(original)
    undo_make = _patch(D, "make_dispatch", make_dispatch)
    # modules already routed through the engine's dispatch take the buggy one now
    swapped = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("mlx_lm.models.") or module is None:
            continue
        f = getattr(module, "scaled_dot_product_attention", None)
        if f is not None and getattr(f, "original", None) is original:
            swapped.append((module, f))
            module.scaled_dot_product_attention = buggy

    def undo():
        for module, f in swapped:
            module.scaled_dot_product_attention = f
        undo_make()
    return undo


BUGS["dispatch_prefill_forgets_owner"] = dispatch_prefill_forgets_owner
HINTS["dispatch_prefill_forgets_owner"] = ("invariant-blocked/gemma4-e4b",)
REGIME["dispatch_prefill_forgets_owner"] = ("KV-shared layers (gemma4-e4b) in the "
                                            "invariant-blocked path's batched prefill")


# 21. top-p's comparison off by one: the token AT the threshold is dropped too (<=).
def top_p_drops_threshold():
    from batchlab.engine.core import sampler as S

    def _top_p(logprobs, top_p):
        ascending = mx.sort(logprobs, axis=-1)
        probs = mx.exp(ascending.astype(mx.float32))
        above = mx.cumsum(probs, axis=-1, reverse=True, inclusive=False)
        total = above[..., :1] + probs[..., :1]
        num_dropped = (above >= top_p * total).sum(axis=-1, keepdims=True)
        threshold = mx.take_along_axis(ascending, num_dropped, axis=-1)
        return mx.where(logprobs <= threshold, -float("inf"), logprobs)
    return _patch(S, "_top_p", _top_p)


BUGS["top_p_drops_threshold"] = top_p_drops_threshold
HINTS["top_p_drops_threshold"] = ("_p0.",)
REGIME["top_p_drops_threshold"] = "top-p: the token at the mass threshold"

# Equivalent on inspection (kept measurable, not counted): MLX's scatter-add keeps the
# array's dtype (the float32 bias is cast to bf16 before adding: checked with a probe), and
# no processor promotes a row, so casting the bias first or writing rows back in place
# changes no bit.
EQUIVALENT = {
    "logit_bias_model_dtype": (BUGS.pop("logit_bias_model_dtype"),
                               "logits.at[].add(float32) keeps the logits' dtype: the cast "
                               "is the one scatter-add does"),
    "process_rows_in_place": (BUGS.pop("process_rows_in_place"),
                              "no processor changes a row's dtype (scatter ops keep it), so "
                              "writing rows back in place equals concatenating them"),
}


# 22. paged: a parked / finished row is extracted at the batch's width (``_idx``), not its
# own token count, so a shorter row's history starts with zero keys.
def paged_extract_batch_width():
    from batchlab.engine.paths.paged import cache as PC

    def extract(self, idx):
        t = self.rows[idx]
        keys, values = self.pool.gather(self._index([t], max(self._idx, 0)))
        return PC.kv_row(keys, values)
    return _patch(PC.PagedKV, "extract", extract)


# 23. quantized paths' admission: the queued rows held back (the other history kind) are
# put back, but the rest of the admitted run that did not fit the prefill batch is lost.
def quantized_admit_loses_rest():
    from batchlab.engine.paths.quantized import path as QP
    from batchlab.engine.core.scheduler import Scheduler

    def _admit(self):
        if len(self.prompt) or not self.queue:
            return
        first = self.queue[0].request.history is not None
        n = next((i for i, s in enumerate(self.queue)
                  if (s.request.history is not None) != first), len(self.queue))
        self.queue, held = self.queue[:n], self.queue[n:]
        try:
            Scheduler._admit(self)
        finally:
            self.queue = held
    return _patch(QP.QuantizedScheduler, "_admit", _admit)


BUGS["paged_extract_batch_width"] = paged_extract_batch_width
BUGS["quantized_admit_loses_rest"] = quantized_admit_loses_rest
HINTS["paged_extract_batch_width"] = ("paged",)
HINTS["quantized_admit_loses_rest"] = ("kv4-s8/qwen3-hd128",)
REGIME["paged_extract_batch_width"] = "paged path: a shorter row's history on park / finish"
REGIME["quantized_admit_loses_rest"] = ("quantized paths: a queued run longer than the "
                                        "prefill batch")
EQUIVALENT["dispatch_prefill_forgets_owner"] = (
    BUGS.pop("dispatch_prefill_forgets_owner"),
    "not shown non-equivalent on the CPU backend: a probe shows the KV-shared layers' "
    "prefill then runs mlx-lm's masked SDPA, and 8 invariant-blocked gemma4-e4b cells "
    "(B3/B8, ragged, static/join-evict, short/wrap) still PASS with it")


# 24. invariant path: its override of the processed decode forward (which only wraps the
# forward in ``decoding_by_rows``) was copied from the ``_forward_logprobs`` override and
# calls the unprocessed forward: rows' logits processors are skipped on this path.
def invariant_processors_dropped():
    from batchlab.engine.paths.invariant import path as IP

    def _processed_logprobs(self, inputs, caches, seqs):
        with IP.decoding_by_rows():
            return IP.Scheduler._forward_logprobs(self, inputs, caches)
    return _patch(IP.InvariantScheduler, "_processed_logprobs", _processed_logprobs)


BUGS["invariant_processors_dropped"] = invariant_processors_dropped
HINTS["invariant_processors_dropped"] = ("invariant",)
REGIME["invariant_processors_dropped"] = "logits processors on the invariant paths"


# 25. history rows merged into a quantized batch are packed with a KVQuant rebuilt from the
# plan's bits and start only (the group size left at its default, 64): group-32 schemes
# then hold their history rows at group 64.
def history_merge_default_group():
    import dataclasses

    from batchlab.engine.paths.quantized import caches as QC
    from batchlab.engine.paths.quantized.kv import KVQuant
    orig = QC.QuantizedCaches.merged

    def merged(self, model, per_row):
        plan = tuple(KVQuant(bits=q.bits, start=q.start) for q in self.plan)
        return orig(dataclasses.replace(self, plan=plan), model, per_row)
    return _patch(QC.QuantizedCaches, "merged", merged)


BUGS["history_merge_default_group"] = history_merge_default_group
HINTS["history_merge_default_group"] = ("g32",)
REGIME["history_merge_default_group"] = "group-32 quantized schemes with prompt-cache history"
