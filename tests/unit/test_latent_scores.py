"""MLA's additive scores on the invariant path's row kernels (zoo2).

Multi-head latent attention (deepseek_v3, kimi_linear) passes ``where(mask, q_pe @ k_pe^T,
min)`` as the attention mask: scores to add, not only padding. The row kernels take each
row's own keys, so they must add each row's own columns of those scores; dropped, the
kimi-linear rows moved by 0.56 in logprob while staying equal to themselves alone.
"""

from __future__ import annotations

import mlx.core as mx
from loaded_matrices import matrix_cells

from batchlab.engine.kernels.attention_dispatch import additive_scores
from batchlab.engine.kernels.row_attention import row_attention
from batchlab.engine.kernels.row_prefill import row_prefill_attention
from batchlab.engine.paths.invariant.path import latent_attention_reason
from batchlab.zoo import load


def _scores(shape, valid):
    """Random scores with finfo.min where ``valid`` is False, as MLA builds them."""
    pe = mx.random.normal(shape, key=mx.random.key(3))
    return mx.where(valid, pe, mx.array(mx.finfo(pe.dtype).min, pe.dtype))


def test_only_a_floating_mask_is_additive():
    assert additive_scores(None) is None
    assert additive_scores("causal") is None
    assert additive_scores(mx.array([[True, False]])) is None
    scores = mx.array([[0.5, -1.0]])
    assert additive_scores(scores) is scores


def test_decode_rows_add_their_own_scores_bit_for_bit():
    """Row 1 has 2 padding columns: alone over its 3 keys with its 3 score columns, the
    same bits as the batch's fused SDPA over 5 columns with the additive mask."""
    q = mx.random.normal((2, 4, 1, 8), key=mx.random.key(0))
    k = mx.random.normal((2, 1, 5, 8), key=mx.random.key(1))
    v = mx.random.normal((2, 1, 5, 8), key=mx.random.key(2))
    valid = mx.array([[True] * 5, [False, False, True, True, True]])[:, None, None, :]
    scores = _scores((2, 4, 1, 5), valid)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=scores)
    got = row_attention(q, k, v, mx.array([0, 2]), 0.25, scores=scores)
    assert mx.array_equal(got, want).item()
    dropped = row_attention(q, k, v, mx.array([0, 2]), 0.25)
    assert not mx.array_equal(dropped, want).item()


def test_prefill_rows_add_their_own_scores_bit_for_bit():
    """A right-padded chunk: row 0 has 3 real queries over keys 0..3, row 1 one query
    over key 0; the scores carry causality, so no causal mask is added on top."""
    q = mx.random.normal((2, 4, 3, 8), key=mx.random.key(4))
    k = mx.random.normal((2, 1, 3, 8), key=mx.random.key(5))
    v = mx.random.normal((2, 1, 3, 8), key=mx.random.key(6))
    causal = mx.tril(mx.ones((3, 3), dtype=mx.bool_))
    scores = _scores((2, 4, 3, 3), causal[None, None])
    got = row_prefill_attention(q, k, v, (0, 0), (3, 1), (3, 1), 0.25, scores=scores)
    want0 = mx.fast.scaled_dot_product_attention(q[:1], k[:1], v[:1], scale=0.25,
                                                 mask=scores[:1])
    want1 = mx.fast.scaled_dot_product_attention(q[1:, :, :1], k[1:, :, :1], v[1:, :, :1],
                                                 scale=0.25, mask=scores[1:, :, :1, :1])
    assert mx.array_equal(got[:1], want0).item()
    assert mx.array_equal(got[1:, :, :1], want1).item()
    assert mx.array_equal(got[1:, :, 1:], mx.zeros_like(got[1:, :, 1:])).item()  # padding


def test_mla_models_are_named_by_their_multilinear_modules():
    assert latent_attention_reason(load("deepseek-v3").model) is not None
    assert latent_attention_reason(load("kimi-linear").model) is not None
    assert latent_attention_reason(load("llama").model) is None


def test_a_shared_golden_keeps_the_logprobs_a_kl_second_judge_needs():
    """kimi-linear's join-evict scenario is judged by invariant (exact on the CPU) and by
    invariant-blocked (KL: its convs are tap-summed); the golden is made for the latter,
    whichever the matrix lists first, so it keeps the logprobs."""
    from batchlab.cells.select import select
    from batchlab.golden.check import unique_scenarios

    cells = select(matrix_cells("matrices/default.toml"),
                   "*/kimi-linear/B3/ragged/join-evict/ctx-short/steps9", None)
    assert [c.path for c in cells][:2] == ["l1", "paged"]
    assert [c.path for c in unique_scenarios(cells)] == ["invariant-blocked"]
    assert [c.path for c in unique_scenarios(cells[::-1])] == ["invariant-blocked"]


def test_the_quantized_paths_refuse_mla_for_its_own_reason():
    """mlx-lm's MLA models read ``k_pe.swapaxes`` from the cache: a QuantizedKVCache hands
    back (packed, scales, biases), so its serial oracle crashes ('list' object has no
    attribute 'swapaxes', kimi-linear with widths 64 and 32 at group 32). The refusal
    names that, not the config's head dim."""
    from batchlab.engine.paths.registry import PATHS

    for name in ("deepseek-v3", "kimi-linear"):
        reason = PATHS["kv8"].refuses(load(name).model)
        assert reason.startswith("multi-head latent attention"), reason
    assert PATHS["kv8"].refuses(load("llama-hd64").model) is None


def test_a_kv_cell_on_mla_reads_unsupported_before_any_reference(tmp_path, monkeypatch):
    """No oracle exists for it (mlx-lm's quantized cache crashes on MLA), so the engine is
    asked first: UNSUPPORTED with the path's reason, not a missing golden (empty goldens
    folder) and not an oracle crash (live), and no reference is fetched at all."""
    from batchlab.cells.spec import expand
    from batchlab.matrix import evaluate
    from batchlab.matrix.evaluate import Reference, evaluate_cell
    from batchlab.status import Status

    (cell,) = expand({"description": "t", "sweep": [
        {"models": ["deepseek-v3"], "paths": ["kv8"], "batch": [2], "padding": ["ragged"],
         "scripts": ["static"], "contexts": ["short"]}]})
    fetched = []
    monkeypatch.setattr(evaluate, "_reference", lambda *a: fetched.append(a))
    for live in (False, True):
        result = evaluate_cell(cell, Reference(matrix="t.toml", goldens=tmp_path, live=live))
        assert result.status == Status.UNSUPPORTED, result.detail
        assert "multi-head latent attention" in result.detail
    assert fetched == []
