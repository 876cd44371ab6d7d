"""Per-row seeded sampling does not depend on B (CPU, non-sliding model)."""

import mlx.core as mx
import pytest

from batchlab.engine.batch import Request
from batchlab.engine.sampler import RowSampler, SamplingParams, filtered_logits
from batchlab.engine.scheduler import Scheduler
from batchlab.zoo import load


def run(requests, model):
    scheduler = Scheduler(model)
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
