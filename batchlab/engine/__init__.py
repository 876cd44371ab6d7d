"""batchlab's batched-decode engine: its own batch caches, masks, scheduler and sampler.

    core/     the scheduler, its two batches, per-row samplers and processors, history,
              the cache factory and the row cost
    caches/   the batch caches the models write (kv, ring, window, state) and their masks
    kernels/  attention a path swaps in (per-row attention, quantized attention)
    paths/    how the engine can run: fast, compiled, quantized/, invariant/ and the
              registry that names them

It must not import mlx-lm's batch caches or BatchGenerator (tests/unit/test_engine_caches.py
checks this); mlx-lm's single-row caches and model modules are fine. It knows nothing of
cells, goldens or how the harness judges it.
"""
