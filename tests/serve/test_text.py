"""Stop strings held back across token boundaries (ChoiceText), with a scripted detokenizer."""

from __future__ import annotations

from batchlab.serve.text import ChoiceText


class _Pieces:
    """A detokenizer whose token i prints PIECES[i]."""

    PIECES = ["he", "llo", " wo", "rld", "!", "a", "b"]

    def add_token(self, token: int) -> None:
        self.last_segment = self.PIECES[token]

    def finalize(self) -> None:
        self.last_segment = ""


def _run(tokens, stops, stop_ids=frozenset()):
    text = ChoiceText(detokenizer=_Pieces(), stop_strings=stops, stop_ids=stop_ids)
    sent = [text.add(t) for t in tokens]
    return sent, text.finish(), text.stopped_by_string


def test_a_stop_string_split_over_tokens_is_held_then_dropped():
    assert _run([0, 1, 2, 3], ["o wor"]) == (["he", "ll", "", ""], "", True)


def test_held_text_that_does_not_become_a_stop_string_is_released():
    assert _run([0, 1, 2, 4], ["o wox"]) == (["he", "ll", "", "o wo!"], "", False)


def test_text_held_at_the_end_is_sent_when_the_row_ends():
    assert _run([0, 1], ["lo!"]) == (["he", "l"], "lo", False)


def test_the_earliest_stop_string_wins_and_a_stop_token_adds_nothing():
    assert _run([5, 6, 0], ["b", "ab"]) == (["", ""] + [""], "", True)
    assert _run([0, 6], [], frozenset({6})) == (["he", ""], "", False)
