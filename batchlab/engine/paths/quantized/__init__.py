"""Quantized KV under batching: the scheme, the packed caches, their factory and the
kvmix sensitivity."""
