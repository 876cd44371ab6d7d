"""batchlab: a research and validation harness for batched LLM decoding on MLX.

The engine (``batchlab.engine``) runs mlx-lm's model modules through batchlab's own batch
caches and scheduler; the oracle (``batchlab.oracle``) drives mlx-lm's BatchGenerator; the
matrix runner compares the two bit for bit.
"""

__version__ = "0.1.0"
