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

from batchlab.selftest import cache_bugs, model_bugs, schedule_bugs
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
    # For a PENDING bug: the default-matrix cell proposed to catch it (TOML), until the
    # matrix has it; then the bug moves to CATALOG.
    proposed_cell: str = ""


def _bug(name: str, cells: str, inject: Callable[[], list[Patch]], history: str,
         caught_as: str = "FAIL") -> SeededBug:
    """The description is the injector's docstring: one text, next to the code it tells."""
    doc = " ".join((inject.__doc__ or "").split())
    return SeededBug(name=name, description=doc, history=history, cells=cells, inject=inject,
                     caught_as=caught_as)


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
)
# fmt: on


# Real holes found by mutation testing (docs/mutation.md): bugs no default-matrix cell
# catches yet. Each names the cell proposed to catch it; tests/unit/test_gate_pending_bugs
# shows (live, against BatchGenerator) that the proposed scenario catches it, and fails
# once the default matrix has a cell matching ``cells``: then move the bug to CATALOG.
PENDING: tuple[SeededBug, ...] = (
    SeededBug(
        name="admit-ignores-prefill-batch-size",
        description=" ".join((schedule_bugs.admit_ignores_prefill_batch_size.__doc__ or "").split()),
        history="rule: BatchGenerator moves up to prefill_batch_size queued rows into the "
                "prompt batch per step (FACTS); no default cell inserts more than 8 rows",
        cells="l1/*/B12/ragged/static/*,l1/*/B5/ragged/capped/*",
        inject=schedule_bugs.admit_ignores_prefill_batch_size,
        proposed_cell="[[cell]] model = \"llama\", script = \"capped\", prefill_batch_size = 2, "
                      "completion_batch_size = 3, prompts = {A = {length = 5}, B = [7], "
                      "C = {length = 3}, D = {length = 7}, E = {length = 2}}, "
                      "events = [\"insert A,B,C,D,E at 0\"], steps = 4 (and on gemma3, qwen3.5)",
    ),
    SeededBug(
        name="step-ignores-completion-cap",
        description=" ".join((schedule_bugs.step_ignores_completion_cap.__doc__ or "").split()),
        history="rule: no admission or join while completion_batch_size rows decode "
                "(BatchGenerator's _next); no default cell has more than 8 rows",
        cells="l1/*/B5/ragged/capped/*,l1/*/B34/*",
        inject=schedule_bugs.step_ignores_completion_cap,
        proposed_cell="the capped cell above (3 may decode, 5 rows)",
    ),
    SeededBug(
        name="prefill-ignores-step-size",
        description=" ".join((schedule_bugs.prefill_ignores_step_size.__doc__ or "").split()),
        history="rule: prefill runs in chunks of prefill_step_size (FACTS); no default "
                "prompt is longer than 26 tokens",
        cells="l1/*/B3/ragged/chunked/*",
        inject=schedule_bugs.prefill_ignores_step_size,
        proposed_cell="[[cell]] model = \"gemma3\", script = \"chunked\", prefill_step_size = 4, "
                      "prompts = {A = {length = 11}, B = {length = 3}, C = {length = 6}}, "
                      "events = [\"insert A,B at 0\", \"insert C at 1\"], steps = 5 "
                      "(and on llama, qwen3.5)",
    ),
    SeededBug(
        name="remove-only-decoding-rows",
        description=" ".join((schedule_bugs.remove_only_decoding_rows.__doc__ or "").split()),
        history="rule: BatchGenerator.remove evicts a row wherever it is (queue, prompt "
                "batch, decode batch); every default evict removes a decoding row",
        cells="l1/*/B5/ragged/capped-evict/*,l1/*/B3/ragged/chunked-evict/*",
        inject=schedule_bugs.remove_only_decoding_rows,
        proposed_cell="the chunked cell above with \"remove A at 1\" (A mid-prompt), and the "
                      "capped cell with \"remove E at 1\" (E still queued)",
    ),
)


def select_bugs(pattern: str | None) -> list[SeededBug]:
    """Bugs whose name contains ``pattern`` (all when None)."""
    bugs = [b for b in CATALOG if not pattern or pattern in b.name]
    if not bugs:
        names = ", ".join(b.name for b in CATALOG)
        raise ValueError(f"no seeded bug matches --bug {pattern!r}; known: {names}")
    return bugs
