"""The row-cost check of the matrix's ``row-cost`` cells (batchlab/subjects/row_cost.py)
and the paged projection it corrected (engine/core/cost.py), with exact values."""

from __future__ import annotations

import mlx.core as mx
import pytest
from loaded_matrices import matrix_cells

from batchlab.cells.select import select
from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.state import BatchState
from batchlab.engine.core.cost import RowCost, ring_width
from batchlab.matrix.engine_run import run_cell
from batchlab.selftest import cost_bugs
from batchlab.selftest.inject import applied
from batchlab.subjects.row_cost import RowCostMismatch, held_bytes, wants_row_cost_check

# gemma3 of the zoo: 2 full layers (256 bytes a token), 2 window-8 rings (128 each)
GEMMA3 = {"per_token": 256, "window_per_token": ((8, 128), (8, 128)), "fixed": 0}


def test_paged_rings_are_left_padded_to_the_longest_row():
    paged = RowCost(**GEMMA3, block_size=16)
    # full layers: (5 + 11) + (9 + 7) block slots x 256; rings: 2 rows x 8 x 2 x 128
    assert paged.batch_bytes([5, 9]) == 32 * 256 + 2 * 8 * 2 * 128 == 12288
    assert RowCost(**GEMMA3).batch_bytes([5, 9]) == 2 * (9 * 256 + 8 * 2 * 128) == 8704
    assert paged.batch_bytes([]) == 0


def test_held_bytes_count_written_columns_not_the_growth_ahead():
    kv = BatchKV([1, 0])
    k = mx.zeros((2, 2, 3, 4), dtype=mx.float16)
    kv.update_and_fetch(k, k)
    assert kv.keys.shape[2] == 256  # grown in steps of 256
    assert held_bytes(kv) == 2 * (2 * 2 * 3 * 4 * 2) == 192
    assert held_bytes(BatchKV([0])) == 0


def test_held_bytes_of_a_ring_and_a_state():
    ring = BatchRing(4, [0])
    k = mx.zeros((1, 1, 1, 2), dtype=mx.float32)
    for _ in range(6):  # wraps past its 4 columns
        ring.update_and_fetch(k, k)
    assert held_bytes(ring) == 2 * (4 * 2 * 4) == 64
    state = BatchState(2)
    state[0] = mx.zeros((3, 5), dtype=mx.float32)
    assert held_bytes(state) == 60


def test_only_row_cost_scripts_ask_for_the_check():
    assert wants_row_cost_check("row-cost") and not wants_row_cost_check("join-evict")


def test_the_old_paged_projection_fails_the_gemma3_cell_with_exact_figures():
    [cell] = select(matrix_cells("matrices/default.toml"),
                    "paged/gemma3/B3/explicit/row-cost/ctx-explicit/steps8", None)
    run_cell(cell, keep_values=False)  # the engine as it is: passes every step
    with applied(cost_bugs.paged_rings_per_row()), pytest.raises(
            RowCostMismatch, match=r"after step 1 .* hold 12288 bytes .* projects 11520"):
        run_cell(cell, keep_values=False)


def test_leaked_blocks_fail_the_pool_check_with_exact_figures():
    """Round 5: a filter that keeps the dropped rows' blocks changes no token (the pool
    grows on demand) but serve's pool statistics; the check counts the live tables."""
    [cell] = select(matrix_cells("matrices/default.toml"),
                    "paged/llama/B3/explicit/row-cost/ctx-explicit/steps8", None)
    run_cell(cell, keep_values=False)  # the engine as it is: passes every step
    with applied(cost_bugs.paged_filter_leaks_blocks()), pytest.raises(
            RowCostMismatch, match=r"after step 5 the KV pool's statistics are wrong "
                                   r"\(stats say 3 blocks used"):
        run_cell(cell, keep_values=False)


def test_prefix_queries_are_counted_from_the_rows_sealed_blocks():
    """Round 6: A seals S's 2 blocks (2 queries, misses), B starts on both (2 hits), C on
    the first (1 hit): 5 queries. A lookup that counts what it finds adds B's 2 and C's 1;
    mutant share_prefix__mutmut_34 (+2 a shared block) adds 3 too."""
    [cell] = select(matrix_cells("matrices/default.toml"),
                    "paged/llama/B3/explicit/row-cost-prefix/ctx-explicit/steps5", None)
    run_cell(cell, keep_values=False)  # the engine as it is: passes every step
    with applied(cost_bugs.prefix_lookup_counts_queries()), pytest.raises(
            RowCostMismatch, match=r"after step 2 .*\(stats say 8 prefix-cache queries; "
                                   r"the 3 rows seen offered 5 full blocks\)"):
        run_cell(cell, keep_values=False)


def test_accounting_bugs_reach_only_the_in_process_subject():
    from batchlab.selftest.catalog import CATALOG
    from batchlab.selftest.modes import InProcessMode
    from batchlab.selftest.peer import plays

    # the catalog grows each round: a fixed list here broke CI twice; every accounting
    # bug, the known ones among them, is checked instead
    accounting = [b for b in CATALOG if b.kind == "accounting"]
    assert {"paged-filter-leaks-blocks", "paged-rowcost-rings-per-row",
            "prefix-lookup-counts-queries", "rowcost-rings-by-live-lengths",
            "rowcost-state-per-token"} <= {b.name for b in accounting}
    assert not {b.name for b in accounting} & set(plays("batchlab"))
    for bug in accounting:
        assert InProcessMode("batchlab").skip(bug) is None, bug.name
        assert "does not run" in InProcessMode("mlx-lm").skip(bug), bug.name


def test_unsealed_names_rows_whose_known_full_blocks_are_not_all_offered():
    from types import SimpleNamespace

    from batchlab.engine.paths.paged.table import BlockTable
    from batchlab.subjects.row_cost import unsealed

    ids = list(range(16)) + list(range(16, 32)) + [None] * 3
    good = BlockTable(blocks=[1, 2, 3], num_tokens=35, ids=ids, num_sealed=2)
    bad = BlockTable(blocks=[1, 2, 3], num_tokens=35, ids=list(ids), num_sealed=16)
    decoded = BlockTable(blocks=[4, 5], num_tokens=32, ids=list(range(16)) + [None] * 16,
                         num_sealed=1)  # block 1 holds decoded ids: never sealed
    cache = SimpleNamespace(pool=SimpleNamespace(block_size=16), rows=(good, bad, decoded))
    assert unsealed(cache) == ["row 1: 16 sealed of 2 full known blocks"]


def test_a_ring_keeps_its_width_when_the_longest_row_leaves():
    ring = BatchRing(8, [4, 0])
    k = mx.zeros((2, 1, 6, 2), dtype=mx.float32)  # row 0: 2 ids after 4 of padding
    ring.update_and_fetch(k, k)
    ring.filter([0])  # the longest row (1) leaves: shared padding stays (mlx-lm)
    assert ring.columns_held() == 6 and held_bytes(ring) == 2 * (6 * 2 * 4)
    assert ring_width([ring, BatchKV([0])]) == 6 and ring_width([BatchKV([0])]) == 0
    # gemma3 rows of 3 ids in rings 7 wide: the projection counts the rings' 7 columns
    assert RowCost(**GEMMA3).batch_bytes([3], ring_width=7) == 3 * 256 + 2 * 7 * 128 == 2560
    assert RowCost(**GEMMA3).batch_bytes([3], ring_width=20) == 3 * 256 + 2 * 8 * 128
