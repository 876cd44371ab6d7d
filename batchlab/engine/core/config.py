"""The scheduler's knobs. Defaults are mlx-lm BatchGenerator's, which the l1 path mirrors."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleConfig:
    prefill_batch_size: int = 8  # rows moved from the queue into one prompt batch
    completion_batch_size: int = 32  # most rows decoding at once (raised to prefill's)
    prefill_step_size: int = 2048  # prompt tokens per prefill chunk

    def as_dict(self) -> dict:
        return asdict(self)


MLX_LM_DEFAULTS = ScheduleConfig()
