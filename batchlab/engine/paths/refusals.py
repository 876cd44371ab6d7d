"""Why a path refuses a model whose modules read something batching changes (zoo3).

mlx-lm's modules mostly read a batch's per-row state through the cache protocol
(``offset`` as a (B,) array, the mask). A few read it in ways only one row at a time,
or only mlx-lm's own cache layout, gets right:

- one Python number for the offset (``layers.scalar_offset_reader``: dynamic NTK RoPE,
  gpt_bigcode's positions): a (B,) offset raises, at B > 1 and inside ``mx.compile``;
- the width of the keys it is handed (``layers.key_width_reader``: afm7's KV-reuse layer
  rotates its queries at ``S - L``): a padded batch, or a fixed-width buffer, puts a
  row's queries at another position than its run alone.

l1, fast and paged run such models as mlx-lm's batch mode does (its bits, ORACLE-BUG
where those are wrong); the paths below refuse them, with the reason and what runs them
(zoo3's live probe: compiled and invariant-blocked crashed on llama-dynamic and afm7 at
B=1, invariant crashed on llama-dynamic at B=3 and failed its solo gate on afm7).
"""

from __future__ import annotations

from collections.abc import Callable

from mlx import nn

from batchlab.engine.core.layers import key_width_reader, scalar_offset_reader

Refusal = Callable[[nn.Module], str | None]


def _reader_refusal(find_reader: Callable[[nn.Module], str | None],
                    message: Callable[[str], str]) -> Refusal:
    """Refuse a model whose module ``find_reader`` names, saying ``message(reader)``."""

    def refuses(model: nn.Module) -> str | None:
        reader = find_reader(model)
        return None if reader is None else message(reader)

    return refuses


def scalar_offset_refusal(path: str, why: str) -> Refusal:
    """``why``: what ``path`` hands the module instead of one number."""
    return _reader_refusal(
        scalar_offset_reader,
        lambda reader: (f"its {reader} reads the position offset as one Python number, and "
                        f"{why}; use the l1, fast or paged path at B=1 ({path} refuses it)"))


def key_width_refusal(path: str, why: str) -> Refusal:
    """``why``: which width ``path`` hands the module instead of the row's own."""
    return _reader_refusal(
        key_width_reader,
        lambda reader: (f"its {reader} places its queries by the width of the keys it is "
                        f"handed, and {why}; use the l1, fast or paged path ({path} refuses "
                        "it)"))


def first_refusal(*checks: Refusal) -> Refusal:
    """The first of ``checks`` that refuses the model, or None."""

    def refuses(model: nn.Module) -> str | None:
        return next((r for r in (check(model) for check in checks) if r), None)

    return refuses
