"""Cell expansion, canonical ids and script validation: pure Python, milliseconds."""

import pytest
from loaded_matrices import matrix_cells

from batchlab.cells.cell import Event, Row
from batchlab.cells.events import parse_event, validate_events
from batchlab.cells.scenarios import prompt_lengths, script_events, seeded_prompt
from batchlab.cells.spec import expand, load_matrix

SWEEP = {
    "sweep": [{
        "models": ["llama", "gemma3"], "batch": [1, 3], "padding": ["equal", "ragged"],
        "scripts": ["static", "join-evict"], "contexts": ["short", "wrap"],
    }]
}


def test_sweep_expands_to_the_cross_product_without_b1_scripts():
    cells = expand(SWEEP)
    # per model: B=1 static x 2 paddings x 2 contexts = 4; B=3: 2 x 2 x 2 = 8
    assert len(cells) == 2 * (4 + 8)
    assert cells[0].id == "l1/llama/B1/equal/static/ctx-short"
    assert "l1/gemma3/B3/ragged/join-evict/ctx-wrap" in [c.id for c in cells]
    assert not [c for c in cells if c.batch == 1 and c.script != "static"]


def test_ids_are_canonical_and_expansion_is_deterministic():
    a, b = expand(SWEEP), expand(SWEEP)
    assert [c.id for c in a] == [c.id for c in b]
    assert [c.definition_digest() for c in a] == [c.definition_digest() for c in b]
    assert len({c.id for c in a}) == len(a)


def test_join_evict_is_the_issue_scenario():
    events = script_events("join-evict", ["A", "B", "C"])
    assert [str(e) for e in events] == ["insert A,B at 0", "insert C at 3", "remove A at 8"]


def test_ragged_has_a_length_one_prompt_and_b1_ragged_is_length_one():
    assert prompt_lengths("ragged", 26, 4) == [26, 1, 13, 23]
    assert prompt_lengths("ragged", 26, 1) == [1]
    assert prompt_lengths("equal", 5, 3) == [5, 5, 5]


def test_seeded_prompts_are_pinned():
    # numpy's PCG64 stream is stable across machines and versions; pin it anyway
    assert seeded_prompt("A", 5, 0) == (187, 251, 167, 192, 242)
    assert seeded_prompt("A", 5, 0) != seeded_prompt("B", 5, 0)


def test_definition_digest_and_id_change_with_the_seed():
    cells = expand(SWEEP)
    other = expand({**SWEEP, "defaults": {"seed": 1}})
    assert other[0].id == cells[0].id + "/seed1"  # ids name what changes the bits
    assert cells[0].definition_digest() != other[0].definition_digest()


def test_explicit_cell_and_event_parsing():
    cells = expand({"cell": [{
        "model": "llama", "script": "abc", "prompts": {"A": [1, 2], "B": {"length": 4}},
        "events": ["insert A at 0", "insert B at 2", "remove A at 5"],
    }]})
    assert cells[0].id == "l1/llama/B2/explicit/abc/ctx-explicit"
    assert parse_event("remove A,B at 8", "t") == Event(step=8, action="remove", rows=("A", "B"))


@pytest.mark.parametrize("text", ["insert A", "add A at 0", "insert A at x", "insert A at -1"])
def test_bad_events_say_how_to_write_them(text):
    with pytest.raises(ValueError, match="event"):
        parse_event(text, "here")


def test_invalid_scripts_are_rejected():
    rows = (Row(name="A", prompt=(1,), max_tokens=4),)
    with pytest.raises(ValueError, match="removed before"):
        validate_events(rows, (Event(step=0, action="remove", rows=("A",)),), "t")
    with pytest.raises(ValueError, match="never inserted"):
        validate_events(rows + (Row(name="B", prompt=(1,), max_tokens=4),),
                        (Event(step=0, action="insert", rows=("A",)),), "t")


def test_unknown_keys_and_duplicate_ids_are_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown keys"):
        expand({"sweep": [{**SWEEP["sweep"][0], "batchsize": [2]}]})
    with pytest.raises(ValueError, match="appears twice"):
        expand({"sweep": SWEEP["sweep"] * 2})
    bad = tmp_path / "m.toml"
    bad.write_text("[[sweep]\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_matrix(bad)


def test_committed_matrices_meet_the_gate_requirements():
    cells = matrix_cells("matrices/default.toml")
    assert len(cells) >= 300
    assert {c.batch for c in cells} >= {1, 2, 3, 4, 8, 34}
    assert {c.script for c in cells} >= {"static", "join", "evict", "join-evict", "staggered",
                                         "trickle", "evict-many", "evict-early", "late-join"}
    assert {c.context for c in cells} == {"short", "wrap", "grow", "long", "explicit"}
    # the schedule's regimes (issue 14): more rows than either cap, chunked prefill
    assert any(c.batch > c.schedule.prefill_batch_size for c in cells)
    assert any(c.batch > max(c.schedule.completion_batch_size, c.schedule.prefill_batch_size)
               for c in cells if c.schedule.completion_batch_size == 32)
    assert any(max(len(r.prompt) for r in c.rows) > c.schedule.prefill_step_size
               for c in cells if c.schedule.prefill_step_size == 2048)
    assert {c.sampling.greedy for c in cells} == {True, False}
    assert any("@w" in c.model for c in cells)
    assert any(len(r.prompt) == 1 for c in cells for r in c.rows)
    assert len(load_matrix("matrices/quick.toml")) <= 40


def test_regime_scripts_are_pinned():
    names = list("ABCDEFGH")
    assert [str(e) for e in script_events("trickle", names[:5])] == [
        "insert A,B at 0", "insert C,D at 1", "insert E at 2"]
    assert [str(e) for e in script_events("evict-many", names)] == [
        "insert A,B,C,D,E,F,G,H at 0", "remove A,D,E,H at 8"]
    assert [str(e) for e in script_events("evict-many", names[:4])] == [
        "insert A,B,C,D at 0", "remove A,C,D at 8"]
    assert [str(e) for e in script_events("evict-early", names[:3])] == [
        "insert A,B,C at 0", "remove B,C at 1"]
    assert [str(e) for e in script_events("late-join", names[:3])] == [
        "insert A,B at 0", "insert C at 10"]


def test_rows_past_z_keep_spreadsheet_names():
    from batchlab.cells.scenarios import row_names

    assert row_names(28)[24:] == ["Y", "Z", "AA", "AB"]
    (cell,) = expand({"sweep": [{"models": ["llama"], "batch": [34], "padding": ["equal"],
                                 "scripts": ["static"], "contexts": ["short"]}]})
    assert len(cell.rows) == 34 and cell.rows[-1].name == "AH"


def test_explicit_cell_batch_is_the_most_rows_alive_at_once():
    def batch(events):
        (c,) = expand({"cell": [{"model": "llama", "script": "s",
                                 "prompts": {n: [1] for n in "ABCD"}, "events": events}]})
        return c.batch

    # a removal and an insert in one step: the removal goes first
    assert batch(["insert A,B at 0", "remove A at 3", "insert C at 3", "insert D at 5"]) == 3
    assert batch(["insert A at 0", "insert B,C at 1", "insert D at 2", "remove B at 4"]) == 4
