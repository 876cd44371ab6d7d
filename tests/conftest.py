"""Under pytest-xdist (``-n auto --dist loadgroup``, pyproject's addopts) each test module
runs whole on one worker, so a module-scoped fixture (a live server, the self-test's run,
a converted checkpoint) is made once; the parity cells, which share nothing but the
per-process model cache, are handed out one at a time and fill the workers' tails."""

import pytest

SPREAD = "tests/parity/test_matrices.py::test_cell["  # one work unit per cell


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if not item.nodeid.startswith(SPREAD) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
