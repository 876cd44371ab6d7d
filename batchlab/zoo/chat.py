"""Chat prompts: messages rendered through the model's own chat template, as token ids.

    chat_prompt("smollm2-135m", "What is the capital of France?")
        -> the ids of "<|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\nWhat is ...
           <|im_end|>\\n<|im_start|>assistant\\n" (ChatML with SmolLM2's default system turn)
    chat_prompt("llama", [{"role": "user", "content": "hi"}])
        -> [256, *b"user\\nhi", 257, 10, 256, *b"assistant\\n"] (the zoo's byte template)

The template is rendered to text and then encoded without added specials: a template that
writes its own BOS (as Llama 3's does) gets it once, never twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Messages = Sequence[Mapping[str, str]]


def chat_messages(text_or_messages: str | Messages) -> list[dict[str, str]]:
    """A plain string is one user turn; messages must each have a role and a content."""
    if isinstance(text_or_messages, str):
        return [{"role": "user", "content": text_or_messages}]
    messages = []
    for i, message in enumerate(text_or_messages):
        if not isinstance(message, Mapping) or set(message) != {"role", "content"}:
            raise ValueError(
                f"chat message {i} is {message!r}; write each as {{role = \"user\", content = "
                "\"...\"}} (roles: system, user, assistant)"
            )
        messages.append({"role": str(message["role"]), "content": str(message["content"])})
    if not messages:
        raise ValueError("a chat prompt needs at least one message")
    return messages


def chat_text(model: str, text_or_messages: str | Messages) -> str:
    """The rendered template, ending with the assistant's generation prompt."""
    from batchlab.zoo.text import tokenizer_for

    tokenizer = tokenizer_for(model)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"model {model!r} has no chat template (tokenizer_config.json 'chat_template'); "
            "give its prompts as text or ids instead"
        )
    return tokenizer.apply_chat_template(
        chat_messages(text_or_messages), add_generation_prompt=True, tokenize=False
    )


def chat_prompt(model: str, text_or_messages: str | Messages) -> tuple[int, ...]:
    """The ids of `text_or_messages` through `model`'s chat template, generation prompt on."""
    from batchlab.zoo.text import tokenizer_for

    text = chat_text(model, text_or_messages)
    return tuple(tokenizer_for(model).encode(text, add_special_tokens=False))
