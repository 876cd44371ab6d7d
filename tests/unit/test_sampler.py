"""Per-row seeded sampling does not depend on B (CPU, non-sliding model)."""

import mlx.core as mx
import pytest
from mlx_lm import sample_utils

from batchlab.engine.core.batch import Request
from batchlab.engine.core.sampler import BatchSampler, RowSampler, SamplingParams, filtered_logits
from batchlab.engine.core.scheduler import Scheduler
from batchlab.zoo import load


def run(requests, model):
    scheduler = Scheduler(model, row_sampler=RowSampler)
    scheduler.insert(requests)
    tokens = {r.name: [] for r in requests}
    while scheduler.num_active:
        for e in scheduler.step():
            tokens[e.name].append(e.token)
    return tokens


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.8, seed=11),
    SamplingParams(temperature=1.0, top_k=20, seed=3),
    SamplingParams(temperature=0.7, top_p=0.9, seed=5),
    SamplingParams(temperature=1.2, min_p=0.05, seed=9),
])
def test_seeded_row_samples_the_same_tokens_at_any_batch_size(params):
    model = load("llama").model
    row = Request(name="X", prompt=(5, 9, 17, 3), max_tokens=10, sampling=params)
    alone = run([row], model)["X"]
    others = [Request(name=n, prompt=tuple(range(1, 2 + i * 3)), max_tokens=14,
                      sampling=SamplingParams(temperature=0.9, seed=100 + i))
              for i, n in enumerate("ABC")]
    in_batch = run([others[0], row, *others[1:]], model)["X"]
    assert alone == in_batch
    assert len(set(alone)) > 1  # it really sampled


def test_filters_keep_exactly_the_expected_tokens():
    logprobs = mx.log(mx.array([[0.5, 0.25, 0.15, 0.1]]))

    def kept(p):
        return (filtered_logits(logprobs, p) > -float("inf")).tolist()[0]

    assert kept(SamplingParams(temperature=1.0, top_k=2)) == [True, True, False, False]
    assert kept(SamplingParams(temperature=1.0, top_p=0.7)) == [True, True, False, False]
    assert kept(SamplingParams(temperature=1.0, min_p=0.35)) == [True, True, False, False]
    assert RowSampler(SamplingParams())(logprobs).tolist() == [0]


def test_bad_params_say_what_is_allowed():
    with pytest.raises(ValueError, match="temperature >= 0"):
        SamplingParams(temperature=-1)


# The engine's filter chain against mlx-lm's own (tests may import mlx-lm; the engine may
# not): the gate compares sampled tokens bit for bit, so the kept sets must be identical.

def mlx_lm_chain(logprobs, p):
    x = logprobs
    if 0 < p.top_p < 1:
        x = sample_utils.apply_top_p(x, p.top_p)
    if p.min_p:
        x = sample_utils.apply_min_p(x, p.min_p)
    if p.top_k:
        x = sample_utils.apply_top_k(x, p.top_k)
    return x * (1.0 / p.temperature)


def kept_set(x):
    return (x > -float("inf")).tolist()


def test_top_p_exactly_at_the_boundary_keeps_the_boundary_token():
    # powers of two are exact: the mass above 0.25 is exactly 0.75
    logprobs = mx.log(mx.array([[0.5, 0.25, 0.125, 0.125]]))
    p = SamplingParams(temperature=1.0, top_p=0.75)
    assert kept_set(filtered_logits(logprobs, p)) == [[True, True, False, False]]
    assert kept_set(mlx_lm_chain(logprobs, p)) == [[True, True, False, False]]


def test_top_p_keeps_every_token_tied_with_the_threshold():
    logprobs = mx.log(mx.array([[0.25, 0.25, 0.25, 0.25]]))
    p = SamplingParams(temperature=1.0, top_p=0.5)
    assert kept_set(filtered_logits(logprobs, p)) == [[True, True, True, True]]


def test_min_p_at_the_boundary_and_top_k_among_ties():
    logprobs = mx.log(mx.array([[0.4, 0.2, 0.2, 0.1, 0.1]]))
    assert kept_set(filtered_logits(logprobs, SamplingParams(temperature=1.0, min_p=0.5))) == \
        [[True, True, True, False, False]]  # 0.2 is exactly half of 0.4: it stays
    got = filtered_logits(logprobs, SamplingParams(temperature=1.0, top_k=2))
    want = mlx_lm_chain(logprobs, SamplingParams(temperature=1.0, top_k=2))
    assert kept_set(got) == kept_set(want)
    assert sum(kept_set(got)[0]) == 2


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(temperature=1.0, top_p=0.9),
    SamplingParams(temperature=1.3, min_p=0.1),
    SamplingParams(temperature=0.8, top_p=0.5, min_p=0.05, top_k=20),
])
@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float32])
def test_filter_chain_equals_mlx_lm_bit_for_bit(params, dtype):
    mx.random.seed(0)
    # a coarse grid makes ties (bf16 rounds further), as flat random models have them
    logits = mx.round(mx.random.normal((8, 320)) * 4) / 4
    logprobs = (logits - mx.logsumexp(logits, axis=-1, keepdims=True)).astype(dtype)
    got, want = filtered_logits(logprobs, params), mlx_lm_chain(logprobs, params)
    assert got.dtype == want.dtype
    assert mx.array_equal(got, want).item()


def test_batch_sampler_draws_what_make_sampler_draws_from_the_same_seed():
    mx.random.seed(1)
    logprobs = mx.log(mx.softmax(mx.random.normal((4, 320)), axis=-1))
    p = SamplingParams(temperature=0.9, top_p=0.8, top_k=50, seed=42)
    mx.random.seed(p.seed)
    want = [sample_utils.make_sampler(p.temperature, top_p=p.top_p, top_k=p.top_k)(logprobs)
            for _ in range(3)]
    mx.random.seed(p.seed)
    sampler = BatchSampler(p)
    got = [sampler(logprobs) for _ in range(3)]
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    assert len({tuple(g.tolist()) for g in got}) > 1  # it really sampled
