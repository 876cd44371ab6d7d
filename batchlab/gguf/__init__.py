"""GGUF files as mlx-lm model directories (``batchlab zoo import``, the real model)."""
