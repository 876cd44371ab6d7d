"""Boolean attention and SSM masks of a left-padded batch (True = attend / keep).

Masks are exact (bools), but their SHAPE is part of the layout attention sees, so each
function returns the shape mlx-lm 0.32's batch caches return for the same state.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

Ints = Sequence[int] | np.ndarray | mx.array


@functools.lru_cache(maxsize=64)
def all_true(shape: tuple[int, ...]) -> mx.array:
    """An all-True bool mask, one array per shape. A decode step's SSM mask (and a full
    ring's) is all True step after step; reusing one array skips building a mask and
    making an array from host memory, which costs more inside a running decode loop
    than in isolation. Arrays are never written in place, so sharing one is safe."""
    return mx.ones(shape, dtype=mx.bool_)


def causal_mask(N: int, offset: int, left_padding: Ints, window: int | None = None) -> mx.array:
    """Mask of N queries at positions ``offset .. offset+N-1`` over keys ``0 .. offset+N-1``.

    Query i sees key j when ``offset+i >= j`` (causal), ``offset+i < j+window`` (window)
    and ``j >= left_padding[b]``. Shape (B, 1, N, offset+N). E.g.
    ``causal_mask(1, 3, [1, 0, 2])`` is ``[[F T T T]], [[T T T T]], [[F F T T]]``.

    The engine's caches keep row ints on the host, so the mask is built in numpy and
    uploaded once: at decode one small copy instead of a handful of lazy ops per step.
    """
    return mx.array(causal_mask_host(N, offset, left_padding, window))


MASK_COLUMNS_STEP = 256  # DecodeMasks widens its host mask in steps, as caches grow


class DecodeMasks:
    """The decode masks (N = 1, no window) of one full-attention cache, each a slice of
    a wider host mask built once per left-padding array.

    At N = 1 the one query sees every key causally, so the mask over keys ``0 .. offset``
    is ``j >= left_padding[b]``, and a step only adds a column. Building it in numpy
    every step put half a dozen numpy calls between the model's op building, which the
    forward build of a small model feels (``docs/performance.md``). A slice uploads the
    same bools into the same contiguous (B, 1, 1, offset + 1) array ``causal_mask``
    makes.

    The memo is keyed by the identity of the cache's read-only left-padding array, which
    it holds (so the id is never reused); any change to the padding is a new array."""

    def __init__(self):
        self._memo: tuple[np.ndarray, np.ndarray] | None = None  # (left_padding, mask)

    def __call__(self, offset: int, left_padding: np.ndarray) -> mx.array:
        width = offset + 1
        memo = self._memo
        if memo is None or memo[0] is not left_padding or memo[1].shape[-1] < width:
            columns = -(-width // MASK_COLUMNS_STEP) * MASK_COLUMNS_STEP
            memo = self._memo = (left_padding, causal_mask_host(1, columns - 1, left_padding))
        return mx.array(memo[1][..., :width])


def causal_mask_host(N, offset, left_padding, window=None) -> np.ndarray:
    """``causal_mask`` as a numpy bool array."""
    cols = np.arange(offset + N)[None]
    rows = np.arange(offset, offset + N)[:, None]
    mask = rows >= cols
    if window is not None:
        mask = mask & (rows < cols + window)
    # row ints shaped (B, 1, 1, 1) broadcast over (B, 1, N, L)
    return mask & (np.asarray(left_padding).reshape(-1, 1, 1, 1) <= cols)


def ring_mask(
    N: int,
    *,
    max_size: int,
    seen: int,
    idx: int,
    rotated: bool,
    left_padding: np.ndarray,
    window: int | None = None,
    left_padding_max: int,
    all_true_as_none: bool = False,
    decode_masks: DecodeMasks | None = None,
) -> mx.array | None:
    """The mask of ``BatchRing`` before it takes N keys (mlx-lm's rotating batch mask).
    ``all_true_as_none``: a decode mask that hides nothing comes back as ``None``.
    ``left_padding_max``: ``max(left_padding)`` (the caller's memo of it saves numpy).
    ``decode_masks``: the ring's own ``DecodeMasks``, for the decode steps before it
    fills (then the mask is a full cache's: keys ``0 .. offset``, padding unchanged).

    ``seen`` counts every column ever written (``_offset``), ``idx`` is the ring pointer.
    Built in temporal order (oldest kept key first) at width ``min(max_size-1, seen)+N``:

    - N > 1 (prefill): the cache first trims to ``max_size - 1`` keys, so the padding
      shrinks by ``idx - max_size + 1``.
    - N = 1 once the ring is full: the write evicts the oldest key (padding - 1), and the
      temporal mask is rolled right by ``idx + 1`` into ring order. E.g. max_size 4,
      pointer 1, left_padding [2, 0]: temporal ``[F T T T], [T T T T]`` (after -1),
      rolled by 2 -> ``[T T F T], [T T T T]``.

    mlx-lm bug, reproduced as is (the oracle's layout wins): for N > 1 on a wrapped ring
    the trim uses the ring pointer, while the cache first unrolls the ring and trims 1, so
    a row that still has padding loses its oldest real key to the mask. BatchGenerator
    never feeds N > 1 after prefill; a multi-token decode (speculation) would hit it.
    """
    window = window or max_size
    offset = min(max_size - 1, seen)
    trim = idx - max_size + int(N > 1)
    wraps = N == 1 and (rotated or idx >= max_size)
    dropped = max(trim, 0) + int(wraps)  # padding columns the write will have dropped
    if N == 1 and offset < window and left_padding_max - dropped <= 0:
        if all_true_as_none:  # one way: cpu
            return None
        return all_true((len(left_padding), 1, 1, offset + 1))  # not gated: cpu
    if N == 1 and not wraps and dropped == 0 and offset < window and decode_masks is not None:
        return decode_masks(offset, left_padding)
    left_padding = left_padding - dropped
    mask = causal_mask_host(N, offset, left_padding=left_padding, window=window)
    if wraps:
        mask = np.roll(mask, shift=(0 if idx >= max_size else idx) + 1, axis=-1)
    return mx.array(mask)


def ssm_keeps_every_step(N: int, left_padding_max: int | None,
                         lengths_min: int | None) -> bool:
    """Whether ``ssm_mask`` keeps every step of every row (from the rows' extremes)."""
    return ((left_padding_max is None or left_padding_max <= 0)
            and (lengths_min is None or lengths_min >= N))


def ssm_mask(N: int, left_padding: Ints | None, lengths: Ints | None) -> mx.array | None:
    """(B, N) mask of the N new steps of a state-space layer: step t of row b is real when
    ``t >= left_padding[b]`` and ``t < lengths[b]``; ``None`` when neither is tracked.

    An all-True mask is NOT the same as ``None`` in general: models take another code
    path (``mx.where(mask, x, 0)``, ``x * mask``), which on a GPU may be other kernels.
    ``BatchState.make_mask`` answers the all-kept case itself (``ssm_keeps_every_step``)
    and keeps mlx-lm's None-vs-array choice except where dropping it is exact.
    """
    if left_padding is None and lengths is None:
        return None
    pos = np.arange(N)  # host ints: build in numpy, upload once
    mask = None
    if left_padding is not None:
        mask = pos >= np.asarray(left_padding).reshape(-1, 1)
    if lengths is not None:  # one way: padded prefill
        valid = pos < np.asarray(lengths).reshape(-1, 1)
        mask = valid if mask is None else mask & valid
    return mx.array(mask)
