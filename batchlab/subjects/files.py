"""Offline subjects: scripts exported to files, trajectories read back and judged.

    batchlab matrix export --out DIR          DIR/scripts/<stem>.json, DIR/*.schema.json
    (your engine, in its own CI)              DIR/trajectories/<stem>.json, one per script
    batchlab matrix judge --trajectories DIR/trajectories

A script holds everything a cell fixes (model, path, schedule, shared sampler, rows with
their prompt ids and settings, events by step); a trajectory, per row, the emitted tokens
with their steps and logprob rows (``wire.py``'s forms), or ``{"unsupported": why}`` /
``{"error": text}``. ``judge`` replays trajectories through the subject protocol
(``ReplaySubject``), so the matrix judges them exactly as it judges a live run: the same
statuses, reports, JUnit and exit codes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from batchlab.cells.cell import Cell, Event, Row
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.sampler import SamplingParams
from batchlab.engine.paths.registry import Unsupported
from batchlab.subjects.protocol import Capabilities, Emission, RowRequest, Setup, SubjectError
from batchlab.subjects.schema import SCRIPT_SCHEMA, TRAJECTORY_SCHEMA
from batchlab.subjects.wire import (
    processors_dict,
    processors_of,
    sampling_dict,
    sampling_of,
    step_of,
)
from batchlab.trajectory import Trajectory

SCRIPT_FORMAT, TRAJECTORY_FORMAT, VERSION = "batchlab-script", "batchlab-trajectory", 1


def stem(cell_id: str, digest: str = "") -> str:
    """The file name of a cell's script and trajectory; the definition digest tells
    apart solo runs that share an id (a needle's row B alone, in two trials)."""
    return cell_id.replace("/", "__") + (f".{digest}" if digest else "")


def script_dict(cell: Cell, model_dir: str = "") -> dict:
    rows = []
    for r in cell.rows:
        row = {"name": r.name, "prompt": list(r.prompt), "max_tokens": r.max_tokens}
        if r.prefix:
            row["prefix"] = list(r.prefix)
        if r.resume:
            row["resume"] = list(r.resume)
        if r.sampling is not None:
            row["sampling"] = sampling_dict(r.sampling)
        if r.processors is not None:
            row["processors"] = processors_dict(r.processors)
        rows.append(row)
    return {"format": SCRIPT_FORMAT, "version": VERSION, "id": cell.id, "model": cell.model,
            "model_dir": model_dir, "path": cell.path, "batch": cell.batch,
            "padding": cell.padding, "script": cell.script, "context": cell.context,
            "steps": cell.steps, "seed": cell.seed, "schedule": cell.schedule.as_dict(),
            "sampling": cell.sampling.as_dict(), "rows": rows,
            "events": [{"step": e.step, "action": e.action, "rows": list(e.rows)}
                       for e in cell.events],
            "trajectory": stem(cell.id, cell.definition_digest()) + ".json"}


def cell_of_script(d: dict) -> Cell:
    if d.get("format") != SCRIPT_FORMAT or d.get("version") != VERSION:
        raise ValueError(f"not a {SCRIPT_FORMAT} v{VERSION} file (format {d.get('format')!r}, "
                         f"version {d.get('version')!r}); export it again")
    rows = tuple(Row(name=r["name"], prompt=tuple(r["prompt"]), max_tokens=r["max_tokens"],
                     prefix=tuple(r.get("prefix", ())), resume=tuple(r.get("resume", ())),
                     sampling=sampling_of(r.get("sampling")),
                     processors=processors_of(r.get("processors"))) for r in d["rows"])
    cell = Cell(model=d["model"], path=d["path"], batch=d["batch"], padding=d["padding"],
                script=d["script"], context=d["context"], rows=rows,
                events=tuple(Event(step=e["step"], action=e["action"], rows=tuple(e["rows"]))
                             for e in d["events"]),
                steps=d["steps"], seed=d["seed"], schedule=ScheduleConfig(**d["schedule"]),
                sampling=SamplingParams(**d["sampling"]))
    if cell.id != d["id"]:
        raise ValueError(f"script {d['id']!r} reads back as {cell.id!r}; export it again")
    return cell


def export_scripts(cells: list[Cell], out: Path, model_dirs: dict[str, str]) -> int:
    """Write one script per cell and the two schemas; returns how many scripts."""
    (out / "scripts").mkdir(parents=True, exist_ok=True)
    (out / "script.schema.json").write_text(json.dumps(SCRIPT_SCHEMA, indent=1) + "\n")
    (out / "trajectory.schema.json").write_text(json.dumps(TRAJECTORY_SCHEMA, indent=1) + "\n")
    for cell in cells:
        text = json.dumps(script_dict(cell, model_dirs.get(cell.model, "")))
        name = stem(cell.id, cell.definition_digest()) + ".json"
        (out / "scripts" / name).write_text(text + "\n")
    return len(cells)


def trajectory_dict(cell_id: str, t: Trajectory) -> dict:
    """The compact form; a step that kept its values carries them (float32, base64): the
    KL gate of lab paths (fast, compiled, kv*) needs them."""
    def emission(s):
        out = {"step": s.step, "token": s.token, "digest": s.digest,
               "top": [[i, v] for i, v in s.top]}
        if s.values is not None:
            out["values"] = base64.b64encode(s.values.astype("float32").tobytes()).decode()
        return out

    return {"format": TRAJECTORY_FORMAT, "version": VERSION, "id": cell_id, "dtype": t.dtype,
            "rows": {name: [emission(s) for s in steps] for name, steps in t.rows.items()}}


def play_scripts(subject, scripts: Path, out: Path, pattern: str | None = None,
                 log=None, shard: tuple[int, int] = (0, 1)) -> int:
    """Run every script in ``scripts`` through ``subject`` (in this process), writing a
    trajectory file each: the offline runner of the reference peer."""
    from batchlab.subjects.drive import run_subject

    out.mkdir(parents=True, exist_ok=True)
    done = 0
    index, count = shard
    for path in sorted(scripts.glob("*.json"))[index::count]:
        d = json.loads(path.read_text())
        if pattern and pattern not in d.get("id", ""):
            continue
        head = {"format": TRAJECTORY_FORMAT, "version": VERSION, "id": d.get("id")}
        try:
            cell = cell_of_script(d)
            body = trajectory_dict(cell.id, run_subject(cell, subject, keep_values=True))
        except Unsupported as err:
            body = {**head, "unsupported": str(err)}
        except Exception as err:  # noqa: BLE001 - the engine's crash is the cell's ERROR
            body = {**head, "error": f"{type(err).__name__}: {err}"}
        (out / d.get("trajectory", path.name)).write_text(json.dumps(body) + "\n")
        done += 1
        if log is not None and done % 100 == 0:
            print(f"{done} scripts run", file=log, flush=True)
    return done


class ReplaySubject:
    """``--engine files:DIR``: a trajectory file played back through the protocol, each
    recorded emission at its recorded step. It runs whatever the engine ran offline; what
    it could not run is in the file (``unsupported``, ``error``)."""

    name = "files"
    capabilities = Capabilities()

    def __init__(self, folder: Path):
        self.folder = folder
        self.pending: list[tuple[int, str, dict]] = []

    def open(self, setup: Setup) -> str:
        path = self.folder / (stem(setup.cell, setup.digest) + ".json")
        if not path.is_file():
            raise SubjectError(f"no trajectory {path} for this cell: run its exported script "
                               f"({path.name}) and write the file there")
        try:
            d = json.loads(path.read_text())
        except ValueError as err:
            raise SubjectError(f"{path} is not JSON ({err}); write it again") from None
        if d.get("format") != TRAJECTORY_FORMAT or d.get("id") != setup.cell:
            raise SubjectError(f"{path} is not the {TRAJECTORY_FORMAT} of {setup.cell} "
                               f"(format {d.get('format')!r}, id {d.get('id')!r})")
        if "unsupported" in d:
            why = str(d["unsupported"])
            raise Unsupported(why, reason=why)
        if "error" in d:
            raise RuntimeError(f"the engine failed offline: {d['error']}")
        recorded = sorted(((s["step"], name, s) for name, steps in d["rows"].items()
                           for s in steps), key=lambda e: e[0])
        self.pending = recorded[::-1]  # popped from the end: earliest first
        self.n = 0
        return str(d["dtype"])

    def insert(self, rows: list[RowRequest]) -> None:
        pass  # the rows' emissions are in the file

    def remove(self, names: list[str], park: bool = False) -> None:
        pass

    def step(self) -> list[Emission]:
        out = []
        while self.pending and self.pending[-1][0] <= self.n:
            at, name, s = self.pending.pop()
            out.append(Emission(name=name, token=int(s["token"]),
                                record=step_of(at, s["token"], s.get("logprobs", s))))
        self.n += 1
        return out

    @property
    def num_active(self) -> int:
        return len(self.pending)

    def close(self) -> None:
        self.pending = []
