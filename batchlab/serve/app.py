"""The OpenAI-compatible routes (FastAPI on uvicorn; see docs/serving.md).

    GET  /health                 the engine's state (503 unless "ok"); HEAD too
    GET  /v1/models, /v1/models/{id}
    GET  /stats                  running / prefilling / decoding / waiting rows, KV bytes
    GET  /metrics                Prometheus text format
    POST /v1/completions         prompt: text, token ids, or a list of either
    POST /v1/chat/completions    messages (the model's chat template, else mlx-lm's
                                 plain role-prefix fallback)

Every route but ``/health`` takes the API key when one is set. A path with a trailing
slash is the same route (``/v1/completions/``), not a redirect: a redirected POST loses
its body in some clients. Every answer, errors included, is JSON in OpenAI's shape.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.middleware.cors import CORSMiddleware

from batchlab.serve import errors
from batchlab.serve.errors import APIError
from batchlab.serve.generate import Generation, collect, stream
from batchlab.serve.job_args import top_logprobs_of
from batchlab.serve.prompts import chat_prompt, encode
from batchlab.serve.request_io import ClientLeft, check_api_key, read_json
from batchlab.serve.schema import ChatRequest, Common, CompletionRequest
from batchlab.serve.state import ServeState


def build_app(state: ServeState, *, allowed_origins: tuple[str, ...] = ()) -> FastAPI:
    app = FastAPI(title="batchlab serve", docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)
    app.state.serve = state
    errors.install(app)

    @app.exception_handler(ClientLeft)
    async def _left(_: Request, __: ClientLeft):
        return Response(status_code=499)  # nobody reads it: uvicorn drops it

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health():
        h = state.engine.health()
        return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)

    @app.api_route("/v1/models", methods=["GET", "HEAD"])
    async def models(request: Request):
        check_api_key(state, request)
        return {"object": "list", "data": [_model_card(state)]}

    @app.api_route("/v1/models/{model_id:path}", methods=["GET", "HEAD"])
    async def model(model_id: str, request: Request):
        check_api_key(state, request)
        _check_model(state, model_id)
        return _model_card(state)

    @app.api_route("/stats", methods=["GET", "HEAD"])
    async def stats(request: Request):
        check_api_key(state, request)
        s = state.engine.stats()
        return {f: getattr(s, f) for f in s.__slots__}

    @app.api_route("/metrics", methods=["GET", "HEAD"])
    async def metrics(request: Request):
        check_api_key(state, request)
        body, content_type = state.metrics.render(state.engine)
        return Response(body, media_type=content_type)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _generate(state, request, CompletionRequest)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await _generate(state, request, ChatRequest)

    if allowed_origins:
        # mlx_lm.server's --allowed-origins; a preflight needs no API key (browsers
        # send none with it)
        app.add_middleware(CORSMiddleware, allow_origins=list(allowed_origins),
                           allow_methods=["*"], allow_headers=["*"])
    return _StripTrailingSlash(app)


class _StripTrailingSlash:
    """``/v1/completions/`` is ``/v1/completions``: the same route, not a 307."""

    def __init__(self, app: FastAPI):
        self.app = app
        self.state = app.state  # tests and the server reach the app's state through here

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] == "http" and len(path) > 1 and path.endswith("/"):
            scope = {**scope, "path": path.rstrip("/") or "/"}
            scope["raw_path"] = scope["path"].encode()
        await self.app(scope, receive, send)


def _model_card(state: ServeState) -> dict:
    return {"id": state.model_name, "object": "model", "created": 0, "owned_by": "batchlab"}


def _check_model(state: ServeState, name: str | None) -> None:
    if name is not None and name != state.model_name and name not in state.model_aliases:
        raise APIError(404, f"The model `{name}` does not exist: this server serves "
                       f"`{state.model_name}`", param="model", code="model_not_found")


async def _generate(state: ServeState, request: Request, schema: type[Common]):
    check_api_key(state, request)
    body = await read_json(state, request)
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
    chat = isinstance(req, ChatRequest)
    prompts = [chat_prompt(state, req)] if chat else [encode(state, p) for p in req.prompts()]
    requested = req.max_tokens or req.max_completion_tokens
    param = "messages" if chat else "prompt"
    max_tokens = [state.limits.max_tokens(len(p), requested, param=param) for p in prompts]
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
