"""The frozen records a matrix expands to: rows, script events and cells.

A cell is everything needed to run one batched-decoding scenario twice (oracle and
engine) and compare the bits. Its canonical id, e.g. ``l1/gemma3/B4/ragged/join-evict/
ctx-wrap``, is the filter key, the golden's file name and the report key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Action = Literal["insert", "remove"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One request: its prompt ids and how many tokens it may generate."""

    name: str
    prompt: tuple[int, ...]
    max_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Rows inserted or removed just before decode step ``step`` runs."""

    step: int
    action: Action
    rows: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.action} {','.join(self.rows)} at {self.step}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One point of a matrix. ``batch`` is the most rows alive at once."""

    model: str
    path: str
    batch: int
    padding: str
    script: str
    context: str
    rows: tuple[Row, ...]
    events: tuple[Event, ...]

    @property
    def id(self) -> str:
        return "/".join(
            (self.path, model_label(self.model), f"B{self.batch}", self.padding, self.script,
             f"ctx-{self.context}")
        )

    @property
    def scenario_id(self) -> str:
        """The id without the path: what the oracle runs, shared by every path."""
        return self.id.split("/", 1)[1]

    @property
    def golden_stem(self) -> str:
        """The scenario id as one file name: goldens/<backend>/<golden_stem>.json."""
        return self.scenario_id.replace("/", "__")

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"cell {self.id} has no row {name!r}")

    def definition(self) -> dict:
        """What the bits depend on apart from the path; the golden stores it."""
        return {
            "model": self.model,
            "rows": [asdict(r) | {"prompt": list(r.prompt)} for r in self.rows],
            "events": [str(e) for e in self.events],
        }

    def definition_digest(self) -> str:
        text = json.dumps(self.definition(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_label(model: str) -> str:
    """Zoo names stay; a model directory is named by its last component in ids."""
    return Path(model).name if ("/" in model or model.startswith(".")) else model


def validate_events(rows: tuple[Row, ...], events: tuple[Event, ...], where: str) -> None:
    """Every row is inserted once, before it is removed, and removed while alive."""
    names = {r.name for r in rows}
    inserted: dict[str, int] = {}
    for event in sorted(events, key=lambda e: e.step):
        for name in event.rows:
            if name not in names:
                raise ValueError(f"{where}: event '{event}' names unknown row {name!r}")
            if event.action == "insert":
                if name in inserted:
                    raise ValueError(f"{where}: row {name!r} is inserted twice")
                inserted[name] = event.step
            elif name not in inserted or event.step <= inserted[name]:
                raise ValueError(f"{where}: row {name!r} is removed before it is inserted")
    missing = names - set(inserted)
    if missing:
        raise ValueError(f"{where}: rows {sorted(missing)} are never inserted")


def parse_event(text: str, where: str) -> Event:
    """``"insert A,B at 0"`` -> Event(step=0, action="insert", rows=("A", "B"))."""
    words = text.replace(", ", ",").split()
    if len(words) != 4 or words[0] not in ("insert", "remove") or words[2] != "at":
        raise ValueError(
            f"{where}: cannot read event {text!r}; write e.g. 'insert A,B at 0' or "
            "'remove A at 8'"
        )
    try:
        step = int(words[3])
    except ValueError:
        raise ValueError(f"{where}: event {text!r} needs an integer step") from None
    if step < 0:
        raise ValueError(f"{where}: event {text!r} has a negative step")
    return Event(step=step, action=words[0], rows=tuple(words[1].split(",")))
