"""Which caches' calls the attention dispatch takes from mlx-lm's helper on CUDA.

The dispatch is installed into mlx-lm's model modules for the life of the process, so
in a live matrix worker the oracle's own caches pass through it too. On CUDA it sends a
packed cache's calls to the engine's quantized attention: only the engine's caches may
go there, or a kv cell's serial oracle (mlx-lm's QuantizedKVCache, which has ``bits``
too) would run the engine's code and the reference would be the engine's own.
"""

import mlx.core as mx
from mlx_lm.models.cache import QuantizedKVCache

from batchlab.engine.kernels import attention_dispatch as ad
from batchlab.engine.paths.quantized.kv import QuantizedMode


def test_on_cuda_only_the_engines_packed_caches_take_its_quantized_attention(monkeypatch):
    calls = []
    monkeypatch.setattr(ad, "on_cuda", lambda: True)
    monkeypatch.setattr(ad, "quantized_attention",
                        lambda q, k, v, scale, mask, group_size, bits, sinks, owner:
                        calls.append(("engine", type(owner).__name__, bits)) or q)

    def mlx_lm_helper(q, k, v, cache=None, scale=1.0, mask=None, sinks=None):
        calls.append(("mlx-lm", type(cache).__name__, getattr(cache, "bits", None)))
        return q

    class EnginePacked(QuantizedMode):  # the engine's mixin, switched to packed words
        quantized = True

        def __init__(self):
            from batchlab.engine.paths.quantized.kv import KVQuant

            self.quant = KVQuant(bits=4, group_size=64)

    dispatch = ad.make_dispatch(mlx_lm_helper)
    q = mx.zeros((1, 4, 1, 64), mx.bfloat16)
    k = mx.zeros((1, 2, 8, 64), mx.bfloat16)
    dispatch(q, k, k, QuantizedKVCache(group_size=64, bits=8), 0.1, None)
    dispatch(q, k, k, EnginePacked(), 0.1, None)
    assert calls == [("mlx-lm", "QuantizedKVCache", 8), ("engine", "EnginePacked", 4)]
