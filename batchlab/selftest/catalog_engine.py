"""The seeded bugs of the engine's first rounds: positions and masks, evictions, joins,
sampling, the model side, the schedule's regimes, history and processors, quantized KV
(``catalog.py`` says what a record is and joins the entries).
"""

from __future__ import annotations

from batchlab.selftest import (
    cache_bugs,
    history_bugs,
    model_bugs,
    quantized_bugs,
    regime_bugs,
    schedule_bugs,
)
from batchlab.selftest.record import (
    B8,
    EVICTS,
    JOINS,
    RAGGED,
    WRAPS,
    SeededBug,
)
from batchlab.selftest.record import bug as _bug
from batchlab.selftest.record import over as _over

# fmt: off
ENGINE_BUGS: tuple[SeededBug, ...] = (
    # -- positions and masks
    _bug("rope-offset-after-write", _over(RAGGED, "llama") + ",l1/llama/B1/equal/static/*",
         model_bugs.rope_after_write,
         "record: the RoPE offset-timing trap (fixed 2026-06-14): Attention.forward read "
         "cache.ropeOffsetArr for K before updateAndFetch and for Q after; the generated "
         "Gemma handlers repeated it (generated/gemma4-12b.ts:63 & :74)"),
    _bug("scalar-offset", _over(RAGGED, "llama", "qwen3", "minicpm"), cache_bugs.scalar_offset,
         "record: one scalar offset per cache (gemma4-base.ts:210), scalar RoPE offset "
         "(gemma4.ts:174,206); minicpm5.ts roped Q/K with the scalar cache.offset and "
         "mis-positioned left-padded rows (logit diff 8.7)"),
    _bug("decode-mask-dropped", _over(RAGGED, "llama", "qwen3"), cache_bugs.decode_mask_dropped,
         "record: makeMask returned an empty mask at N=1 (gemma4-base.ts:256-257), 'the "
         "first thing to change' for batched decode"),
    _bug("mask-j-gt-lp", _over(RAGGED, "llama", "gemma3"), cache_bugs.mask_hides_first_key,
         "rule: the key-validity mask is j >= left_padding[b] (FACTS; the seed's "
         "'j>=leftPad mask'); > is the off-by-one"),
    _bug("finalize-skips-roll", _over(RAGGED, "llama", "gemma3"), cache_bugs.finalize_skips_roll,
         "rule: a joiner is right-padded, prefilled, then finalize() rolls it left-padded "
         "(FACTS); the seed's subtlety 1: prefill and decode padding conventions differ"),
    # -- evict
    _bug("filter-counters-only", _over(EVICTS, "llama", "qwen3"),
         cache_bugs.filter_counters_only,
         "rule: filter trims the shared left padding (FACTS), columns and counters "
         "together (engine kv.py); this does the counter half"),
    _bug("filter-arrays-only", _over(EVICTS, "llama", "qwen3"), cache_bugs.filter_arrays_only,
         "rule: as filter-counters-only, the array half"),
    _bug("filter-trims-max", _over(EVICTS, "llama", "qwen3"), cache_bugs.filter_trims_max,
         "rule: only the padding EVERY kept row has can go (min); over-trimming cuts keys"),
    _bug("ssm-filter-truncates", _over(EVICTS, "qwen3.5", "mamba2", "lfm2"),
         cache_bugs.ssm_filter_truncates,
         "rule: the SSM batched path came late (seed: hybrid/SSM models routed serial "
         "until 2026-07-02); a state has no sequence axis, filter must gather rows"),
    _bug("cache-list-prepares-first-part", _over(RAGGED, "falcon-h1", "baichuan-m1"),
         cache_bugs.cache_list_prepares_first_part,
         "rule: a container of caches forwards every protocol call to every part "
         "(mlx-lm's CacheList does); the delegate written for one call and missed for "
         "another is the classic slip"),
    _bug("ssm-padding-through-state", _over(RAGGED, "qwen3.5", "mamba2", "lfm2"),
         cache_bugs.ssm_padding_through_state,
         "rule: engine state.py: mlx-lm's ArraysCache would run padding through the "
         "state; upstream minicpm3 ignores its padding mask (mlx-lm issue 1906, FACTS)"),
    # -- join
    _bug("extend-pads-right", _over(JOINS, "llama", "qwen3"), cache_bugs.extend_pads_right,
         "rule: extend pads both sides so _idx lines up (FACTS); the seed deferred extend "
         "('today joins re-merge'), so it was written later, apart from merge"),
    _bug("ring-extend-no-temporal-order", _over(WRAPS, "gemma3", "gpt-oss"),
         cache_bugs.ring_extend_skips_temporal_order,
         "rule: BatchRotatingKVCache.extend calls _temporal_order when the rings differ "
         "(FACTS); the seed validated ring wrap separately, after short contexts"),
    _bug("window-trim-keeps-oldest", _over(WRAPS, "gemma3", "gpt-oss", "gemma4-12b"),
         cache_bugs.ring_trim_keeps_oldest,
         "rule: the prefill keeps up to max_size + S - 1 entries; the first decode trims "
         "and starts rotating (FACTS); which end is cut is the ring's subtlety"),
    _bug("window-evict-keeps-padding", _over(WRAPS, "gemma3", "gpt-oss", "gemma4-12b"),
         cache_bugs.ring_evict_keeps_padding,
         "rule: left_padding goes negative once the ring wraps (FACTS): each write into "
         "a wrapped ring evicts one column of every row, padding first"),
    _bug("ring-mask-not-rolled", _over(WRAPS, "gemma3", "gpt-oss", "gemma4-12b"),
         cache_bugs.ring_mask_not_rolled,
         "rule: the seed's port of BatchRotatingKVCache 'incl. the ring-wrap rolled "
         "mask'; per-row offsets through the ring wrap are 'the trickiest mask math'"),
    _bug("joiner-cache-rows-first", _over(JOINS, "llama", "qwen3"),
         schedule_bugs.joiner_cache_rows_first,
         "rule: joiners are appended at the END; key rows by uid, never by batch "
         "position (FACTS)"),
    _bug("joiner-first-step-batched", _over(JOINS, "llama", "gemma3"),
         schedule_bugs.joiner_first_step_batched,
         "rule: rows whose prompt is done take their FIRST decode step alone at their own "
         "B, then are extended onto the running batch (FACTS, BatchGenerator's tick)"),
    _bug("join-offset-not-advanced", _over(JOINS, "llama", "gemma3"),
         schedule_bugs.join_offset_not_advanced,
         "rule: a joiner enters the running batch with its offset already advanced by "
         "its first step; the seed's first joins re-merged 'advanced-offset rows'"),
    # -- sampling
    _bug("greedy-ties-to-last", _over(B8, "llama", "minicpm", "gemma4-12b", "qwen3.5"),
         schedule_bugs.greedy_ties_to_last,
         "rule: greedy = argmax(logprobs), first index on ties; ties are common in "
         "random bf16 models (FACTS)"),
    _bug("argmax-over-logits", _over(B8, "llama-flat") + ",l1/llama-flat/B4/ragged/static/*",
         schedule_bugs.argmax_over_logits,
         "rule: greedy = argmax over logprobs, not logits: they differ in ~5% of steps of "
         "random bf16 models (FACTS)"),
    # -- model side (gemma4)
    _bug("gemma4-per-layer-batch1", _over(RAGGED + "," + JOINS, "gemma4-e4b"),
         model_bugs.per_layer_inputs_batch1,
         "record: per-layer-input reshapes [1, L, ...] (gemma4.ts:647-653, fixed in S1b); "
         "'e4b: computePerLayerInputs hardcodes [1,L,...] -> B>1 breaks'"),
    _bug("kv-shared-wrong-layer", _over(RAGGED, "gemma4-e4b"), model_bugs.kv_shared_wrong_layer,
         "rule: the seed lists e4b KV sharing (the sharer's SharedKv) among the batched "
         "landmines. The zoo e4b has one owner per layer type and their head_dim differs "
         "(16 vs 32), so here it crashes; with more owners per type it would be silent",
         caught_as="ERROR"),
    # -- the schedule's regimes
    _bug("admit-ignores-completion-cap",
         "l1/llama/B9/ragged/static/ctx-short/pb4_cb5,l1/qwen3.5/B9/ragged/trickle/ctx-*/pb4_cb5",
         regime_bugs.admit_ignores_completion_cap,
         "rule: BatchGenerator admits min(prefill_batch_size - prompt rows, "
         "completion_batch_size - decoding rows, queued) (FACTS; its _next)"),
    _bug("remove-misses-queue",
         "l1/llama/B8/ragged/evict-early/ctx-wrap/pb2_ps8,l1/gemma3/B6/ragged/evict-early/*/pb2_cb4",
         regime_bugs.remove_misses_the_queue,
         "rule: remove() evicts a row wherever it is: queue, prompt batch or decode batch "
         "(BatchGenerator._find_uids looks in all three)"),
    _bug("admit-ignores-prefill-batch-size",
         "l1/llama/B9/ragged/static/ctx-short/pb4,l1/gemma3/B6/ragged/trickle/ctx-short/pb2_cb4,"
         "l1/llama/B34/ragged/static/ctx-short",
         schedule_bugs.admit_ignores_prefill_batch_size,
         "rule: BatchGenerator moves up to prefill_batch_size queued rows into the prompt "
         "batch per step (FACTS); found by mutation testing (docs/mutation.md)"),
    _bug("step-ignores-completion-cap",
         "l1/llama/B9/ragged/static/ctx-short/pb4_cb5,l1/qwen3/B34/ragged/static/ctx-short,"
         "l1/llama/B6/ragged/static/ctx-short/pb2_cb4",
         schedule_bugs.step_ignores_completion_cap,
         "rule: no admission or join while completion_batch_size rows decode "
         "(BatchGenerator's _next); found by mutation testing (docs/mutation.md)"),
    _bug("remove-only-decoding-rows",
         "l1/llama/B8/ragged/evict-early/ctx-wrap/pb2_ps8,l1/gemma3/B3/ragged/evict-early/ctx-wrap/ps8",
         schedule_bugs.remove_only_decoding_rows,
         "rule: BatchGenerator.remove evicts a row wherever it is (queue, prompt batch, "
         "decode batch); found by mutation testing (docs/mutation.md)"),
    _bug("prefill-ignores-step-size",
         "l1/llama/B3/ragged/staggered/ctx-wrap/ps8,l1/mamba2/B3/ragged/static/ctx-wrap/ps8",
         schedule_bugs.prefill_ignores_step_size,
         "rule: prefill runs in chunks of prefill_step_size, one chunk per tick (FACTS)"),
    # -- sampling at temperature > 0
    _bug("shared-draw-per-row",
         "l1/llama/B4/ragged/static/ctx-short/t1_r1,l1/qwen3.5/B8/ragged/join-evict/ctx-short/t1_r1",
         regime_bugs.shared_draw_per_row,
         "rule: BatchGenerator samples a batch that shares a sampler in one call over "
         "(B, V) (generate.py, 'One batched call when the batch shares a sampler')"),
    _bug("temperature-before-filters",
         "l1/llama/B4/ragged/static/ctx-short/t1.3_m0.1_r4,l1/qwen3/B8/ragged/static/ctx-short/t1.3_m0.1_r4",
         regime_bugs.temperature_before_filters,
         "record: this engine's own per-row sampler scaled by the temperature first, until "
         "it was gated against make_sampler's chain (top-p, min-p, top-k, then 1/temp)"),
    _bug("top-k-keeps-ties", "l1/llama-flat/B8/ragged/*/ctx-short/t0.7_k5_r2",
         regime_bugs.top_k_keeps_ties,
         "rule: mlx-lm's top-k keeps exactly k (argpartition); ties are common in flat "
         "bf16 logits (FACTS, the zoo's llama-flat)"),
    # -- history, processors, per-row samplers (docs/history.md)
    _bug("history-processor-neighbour-token",
         "l1/llama/B3/ragged/static/ctx-short/lp-*,l1/qwen3/B8/ragged/join-evict/ctx-short/lp-*",
         history_bugs.processor_reads_neighbour_token,
         "rule: each row's processors see that row's own TokenBuffer context "
         "(BatchGenerator's GenerationBatch._step, one context per row)"),
    _bug("finished-row-keeps-neighbours-cache",
         "l1/llama/B4/explicit/finish-continue/*,l1/qwen3.5/B4/explicit/finish-continue/*,"
         "l1/falcon-h1/B4/explicit/finish-continue/*",
         history_bugs.finished_row_keeps_neighbours_cache,
         "rule: BatchGenerator extracts a finished row's caches (Response.prompt_cache) "
         "before the filter drops it; extracting after, or at a shifted index, hands the "
         "next turn its neighbour's context"),
    _bug("history-parked-offset",
         "l1/llama/B2/ragged/park-resume/ctx-wrap,l1/llama/B3/ragged/history/ctx-wrap",
         history_bugs.parked_offset_not_restored,
         "rule: remove(return_prompt_caches=True) returns the row's caches holding every id "
         "fed so far (extract slices left_padding.._idx); the resumed row continues there"),
    _bug("history-merge-no-left-padding",
         "l1/llama/B2/ragged/prefix-join/ctx-wrap,l1/llama/B4/ragged/prefix-join/ctx-wrap",
         history_bugs.history_merged_right_aligned,
         "rule: BatchKVCache.merge left-pads rows to the longest (FACTS: 'merge left-pads "
         "rows'); insert(caches=) goes through it"),
    _bug("history-row-draws-reversed",
         "l1/llama/B4/ragged/static/ctx-short/t0.8_r7_rs-*,"
         "l1/gemma3/B2/ragged/join-evict/ctx-short/t0.8_r7_rs-*",
         history_bugs.row_samplers_drawn_in_reverse,
         "rule: with per-row samplers BatchGenerator samples row by row in batch order "
         "(generate.py _step), each call taking the next turn of MLX's global key"),
    _bug("history-context-forgets-cache",
         "l1/llama/B3/explicit/resume-one/*,l1/llama/B3/ragged/history/ctx-wrap/t0.7_r2_*",
         history_bugs.context_forgets_history,
         "rule: the processors' context starts from insert's all_tokens (the ids the "
         "row's caches hold) plus the prefilled prompt (TokenBuffer(tokens) at the join)"),
    _bug("history-xtc-coin-per-row",
         "l1/llama/B4/ragged/static/ctx-short/t0.9_x0.5_xt0.05_r4,"
         "l1/qwen3.5/B8/ragged/join-evict/ctx-short/t0.9_x0.5_xt0.05_r4",
         history_bugs.xtc_coin_per_row,
         "rule: mlx-lm's apply_xtc draws one uniform() scalar per call (sample_utils.py), "
         "so rows sampled in one call share the coin"),
    # -- quantized KV (docs/quantized-kv.md); the first three hit bit-exact cells
    _bug("qkv-scales-biases-swapped",
         "kv8/llama-hd64/B4/ragged/join-evict/*,kv4-g32/llama-hd64/B3/ragged/static/*",
         quantized_bugs.scales_biases_swapped,
         "rule: mx.quantize returns (ints, scales, biases) and quantized_matmul takes them "
         "in that order; a packed layout must read back what it wrote"),
    _bug("qkv-quantized-before-first-forward",
         "kv8/llama-hd64/B4/ragged/join-evict/*,kv4/qwen3-hd128/B4/ragged/join-evict/*",
         quantized_bugs.quantized_before_first_forward,
         "rule: mlx-lm's maybe_quantize_kv_cache runs after each forward (generate_step), "
         "so even at quantized_kv_start 0 the first forward attends in the model dtype"),
    _bug("qkv-mixed-plan-uniform",
         "kvmix/llama-hd64/B4/ragged/join-evict/*,kvmix/qwen3-hd128/B4/ragged/join-evict/*",
         quantized_bugs.mixed_plan_uniform,
         "rule: the mixed scheme's bits are per layer (8 for the most KL-sensitive, 4 "
         "elsewhere); its oracle quantizes each layer at its own bits"),
    _bug("qkv-window-scales-as-float16",
         "kv8/gemma3-hd64/B4/ragged/join-evict/*,kv4/gemma3-hd64/B4/ragged/join-evict/*",
         quantized_bugs.ring_scales_as_float16,
         "rule: mx.quantize's scales and biases are in the input's dtype (bf16 here), "
         "unlike GGUF's float16 block scales; caught by the sliding-window KL gate"),
)
# fmt: on
