"""A script's events (``"insert A,B at 0"``, ``"park A at 4"``, ...): read from a
matrix's text and checked against the cell's rows before anything runs."""

from __future__ import annotations

from batchlab.cells.cell import ACTIONS, Event, Row


def validate_events(rows: tuple[Row, ...], events: tuple[Event, ...], where: str) -> None:
    """Every row is inserted once, before it is removed, and removed while alive. A row is
    parked while alive and at a step before it can have finished (fewer steps since its
    insert than its ``max_tokens``: otherwise there may be no cache to keep), and resumed,
    once, at a later step, with ``resume`` ids. ``continue`` inserts a row again after it
    finished, with the caches it finished with (BatchGenerator's ``Response.prompt_cache``)
    and its ``resume`` ids: a chat's next turn; it must come after the row's last token."""
    names = {r.name: r for r in rows}
    inserted: dict[str, int] = {}
    state: dict[str, str] = {}  # alive, parked, resumed (alive again), gone
    resumed: set[str] = set()
    for event in sorted(events, key=lambda e: (e.step, e.action not in
                                                ("insert", "resume", "continue"))):
        for name in event.rows:
            if name not in names:
                raise ValueError(f"{where}: event '{event}' names unknown row {name!r}")
            have = state.get(name)
            if event.action == "insert":
                if name in inserted:
                    raise ValueError(f"{where}: row {name!r} is inserted twice; use 'park' "
                                     "and 'resume' to bring a row back")
                inserted[name], state[name] = event.step, "alive"
            elif event.action == "resume":
                if have != "parked":
                    raise ValueError(f"{where}: row {name!r} is resumed at step {event.step} "
                                     "but was not parked before; park it at an earlier step")
                if not names[name].resume:
                    raise ValueError(f"{where}: row {name!r} is resumed but has no 'resume' "
                                     "ids; give its prompt a resume = [...] or length")
                inserted[name], state[name] = event.step, "resumed"
                resumed.add(name)
            elif event.action == "continue":
                if have != "alive":
                    raise ValueError(f"{where}: row {name!r} is continued at step {event.step} "
                                     "but is not a running row then; continue a row once, "
                                     "after it was inserted")
                if event.step - inserted[name] <= names[name].max_tokens + 1:
                    raise ValueError(
                        f"{where}: row {name!r} is continued at step {event.step}, before it "
                        f"surely finished its {names[name].max_tokens} tokens; continue it "
                        f"at step {inserted[name] + names[name].max_tokens + 2} or later")
                if not names[name].resume:
                    raise ValueError(f"{where}: row {name!r} is continued but has no 'resume' "
                                     "ids; give its prompt a resume = [...] or length")
                inserted[name], state[name] = event.step, "resumed"
                resumed.add(name)
            elif have is None:
                raise ValueError(f"{where}: row {name!r} is {event.action}d before it is "
                                 "inserted")
            elif have not in ("alive", "resumed"):
                raise ValueError(f"{where}: row {name!r} is {event.action}d at step "
                                 f"{event.step} but is not alive then")
            elif event.step == inserted[name]:
                raise ValueError(f"{where}: row {name!r} is {event.action}d at step "
                                 f"{event.step}, the step it is inserted; {event.action} it "
                                 "at a later step")
            elif event.action == "park":
                if have == "resumed":
                    raise ValueError(f"{where}: row {name!r} is parked twice; park it once")
                if event.step - inserted[name] >= names[name].max_tokens:
                    raise ValueError(
                        f"{where}: row {name!r} is parked at step {event.step}, when it may "
                        f"have finished its {names[name].max_tokens} tokens; park it earlier")
                state[name] = "parked"
            else:
                state[name] = "gone"
    missing = set(names) - set(inserted)
    if missing:
        raise ValueError(f"{where}: rows {sorted(missing)} are never inserted")
    unresumed = [r.name for r in rows if r.resume and r.name not in resumed]
    if unresumed:
        raise ValueError(f"{where}: rows {unresumed} have 'resume' ids but are never parked "
                         "and resumed or continued; drop the ids or add the events")


def parse_event(text: str, where: str) -> Event:
    """``"insert A,B at 0"`` -> Event(step=0, action="insert", rows=("A", "B"))."""
    words = text.replace(", ", ",").split()
    if len(words) != 4 or words[0] not in ACTIONS or words[2] != "at":
        raise ValueError(
            f"{where}: cannot read event {text!r}; write e.g. 'insert A,B at 0', "
            "'remove A at 8', 'park A at 4' or 'resume A at 7'"
        )
    try:
        step = int(words[3])
    except ValueError:
        raise ValueError(f"{where}: event {text!r} needs an integer step") from None
    if step < 0:
        raise ValueError(f"{where}: event {text!r} has a negative step")
    return Event(step=step, action=words[0], rows=tuple(words[1].split(",")))
