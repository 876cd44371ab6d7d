"""A pytest plugin that runs the killers of a mutant in fail-fast order.

mutmut hands each mutant the set of tests that reached the mutated function, in no
particular order, and runs them with ``-x``. A killed mutant costs the time to its first
failure, so the order is: the engine's own unit tests (exact values, milliseconds), then
the default-matrix cells that exercise the most schedule regimes at once (ragged rows that
join and leave, rings that wrap, every cache family), then the other cells, then the
rest of the unit tests (end-to-end ones that take seconds).

Use: ``python -m pytest -p batchlab.gate.killers ...`` (``[tool.mutmut]`` passes it).
"""

from __future__ import annotations

# Unit tests of the engine itself: fast and exact, first.
ENGINE_UNIT_FILES = (
    "tests/unit/test_engine_",
    "tests/unit/test_sampler.py",
    "tests/unit/test_compiled_path.py",
)

# Cell id fragments, most discriminating first: one cell of each cache family that joins,
# evicts and (for rings) wraps, then the regimes one at a time. A cell matches the first
# fragment it contains; the position in this list is its rank.
CELL_PRIORITY = (
    "l1/llama/B3/ragged/join-evict/ctx-wrap",
    "l1/gemma3/B3/ragged/join-evict/ctx-wrap",
    "l1/qwen3.5/B3/ragged/join-evict/ctx-wrap",
    "l1/gpt-oss/B3/ragged/join-evict/ctx-wrap",
    "l1/gemma4-e4b/B3/ragged/join-evict/ctx-wrap",
    "l1/mamba2/B3/ragged/join-evict/ctx-short",
    "l1/lfm2/B3/ragged/join-evict/ctx-short",
    "fast/gemma3/B4/ragged/join-evict/ctx-wrap",
    "compiled/llama/B4/ragged/join-evict/ctx-wrap",
    # the schedule's limits (round 3: these killed prepare__mutmut_7 and step__mutmut_10
    # only past the device's 40 s cap, 90 and 159 cells into their killers)
    "l1/llama/B6/ragged/trickle/ctx-short/steps1_pb4_cb2",
    "paged/llama/B4/ragged/join-evict/ctx-wrap/pb2_cb2",
    # bad requests refused while the other rows run (round 4: the request checks; the
    # cell costs ~0.3 s, and past the cap Request.__post_init__'s mutant sat 2082 deep)
    "/explicit/refuse-requests/",
    "/B3/ragged/staggered/",
    "/B3/ragged/join/",
    "/B3/ragged/evict/",
    "/B8/ragged/",
    "/ragged/join-evict/",
    "/ragged/",
)
PARITY_FILE = "tests/parity/"


def rank(nodeid: str) -> tuple[int, int]:
    """Sort key of one test id: (tier, rank inside the tier)."""
    nodeid = nodeid.removeprefix("mutants/")
    if nodeid.startswith(ENGINE_UNIT_FILES):
        return (0, 0)
    if nodeid.startswith(PARITY_FILE):
        for i, fragment in enumerate(CELL_PRIORITY):
            if fragment in nodeid:
                return (1, i)
        return (2, 0)
    return (3, 0)


def pytest_collection_modifyitems(session, config, items) -> None:
    # sort() is stable: inside one rank, tests keep the order pytest collected them in.
    items.sort(key=lambda item: rank(item.nodeid))
