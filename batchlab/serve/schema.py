"""The request bodies, by schema (pydantic): what OpenAI's clients send, checked once.

Every field OpenAI defines is declared, so none is silently ignored: the ones the engine
cannot honour (tools, ``response_format`` other than text, ``echo``, ...) are refused with
a 400 naming the field when set to anything but their no-op value, and an unknown field
is refused as OpenAI refuses it ("Unrecognized request argument").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from batchlab.engine.core.processors import ProcessorParams

SEED_LIMIT = 2**64  # the engine's RowSampler takes 0 <= seed < 2**64

# field -> (its no-op value test, why it is refused otherwise)
REFUSED: dict[str, tuple[Any, str]] = {
    "best_of": (lambda v: v in (None, 1), "best_of is not served; use n"),
    "echo": (lambda v: not v, "echo is not served"),
    "suffix": (lambda v: not v, "suffix (insertion) is not served"),
    "tools": (lambda v: not v, "tool calling is not served"),
    "tool_choice": (lambda v: v in (None, "none"), "tool calling is not served"),
    "functions": (lambda v: not v, "function calling is not served"),
    "function_call": (lambda v: v in (None, "none"), "function calling is not served"),
    "response_format": (lambda v: v is None or v.get("type") == "text",
                        "only response_format {\"type\": \"text\"} is served"),
    "parallel_tool_calls": (lambda v: v is None or v is True or v is False,
                            "tool calling is not served"),
}

Probability = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
Bias = Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]  # OpenAI's range


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: StrictBool = False


class Common(BaseModel):
    """Fields both routes take."""

    model_config = ConfigDict(extra="forbid")
    model: StrictStr | None = None
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: Probability | None = None
    top_k: StrictInt | None = Field(None, ge=0)  # beyond OpenAI, as vLLM and mlx-lm
    min_p: float | None = Field(None, ge=0, lt=1, allow_inf_nan=False)
    seed: StrictInt | None = Field(None, ge=0, lt=SEED_LIMIT)  # absent: a random seed
    n: StrictInt = Field(1, ge=1, le=16)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    stop: StrictStr | list[StrictStr] | None = None
    stop_token_ids: list[StrictInt] | None = None  # beyond OpenAI, as vLLM
    user: StrictStr | None = None  # metadata: recorded in the access log only
    # the engine's per-row logits processors (mlx-lm's make_logits_processors, op for op)
    presence_penalty: float | None = Field(None, ge=-2, le=2, allow_inf_nan=False)
    frequency_penalty: float | None = Field(None, ge=-2, le=2, allow_inf_nan=False)
    repetition_penalty: float | None = Field(None, ge=0, allow_inf_nan=False)  # as vLLM
    logit_bias: dict[str, Bias] | None = None
    # refused unless at their no-op value (see REFUSED)
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None

    def refusals(self) -> list[tuple[str, str]]:
        return [(name, why) for name, (unset, why) in REFUSED.items()
                if name in type(self).model_fields and not unset(getattr(self, name))]

    def processors(self) -> ProcessorParams | None:
        """The row's processors, or None when every field is at its no-op value."""
        bias = []
        for key, value in (self.logit_bias or {}).items():
            if not key.isdigit():
                raise ValueError(f"logit_bias keys are token ids, got {key!r}")
            bias.append((int(key), float(value)))
        params = ProcessorParams(
            logit_bias=tuple(bias),
            # 1 is no penalty (x / 1 == x bit for bit); 0 is how the engine says "off"
            repetition_penalty=0.0 if self.repetition_penalty in (None, 1) else
            self.repetition_penalty,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0)
        return params if params.active else None

    def stop_strings(self) -> list[str]:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stop if s]


class CompletionRequest(Common):
    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    logprobs: StrictInt | None = Field(None, ge=0, le=20)
    best_of: StrictInt | None = None
    echo: StrictBool | None = None
    suffix: StrictStr | None = None

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str) or not p:
            return [p]  # an empty list is one empty prompt: refused with the reason
        if p and all(isinstance(x, int) for x in p):
            return [p]
        return list(p)


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[ContentPart] | None = None
    name: StrictStr | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatRequest(Common):
    messages: list[Message] = Field(min_length=1)
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
