"""The OpenAI-compatible routes (FastAPI on uvicorn; see docs/serving.md).

    GET  /health                 the engine's state (503 once it is shutting down)
    GET  /v1/models, /v1/models/{id}
    GET  /stats                  running / decoding / waiting rows, KV bytes, peak batch
    GET  /metrics                Prometheus text format
    POST /v1/completions         prompt: text, token ids, or a list of either
    POST /v1/chat/completions    messages (the model's chat template, else mlx-lm's
                                 plain role-prefix fallback)

The body is read here, not by FastAPI, so that its size (413), its read time (408) and a
body that is not JSON at all (deep nesting included) all get a 400-class answer in
OpenAI's shape before the schema sees it.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from batchlab.serve import errors
from batchlab.serve.engine_thread import ServeEngine
from batchlab.serve.errors import APIError
from batchlab.serve.generate import Generation, collect, stream, top_logprobs_of
from batchlab.serve.metrics import ServeMetrics
from batchlab.serve.schema import ChatRequest, Common, CompletionRequest

DEFAULT_BODY_LIMIT = 4 * 2**20  # bytes
BODY_TIMEOUT_S = 30.0  # a body not fully sent by then is a 408


@dataclass(kw_only=True)  # no slots: ``spell`` caches itself on the instance
class ServeState:
    engine: ServeEngine
    tokenizer: object | None
    model_name: str
    model_aliases: frozenset[str]  # other names a client may send as "model" (its path)
    max_tokens: int  # the cap, and the default for a request that names none
    api_key: str | None
    metrics: ServeMetrics
    body_limit: int = DEFAULT_BODY_LIMIT
    body_timeout_s: float = BODY_TIMEOUT_S

    @functools.cached_property
    def spell(self):
        tokenizer = self.tokenizer

        @functools.lru_cache(maxsize=65536)
        def spell(token: int) -> str:
            return "" if tokenizer is None else tokenizer.decode([token])
        return spell


def build_app(state: ServeState) -> FastAPI:
    app = FastAPI(title="batchlab serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serve = state
    errors.install(app)

    @app.get("/health")
    async def health():
        h = state.engine.health()
        return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)

    @app.get("/v1/models")
    async def models(request: Request):
        _auth(state, request)
        return {"object": "list", "data": [_model_card(state)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request):
        _auth(state, request)
        _check_model(state, model_id)
        return _model_card(state)

    @app.get("/stats")
    async def stats():
        s = state.engine.stats()
        return {f: getattr(s, f) for f in s.__slots__}

    @app.get("/metrics")
    async def metrics():
        body, content_type = state.metrics.render(state.engine)
        return Response(body, media_type=content_type)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _generate(state, request, CompletionRequest)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await _generate(state, request, ChatRequest)

    return app


def _model_card(state: ServeState) -> dict:
    return {"id": state.model_name, "object": "model", "created": 0, "owned_by": "batchlab"}


def _auth(state: ServeState, request: Request) -> None:
    if state.api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), state.api_key):
        raise APIError(401, "Incorrect or missing API key: send Authorization: Bearer <key>",
                       type="authentication_error", code="invalid_api_key")


def _check_model(state: ServeState, name: str | None) -> None:
    if name is not None and name != state.model_name and name not in state.model_aliases:
        raise APIError(404, f"The model `{name}` does not exist: this server serves "
                       f"`{state.model_name}`", param="model", code="model_not_found")


async def _read_json(state: ServeState, request: Request):
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > state.body_limit):
        raise APIError(413, f"the body may be at most {state.body_limit} bytes",
                       code="request_too_large")

    async def read() -> bytes:
        parts, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > state.body_limit:
                raise APIError(413, f"the body may be at most {state.body_limit} bytes",
                               code="request_too_large")
            parts.append(part)
        return b"".join(parts)

    try:
        data = await asyncio.wait_for(read(), state.body_timeout_s)
    except TimeoutError:
        raise APIError(408, f"the body was not sent within {state.body_timeout_s:g} s",
                       code="timeout") from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # RecursionError: nesting too deep
        raise APIError(400, f"the body is not valid JSON: {type(err).__name__}: "
                       f"{str(err)[:200]}", code="invalid_json") from None


async def _generate(state: ServeState, request: Request, schema: type[Common]):
    _auth(state, request)
    body = await _read_json(state, request)
    if not isinstance(body, dict):
        raise APIError(400, "the body must be a JSON object", code="invalid_json")
    try:
        req = schema.model_validate(body)
    except ValidationError as err:
        raise errors.validation_error(err.errors()) from None
    for name, why in req.refusals():
        raise APIError(400, f"{name} is not supported: {why}", param=name,
                       code="unsupported_parameter")
    _check_model(state, req.model)
    max_tokens = req.max_tokens or req.max_completion_tokens or state.max_tokens
    if max_tokens > state.max_tokens:
        raise APIError(400, f"max_tokens {max_tokens} is over this server's cap of "
                       f"{state.max_tokens} (--max-tokens)", param="max_tokens")
    chat = isinstance(req, ChatRequest)
    prompts = [_chat_prompt(state, req)] if chat else [_encode(state, p) for p in req.prompts()]
    gen = Generation(state, req, prompts, chat=chat, max_tokens=max_tokens,
                     top_logprobs=top_logprobs_of(req))
    watcher = asyncio.create_task(_watch_disconnect(request, gen))
    if req.stream:
        async def body_iter():
            try:
                async for part in stream(gen):
                    yield part
                gen.log(200, streamed=True)
            finally:
                watcher.cancel()
                gen.cancel()
        return StreamingResponse(body_iter(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    try:
        status, payload = await collect(gen)
    finally:
        watcher.cancel()
        gen.cancel()
    gen.log(status, streamed=False)
    return JSONResponse(payload, status_code=status)


async def _watch_disconnect(request: Request, gen: Generation) -> None:
    """The body is read: the next ASGI message is the client leaving."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            gen.cancel()
            gen.log(499, streamed=bool(gen.req.stream), disconnected=True)
            return


def _encode(state: ServeState, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, list):
        if not prompt:
            raise APIError(400, "a prompt is empty: give at least one token", param="prompt")
        return prompt
    if state.tokenizer is None:
        raise APIError(400, f"{state.model_name} has no tokenizer: send the prompt as token "
                       "ids", param="prompt")
    _check_text(prompt, "prompt")
    try:
        return list(state.tokenizer.encode(prompt, add_special_tokens=False))
    except Exception as err:  # noqa: BLE001 - a tokenizer error is the prompt's
        raise APIError(400, f"the tokenizer cannot encode the prompt: {err}",
                       param="prompt") from None


def _check_text(text: str, param: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise APIError(400, f"{param} holds a lone UTF-16 surrogate: send valid Unicode",
                       param=param) from None


def _chat_prompt(state: ServeState, req: ChatRequest) -> list[int]:
    tokenizer = state.tokenizer
    if tokenizer is None:
        raise APIError(400, f"{state.model_name} has no tokenizer: use /v1/completions with "
                       "token ids", param="messages")
    messages = [{"role": m.role, "content": m.text()} for m in req.messages]
    for i, m in enumerate(messages):
        _check_text(m["content"], f"messages.{i}.content")
    try:
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
            return list(ids["input_ids"] if isinstance(ids, dict) else ids)
        return list(tokenizer.encode(_plain_chat(messages), add_special_tokens=False))
    except Exception as err:  # noqa: BLE001 - a template or tokenizer error is the request's
        raise APIError(400, f"the chat template cannot render these messages: {err}",
                       param="messages") from None


def _plain_chat(messages: list[dict]) -> str:
    """mlx_lm.server's fallback for a tokenizer without a chat template (convert_chat)."""
    prefix = {"system": "ASSISTANT's RULE: ", "developer": "ASSISTANT's RULE: ",
              "user": "USER: ", "assistant": "ASSISTANT: "}
    text = "".join(f"{prefix.get(m['role'], '')}{m['content']}\n" for m in messages)
    return (text + "ASSISTANT: ").rstrip()
