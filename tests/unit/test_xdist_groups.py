"""Each test module runs whole on one xdist worker (tests/conftest.py gives every module
its own xdist_group; pyproject's addopts ask for --dist loadgroup), so module fixtures
are built once. pytest 9.2 broke that silently (pytest-dev/pytest-xdist#1386): this
test fails then instead of the suite just getting slower."""

import os

import pytest


def test_this_module_is_one_xdist_group(request):
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        pytest.skip("not under pytest-xdist (-n 0)")
    assert request.node.nodeid.endswith("@tests/unit/test_xdist_groups.py"), (
        f"{request.node.nodeid}: --dist loadgroup did not group this module; see pyproject's "
        "pin of pytest")
