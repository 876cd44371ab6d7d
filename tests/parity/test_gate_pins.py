"""The gate's size: the default matrix keeps its pinned cells, the goldens their pinned
ORACLE-BUG ids (gate_pins.json; refresh with ``batchlab golden pins --write``)."""

import pytest
from loaded_matrices import matrix_cells

from batchlab.backend import backend_key
from batchlab.defaults import DEFAULT_GOLDENS, DEFAULT_MATRIX
from batchlab.golden.pins import WRITE_COMMAND, Pins, current_pins, differences, read_pins

PINS = read_pins()


@pytest.mark.parity
def test_the_default_matrix_has_exactly_the_pinned_cells():
    ids = sorted(c.id for c in matrix_cells(DEFAULT_MATRIX))
    assert len(ids) == len(PINS.cell_ids) and ids == list(PINS.cell_ids), (
        "\n".join(differences(PINS, Pins(matrix="", cell_ids=tuple(ids),
                                          oracle_bug=PINS.oracle_bug), backend_key()))
        + f"\nif intended, run `{WRITE_COMMAND}` and commit tests/parity/gate_pins.json")


@pytest.mark.parity
def test_the_goldens_mark_exactly_the_pinned_oracle_bug_cells():
    now = current_pins(DEFAULT_MATRIX, DEFAULT_GOLDENS, keep=PINS)
    assert differences(PINS, now, backend_key()) == []


def test_a_lost_cell_and_a_new_oracle_bug_are_named():
    pinned = Pins(matrix="m", cell_ids=("a", "b", "c"), oracle_bug={"cpu": ("b",)})
    now = Pins(matrix="m", cell_ids=("a", "b"), oracle_bug={"cpu": ("a", "b")})
    assert differences(pinned, now, "cpu") == [
        "cells no longer: 1: c", "ORACLE-BUG cells on cpu not pinned: 1: a"]
    assert differences(pinned, pinned, "cpu") == []
    assert differences(pinned, pinned, "metal") == ["no oracle-bug pin for backend metal"]


def test_the_pin_file_round_trips_and_its_count_is_checked(tmp_path):
    pins = Pins(matrix="m", cell_ids=("a", "b"), oracle_bug={"cpu": ("b",)})
    path = tmp_path / "pins.json"
    path.write_text(pins.to_json())
    assert read_pins(path) == pins
    path.write_text(pins.to_json().replace('"cells": 2', '"cells": 3'))
    with pytest.raises(ValueError, match="'cells' is 3 but 2 ids are listed"):
        read_pins(path)
