"""The built-in scenario vocabulary: scripts, padding and context lengths.

A sweep names them; these functions turn a name and a batch size B into rows and events.
Rows are named A, B, C, ... and keep their prompt across cells (row A of length 26 is the
same ids in every cell that has it), so cells at different B can be compared by eye.

Scripts (B is the most rows alive at once):

    static      A..  inserted at step 0
    join        all but the last at 0; the last joins at step 3
    evict       all at 0; A leaves at step 8
    join-evict  all but the last at 0; the last joins at 3; A leaves at 8
                (B=3: {A,B} -> C joins at 3 -> A leaves at 8 -> {B,C})
    staggered   row i arrives at step i (one arrival every step, so a joiner meets the
                previous joiner still in the prompt batch)
    trickle     two rows arrive every step (with a small prefill or completion batch, the
                queue fills faster than it drains)
    evict-many  all at 0; at step 8 the first, the last and one or two middle rows leave
                in one remove (B >= 4), the others stay
    evict-early all at 0; at step 1 the second and the last rows leave: still in the prompt
                batch (prefilled, not yet joined; or mid chunked prefill) or in the queue
                (when B exceeds the prefill batch)
    late-join   all but the last at 0; the last joins at step 10, into rings that have
                wrapped (the zoo's window is 8)

History scripts (prompt caches kept or brought along; docs/history.md traces one):

    park-resume all at 0; at step 4 A (and the last row, B >= 3) is parked (removed
                keeping its caches), at step 7 resumed with 3 new ids on those caches
    prefix-join rows but every third join with a prefix cache (26 + i ids at ctx-wrap)
                built by the single-stream path; all but the last at 0, the last at 3
    history     prefix-join's rows and joins, then A (and B, B >= 3) parked at 5 and
                resumed at 8

Scripts other than ``static``, ``park-resume`` and ``prefix-join`` need at least two rows
(``evict-many`` four); a sweep skips them at B=1.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import replace

import numpy as np

from batchlab.cells.cell import Event, Row

JOIN_STEP = 3
EVICT_STEP = 8
EARLY_EVICT_STEP = 1
LATE_JOIN_STEP = 10
# "chat": row i asks QUESTIONS[i] through the model's chat template (real text, lengths
# as the questions give them); "corpus-*": slices of the real-text corpus, of the lengths
# "equal" / "ragged" give, from a seeded offset per row.
PADDINGS_REAL = ("chat", "corpus-equal", "corpus-ragged")
QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "Why is the sky blue? Answer in one sentence.",
    "Write a haiku about the sea.",
    "What is 12 times 12?",
    "Translate 'good morning' into Spanish.",
    "Give me a synonym for happy.",
    "Who wrote Pride and Prejudice?",
)
CHAT_SYSTEM = "Be brief."
PARK_STEP, RESUME_STEP = 4, 7
HISTORY_PARK_STEP, HISTORY_RESUME_STEP = 5, 8
RESUME_LENGTH = 3
SCRIPTS = ("static", "join", "evict", "join-evict", "staggered", "trickle", "evict-many",
           "evict-early", "late-join", "park-resume", "prefix-join", "history")
PADDINGS = ("equal", "ragged", "needle")  # needle: see needle_prompts

# Prompt length of each named context. "wrap" is >= 3x the zoo's sliding window (8), so
# prefill alone overflows the ring and decoding runs far past it.
DEFAULT_CONTEXTS = {"short": 5, "wrap": 26}
# Token ids come from the byte range, which every zoo tokenizer maps 1:1.
PROMPT_VOCAB = 256


MAX_ROWS = 26 * 27


def row_names(n: int) -> list[str]:
    """A..Z, then AA, AB, ... (a spreadsheet's columns), so rows keep their names at any B."""
    if n > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows per cell, asked for {n}")
    letters = string.ascii_uppercase
    names = list(letters) + [a + b for a in letters for b in letters]
    return names[:n]


def seeded_prompt(name: str, length: int, seed: int) -> tuple[int, ...]:
    """Deterministic ids on every machine: the seed is a sha256, the generator PCG64."""
    digest = hashlib.sha256(f"{seed}/{name}/{length}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return tuple(int(t) for t in rng.integers(0, PROMPT_VOCAB, size=length))


def prompt_lengths(padding: str, context_len: int, batch: int) -> list[int]:
    """``equal``: every row ``context_len``. ``ragged``: mixed, one row of length 1."""
    if padding == "equal":
        return [context_len] * batch
    if padding != "ragged":
        raise ValueError(f"unknown padding {padding!r}; use one of {PADDINGS + PADDINGS_REAL}")
    if batch == 1:
        return [1]  # a lone length-1 prompt skips prefill entirely: worth a cell
    p = context_len
    pattern = [p, 1, max(2, p // 2), max(2, p - 3), 3, max(2, p - 1), 2, max(2, p // 3)]
    return [pattern[i % len(pattern)] for i in range(batch)]


def script_events(script: str, names: list[str]) -> tuple[Event, ...]:
    first, last = names[0], names[-1]
    if script == "static":
        return (Event(step=0, action="insert", rows=tuple(names)),)
    if script == "park-resume":
        parked = (first,) if len(names) < 3 else (first, last)
        return (Event(step=0, action="insert", rows=tuple(names)),
                Event(step=PARK_STEP, action="park", rows=parked),
                Event(step=RESUME_STEP, action="resume", rows=parked))
    if script == "prefix-join" and len(names) == 1:
        return (Event(step=0, action="insert", rows=tuple(names)),)
    if len(names) < 2:
        raise ValueError(f"script {script!r} needs at least two rows")
    if script == "join":
        return (
            Event(step=0, action="insert", rows=tuple(names[:-1])),
            Event(step=JOIN_STEP, action="insert", rows=(last,)),
        )
    if script == "evict":
        return (
            Event(step=0, action="insert", rows=tuple(names)),
            Event(step=EVICT_STEP, action="remove", rows=(first,)),
        )
    if script == "join-evict":
        return (
            Event(step=0, action="insert", rows=tuple(names[:-1])),
            Event(step=JOIN_STEP, action="insert", rows=(last,)),
            Event(step=EVICT_STEP, action="remove", rows=(first,)),
        )
    if script == "staggered":
        return tuple(
            Event(step=i, action="insert", rows=(name,)) for i, name in enumerate(names)
        )
    if script == "trickle":
        return tuple(Event(step=i // 2, action="insert", rows=tuple(names[i : i + 2]))
                     for i in range(0, len(names), 2))
    if script == "evict-many":
        if len(names) < 4:
            raise ValueError("script 'evict-many' needs at least four rows")
        n = len(names)
        leaving = sorted({0, n // 2, n - 1} | ({n // 2 - 1} if n >= 6 else set()))
        return (
            Event(step=0, action="insert", rows=tuple(names)),
            Event(step=EVICT_STEP, action="remove", rows=tuple(names[i] for i in leaving)),
        )
    if script == "evict-early":
        leaving = (names[1],) if len(names) == 2 else (names[1], last)
        return (
            Event(step=0, action="insert", rows=tuple(names)),
            Event(step=EARLY_EVICT_STEP, action="remove", rows=leaving),
        )
    if script in ("prefix-join", "history"):
        events = (Event(step=0, action="insert", rows=tuple(names[:-1])),
                  Event(step=JOIN_STEP, action="insert", rows=(last,)))
        if script == "history":
            parked = tuple(names[:2]) if len(names) >= 3 else (first,)
            events += (Event(step=HISTORY_PARK_STEP, action="park", rows=parked),
                       Event(step=HISTORY_RESUME_STEP, action="resume", rows=parked))
        return events
    if script == "late-join":
        return (
            Event(step=0, action="insert", rows=tuple(names[:-1])),
            Event(step=LATE_JOIN_STEP, action="insert", rows=(last,)),
        )
    raise ValueError(f"unknown script {script!r}; use one of {SCRIPTS}")


def scenario_rows(
    padding: str, context_len: int, batch: int, steps: int, seed: int, model: str = ""
) -> tuple[Row, ...]:
    names = row_names(batch)
    if padding == "chat":
        prompts = [chat_question(model, i) for i in range(batch)]
    elif padding == "needle":
        prompts = needle_prompts(names, context_len, seed)
    elif padding.startswith("corpus-"):
        lengths = prompt_lengths(padding.removeprefix("corpus-"), context_len, batch)
        prompts = [corpus_slice(model, n, length, seed) for n, length in zip(names, lengths)]
    else:
        lengths = prompt_lengths(padding, context_len, batch)
        prompts = [seeded_prompt(n, length, seed) for n, length in zip(names, lengths)]
    return tuple(Row(name=n, prompt=p, max_tokens=steps) for n, p in zip(names, prompts))


NEEDLE_SEED = 0  # the needle's ids do not change with the cell's seed: one solo run


def needle_prompts(names: list[str], context_len: int, seed: int) -> list[tuple[int, ...]]:
    """vLLM's needle test: one fixed prompt (``context_len`` ids, the same in every cell)
    at a seeded position among fillers of seeded mixed lengths 1 .. 2 * context_len.
    Another seed is another trial: other position, filler lengths and contents."""
    digest = hashlib.sha256(f"needle/{seed}/{len(names)}/{context_len}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    at = int(rng.integers(0, len(names)))
    lengths = rng.integers(1, 2 * context_len + 1, size=len(names))
    return [seeded_prompt("needle", context_len, NEEDLE_SEED) if i == at
            else seeded_prompt(n, int(lengths[i]), seed) for i, n in enumerate(names)]


def chat_question(model: str, i: int) -> tuple[int, ...]:
    from batchlab.zoo.chat import chat_prompt

    return chat_prompt(model, [{"role": "system", "content": CHAT_SYSTEM},
                               {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])


def corpus_slice(model: str, name: str, length: int, seed: int) -> tuple[int, ...]:
    """``length`` corpus tokens from an offset drawn from (seed, row name, length)."""
    from batchlab.zoo.corpus import corpus_prompt, corpus_tokens

    room = len(corpus_tokens(model)) - length
    if room < 0:
        raise ValueError(f"a corpus prompt of {length} tokens is longer than the corpus")
    digest = hashlib.sha256(f"corpus/{seed}/{name}/{length}".encode()).digest()
    return corpus_prompt(model, int.from_bytes(digest[:8], "little") % (room + 1), length)


def with_history(script: str, rows: tuple[Row, ...], context_len: int, seed: int
                 ) -> tuple[Row, ...]:
    """The history scripts' rows: prefixes for prefix-join / history (rows i with
    i % 3 != 2, ``context_len + i`` ids each, so merged caches differ in length), resume
    ids for the rows a script parks. Other scripts' rows come back unchanged."""
    if script not in ("park-resume", "prefix-join", "history"):
        return rows
    parked = {e for ev in script_events(script, [r.name for r in rows])
              if ev.action == "park" for e in ev.rows}
    out = []
    for i, row in enumerate(rows):
        prefix = (seeded_prompt(f"{row.name}.prefix", context_len + i, seed)
                  if script != "park-resume" and i % 3 != 2 else ())
        resume = (seeded_prompt(f"{row.name}.resume", RESUME_LENGTH, seed)
                  if row.name in parked else ())
        out.append(replace(row, prefix=prefix, resume=resume))
    return tuple(out)
