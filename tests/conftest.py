"""Under pytest-xdist (``-n auto --dist loadgroup``, pyproject's addopts) each test module
runs whole on one worker, so a module-scoped fixture (a live server, the self-test's run,
a converted checkpoint) is made once; the parity cells, which share nothing but the
per-process model cache, are handed out one at a time and fill the workers' tails.

xdist 3.x hands out the largest groups first (``--loadscope-reorder``, its default),
collection order among groups of one size. The sort below puts the modules before the
parity cells and the real model's cells first among those (its invariant cell takes
~13 s: handed out last, it was the run's tail).

The parity cells that the self-test's control also evaluates (212 of them) join the
self-test's group instead: they run after its module (the sort puts it first, which
also holds under ``-n 0``), in its process, and read the control's results rather than
evaluating the same cells again (tests/control_results.py). That group is the largest,
so its ~35 s start at once on one worker while the other takes the next groups."""

import pytest

SPREAD = "tests/parity/test_matrices.py::test_cell["  # one work unit per cell
LONGEST = "tests/unit/test_selftest.py"  # its module fixture runs the whole catalog
SLOW_CELLS = "smollm2-135m"  # the real model: ~0.3 s a decode step here, the zoo's ~0.01


def _order(item) -> tuple[int, int]:
    if item.nodeid.startswith(SPREAD):
        return 2, 0 if SLOW_CELLS in item.nodeid else 1
    return (0 if item.nodeid.startswith(LONGEST) else 1), 0


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    control = set()
    if any(item.nodeid.startswith(LONGEST) for item in items):
        from control_results import control_ids  # imports the catalog: only when needed

        control = {f"{SPREAD}{i}]" for i in control_ids()}
    for item in items:
        if item.nodeid in control:
            item.add_marker(pytest.mark.xdist_group(LONGEST))
        elif not item.nodeid.startswith(SPREAD) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items.sort(key=_order)  # stable: each module's own order is kept
