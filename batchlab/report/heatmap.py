"""A PNG status heatmap: models down, scenarios across, one colour per status."""

from __future__ import annotations

from pathlib import Path

from batchlab.cells.result import CellResult
from batchlab.status import Status, worst

SEVERITY = list(Status)  # most severe first; a grid cell shows its worst


def write_heatmap(path: Path, results: list[CellResult]) -> None:
    if not results:
        return
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    models = list(dict.fromkeys(r.model for r in results))
    # sort on the fields, not on the scenario text: a name may hold a "/"
    order = {r.scenario: (r.batch, r.script, r.padding, r.context) for r in results}
    scenarios = sorted(order, key=order.__getitem__)
    statuses: dict = {}
    for r in results:
        statuses.setdefault((r.model, r.scenario), []).append(r.status)
    grid = [[worst(statuses[(m, s)]).severity if (m, s) in statuses else len(SEVERITY)
             for s in scenarios] for m in models]
    cmap = ListedColormap([s.colour for s in SEVERITY] + ["#ffffff"])

    fig, ax = plt.subplots(figsize=(max(8, 0.16 * len(scenarios) + 3), 0.35 * len(models) + 2))
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=len(SEVERITY), aspect="auto",
              interpolation="nearest")
    ax.set_yticks(range(len(models)), models, fontsize=8)
    ax.set_xticks(range(len(scenarios)), scenarios, rotation=90, fontsize=5)
    present = {s for v in statuses.values() for s in v}
    ax.legend(handles=[Patch(color=s.colour, label=str(s)) for s in SEVERITY if s in present],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_title(f"batchlab parity: {len(results)} cells")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

