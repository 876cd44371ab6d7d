"""A pytest plugin that gives each test its own coverage context (its node id).

The unit tests' half of the mutation map (gate/mutation_map.py): run them as
``python -m coverage run --source batchlab/engine -m pytest -p batchlab.gate.unit_contexts
...`` and every engine line records the tests that ran it, as pytest-cov's
``--cov-context=test`` would, without needing pytest-cov.
"""

from __future__ import annotations

import os

import pytest

# Where the node ids of the tests that passed go (one a line): a test that fails on the
# clean engine (a missing model, no network) would "kill" every mutant it reaches.
PASSED_FILE = "MUTATION_UNIT_PASSED"


def _switch(context: str) -> None:
    import coverage

    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(context)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _switch(item.nodeid)  # setup, call and teardown: a fixture may run the engine too
    yield
    _switch("")


def pytest_runtest_logreport(report):
    path = os.environ.get(PASSED_FILE)
    if path and report.when == "call" and report.passed:
        with open(path, "a") as sink:
            sink.write(report.nodeid + "\n")
