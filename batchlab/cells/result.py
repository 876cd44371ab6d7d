"""CellResult: the one record per cell that every printer reads."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from batchlab.cells.cell import Cell, CellKey
from batchlab.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class CellResult(CellKey):
    cell_id: str
    status: Status  # given as a Status or its spelling ("ORACLE-BUG"); kept as a Status
    detail: str
    rerun: str
    seconds: float
    tokens: int  # emitted tokens compared
    divergence: dict | None = None
    kl: dict | None = None  # lab paths that are not bit-exact: statistics vs the oracle
    traceback: str | None = None

    def __post_init__(self) -> None:
        # a spelling read back from results.jsonl becomes the member; a typo raises here
        object.__setattr__(self, "status", Status(self.status))

    @classmethod
    def of(cls, cell: Cell, **kw) -> CellResult:
        key = cell.key
        return cls(cell_id=cell.id, **{f: getattr(key, f) for f in CellKey.FIELDS}, **kw)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> CellResult:
        return cls(**json.loads(line))
