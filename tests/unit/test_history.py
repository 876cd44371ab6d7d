"""History, per-row processors and per-row samplers: the engine's pieces against mlx-lm's,
the TOML that expresses them, and the oracle's serial replay (issue 17)."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from batchlab.cells.cell import cyclic
from batchlab.cells.spec import expand
from batchlab.engine.core.batch import Request
from batchlab.engine.core.history import prefix_history
from batchlab.engine.core.processors import ProcessorParams, make_processors
from batchlab.engine.core.scheduler import Scheduler
from batchlab.oracle.batch import prefix_cache
from batchlab.oracle.processors import mlx_lm_processors
from batchlab.oracle.serial import check_against_serial
from batchlab.trajectory import Trajectory, array_bytes
from batchlab.zoo import load

PARAMS = [
    ProcessorParams(logit_bias=((7, 3.0), (100, -2.5), (3, 0.25))),
    ProcessorParams(repetition_penalty=1.5, repetition_context_size=4),
    ProcessorParams(presence_penalty=0.8),
    ProcessorParams(frequency_penalty=0.6, frequency_context_size=6),
    ProcessorParams(logit_bias=((5, 1.0),), repetition_penalty=0.7, presence_penalty=0.3,
                    frequency_penalty=1.1),
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.tag)
@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float32])
def test_processors_equal_mlx_lm_bit_for_bit(params, dtype):
    """Contexts with repeats (3 seen three times): frequency counts them, presence not."""
    logits = (mx.random.normal((1, 256), key=mx.random.key(4)) * 3).astype(dtype)
    context = mx.array([3, 9, 3, 250, 3, 17, 9, 42], dtype=mx.int32)
    ours, theirs = mx.array(logits), mx.array(logits)  # the penalties assign in place
    for p in make_processors(params):
        ours = p(context, ours)
    for p in mlx_lm_processors(params):
        theirs = p(context, theirs)
    assert ours.dtype == theirs.dtype
    assert array_bytes(ours) == array_bytes(theirs)
    assert array_bytes(ours) != array_bytes(logits)  # it really changed something


def test_frequency_counts_repeats_and_presence_does_not():
    logits = mx.zeros((1, 8))
    context = mx.array([3, 3, 3, 5], dtype=mx.int32)
    (freq,) = make_processors(ProcessorParams(frequency_penalty=0.5))
    (pres,) = make_processors(ProcessorParams(presence_penalty=0.5))
    assert freq(context, logits).tolist() == [[0, 0, 0, -1.5, 0, -0.5, 0, 0]]
    assert pres(context, mx.zeros((1, 8))).tolist() == [[0, 0, 0, -0.5, 0, -0.5, 0, 0]]


def test_tags_and_cyclic_ids():
    assert PARAMS[4].tag == "b5x1rp0.7pp0.3fp1.1"
    assert PARAMS[1].tag == "rp1.5rc4"
    assert ProcessorParams().tag == "0"
    assert cyclic(["a", "0", "a", "0", "a"]) == ["a", "0"]
    assert cyclic(["a", "b", "c"]) == ["a", "b", "c"]


SWEEP = {"models": ["llama"], "batch": [3], "padding": ["ragged"], "scripts": ["static"],
         "contexts": ["short"]}


def test_row_settings_go_to_rows_by_position_and_into_the_id():
    (cell,) = expand({"sweep": [SWEEP | {
        "row_sampling": [{"temperature": 0.9, "top_k": 8}, {}],
        "row_processors": [{"logit_bias": {"5": 2.0}}],
        "sampling": [{"temperature": 0.5, "seed": 3}]}]})
    assert [r.sampling.top_k if r.sampling else None for r in cell.rows] == [8, None, 8]
    assert all(r.processors.logit_bias == ((5, 2.0),) for r in cell.rows)
    assert cell.id == "l1/llama/B3/ragged/static/ctx-short/t0.5_r3_rs-t0.9k8+0_lp-b5x2"


def test_history_scripts_give_rows_prefixes_and_resume_ids():
    cells = expand({"sweep": [SWEEP | {"scripts": ["history"], "batch": [4],
                                       "contexts": ["wrap"]}]})
    (cell,) = cells
    assert [len(r.prefix) for r in cell.rows] == [26, 27, 0, 29]
    assert [len(r.resume) for r in cell.rows] == [3, 3, 0, 0]
    assert [str(e) for e in cell.events] == ["insert A,B,C at 0", "insert D at 3",
                                             "park A,B at 5", "resume A,B at 8"]


@pytest.mark.parametrize("extra, message", [
    ({"row_sampling": [{"temperature": 0.9, "seed": 1}]}, "takes no seed"),
    ({"row_processors": [{"repetition": 1.2}]}, "unknown keys"),
    ({"row_processors": [{"logit_bias": {"x": 1.0}}]}, "maps token ids to numbers"),
    ({"row_processors": [{"logit_bias": {"999999": 1.0}}]}, "outside"),
    ({"row_processors": [{"repetition_penalty": -1}]}, "number >= 0"),
    ({"row_sampling": []}, "non-empty list"),
])
def test_bad_row_settings_are_refused(extra, message):
    with pytest.raises(ValueError, match=message):
        expand({"sweep": [SWEEP | extra]})


def explicit(prompts, events):
    return {"cell": [{"model": "llama", "script": "x", "prompts": prompts, "events": events}]}


@pytest.mark.parametrize("prompts, events, message", [
    ({"A": {"length": 4, "resume": 2}}, ["insert A at 0", "resume A at 3"], "not parked"),
    ({"A": {"length": 4}}, ["insert A at 0", "park A at 2", "resume A at 4"], "no 'resume'"),
    ({"A": {"length": 4, "resume": 2}}, ["insert A at 0", "park A at 12", "resume A at 14"],
     "may have finished"),
    ({"A": {"length": 4, "resume": 2}}, ["insert A at 0"], "never parked"),
    ({"A": {"length": 4, "resume": 2}}, ["insert A at 0", "park A at 2", "remove A at 3"],
     "not alive"),
    ({"A": {"ids": [1], "length": 3}}, ["insert A at 0"], "either ids"),
    ({"A": {"length": 4}}, ["insert A at 0", "insert A at 2"], "inserted twice"),
    ({"A": {"length": 4}}, ["insert A,Z at 0"], "unknown row 'Z'"),
    ({"A": {"length": 4, "resume": 2}},
     ["insert A at 0", "park A at 1", "resume A at 2", "park A at 3"], "parked twice"),
    ({"A": {"length": 4, "resume": 2}}, ["insert A at 0", "continue A at 5"],
     "before it surely finished"),
    ({"A": {"length": 4, "resume": 2}}, ["insert A at 0", "remove A at 2", "continue A at 20"],
     "not a running row"),
])
def test_bad_history_events_are_refused(prompts, events, message):
    with pytest.raises(ValueError, match=message):
        expand(explicit(prompts, events))


def test_engine_prefix_history_equals_the_oracles_prefix_cache():
    model = load("qwen3.5").model  # hybrid: KV and SSM state layers
    prefix = tuple(range(3, 40))
    ours = prefix_history(model, prefix, 8).caches
    theirs = prefix_cache(model, prefix, 8)
    def flat(caches):
        return [a for c in caches for a in c.state if isinstance(a, mx.array)]

    assert [array_bytes(a) for a in flat(ours)] == [array_bytes(a) for a in flat(theirs)]


def test_a_parked_row_keeps_every_id_fed_and_resumes_where_it_stopped():
    """Parked after 3 emitted tokens: the caches hold the prompt and those 3 ids; resumed
    with one new id, it continues exactly as a row that had never left (same ids fed)."""
    model = load("llama").model
    s = Scheduler(model)
    s.insert([Request(name="A", prompt=(5, 9, 17, 3), max_tokens=12)])
    emitted = [e.token for _ in range(5) for e in s.step()]
    assert len(emitted) == 3
    kept = s.remove(["A"], keep_history=True)["A"]
    assert kept.tokens == (5, 9, 17, 3, *emitted)
    assert [c.offset for c in kept.caches] == [7] * len(kept.caches)
    s.insert([Request(name="A", prompt=(11,), max_tokens=3,
                      history=kept)])
    resumed = [e.token for _ in range(5) for e in s.step()]
    straight = Scheduler(model)
    straight.insert([Request(name="A", prompt=(5, 9, 17, 3, *emitted, 11), max_tokens=3)])
    alone = [e.token for _ in range(5) for e in straight.step()]
    assert resumed == alone and len(resumed) == 3


def test_serial_replay_catches_a_batch_row_that_lost_its_prefix():
    (cell,) = expand({"sweep": [SWEEP | {"scripts": ["prefix-join"], "batch": [1]}]})
    from batchlab.oracle.batch import run_batch_oracle

    model = load("llama")
    good = run_batch_oracle(cell, model.model, model.dtype)
    assert check_against_serial(cell, model.model, good) is None
    lost = replace(cell, rows=tuple(replace(r, prefix=()) for r in cell.rows))
    bad = run_batch_oracle(lost, model.model, model.dtype)
    bug = check_against_serial(cell, model.model, Trajectory(rows=bad.rows, dtype=bad.dtype))
    assert bug is not None and bug.rows == ("A",) and bug.first_step == 0
    assert "row A token 0" in bug.detail


def test_own_key_sampler_draws_make_samplers_distribution():
    """Where the bits cannot match (a row that owns its key, as serving wants, has no
    counterpart in BatchGenerator, whose rows share MLX's global key), the gate is the
    distribution: 20000 draws of each sampler over one filtered vector land within a
    total variation of 0.02 of the exact softmax, and of each other. Fixed keys: the
    figures are the same on every run."""
    from mlx_lm.sample_utils import make_sampler

    from batchlab.engine.core.sampler import RowSampler, SamplingParams, filtered_logits

    params = SamplingParams(temperature=0.8, top_k=6, top_p=0.95, seed=1)
    logits = mx.array([[2.0, 1.5, 1.4, 0.3, 0.0, -0.5, -1.0, -3.0]])
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    exact = np.array(mx.softmax(filtered_logits(logprobs, params), axis=-1))[0]
    n = 20_000
    tiled = mx.repeat(logprobs, n, axis=0)
    row = RowSampler(params)
    ours = np.array(mx.random.categorical(filtered_logits(tiled, params), key=row.key))
    mx.random.seed(5)
    theirs = np.array(make_sampler(0.8, top_p=0.95, top_k=6)(tiled))

    def tv(draws):
        return 0.5 * np.abs(np.bincount(draws, minlength=8) / n - exact).sum()

    assert tv(ours) < 0.02 and tv(theirs) < 0.02
    assert exact[6:].sum() == 0 and (np.bincount(ours, minlength=8)[6:] == 0).all()


def test_xtc_equals_mlx_lms_and_leaves_old_definitions_alone():
    """The engine's XTC step equals mlx-lm's apply_xtc bit for bit from the same global
    seed (its coin included); a sampler with XTC off defines exactly what it did before."""
    from mlx_lm.sample_utils import apply_xtc

    from batchlab.engine.core.sampler import SamplingParams, _xtc

    logits = mx.random.normal((3, 64), key=mx.random.key(2)).astype(mx.bfloat16)
    for seed in range(6):  # both sides of the coin at p = 0.5
        mx.random.seed(seed)
        ours = _xtc(logits, 0.5, 0.05)
        mx.random.seed(seed)
        theirs = apply_xtc(logits, 0.5, 0.05, [])
        assert array_bytes(ours) == array_bytes(theirs)
    assert set(SamplingParams(temperature=0.7).as_dict()) == {
        "temperature", "top_p", "top_k", "min_p", "seed"}
    assert SamplingParams(temperature=0.7, xtc_probability=0.5).as_dict()["xtc_threshold"] == 0.1
