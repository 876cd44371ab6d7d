"""Oracle bugs found by batchlab and not (yet) flagged in goldens, pinned so a fix in
mlx-lm shows up here.

baichuan-m1 (mlx-lm's ``baichuan_m1``): each attention layer runs a 2-tap conv over
time on its keys and values, with the previous token's key/value kept in an
ArraysCache. BatchGenerator right-pads ragged prompts for one prefill; the conv state
then ends on a pad token's key for the short rows, and their first decode step (which
feeds the last prompt token) convolves with it. So a short row beside a long one is
not the row alone. The engine's l1 path reproduces the oracle bit for bit (its cells
pass); the invariant path's solo gate is what found it.

rwkv7 (zoo2): its time and channel mixing read no mask and no ``lengths``, so the right
padding of a ragged prefill runs through the short rows' token-shift and wkv state.
The oracle's serial self-check marks it (``l1/rwkv7/B3/ragged/static/ctx-short/steps9``
is ORACLE-BUG); kimi-linear, whose KDA layers mask the padding, is the control.

llama-dynamic (zoo3): mlx-lm's ``DynamicNTKScalingRoPE`` grows the RoPE base with
``max(L + offset, max_position_embeddings)`` in Python. Batch mode hands it one offset a
row, a (B,) array, and at B > 1 it raises; alone (an int offset) and at B=1 it runs. The
golden's batch-crash evidence makes ``l1/llama-dynamic/B3/ragged/join-evict/*``
ORACLE-BUG; the engine runs the same module and raises too. gpt-bigcode (zoo3): its
learned positions are ``np.arange(offset, offset + L)``, one number again (and were it an
array, one position vector for every row); ``l1/gpt-bigcode/B3/*`` is ORACLE-BUG.

afm7 (zoo3): its KV-reuse layer rotates its queries at ``S - L``, S the width of the
keys it is handed; in a padded batch that is the batch's width, so a short row's queries
sit at the long row's position. The serial self-check marks ``l1/afm7/B3/ragged/*``;
the engine reproduces those bits (its caches hand the model mlx-lm's widths)."""

import mlx.core as mx
import pytest
from mlx_lm.generate import BatchGenerator, generate_step

from batchlab.zoo import load


def _short_row_batched_vs_alone(name: str) -> float:
    model = load(name).model
    long, short = list(range(10, 30)), [5, 6, 7]
    generator = BatchGenerator(model, max_tokens=3)
    uid = generator.insert([long, short])[1]
    batched = []
    while len(batched) < 3:
        _, responses = generator.next()
        batched += [r.logprobs for r in responses if r.uid == uid]
    alone = [lp for _, lp in generate_step(mx.array(short), model, max_tokens=3)]
    return max(float(mx.abs(a - b).max()) for a, b in zip(alone, batched))


def test_baichuan_m1_batch_mode_mixes_a_short_rows_conv_state_with_padding():
    assert _short_row_batched_vs_alone("baichuan-m1") > 1.0


def test_falcon_h1_short_row_batched_is_the_row_alone():
    # the control: another CacheList hybrid, whose state is masked by the prefill lengths
    assert _short_row_batched_vs_alone("falcon-h1") == 0.0


def test_rwkv7_batch_mode_runs_the_padding_through_a_short_rows_state():
    assert _short_row_batched_vs_alone("rwkv7") > 1.0


def test_kimi_linear_short_row_batched_is_the_row_alone():
    # the control: a 4-array recurrent state whose conv and delta updates are masked
    assert _short_row_batched_vs_alone("kimi-linear") == 0.0


def _dynamic_rows(prompts: list[list[int]]):
    model = load("llama-dynamic").model
    generator = BatchGenerator(model, max_tokens=12)
    uids = generator.insert(prompts)
    out = {uid: [] for uid in uids}
    while min(len(v) for v in out.values()) < 12:
        for r in generator.next()[1]:
            out[r.uid].append(r.logprobs)
    return model, [out[u] for u in uids]


@pytest.mark.parametrize("name", ["llama-dynamic", "gpt-bigcode"])
def test_batch_mode_raises_on_per_row_offsets(name):
    model = load(name).model
    generator = BatchGenerator(model, max_tokens=3)
    generator.insert([[10, 11, 12, 13, 14], [5]])
    with pytest.raises(ValueError, match="Only length-1 arrays"):
        for _ in range(3):  # the first steps may run one row at a time (a row's first step)
            generator.next()
    # ... while each row alone runs (and crosses max_position_embeddings 8)
    assert len(list(generate_step(mx.array([10, 11, 12, 13, 14]), model, max_tokens=12))) == 12


def test_llama_dynamic_at_b1_is_the_row_alone():
    # the control: one row's batch mode (a (1,) offset converts to a number) past position 8
    prompt = [10, 11, 12, 13, 14]
    model, (batched,) = _dynamic_rows([prompt])
    alone = [lp for _, lp in generate_step(mx.array(prompt), model, max_tokens=12)]
    assert all(mx.array_equal(a, b).item() for a, b in zip(alone, batched))


def test_afm7_batch_mode_places_a_short_rows_queries_at_the_batch_width():
    assert _short_row_batched_vs_alone("afm7") > 0.01
