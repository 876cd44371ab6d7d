"""A request's prompts as token ids: completions' text or ids, chat messages through the
chat template (the tokenizer's, or ``--chat-template``), with keyword arguments from
``--chat-template-args``, then the request's ``chat_template_kwargs``,
``reasoning_effort`` and ``verbosity``.

``reasoning_effort`` and ``verbosity`` go to the template only where it reads them (its
text names them: gpt-oss's reads ``reasoning_effort``). Elsewhere their no-op values
pass (``reasoning_effort`` "none", ``verbosity`` "medium") and any other is refused: it
asks for an answer this model's template cannot give.
"""

from __future__ import annotations

from batchlab.serve.errors import APIError
from batchlab.serve.schema import ChatRequest
from batchlab.serve.state import ServeState

TEMPLATE_FIELDS = {"reasoning_effort": "none", "verbosity": "medium"}  # field: its no-op


def encode(state: ServeState, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, list):
        if not prompt:
            raise APIError(400, "a prompt is empty: give at least one token", param="prompt")
        return prompt
    if state.tokenizer is None:
        raise APIError(400, f"{state.model_name} has no tokenizer: send the prompt as token "
                       "ids", param="prompt")
    check_text(prompt, "prompt")
    try:
        return list(state.tokenizer.encode(prompt, add_special_tokens=False))
    except Exception as err:  # noqa: BLE001 - a tokenizer error is the prompt's
        raise APIError(400, f"the tokenizer cannot encode the prompt: {err}",
                       param="prompt") from None


def check_text(text: str, param: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise APIError(400, f"{param} holds a lone UTF-16 surrogate: send valid Unicode",
                       param=param) from None


def chat_prompt(state: ServeState, req: ChatRequest) -> list[int]:
    tokenizer = state.tokenizer
    if tokenizer is None:
        raise APIError(400, f"{state.model_name} has no tokenizer: use /v1/completions with "
                       "token ids", param="messages")
    for i, m in enumerate(req.messages):
        for field, why in m.problems():
            raise APIError(400, f"messages.{i}.{field}: {why}", param=f"messages.{i}.{field}",
                           code="unsupported_parameter")
    developer = "developer" in state.template_source
    messages = [m.for_template(developer=developer) for m in req.messages]
    for i, m in enumerate(messages):
        check_text(m["content"], f"messages.{i}.content")
    kwargs = template_kwargs(state, req)
    try:
        if state.template_source:
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True,
                chat_template=state.chat_template.source or None, **kwargs)
            return list(ids["input_ids"] if isinstance(ids, dict) else ids)
        return list(tokenizer.encode(_plain_chat(messages), add_special_tokens=False))
    except Exception as err:  # noqa: BLE001 - a template or tokenizer error is the request's
        raise APIError(400, f"the chat template cannot render these messages: {err}",
                       param="messages") from None


def template_kwargs(state: ServeState, req: ChatRequest) -> dict:
    kwargs = {**state.chat_template.args, **(req.chat_template_kwargs or {})}
    for field, no_op in TEMPLATE_FIELDS.items():
        value = getattr(req, field)
        if value is None:
            continue
        if field in state.template_source:
            kwargs[field] = value
        elif value != no_op:
            raise APIError(400, f"{field} {value!r} is not served: this model's chat template "
                           f"does not read {field} (send null or {no_op!r})", param=field,
                           code="unsupported_parameter")
    return kwargs


def _plain_chat(messages: list[dict]) -> str:
    """mlx_lm.server's fallback for a tokenizer without a chat template (convert_chat)."""
    prefix = {"system": "ASSISTANT's RULE: ", "user": "USER: ", "assistant": "ASSISTANT: "}
    text = "".join(f"{prefix.get(m['role'], '')}{m['content']}\n" for m in messages)
    return (text + "ASSISTANT: ").rstrip()
