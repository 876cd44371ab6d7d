import sys
sys.path.insert(0, ".")
from tools.tester7 import bugs
from batchlab.engine.kernels import attention_dispatch as D
calls = {"prefill_owner_none": 0, "prefill_rows": 0, "decode_rows": 0, "orig": 0}
orig_make = D.make_dispatch
def counting_make(original):
    inner = orig_make(original)
    def f(queries, keys, values, cache, scale, mask, sinks=None):
        owner = D._cache_of(keys, cache)
        if queries.shape[2] > 1:
            if getattr(owner, "prefills_rows", False): calls["prefill_rows"] += 1
            elif cache is None: calls["prefill_owner_none"] += 1
            else: calls["orig"] += 1
        return inner(queries, keys, values, cache, scale, mask, sinks)
    f.original = original
    return f
D.make_dispatch = counting_make
from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.defaults import DEFAULT_GOLDENS
cells = select(load_matrix("matrices/default.toml"), "invariant-blocked/gemma4-e4b", None)
ref = Reference(matrix="matrices/default.toml", goldens=DEFAULT_GOLDENS, live=False)
for c in cells:
    r = evaluate_cell(c, ref); print(c.id, r.status, calls)
