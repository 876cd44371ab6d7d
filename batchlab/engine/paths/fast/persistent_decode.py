"""``fast``'s decode step of one row on CUDA as one kernel for all the layers
(``kernels/row_step.py``): on by default where the layers are small (``on_by_default``);
``BATCHLAB_FAST_PERSISTENT=1`` switches it on for any model it can run, ``=0`` off.

The host builds and launches the embedding, one kernel, the final norm and the head,
where the modules' forward launches some 230 kernels for llama-3.2-1b (the chain, 118):
the step of one row is bound by the host on the H200 (docs/performance.md). The kernel
writes each layer's new key and value into the cache's buffers itself, so before it runs
every layer's cache gets room for the column (``BatchKV.room_for_one``) and buffers of
its own, row-contiguous (a filtered cache holds a strided view: MLX would hand the
kernel a copy of it, and the write would land in the copy); after it, the cache holds
its buffers as arrays that depend on the kernel (``mx.depends``), so whatever reads
them next runs after the write.

The products sum in the kernel's order and the attention is its own, so this is not l1's
rounding: ``fast`` on a GPU is judged by KL against the oracle, and this step is held to
that gate.
"""

from __future__ import annotations

import weakref

import mlx.core as mx
from mlx import nn

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.kernels import row_chain, row_step
from batchlab.engine.paths.fast import chain_decode, flat_decode

PERSISTENT_ENV = "BATCHLAB_FAST_PERSISTENT"
# The layers' weight bytes up to which the kernel runs by default. Its phases are bound by
# latency (one block an SM): on the H200 llama-3.2-1b's 1.95 GB of layers took 1.30 ms a
# step with it against fast's own 1.61, host-bound; llama-3.1-8b's 15 GB took 6.26 ms
# against 4.79, where MLX's products stream the weights faster
# (reports/bench/cuda-sm90/issue28-persistent/). The kernel's ~1.6 TB/s meets the host's
# ~1.6 ms near 2.5 GB.
DEFAULT_MAX_LAYER_BYTES = 2_500_000_000


def _layer_arrays(layer: nn.Module,  # not gated: gpu only
                  head_norms: bool) -> tuple[mx.array, ...]:
    attn, mlp = layer.self_attn, layer.mlp
    arrays = (layer.input_layernorm.weight, attn.q_proj.weight, attn.k_proj.weight,
              attn.v_proj.weight, attn.o_proj.weight, layer.post_attention_layernorm.weight,
              mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)
    return arrays + ((attn.q_norm.weight, attn.k_norm.weight) if head_norms else ())


def _shape(model: nn.Module) -> tuple[int, int, int, int, int, int]:  # not gated: gpu only
    """(hidden, head dim, query heads, KV heads, intermediate, layers)."""
    layer = model.model.layers[0]
    attn = layer.self_attn
    hidden = attn.q_proj.weight.shape[1]
    return (hidden, attn.q_proj.weight.shape[0] // attn.n_heads, attn.n_heads,
            attn.n_kv_heads, layer.mlp.gate_proj.weight.shape[0], len(model.model.layers))


def _eps(layer: nn.Module, head_norms: bool) -> tuple[float, float, float]:  # not gated: gpu only
    attn = layer.self_attn
    return (layer.input_layernorm.eps, layer.post_attention_layernorm.eps,
            attn.q_norm.eps if head_norms else 0.0)


def unsupported_reason(model: nn.Module) -> str | None:  # not gated: gpu only
    """Why the kernel cannot run ``model``'s decode step of one row (None: it can)."""
    reason = chain_decode.unsupported_reason(model)
    if reason:
        return reason
    head_norms = flat_decode.FAMILIES[type(model).__module__]
    hidden, dim, n_q, n_kv, inter, layers = _shape(model)
    dtype = model.model.layers[0].input_layernorm.weight.dtype
    if dim % 64 or n_q % n_kv:
        return f"head dim {dim} (a multiple of 64 needed) or {n_q} / {n_kv} heads"
    if not row_chain.fits(dtype, inter) or not row_chain.fits(dtype, n_q * dim):
        return "an intermediate or attention width that is not whole 16-byte chunks"
    rope = model.model.layers[0].self_attn.rope
    if row_chain.rope_inverse_frequencies(rope) is None or rope.dims != dim:
        return f"a RoPE the kernel does not reproduce ({type(rope).__name__})"
    layer0 = model.model.layers[0]
    for layer in model.model.layers:
        if (_eps(layer, head_norms) != _eps(layer0, head_norms)
                or layer.self_attn.scale != layer0.self_attn.scale):
            return "layers with different norm eps or attention scales"
    used = row_step.shared_bytes(dtype, hidden, dim, n_q, inter, layers, head_norms)
    if used > row_step.SHARED_BYTES:
        return f"{used} bytes of shared memory a block (at most {row_step.SHARED_BYTES})"
    return None


def on_by_default(model: nn.Module) -> bool:  # not gated: gpu only
    """Whether the kernel runs ``model``'s one-row step unless switched: its layers' weights
    are at most ``DEFAULT_MAX_LAYER_BYTES`` (called once ``unsupported_reason`` is None)."""
    head_norms = flat_decode.FAMILIES[type(model).__module__]
    layers = model.model.layers
    return (sum(a.nbytes for layer in layers for a in _layer_arrays(layer, head_norms))
            <= DEFAULT_MAX_LAYER_BYTES)


class RowStep:
    """One row's decode forward through ``row_step``, built once per scheduler (it keeps
    the weights it was built with: a model updated later needs a new scheduler)."""

    def __init__(self, model: nn.Module):  # not gated: gpu only
        self.head_norms = flat_decode.FAMILIES[type(model).__module__]
        inner = model.model
        self.shape = _shape(model)
        self.weights = [_layer_arrays(layer, self.head_norms) for layer in inner.layers]
        self.embed = inner.embed_tokens
        self.norm = inner.norm
        self.head = flat_decode.output_head(model)
        layer0 = inner.layers[0]
        self.inv_freq = row_chain.rope_inverse_frequencies(layer0.self_attn.rope)
        self.consts = mx.array([*_eps(layer0, self.head_norms), layer0.self_attn.scale],
                               dtype=mx.float32)
        # the grid barrier's word (any start value works), in a buffer of its own on the
        # device: MLX keeps arrays of 8 bytes or less in a managed pool the host also touches,
        # and there every block's atomic took ~4 us (a barrier of 132 blocks, ~500 us)
        self.barrier = mx.zeros((row_step.BARRIER_WORDS,), dtype=mx.uint32)
        mx.eval(self.inv_freq, self.consts, self.barrier)
        # each cache's buffers as this step last made them its own
        self._owned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def runs(self, caches: list) -> bool:  # not gated: gpu only
        """Whether the kernel can take this step: one row of full-attention caches."""
        first = caches[0]
        return (isinstance(first, BatchKV) and all(type(c) is type(first) for c in caches)
                and first.keys is not None and first.keys.shape[0] == 1
                and first.keys.dtype == self.weights[0][1].dtype)

    def _own_buffers(self, caches: list) -> None:  # not gated: gpu only
        """Give every cache row-contiguous buffers of its own, once per new buffer."""
        for c in caches:
            c.room_for_one()
            owned = self._owned.get(c)
            if owned is None or owned[0] is not c.keys or owned[1] is not c.values:
                c.keys, c.values = mx.contiguous(c.keys), mx.contiguous(c.values)
                self._owned[c] = (c.keys, c.values)

    def logits(self, tokens: mx.array, caches: list) -> mx.array:  # not gated: gpu only
        """The logits ``(1, V)`` of one decode step of the row's token ``tokens`` ``(1,)``."""
        self._own_buffers(caches)
        first = caches[0]
        meta = mx.array([first._idx, int(first.left_padding_host[0]),
                         int(first.offset_host[0]), first.keys.shape[2]], dtype=mx.int32)
        arrays = []
        for weights, c in zip(self.weights, caches, strict=True):
            arrays += [*weights, c.keys, c.values]
        h = row_step.step(self.embed(tokens), meta, self.barrier, self.consts, self.inv_freq,
                          arrays, self.shape, self.head_norms)
        # the buffers as arrays that come after the kernel: MLX sees no write to them, so
        # a reader (the next step's kernel, a join's concatenation) would otherwise have
        # no edge to it, and two such kernels in one graph could run at once and never
        # meet at their grid barriers
        buffers = mx.depends([a for c in caches for a in (c.keys, c.values)], [h])
        for i, c in enumerate(caches):
            c.keys, c.values = buffers[2 * i], buffers[2 * i + 1]
            self._owned[c] = (c.keys, c.values)
            c.wrote_one()
        return self.head(self.norm(h))
