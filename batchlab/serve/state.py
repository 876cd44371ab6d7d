"""What the HTTP layer knows about the server it fronts: one ``ServeState`` per server."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from batchlab.serve.engine_thread import ServeEngine
from batchlab.serve.limits import TokenLimits
from batchlab.serve.metrics import ServeMetrics

DEFAULT_BODY_LIMIT = 4 * 2**20  # bytes
BODY_TIMEOUT_S = 30.0  # a body not fully sent by then is a 408


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingDefaults:
    """What a request that leaves a sampling field out gets (``--temp``, ``--top-p``,
    ``--top-k``, ``--min-p``, as mlx_lm.server's flags)."""

    temperature: float = 0.0  # greedy, as the gates run
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0

    def __post_init__(self):
        if not (0 <= self.temperature <= 2 and 0 <= self.top_p <= 1 and self.top_k >= -1
                and 0 <= self.min_p < 1):
            raise ValueError("sampling defaults: need 0 <= --temp <= 2, 0 <= --top-p <= 1, "
                             "--top-k >= -1 (-1 or 0: off), 0 <= --min-p < 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatTemplate:
    """``--chat-template`` (the template's text; None: the tokenizer's own) and
    ``--chat-template-args`` (keyword arguments of every render)."""

    source: str | None = None
    args: dict = field(default_factory=dict)


@dataclass(kw_only=True)  # no slots: ``spell`` caches itself on the instance
class ServeState:
    engine: ServeEngine
    tokenizer: object | None
    model_name: str
    model_aliases: frozenset[str]  # other names a client may send as "model" (its path)
    limits: TokenLimits
    api_key: str | None
    metrics: ServeMetrics
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    chat_template: ChatTemplate = field(default_factory=ChatTemplate)
    body_limit: int = DEFAULT_BODY_LIMIT
    body_timeout_s: float = BODY_TIMEOUT_S

    @functools.cached_property
    def spell(self):
        tokenizer = self.tokenizer

        @functools.lru_cache(maxsize=65536)
        def spell(token: int) -> str:
            return "" if tokenizer is None else tokenizer.decode([token])
        return spell

    @functools.cached_property
    def template_source(self) -> str:
        """The chat template's text (empty: none), to see which variables it reads."""
        if self.chat_template.source:
            return self.chat_template.source
        template = getattr(self.tokenizer, "chat_template", None)
        if isinstance(template, dict):  # named templates: any may be the one used
            return "\n".join(str(t) for t in template.values())
        return str(template or "")
