"""How the harness judges a cell: one answer per cell, resolved here and nowhere else.

The engine says what a path runs (``engine/paths/registry.py``: its scheduler, its
caches, what it refuses); this module says how the matrix judges what it ran:

    path        reference           bit-exact, else
    l1          batch-oracle        FAIL (no tolerance, ever)
    fast        batch-oracle        the lab KL gate
    compiled    batch-oracle        the lab KL gate
    kv*         serial-quantized    the KV8 / KV4 KL gate (by the scheme's bits)
    invariant*  solo                FAIL (each row against itself run alone)
    l1-solo     solo                FAIL (the invariance gate's negative control)
    paged       batch-oracle        FAIL (l1's layout gathered from KV blocks)

    batch-oracle      mlx-lm's BatchGenerator at the same B and schedule: goldens shared
                      by every path of a scenario (or the oracle live, ``--live``)
    serial-quantized  mlx-lm's QuantizedKVCache, each row alone at the path's scheme:
                      goldens of the path's own (its scenario keeps the path)
    solo              the row's own run alone on the same path: no golden

``matrix/evaluate.py``, ``oracle/regen.py``, ``golden/check.py`` and a cell's scenario id
read ``judging_for(cell.path)``; a new path adds one line to ``_BY_PATH`` (a quantized
scheme needs none: ``judging_for`` reads its scheme from the engine's registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from batchlab.engine.paths.quantized.path import KVScheme
from batchlab.engine.paths.registry import PATHS
from batchlab.judging.kl import KV4_KL_GATE, KV8_KL_GATE, LAB_KL_GATE, KLGate


class Reference(str, Enum):
    BATCH_ORACLE = "batch-oracle"
    SERIAL_QUANTIZED = "serial-quantized"
    SOLO = "solo"


@dataclass(frozen=True, slots=True, kw_only=True)
class Judging:
    path: str
    reference: Reference
    kl_gate: KLGate | None = None  # None: bit-exact or FAIL
    kv_scheme: KVScheme | None = None  # the serial quantized oracle's settings

    @property
    def has_golden(self) -> bool:
        """Whether the cell is compared with an oracle's golden (not with its solo runs)."""
        return self.reference is not Reference.SOLO

    @property
    def scenario_keeps_path(self) -> bool:
        """A golden shared by every path of a scenario (batch mode), or the path's own."""
        return self.reference is Reference.SERIAL_QUANTIZED

    @property
    def keeps_values(self) -> bool:
        """Whether a live reference keeps full logprob vectors (for the KL gate)."""
        return self.kl_gate is not None


_BY_PATH = {
    "l1": Judging(path="l1", reference=Reference.BATCH_ORACLE),
    "fast": Judging(path="fast", reference=Reference.BATCH_ORACLE, kl_gate=LAB_KL_GATE),
    "compiled": Judging(path="compiled", reference=Reference.BATCH_ORACLE, kl_gate=LAB_KL_GATE),
    "invariant": Judging(path="invariant", reference=Reference.SOLO),
    "invariant-blocked": Judging(path="invariant-blocked", reference=Reference.SOLO),
    "l1-solo": Judging(path="l1-solo", reference=Reference.SOLO),
    "paged": Judging(path="paged", reference=Reference.BATCH_ORACLE),
}


def judging_for(path: str) -> Judging:
    """How a cell on ``path`` is judged. A path the table does not name is judged as l1
    (bit-exact against batch mode): the engine then says whether it has such a path."""
    known = _BY_PATH.get(path)
    if known is not None:
        return known
    engine_path = PATHS.get(path)
    scheme = engine_path.kv_scheme if engine_path is not None else None
    if scheme is not None:
        return Judging(path=path, reference=Reference.SERIAL_QUANTIZED, kv_scheme=scheme,
                       kl_gate=KV8_KL_GATE if scheme.bits == 8 else KV4_KL_GATE)
    return Judging(path=path, reference=Reference.BATCH_ORACLE)
