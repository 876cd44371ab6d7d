"""The scheduler, its batches, samplers, processors, history and the cache factory."""
