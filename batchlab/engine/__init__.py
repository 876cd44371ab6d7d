"""batchlab's batched-decode engine: its own batch caches, masks, scheduler and sampler.

It must not import mlx-lm's batch caches or BatchGenerator (tests/unit/test_engine_caches.py
checks this); mlx-lm's single-row caches and model modules are fine.
"""
