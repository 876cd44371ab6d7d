"""Holes the round-2 mutation campaign found (reports/mutation/2026-12-01-r2), closed with
exact values: kvmix picks its 8-bit layers from ``layer_sensitivity``, and the kvmix cells
are judged by KL, which passes with any choice of layers; so the scores themselves are
pinned here (CPU values; the sensitivity probe is deterministic: fixed probe ids, greedy
teacher forcing)."""

from batchlab.engine.paths.quantized.sensitivity import layer_sensitivity, probe_ids
from batchlab.engine.paths.registry import PATHS
from batchlab.zoo import load


def test_sensitivity_probe_ids_are_seeded_below_the_vocabulary():
    model = load("gemma3-hd64").model
    assert probe_ids(model, 4) == [217, 163, 130, 69, 78, 10, 19, 4]


def test_layer_sensitivity_scores_are_exact():
    """Mean KL over the vocabulary per probe position, one attention cache quantized at a
    time (the reference quantizes nothing). Kills: a reference that quantizes, a sum over
    positions instead of the vocabulary, a probe that never quantizes, another seed."""
    model = load("gemma3-hd64").model
    scores = layer_sensitivity(model, PATHS["kvmix"].kv_scheme)
    assert scores == [0.1353685542980027, 0.02774212693719126, 0.007297207684233156,
                      0.003693979512686599]
