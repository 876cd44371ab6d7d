"""How far the fast path's seeded bugs move a cell's logprobs, against the noise of two
correct attentions (``attention_rounding.py``).

On a GPU fast is judged by KL against mlx-lm's batch mode (its unmasked decode runs
another attention kernel than the oracle's masked one), so its gate there must sit above
that noise and below what a bug does. This runs, on the CPU with the live oracle, every
self-test bug whose name contains the argument (default ``fast``) on its candidate fast
cells, and prints each cell's verdict line: on the CPU fast is bit-exact, so a bug FAILs
there anyway, and the line's KL statistics say how far the bug moved the logprobs (up to
the row's first different token, as the gate counts them).

Then (``kernel``) three slips a CUDA decode kernel could make, which the CPU cannot run,
emulated around the attention call of fast's flat decode on its unmasked steps: the
newest key left out, the oldest key left out, and query head h read against KV head
h % H_kv instead of h // G.

    PYTHONPATH=. python tools/probes/fast_bug_kl.py [bug-name-substring | kernel]
"""

from __future__ import annotations

import sys

import mlx.core as mx

from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.defaults import PROJECT_ROOT
from batchlab.engine.paths.fast import flat_decode
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.selftest.catalog import select_bugs
from batchlab.selftest.inject import applied, wrapped

MATRIX = PROJECT_ROOT / "matrices" / "default.toml"
KERNEL_CELLS = ("fast/llama/B4/equal/static/ctx-wrap", "fast/qwen3/B4/equal/static/ctx-wrap",
                "fast/llama/B4/equal/static/ctx-short")


def _keys_interleaved(keys, group):
    """KV head h % H_kv for query head h, as a kernel with the group index wrong reads."""
    n_kv = keys.shape[1]
    order = [h % n_kv for h in range(n_kv * group)]
    return mx.take(keys, mx.array(order), axis=1)


def _kernel_slips():
    def wrap(change):
        def make(clean):
            def attention(attn, x, mask, cache, sdpa, head_norms):
                def slipped(q, k, v, cache=None, scale=1.0, mask=None, **kw):
                    if mask is None and q.shape[2] == 1 and k.shape[2] > 1:
                        q, k, v = change(q, k, v)
                    return sdpa(q, k, v, cache=cache, scale=scale, mask=mask, **kw)
                return clean(attn, x, mask, cache, slipped, head_norms)
            return attention
        return [wrapped(flat_decode, "_attention", make)]

    def heads(q, k, v):
        group = q.shape[1] // k.shape[1]
        return q, _keys_interleaved(k, group), _keys_interleaved(v, group)

    return {"kernel-misses-newest-key": wrap(lambda q, k, v: (q, k[..., :-1, :], v[..., :-1, :])),
            "kernel-misses-oldest-key": wrap(lambda q, k, v: (q, k[..., 1:, :], v[..., 1:, :])),
            "kernel-kv-head-h-mod-hkv": wrap(heads)}


def main(pattern: str) -> None:
    cells = load_matrix(MATRIX)
    ref = Reference(matrix=str(MATRIX), goldens=PROJECT_ROOT / "goldens", live=True)
    if pattern == "kernel":
        chosen = [c for c in cells if c.id in KERNEL_CELLS]
        for name, patches in _kernel_slips().items():
            for cell in chosen:
                with applied(patches):
                    result = evaluate_cell(cell, ref)
                print(f"{name} {cell.id}: {result.status.value} {result.detail}", flush=True)
        return
    for bug in select_bugs(pattern):
        chosen = [c for c in select(cells, bug.cells, None) if c.path == "fast"]
        for cell in chosen:
            with applied(bug.inject()):
                result = evaluate_cell(cell, ref)
            print(f"{bug.name} {cell.id}: {result.status.value} {result.detail}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fast")
