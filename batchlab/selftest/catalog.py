"""The seeded bugs: batching mistakes that really happened (or nearly did), each a record.

A record names the bug, says where it comes from, picks the default-matrix cells that
exercise it (``cells``: a ``batchlab.matrix.runner.select`` pattern: substring or glob,
comma = or) and points at its injector (``inject``: returns the patches to apply).
Candidates stay focused (a handful of cells that hit the code path) so the whole
self-test runs in about a minute; the gate catches a bug when any candidate fails.

``history`` says where a bug comes from: "record" = it happened (shared/seeds/
parallel-slots.md, mlx-bun's batching design record, cited by file:line); "rule" = a rule
of shared/FACTS.md or an engine docstring that the bug breaks (a slip that did not make
the record but that every batching port risks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from batchlab.selftest import (
    cache_bugs,
    cost_bugs,
    history_bugs,
    invariant_bugs,
    model_bugs,
    mutation_bugs,
    paged_bugs,
    peer_faults,
    quantized_bugs,
    refusal_bugs,
    regime2_bugs,
    regime_bugs,
    schedule_bugs,
    subject_bugs,
    tester3_bugs,
    tester4_bugs,
    tester_bugs,
    zoo2_bugs,
    zoo3_bugs,
)
from batchlab.selftest.inject import Patch


@dataclass(frozen=True, slots=True, kw_only=True)
class SeededBug:
    name: str
    description: str
    history: str
    cells: str  # select() pattern over default-matrix ids
    inject: Callable[[], list[Patch]]
    # How the gate must see it. A silent bug that only ever shows up as ERROR is more
    # likely an injector broken by an engine change (a TypeError in the patch) than a catch.
    caught_as: str = "FAIL"
    # the matrix the candidates come from, relative to the project root; None: the one
    # the self-test runs (the default matrix). The invariance bugs use the solo gate's.
    matrix: str | None = None
    # where the bug lives: "engine" (patches batchlab's engine: reaches only its subject),
    # "subject" (an adapter's bookkeeping: wraps any subject, a peer plays it by name),
    # "peer" (a process peer's fault: ERROR for its first candidate, the rest must PASS),
    # "accounting" (patches batchlab's engine where only the in-process subject's row-cost
    # check of a row-cost cell looks: no trajectory shows it, so a peer or files cannot)
    kind: str = "engine"


def _bug(name: str, cells: str, inject: Callable[[], list[Patch]], history: str,
         caught_as: str = "FAIL", matrix: str | None = None, kind: str = "engine") -> SeededBug:
    """The description is the injector's docstring: one text, next to the code it tells."""
    doc = " ".join((inject.__doc__ or "").split())
    return SeededBug(name=name, description=doc, history=history, cells=cells, inject=inject,
                     caught_as=caught_as, matrix=matrix, kind=kind)


INVARIANT_MATRIX = "matrices/invariant.toml"


RAGGED = "l1/{m}/B3/ragged/static/ctx-short"
JOINS = "l1/{m}/B3/ragged/join/ctx-short,l1/{m}/B3/ragged/staggered/ctx-short"
EVICTS = "l1/{m}/B3/ragged/evict/*,l1/{m}/B3/ragged/join-evict/*"
WRAPS = "l1/{m}/B3/ragged/*/ctx-wrap"
B8 = "l1/{m}/B8/ragged/static/ctx-short"


def _over(template: str, *models: str) -> str:
    """``template`` for each model, comma-joined (select() reads a comma as or)."""
    return ",".join(template.format(m=m) for m in models)


# fmt: off
CATALOG: tuple[SeededBug, ...] = (
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
    # -- the gate's second round (issue 26; regime2_bugs.py)
    _bug("qkv-start-one-write-late",
         "kv8-s8/llama-hd64/B1/equal/static/ctx-short,kv4-s8/qwen3-moe-hd64/B4/equal/static/*",
         regime2_bugs.start_one_write_late,
         "rule: mlx-lm's maybe_quantize_kv_cache quantizes after the forward whose offset "
         "reaches quantized_kv_start (generate_step), so the next write is quantized"),
    _bug("qkv-history-rows-unquantized",
         "kv8/llama-hd64/B3/explicit/kv-history/*,kv4/qwen3-moe-hd64/B3/explicit/kv-history/*",
         regime2_bugs.history_rows_unquantized,
         "record: issue 26, a kv row admitted with history got plain bf16 caches and a "
         "fresh quantized row joining it crashed (the reproduction at 18808d7)",
         caught_as="ERROR"),
    _bug("sampler-equal-settings-one-draw",
         "l1/llama/B3/ragged/static/ctx-short/t0.8_r5_rs-t0.9k20,"
         "l1/qwen3.5/B4/ragged/join-evict/ctx-short/t0.8_r5_rs-t0.9k20+t0.9k20+t1.2",
         regime2_bugs.equal_samplers_one_draw,
         "rule: BatchGenerator samples the batch in one call only when every row holds the "
         "same sampler object (`all(s is samplers[0])`), else per row in batch order"),
    _bug("completion-cap-not-raised",
         "l1/llama/B6/ragged/static/ctx-short/steps3_pb4_cb2,"
         "l1/mamba2/B6/ragged/trickle/ctx-short/steps3_pb4_cb2",
         regime2_bugs.completion_cap_not_raised,
         "rule: FACTS.md, completion_batch_size is raised to at least prefill_batch_size"),
    _bug("compiled-skips-processors",
         "compiled/llama/B4/ragged/staggered/*,compiled/qwen3-moe/B3/ragged/join-evict/*",
         regime2_bugs.compiled_skips_processors,
         "rule: processors run on each row's raw logits before the logsumexp, on every "
         "path (BatchGenerator's order); the compiled trace folds the logsumexp in"),
    _bug("qkv-float32-scales-as-bf16",
         "kv8/qwen3-moe-hd64/B4/ragged/join-evict/*,kv8-s8/qwen3-moe-hd64/B1/equal/static/*",
         regime2_bugs.scales_stored_bf16,
         "rule: mx.quantize's scales and biases take the keys' dtype (float32 on the "
         "real model and qwen3-moe-hd64), so a packed column of float32 KV holds two "
         "words per group and side"),
    _bug("blocked-pad-rows-float32",
         "invariant-blocked/gemma3/B8/ragged/static/*,invariant-blocked/qwen3.5/B8/ragged/static/*,"
         "invariant-blocked/llama/B8/ragged/static/*",
         regime2_bugs.blocked_pad_rows_float32,
         "rule: rowblock.py pads with zero rows of the input's dtype, so a padded block "
         "and a full one run the same product"),
    # -- batch invariance (matrices/invariant.toml, the solo gate; docs/invariant.md)
    _bug("invariant-l1-shared-pointer",
         "invariant/gpt-oss/B16/needle/join-evict/*,invariant/gemma4-26b/B16/needle/staggered/*",
         invariant_bugs.shared_ring_pointer,
         "rule: FACTS.md, sliding-window rows differ from B=1 once the ring rotates "
         "because the batch ring pointer is shared; the negative control of issue 20",
         matrix=INVARIANT_MATRIX),
    _bug("invariant-window-decode-mask-dropped",
         "invariant/gemma3/B16/needle/join-evict/*,invariant/gpt-oss/B16/needle/join-evict/*",
         invariant_bugs.window_decode_mask_dropped,
         "rule: attention over exactly a row's keys (issue 20); padding in a row's "
         "window must stay masked", matrix=INVARIANT_MATRIX),
    _bug("invariant-window-cut-keeps-padding",
         "invariant/gemma3/B32/needle/evict-many/*/seed1",
         invariant_bugs.window_cut_keeps_padding,
         "rule: engine window.py: cutting the columns no window reads lowers "
         "left_padding with them", matrix=INVARIANT_MATRIX),
    _bug("invariant-joiner-state-zeroed",
         "invariant/qwen3.5/B16/needle/join-evict/*,invariant/mamba2/B16/needle/staggered/*",
         invariant_bugs.joiner_state_zeroed,
         "rule: a joiner's SSM state travels with it into the running batch (extend); "
         "alone it is never appended, so the solo gate sees the loss",
         matrix=INVARIANT_MATRIX),
    _bug("invariant-window-one-key-short",
         "invariant/gemma3/B16/needle/evict-many/ctx-wrap/seed1,"
         "invariant/gemma3/B8/needle/join-evict/ctx-short",
         invariant_bugs.window_one_key_short,
         "rule: a sliding window reads the model's window, alone as in a batch; the same "
         "in every row, so only the second judge (the batch oracle's golden) sees it"),
    # -- the paged path's block manager (issue 27)
    _bug("paged-freed-block-still-in-table",
         "paged/llama/B8/ragged/static/ctx-wrap,paged/qwen3/B3/ragged/join-evict/ctx-wrap",
         paged_bugs.freed_block_still_in_table,
         "rule: a block given back to the free list leaves every table (nano-vllm's "
         "deallocate clears the table); a freed block still referenced is read and "
         "written by two rows"),
    _bug("paged-hash-without-parent", "paged/llama/*/prefix-share/*",
         paged_bugs.hash_without_parent,
         "rule: a block's hash chains its parent's (vLLM, nano-vllm): equal ids after "
         "different prefixes are different keys"),
    _bug("paged-block-boundary-off-by-one",
         "paged/llama/B3/ragged/static/ctx-wrap,paged/qwen3/B3/ragged/static/ctx-wrap",
         paged_bugs.block_boundary_off_by_one,
         "rule: token p sits in block p // block_size at slot p % block_size; the "
         "boundary is where paged KV ports slip"),
    _bug("paged-stale-hash-on-reuse", "paged/llama/*/prefix-lru/*,paged/qwen3/*/prefix-lru/*",
         paged_bugs.stale_hash_on_reuse,
         "rule: a cached free block handed out again is rewritten, so its hash must go "
         "(nano-vllm's _allocate_block resets it)"),
    _bug("invariant-prefill-reads-right-padding",
         "invariant-blocked/llama/B8/ragged/static/ctx-short/steps6",
         invariant_bugs.prefill_reads_right_padding,
         "rule: the batched prefill's attention runs over exactly each row's keys "
         "(issue 28); seen when its spans were written: max |d logprob| 4.28"),
    _bug("invariant-padded-decode-keeps-padding-rows",
         "invariant-blocked/llama/B8/ragged/static/ctx-short/steps6",
         invariant_bugs.padded_decode_keeps_padding_rows,
         "rule: the padded decode batch (issue 28, h200b) cuts its logits back to the "
         "batch's rows; seen when it was written: all 3 invariant-blocked/llama cells "
         "failed (B 12 and 6 by the second judge alone, the solo gate passing)"),
    # -- found by mutation testing, round 2 (docs/mutation.md)
    _bug("invariant-queued-row-batch-sampler",
         "invariant/llama/B4/ragged/join-evict/ctx-short/rs-*,"
         "invariant/gemma3/B4/ragged/join-evict/ctx-short/rs-*,"
         "invariant/mamba2/B4/ragged/join-evict/ctx-short/rs-*",
         mutation_bugs.queued_row_batch_sampler,
         "rule: the invariant path draws each row from its own key (RowSampler); "
         "mutant scheduler insert__mutmut_9 survived the campaign's budget "
         "(reports/mutation/2026-12-01-r2)"),
    _bug("paged-evict-keeps-index-entry", "paged/*/B3/explicit/prefix-evict-reuse/*",
         mutation_bugs.evict_keeps_index_entry,
         "rule: evicting a cached block drops its hash-index entry too: the ids check "
         "alone fails once the block is rewritten with equal ids under another parent; "
         "mutant block_manager _forget__mutmut_2 survived every cell until "
         "prefix-evict-reuse (reports/mutation/2026-12-02-r3)"),
    # -- the engine's checks of a request, told only by refusal cells (mutation round 3)
    _bug("engine-accepts-zero-max-tokens", "l1/*/B3/explicit/refuse-requests/*",
         refusal_bugs.accepts_zero_max_tokens,
         "rule: a request with max_tokens < 1 is refused (invalid); mutant batch "
         "Request.__post_init____mutmut_3 survived every cell until the refusal cells "
         "(reports/mutation/2026-12-02-r3/closed-r4-refusals.md)"),
    _bug("engine-refuses-explicit-greedy", "l1/*/B3/explicit/refuse-requests/*",
         refusal_bugs.refuses_explicit_greedy,
         "rule: temperature 0 is a valid sampler (greedy); mutant sampler "
         "SamplingParams.__post_init____mutmut_6 ran in no cell, the shared greedy sampler "
         "being built before the cell starts"),
    _bug("engine-accepts-duplicate-name", "l1/*/B3/explicit/refuse-requests/*",
         refusal_bugs.accepts_duplicate_name,
         "rule: a name in flight is refused (invalid): rows are keyed by name"),
    # -- round 4: the row-cost accounting serve admits by, and an empty merge
    _bug("paged-rowcost-rings-per-row", "paged/gemma3/B3/explicit/row-cost/*",
         cost_bugs.paged_rings_per_row,
         "record: the paged path's RowCost.batch_bytes until round 4 (the row-cost cells "
         "caught it: 12288 bytes held, 11520 projected); reports/mutation/2026-12-02-r3/"
         "closed-r4.md", kind="accounting"),
    _bug("rowcost-rings-by-live-lengths",
         "l1/gemma3/B2/explicit/row-cost-longest-leaves/*,"
         "paged/gemma4-e4b/B2/explicit/row-cost-longest-leaves/*",
         cost_bugs.ring_width_ignored,
         "record: serve's RowCost.batch_bytes until this round (found by a scratch "
         "row-cost cell in which the longest row leaves: 2560 bytes held, 1536 projected)",
         kind="accounting"),
    _bug("rowcost-state-per-token", "l1/qwen3.5/B3/explicit/row-cost/*",
         cost_bugs.state_costs_per_token,
         "rule: a state layer's cost does not grow with length (engine/core/cost.py); "
         "mutants measure_row_cost__mutmut_29 and BatchState.row_bytes__mutmut_7 had no "
         "cell (reports/mutation/2026-12-02-r3)", kind="accounting"),
    _bug("paged-filter-leaks-blocks", "paged/llama/B3/explicit/row-cost/*",
         cost_bugs.paged_filter_leaks_blocks,
         "rule: the blocks in use are the live rows' (BlockManager.stats, serve's pool "
         "metrics); every other paged cell passes with the leak (the pool grows on "
         "demand): round 5's pool check (reports/mutation/2026-12-02-r5/closed-r5.md)",
         kind="accounting"),
    _bug("empty-merge-pads-rings", "l1/gemma3/B2/explicit/park-queued/*",
         mutation_bugs.empty_ring_merge_padded,
         "rule: a merge left-pads each row to the longest, no more; mutant ring "
         "merge__mutmut_39 had no cell (reports/mutation/2026-12-02-r3)"),
    # -- mutation round 6 (reports/mutation/2026-12-02-r6/closed-r6.md)
    _bug("prefix-lookup-counts-queries", "paged/llama/B3/explicit/row-cost-prefix/*",
         cost_bugs.prefix_lookup_counts_queries,
         "rule: num_queries counts the full blocks the rows offered (BlockStats); the "
         "pool check saw only hits <= queries until round 6 (mutant "
         "share_prefix__mutmut_34 survived it)", kind="accounting"),
    _bug("quantized-empty-merge-unquantized", "kv8/llama-hd64/B2/explicit/park-queued/*",
         mutation_bugs.quantized_empty_merge_unquantized,
         "rule: a quantized path's rows stay quantized whatever they resume from; no "
         "cell merged only empty quantized caches before round 6 (the serial quantized "
         "oracle refused a park before the first token)"),
    _bug("quantized-ring-join-keeps-unused-tail",
         "kv8/gemma3-hd64/B2/explicit/prefix-decoded/*",
         mutation_bugs.quantized_ring_join_keeps_unused_tail,
         "rule: an unwrapped ring's unused tail is not keys (single.py ring_temporal); "
         "mutant ring_temporal__mutmut_4 passed l1's prefix-decoded cell, whose ring "
         "merge hides it (reports/mutation/2026-12-02-r5)"),
    # -- mutation round 7 (reports/mutation/2026-12-02-r7/)
    _bug("invariant-row-attention-not-dispatched",
         "invariant-blocked/llama-mha/B8/needle/join-evict/ctx-short/steps6,"
         "invariant-blocked/llama/B12/needle/join-evict/ctx-short/steps6",
         mutation_bugs.row_attention_not_dispatched,
         "rule: blocked invariant decode runs its own row attention (attention_dispatch); "
         "round 3 called its 5 mutants 'gpu only in effect' and rounds 4-6 ran them on "
         "CUDA only: the padded decode batch (issue 28) makes them crash on the CPU",
         caught_as="ERROR"),
    # -- the outside tester's second round: its misses, closed (reports/gate/outside-tester-r2/)
    _bug("default-window-cut-keeps-padding", "invariant/*/B2/ragged/static/ctx-wrap/steps10",
         invariant_bugs.window_cut_keeps_padding,
         "rule: WindowKV's cut moves the padding with the columns (engine/caches/window.py); "
         "invariant-window-cut-keeps-padding on the default matrix, which passed it whole "
         "before the tester's cells (its needle rows are all one length)"),
    _bug("xtc-before-min-p", "*_m0.1_x0.5_xt0.05_r4,*rs-t1m0.05*",
         tester_bugs.xtc_before_min_p,
         "rule: mlx-lm's make_sampler chain order (top-p, min-p, XTC, top-k; "
         "engine/core/sampler.py); no default cell set min-p and XTC together before the "
         "tester's cells"),
    # -- the outside tester's third round: its misses, closed (reports/gate/outside-tester-r3/)
    _bug("finish-at-first-rows-budget", "*/explicit/own-budgets/*",
         tester3_bugs.finish_at_first_rows_budget,
         "rule: each row ends at its own max_tokens (BatchGenerator.insert takes a list); "
         "no default cell gave rows of one batch different budgets before the tester's "
         "own-budgets cells"),
    _bug("processor-context-capped", "*/explicit/wide-penalty-context/*",
         tester3_bugs.processor_context_capped,
         "rule: a penalty reads its own context size (mlx-lm's make_logits_processors); "
         "every default processor cell used 20 ids or fewer before the tester's "
         "wide-penalty-context cells"),
    _bug("top-k-one-as-off", "*_t1_k1_r6_rs-0+t0.8k1",
         tester3_bugs.top_k_one_as_off,
         "rule: make_sampler applies top-k for any top_k > 0 (engine/core/sampler.py); the "
         "default sampling cells used top-k 5 to 30 before the tester's top-k-1 cells"),
    # -- the outside tester's fourth round: its misses, closed (reports/gate/outside-tester-r4/)
    _bug("row-cost-latent-keys-twice",
         "l1/deepseek-v3/B3/explicit/row-cost/*,l1/kimi-linear/B3/explicit/row-cost/*",
         tester4_bugs.row_cost_latent_keys_twice,
         "rule: a token costs its keys plus its values (engine/core/cost.py); the row-cost "
         "cells had only caches whose keys and values are one width before the tester's "
         "MLA row-cost cells", kind="accounting"),
    _bug("seal-hit-keeps-own-block", "paged/*/B3/explicit/row-cost-seal-hit/*",
         tester4_bugs.seal_hit_keeps_own_block,
         "rule: a seal that finds its block cached frees the row's own copy "
         "(paged/block_manager.py); no row-cost cell sealed a hit before the tester's "
         "row-cost-seal-hit cells (the prefix-share cells do, and count nothing)",
         kind="accounting"),
    # -- the zoo's multi-head latent attention models (zoo2): the row kernels and MLA
    _bug("invariant-rows-drop-latent-scores",
         "invariant-blocked/kimi-linear/B3/ragged/join-evict/*,"
         "invariant-blocked/deepseek-v3/B3/ragged/join-evict/*",
         zoo2_bugs.rows_drop_latent_scores,
         "record: the engine until zoo2 (a live probe of the new zoo models: "
         "invariant-blocked/kimi-linear/B3/ragged/join-evict/ctx-short/steps9 FAIL on the "
         "second judge, token 0 expected 114 got 29; the deepseek-v3 cell a broadcast "
         "error on the padded decode block)"),
    _bug("invariant-pads-latent-decode",
         "invariant-blocked/deepseek-v3/B3/ragged/join-evict/*",
         zoo2_bugs.pads_latent_decode,
         "record: the engine until zoo2 (the same probe: invariant-blocked/deepseek-v3/B3/"
         "ragged/join-evict/ctx-short/steps9 ERROR, '[broadcast_shapes] Shapes (8,4) and "
         "(2,1)' in deepseek_v3's q_pe @ k_pe^T)", caught_as="ERROR"),
    _bug("invariant-prefills-maskless-state-together",
         "invariant/rwkv7/B3/ragged/static/*",
         zoo2_bugs.prefills_maskless_state_together,
         "record: the engine until zoo2 (a live probe: invariant/rwkv7/B3/ragged/static/"
         "ctx-short/steps9 FAIL, not batch-invariant: row C token #0 expected 136 (alone), "
         "got 32 (mlx-lm's padded batch bits))"),
    # -- the zoo's models that read what batching changes (zoo3): afm7 reads its key width
    _bug("filter-keeps-shared-padding",
         "l1/afm7/B3/ragged/join-evict/*,fast/afm7/B3/ragged/join-evict/*",
         zoo3_bugs.filter_keeps_shared_padding,
         "rule: BatchKVCache.filter trims the left padding every kept row shares (FACTS.md); "
         "no zoo model before afm7 could see the untrimmed columns on the CPU"),
    # -- subjects: an adapter's bookkeeping between an engine and the protocol (issue 25);
    # any subject, in-process or as a peer (`batchlab selftest --engine E`)
    _bug("subject-step-late",
         "l1/llama/B3/ragged/static/ctx-short,l1/llama/B3/ragged/join/ctx-short",
         subject_bugs.step_late,
         "rule: the emitting step is gated like the token (docs/wire-protocol.md: a token "
         "belongs to the step whose reply carries it)", kind="subject"),
    _bug("subject-drops-parked-history",
         "l1/llama/B2/ragged/park-resume/ctx-wrap,l1/llama/B3/ragged/history/ctx-wrap",
         subject_bugs.drops_parked_history,
         "rule: a row inserted with history 'parked' continues from the caches it was "
         "parked with (BatchGenerator.insert(caches=...))", kind="subject"),
    _bug("subject-ignores-remove", _over(EVICTS, "llama"), subject_bugs.ignores_remove,
         "rule: remove() evicts the row in the engine, wherever it is (BatchGenerator.remove)",
         kind="subject"),
    _bug("subject-stale-logprobs", _over(RAGGED, "llama") + ",l1/llama/B1/equal/static/*",
         subject_bugs.stale_logprobs,
         "rule: an emission carries the logprob row its token was drawn from (the digest "
         "of those bytes is gated)", kind="subject"),
    # -- process peers (docs/wire-protocol.md, Failures): ERROR for the one cell only
    _bug("peer-crash-mid-cell",
         "l1/llama/B3/ragged/join/ctx-short,l1/llama/B3/ragged/static/ctx-short",
         peer_faults.crash, "rule: a peer that dies is ERROR for its cell; the run goes on",
         caught_as="ERROR", kind="peer"),
    _bug("peer-hangs",
         "l1/llama/B3/ragged/join/ctx-short,l1/llama/B3/ragged/static/ctx-short",
         peer_faults.hang, "rule: a peer that answers nothing within --timeout is ERROR "
         "for its cell; the run goes on", caught_as="ERROR", kind="peer"),
    _bug("peer-out-of-protocol",
         "l1/llama/B3/ragged/join/ctx-short,l1/llama/B3/ragged/static/ctx-short",
         peer_faults.out_of_protocol, "rule: a reply that is not one JSON object with a "
         "boolean ok is ERROR for its cell; the run goes on", caught_as="ERROR", kind="peer"),
)
# fmt: on


def select_bugs(pattern: str | None) -> list[SeededBug]:
    """Bugs whose name contains ``pattern`` (all when None)."""
    bugs = [b for b in CATALOG if not pattern or pattern in b.name]
    if not bugs:
        names = ", ".join(b.name for b in CATALOG)
        raise ValueError(f"no seeded bug matches --bug {pattern!r}; known: {names}")
    return bugs
