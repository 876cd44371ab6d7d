"""Under pytest-xdist (``-n auto --dist loadgroup``, pyproject's addopts) each test module
runs whole on one worker, so a module-scoped fixture (a live server, the self-test's run,
a converted checkpoint) is made once; the parity cells, which share nothing but the
per-process model cache, are handed out one at a time and fill the workers' tails.

xdist hands out work units in collection order, and tests/parity sorts first: left
there, the parity cells went out first and the longest module (the self-test's, ~80 s)
could start last on one worker while the other sat idle. So the modules go first, the
self-test's at their head, and the parity cells last, the real model's first among them
(its invariant cells take 30-40 s each: handed out last, one of them was the run's tail)."""

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
    for item in items:
        if not item.nodeid.startswith(SPREAD) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items.sort(key=_order)  # stable: each module's own order is kept
