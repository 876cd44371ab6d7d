"""How this server wants a completion asked for, found by asking it (once per run).

- the prompt: a list of token ids (OpenAI's completions take one; batchlab serve and vLLM
  honour it) or, where the server refuses ids (mlx_lm.server encodes ``prompt`` as text
  and answers a list with an error), the text that the model's tokenizer encodes back to
  exactly the same ids (``cases.as_text``);
- logprobs: OpenAI's completions form, ``logprobs: K`` (K alternatives; 0: the chosen
  token's alone), or the chat form ``logprobs: true, top_logprobs: K`` that
  mlx_lm.server takes on both routes (it refuses an integer);
- vLLM's ``return_tokens_as_token_ids``, sent where accepted, so that the alternatives
  are named by id, not by text.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchlab.http_gate.reply import parse_reply
from batchlab.http_gate.wire import Api, ServerError

ROUTE = "/v1/completions"


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    model: str | None  # the "model" field; None: left out
    prompt_as: str  # "ids" or "text"
    logprobs_as: str  # "count" (logprobs: K), "flag" (logprobs: true, top_logprobs: K)
    token_id_names: bool  # return_tokens_as_token_ids is sent
    why: str  # how the probe decided, for the report

    def body(self, ids, text: str | None, max_tokens: int, *, top: int | None,
             stream: bool = False, stop: list[str] | None = None) -> dict:
        """A greedy completion of one prompt. ``top``: None asks no logprobs, 0 the
        chosen token's, K also K alternatives."""
        if self.prompt_as == "text" and text is None:
            raise ServerError("this server takes text prompts only, and no text encodes to "
                              f"exactly the ids {list(ids)[:12]}...: pick ASCII prompts")
        body = {"prompt": list(ids) if self.prompt_as == "ids" else text,
                "max_tokens": max_tokens, "temperature": 0.0}
        if self.model is not None:
            body["model"] = self.model
        if top is not None and self.logprobs_as != "none":
            if self.logprobs_as == "count":
                body["logprobs"] = top
            else:
                body["logprobs"] = True
                if top:
                    body["top_logprobs"] = top
            if self.token_id_names:
                body["return_tokens_as_token_ids"] = True
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if stop:
            body["stop"] = stop
        return body


def served_model(api: Api, wanted: str | None) -> str | None:
    """The "model" to send: ``wanted`` if given, else the one model ``/v1/models`` lists
    (none listed, or several: left out, the server's default)."""
    if wanted:
        return wanted
    try:
        listed = api.get("/v1/models").get("data") or []
    except ServerError:
        return None
    ids = [m.get("id") for m in listed if isinstance(m, dict)]
    return ids[0] if len(ids) == 1 else None


def probe(api: Api, model: str | None, ids, text: str | None) -> Dialect:
    """Ask one token three ways at most; a server that answers none is a ServerError."""
    base = Dialect(model=model, prompt_as="ids", logprobs_as="count", token_id_names=False,
                   why="")
    try:
        api.post(ROUTE, base.body(ids, text, 1, top=None))
        prompt_as, why = "ids", "prompt as token ids"
    except ServerError as err:
        if text is None or err.status is None:
            raise
        try:
            api.post(ROUTE, {**base.body(ids, text, 1, top=None), "prompt": text})
        except ServerError as err2:
            raise ServerError(f"the server answers neither ids ({err}) nor text ({err2})") \
                from None
        prompt_as = "text"
        why = f"prompt as text (ids refused: HTTP {err.status})"
    refusals = []
    for logprobs_as in ("count", "flag"):
        for names in (True, False):
            d = Dialect(model=model, prompt_as=prompt_as, logprobs_as=logprobs_as,
                        token_id_names=names, why="")
            try:
                reply = parse_reply(api.post(ROUTE, d.body(ids, text, 1, top=2)), "probe")
            except ServerError as err:
                refusals.append(str(err)[:120])
                continue
            if reply.logprobs is None:
                refusals.append(f"{logprobs_as}: 200 without logprobs")
                continue
            form = "logprobs: K" if logprobs_as == "count" else "logprobs: true, top_logprobs: K"
            return Dialect(model=model, prompt_as=prompt_as, logprobs_as=logprobs_as,
                           token_id_names=names,
                           why=f"{why}; {form}" + ("; return_tokens_as_token_ids sent"
                                                   if names else ""))
    return Dialect(model=model, prompt_as=prompt_as, logprobs_as="none", token_id_names=False,
                   why=f"{why}; no logprobs ({'; '.join(refusals)})")
