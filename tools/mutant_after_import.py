"""Switch one mutant on after import (as the campaign's trampoline does after its fork),
then evaluate the filtered default-matrix cells in this process against the goldens.

    python tools/mutant_after_import.py MODULE QUALNAME OLD NEW FILTER
    python tools/mutant_after_import.py batchlab.engine.core.batch Request.__post_init__ \
        'max_tokens <= 0' 'max_tokens < 0' refuse-requests

QUALNAME is a module function or Class.method; OLD must occur once in its source. A
closure built at import (``refuses_quantized``'s) cannot be switched this way: apply
such a mutant to the source instead.
"""
import importlib
import inspect
import sys
import textwrap
from pathlib import Path

from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.matrix.evaluate import Reference, evaluate_cell

module_name, qualname, old, new, pattern = sys.argv[1:6]

cells = select(load_matrix("matrices/default.toml"), pattern, None)
mod = importlib.import_module(module_name)
owner, _, name = qualname.rpartition(".")
target = getattr(mod, owner) if owner else mod
fn = inspect.unwrap(getattr(target, name))
if isinstance(inspect.getattr_static(target, name), property):
    raise SystemExit("properties are not handled; apply that mutant to the source")
src = textwrap.dedent(inspect.getsource(fn))
if src.count(old) != 1:
    raise SystemExit(f"{old!r} occurs {src.count(old)} times in {qualname}")
ns = dict(mod.__dict__)
exec(compile(src.replace(old, new), f"<mutant {qualname}>", "exec"), ns)
setattr(target, name, ns[name])
ref = Reference(matrix="matrices/default.toml", goldens=Path("goldens"))
for cell in cells:
    r = evaluate_cell(cell, ref)
    print(f"  {str(r.status):12s} {cell.id[:70]}  {r.detail.replace(cell.id + ': ', '')[:220]}")
