"""Refusal cells: a subject that declares 'validates' turns bad raw requests down by kind
and keeps serving; one that does not is UNSUPPORTED; the judge wants the kind and a
message, never a given text (batchlab/subjects/refusal.py, docs/subjects.md)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from batchlab.cells.spec import expand
from batchlab.subjects.capabilities import refusal
from batchlab.subjects.engine import BatchlabSubject
from batchlab.subjects.peer import answer
from batchlab.subjects.process import ProcessSubject
from batchlab.subjects.protocol import Capabilities, Refused, Setup, SubjectError
from batchlab.subjects.refusal import RefusalMismatch, judge_answer

CELL = {"model": "llama", "script": "refuse-x", "steps": 3,
        "prompts": {"A": [1, 2, 3], "B": [4, 5]},
        "events": ["insert A at 0", "insert B at 2"]}


def _cell(**extra):
    (cell,) = expand({"cell": [CELL | extra]})
    return cell


def test_a_refuse_entry_is_kept_raw_with_the_cells_steps_as_default():
    cell = _cell(refuse=[{"at": 1, "expect": "invalid",
                          "row": {"name": "X", "prompt": [7], "sampling": {"top_p": 1.5}}}])
    (r,) = cell.refusals
    assert (r.step, r.expect) == (1, "invalid")
    assert r.row() == {"name": "X", "prompt": [7], "sampling": {"top_p": 1.5},
                       "max_tokens": 3, "history": "none"}
    assert cell.definition()["refusals"] == [r.definition()]
    assert "refusals" not in _cell().definition()  # other cells define what they did


@pytest.mark.parametrize(("entry", "says"), [
    ({"at": 1, "expect": "wrong", "row": {"name": "X", "prompt": [7]}}, "expect = 'wrong'"),
    ({"at": 5, "expect": "invalid", "row": {"name": "X", "prompt": [7]}}, "from 0 to 2"),
    ({"at": 1, "expect": "invalid", "row": {"prompt": [7]}}, "needs a name and a prompt"),
    ({"at": 1, "expect": "invalid", "row": {"name": "X", "prompt": [7]}, "why": 1}, "why"),
])
def test_a_malformed_refuse_entry_is_refused_with_what_to_change(entry, says):
    with pytest.raises(ValueError, match="refuse #1") as err:
        _cell(refuse=[entry])
    assert says in str(err.value)


def test_a_solo_judged_path_takes_no_refusal_cell():
    with pytest.raises(ValueError, match="solo runs"):
        _cell(path="invariant", refuse=[{"at": 1, "expect": "invalid",
                                         "row": {"name": "X", "prompt": [7]}}])


def test_a_subject_without_validates_is_unsupported_for_refusal_cells():
    cell = _cell(refuse=[{"at": 1, "expect": "invalid", "row": {"name": "X", "prompt": [7]}}])
    assert "declares no validation" in refusal("mlx-lm", Capabilities(paths=("l1",)), cell)
    assert refusal("batchlab", Capabilities(validates=True), cell) is None
    assert refusal("mlx-lm", Capabilities(paths=("l1",)), _cell()) is None
    assert Capabilities.from_dict(Capabilities(validates=True).as_dict()).validates is True
    assert Capabilities.from_dict({}).validates is False


@pytest.fixture
def subject():
    s = BatchlabSubject()
    s.open(Setup(cell="t", model="llama", model_dir=""))
    s.submit({"name": "A", "prompt": [1, 2, 3], "max_tokens": 3})
    yield s
    s.close()


@pytest.mark.parametrize("row", [
    {"name": "X", "prompt": [7], "max_tokens": 3, "sampling": {"temperature": 0.5, "top_p": 0}},
    {"name": "X", "prompt": [7], "max_tokens": 3, "sampling": {"temperature": -1.0}},
    {"name": "X", "prompt": [7], "max_tokens": 3,
     "processors": {"logit_bias": [[5, 1.0], [5, 2.0]]}},
    {"name": "X", "prompt": [7], "max_tokens": 3, "processors": {"presence_context_size": 0}},
    {"name": "X", "prompt": [7], "max_tokens": 0},
    {"name": "X", "prompt": [], "max_tokens": 3},
    {"name": "X", "prompt": [7], "max_tokens": 3, "sampling": {"temp": 0.5}},
    {"name": "A", "prompt": [7], "max_tokens": 3},
    {"prompt": [7], "max_tokens": 3},
])
def test_the_engine_refuses_a_bad_request_as_invalid_and_keeps_its_rows(subject, row):
    with pytest.raises(Refused) as err:
        subject.submit(row)
    assert err.value.kind == "invalid" and len(err.value.message.split()) >= 3
    assert subject.num_active == 1  # only A, still running
    emitted = []
    while subject.num_active and len(emitted) < 10:
        emitted += [e.name for e in subject.step()]
    assert emitted == ["A", "A", "A"]


def test_the_peer_answers_a_refusal_and_stays_up(subject):
    reply = answer(subject, {"op": "insert", "rows": [{"name": "X", "prompt": [7],
                                                       "max_tokens": 0}]})
    assert reply["ok"] is False and reply["refused"]["kind"] == "invalid"
    assert answer(subject, {"op": "insert", "rows": [{"name": "B", "prompt": [7],
                                                      "max_tokens": 2}]}) == {"ok": True,
                                                                              "active": 2}


class _Answers:
    name = "fake"

    def __init__(self, error: Exception | None):
        self.error = error

    def submit(self, row):
        if self.error is not None:
            raise self.error


def test_the_judge_wants_the_kind_and_a_message_not_a_text():
    row = {"name": "X"}
    judge_answer(_Answers(Refused("invalid", "top_p must be in (0, 1]")), row, "invalid")
    judge_answer(_Answers(None), row, None)
    for subject, expect, says in [
        (_Answers(None), "invalid", "accepted request 'X'"),
        (_Answers(Refused("invalid", "None")), "invalid", "says nothing"),
        (_Answers(Refused("unsupported", "not on this path, use l1")), "invalid", "'unsupported'"),
        (_Answers(Refused("invalid", "max_tokens must be > 0")), None, "refused valid request"),
    ]:
        with pytest.raises(RefusalMismatch, match=says):
            judge_answer(subject, row, expect)


def _fake_peer(tmp_path, refused: dict) -> ProcessSubject:
    script = tmp_path / "peer.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        for line in sys.stdin:
            op = json.loads(line)["op"]
            if op == "hello":
                r = {{"ok": True, "protocol": "batchlab-subject/1", "name": "fake",
                     "capabilities": {{"validates": True}}}}
            elif op == "insert":
                r = {{"ok": False, "refused": {json.dumps(refused)}}}
            else:
                r = {{"ok": True}}
            print(json.dumps(r), flush=True)
    """))
    return ProcessSubject([sys.executable, str(script)], timeout=30)


def test_a_process_peers_refusal_is_refused_and_an_unknown_kind_breaks_it(tmp_path):
    peer = _fake_peer(tmp_path, {"kind": "capacity", "message": "no KV blocks left now"})
    assert peer.capabilities.validates is True
    with pytest.raises(Refused) as err:
        peer.submit({"name": "X", "prompt": [7], "max_tokens": 1})
    assert (err.value.kind, err.value.message) == ("capacity", "no KV blocks left now")
    assert peer.alive
    peer.shutdown()
    peer = _fake_peer(tmp_path, {"kind": "nope", "message": "x"})
    with pytest.raises(SubjectError, match="without a known kind"):
        peer.submit({"name": "X", "prompt": [7], "max_tokens": 1})
