"""Reading a request: its API key, and its body as JSON, each failure in OpenAI's shape.

The body is read here, not by FastAPI, so that its size (413), its read time (408), a
client that leaves half way (one log line, no answer: nobody is there to read it) and a
body that is not JSON at all (deep nesting included) all end before the schema sees it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging

from fastapi import Request
from starlette.requests import ClientDisconnect

from batchlab.serve.errors import APIError
from batchlab.serve.state import ServeState

log = logging.getLogger("batchlab.serve")


class ClientLeft(Exception):
    """The client disconnected before its body was read whole: nothing to answer."""


def check_api_key(state: ServeState, request: Request) -> None:
    if state.api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), state.api_key):
        raise APIError(401, "Incorrect or missing API key: send Authorization: Bearer <key>",
                       type="authentication_error", code="invalid_api_key")


async def read_json(state: ServeState, request: Request):
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
    except ClientDisconnect:
        client = request.client
        log.info("%s %s: the client left before its body was sent whole (%s)",
                 request.method, request.url.path,
                 f"{client.host}:{client.port}" if client else "unknown client")
        raise ClientLeft from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # RecursionError: nesting too deep
        raise APIError(400, f"the body is not valid JSON: {type(err).__name__}: "
                       f"{str(err)[:200]}", code="invalid_json") from None
