"""The masks' device-int path equals their host-int path, bool for bool.

The engine's caches keep row ints on the host, so every engine caller takes the numpy
path of ``causal_mask`` / ``ssm_mask``; the mx.array path (for callers holding device
ints) is never reached by a matrix cell (docs/coverage.md, kind F) and a mutant of it
survived (docs/mutation.md). Pinned here on the docstrings' examples and a few more.
"""

import mlx.core as mx
import numpy as np
import pytest

from batchlab.engine.mask import causal_mask, ssm_mask

T, F = True, False


def _ints(x):
    return mx.array(x, dtype=mx.int32)


def test_causal_mask_docstring_example_on_device_ints():
    got = causal_mask(1, 3, _ints([1, 0, 2]))
    assert got.shape == (3, 1, 1, 4)
    assert got.tolist() == [[[[F, T, T, T]]], [[[T, T, T, T]]], [[[F, F, T, T]]]]


@pytest.mark.parametrize("N, offset, window", [(1, 5, None), (3, 4, None), (4, 6, 3), (2, 0, 2)])
def test_device_and_host_ints_give_the_same_causal_mask(N, offset, window):
    lp, rp = [2, 0, 1], [0, 1, 2]
    host = causal_mask(N, offset, lp, window=window, right_padding=rp)
    device = causal_mask(N, offset, _ints(lp), window=window, right_padding=_ints(rp))
    assert host.shape == device.shape == (3, 1, N, offset + N)
    assert np.array_equal(np.asarray(host), np.asarray(device))


def test_right_padding_hides_each_rows_last_columns():
    got = causal_mask(3, 0, right_padding=[0, 2])
    assert got.tolist() == [[[[T, F, F], [T, T, F], [T, T, T]]],
                            [[[T, F, F], [T, F, F], [T, F, F]]]]


def test_device_and_host_ints_give_the_same_ssm_mask():
    lp, lengths = [1, 0], [3, 1]
    host = ssm_mask(3, lp, lengths)
    device = ssm_mask(3, _ints(lp), _ints(lengths))
    assert host.tolist() == device.tolist() == [[F, T, T], [T, F, F]]
