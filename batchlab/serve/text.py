"""One choice's text as tokens arrive: detokenized once, stop strings held back, no EOS.

mlx-lm's streaming detokenizer gives each token's printable text (it holds back bytes of
an unfinished UTF-8 character). A stop string can span token boundaries, so text that
could still become the start of a stop string is held back until the next token says
whether it did; the stop string itself and everything after it is never sent (OpenAI's
rule). A stop token (EOS or ``stop_token_ids``) ends the choice without adding its text.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, kw_only=True)
class ChoiceText:
    detokenizer: object | None  # mlx-lm's StreamingDetokenizer (None: no tokenizer)
    stop_strings: list[str]
    stop_ids: frozenset[int]
    pending: str = ""  # printable text not yet sent: it may start a stop string
    sent: list[str] = field(default_factory=list)
    stopped_by_string: bool = False

    def add(self, token: int) -> str:
        """The text that became safe to send with ``token``."""
        if self.stopped_by_string or token in self.stop_ids or self.detokenizer is None:
            return ""
        self.detokenizer.add_token(token)
        return self._release(self.detokenizer.last_segment)

    def finish(self) -> str:
        """What is left once the row ends (no stop string can complete any more)."""
        if self.stopped_by_string or self.detokenizer is None:
            return ""
        self.detokenizer.finalize()
        rest = self.pending + self.detokenizer.last_segment
        self.pending = ""
        hit = self._first_stop(rest)
        if hit is not None:
            self.stopped_by_string = True
            rest = rest[:hit]
        self.sent.append(rest)
        return rest

    def _release(self, segment: str) -> str:
        text = self.pending + segment
        hit = self._first_stop(text)
        if hit is not None:
            self.stopped_by_string = True
            self.pending = ""
            self.sent.append(text[:hit])
            return text[:hit]
        keep = self._held_suffix(text)
        out, self.pending = text[:len(text) - keep], text[len(text) - keep:]
        self.sent.append(out)
        return out

    def _first_stop(self, text: str) -> int | None:
        hits = [i for i in (text.find(s) for s in self.stop_strings) if i >= 0]
        return min(hits) if hits else None

    def _held_suffix(self, text: str) -> int:
        """The longest end of ``text`` that is a proper start of some stop string."""
        best = 0
        for stop in self.stop_strings:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best

    @property
    def text(self) -> str:
        return "".join(self.sent)
