"""The request bodies, by schema (pydantic): what OpenAI's clients send, checked once.

Every field OpenAI defines is declared, and each is one of three kinds:

- served: sampling, penalties, stop, logprobs, n, stream, ...;
- accepted and ignored, because the answer does not depend on it here: ``store`` (nothing
  is stored), ``metadata``, ``service_tier``, ``prediction`` (a latency hint: the answer is
  the same), ``prompt_cache_key`` / ``prompt_cache_options`` / ``prompt_cache_retention``
  (the prompt cache matches by prefix), ``safety_identifier`` and ``user`` (the access
  log), ``stream_options.include_obfuscation``;
- refused with a 400 naming the field (``REFUSED``) when set to anything but its no-op
  value, because it would change the answer and is not served: tools, ``response_format``
  other than text, ``echo``, audio, web search, moderation, ...

``reasoning_effort`` and ``verbosity`` reach the chat template, which may read them
(gpt-oss's reads ``reasoning_effort``); where it does not, a value that asks for a change
is refused (``prompts.py``). A field OpenAI does not define is refused as OpenAI refuses
it ("Unrecognized request argument").
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
    "audio": (lambda v: v is None, "audio output is not served"),
    "modalities": (lambda v: v is None or set(v) <= {"text"},
                   "only the text modality is served"),
    "web_search_options": (lambda v: v is None, "web search is not served"),
    "moderation": (lambda v: v is None, "moderation is not run by this server"),
}

Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # 0: greedy
Bias = Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]  # OpenAI's range


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: StrictBool = False
    include_obfuscation: StrictBool | None = None  # padding against side channels: none


class Common(BaseModel):
    """Fields both routes take."""

    model_config = ConfigDict(extra="forbid")
    model: StrictStr | None = None
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: Probability | None = None
    top_k: StrictInt | None = Field(None, ge=-1)  # beyond OpenAI, as vLLM: -1 and 0 are off
    min_p: float | None = Field(None, ge=0, lt=1, allow_inf_nan=False)
    seed: StrictInt | None = Field(None, ge=0, lt=SEED_LIMIT)  # absent: a random seed
    n: StrictInt = Field(1, ge=1, le=16)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    stop: StrictStr | list[StrictStr] | None = None
    stop_token_ids: list[StrictInt] | None = Field(None, max_length=1024)  # beyond OpenAI
    return_tokens_as_token_ids: StrictBool = False  # beyond OpenAI, vLLM's: "token_id:N"
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
                raise ValueError(f"logit_bias keys are token ids (digits), got {key!r}")
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


# content parts OpenAI defines that carry something other than text
MEDIA_PARTS = {"image_url": "image input", "input_audio": "audio input", "file": "file input"}


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")  # a media part's payload: refused by type
    type: StrictStr
    text: StrictStr | None = None  # type "text"
    refusal: StrictStr | None = None  # type "refusal" (an assistant's earlier refusal)

    def problem(self) -> str | None:
        if self.type in MEDIA_PARTS:
            return f"{MEDIA_PARTS[self.type]} is not served: send text parts"
        if self.type == "text" and self.text is not None:
            return None
        if self.type == "refusal" and self.refusal is not None:
            return None
        return (f"a content part of type {self.type!r} is not served: send "
                "{\"type\": \"text\", \"text\": ...}")


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: StrictStr | list[ContentPart] | None = None
    name: StrictStr | None = None
    refusal: StrictStr | None = None  # assistant: shown as its text when it has no content
    tool_calls: list[Any] | None = None  # assistant: only [] (tool calling is not served)
    function_call: Any = None  # assistant: only null
    audio: Any = None  # assistant: only null (an earlier audio answer)
    tool_call_id: StrictStr | None = None  # tool: passed to the template

    def problems(self) -> list[tuple[str, str]]:
        """(field, why) of what this message holds that is not served."""
        out = [(f, why) for f, why, bad in (
            ("tool_calls", "tool calling is not served", bool(self.tool_calls)),
            ("function_call", "function calling is not served",
             self.function_call is not None),
            ("audio", "audio is not served", self.audio is not None)) if bad]
        for j, part in enumerate(self.content if isinstance(self.content, list) else []):
            why = part.problem()
            if why:
                out.append((f"content.{j}", why))
        return out

    def text(self) -> str:
        if isinstance(self.content, list):
            text = "".join(p.text if p.type == "text" else p.refusal or ""
                           for p in self.content)
        else:
            text = self.content or ""
        return text or self.refusal or ""

    def for_template(self, *, developer: bool) -> dict:
        """What the chat template sees. ``developer``: the template knows that role;
        else a developer message is a system message (OpenAI's own reading of it)."""
        role = "system" if self.role == "developer" and not developer else self.role
        out = {"role": role, "content": self.text()}
        for key in ("name", "tool_call_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class ChatRequest(Common):
    messages: list[Message] = Field(min_length=1)
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    # refused unless at their no-op value (see REFUSED)
    audio: dict[str, Any] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    web_search_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    # to the chat template (prompts.py): served where it reads them
    reasoning_effort: Effort | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # beyond OpenAI: vLLM's, mlx-lm's
    # accepted, and ignored: the answer does not depend on them here
    store: StrictBool | None = None
    metadata: dict[StrictStr, StrictStr] | None = Field(None, max_length=16)
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    prediction: dict[str, Any] | None = None
    prompt_cache_key: StrictStr | None = None
    prompt_cache_options: dict[str, Any] | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: StrictStr | None = None  # the access log, as user
