"""The HTTP client of the gate: stdlib only, so it runs wherever batchlab does.

Every failure to get a well-formed JSON answer is a ``ServerError`` whose message says
what came back (refused connection, a status with the body's start, bytes that are not
JSON, a stream without ``[DONE]``): the check that met it is ERROR, never FAIL.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass

BODY_SHOWN = 300  # characters of a bad answer quoted in the error


class ServerError(Exception):
    """No usable answer. ``status``: the HTTP status, or None (no HTTP answer at all)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True, kw_only=True)
class Api:
    """One server: ``url`` is its root (``http://127.0.0.1:8000``; a trailing ``/v1`` is
    dropped), ``api_key`` goes in ``Authorization: Bearer``."""

    url: str
    api_key: str | None = None
    timeout_s: float = 120.0

    @property
    def root(self) -> str:
        return self.url.rstrip("/").removesuffix("/v1")

    def get(self, route: str) -> dict:
        return self._json(self._open(urllib.request.Request(self.root + route,
                                                            headers=self._headers())), route)

    def post(self, route: str, body: dict) -> dict:
        return self._json(self._open(self._request(route, body)), route)

    def stream(self, route: str, body: dict) -> list[dict]:
        """The ``data:`` events of an SSE answer, up to ``[DONE]`` (which must come)."""
        events = []
        with self._open(self._request(route, body)) as answer:
            for raw in answer:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue  # comments (": keepalive"), blank separators
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    return events
                try:
                    events.append(json.loads(data))
                except ValueError:
                    raise ServerError(f"POST {route} (stream): an event is not JSON: "
                                      f"{data[:BODY_SHOWN]!r}") from None
        raise ServerError(f"POST {route} (stream): the stream ended without data: [DONE]")

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _request(self, route: str, body: dict) -> urllib.request.Request:
        return urllib.request.Request(self.root + route, data=json.dumps(body).encode(),
                                      headers=self._headers(), method="POST")

    def _open(self, request: urllib.request.Request):
        what = f"{request.get_method()} {request.full_url}"
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            raise ServerError(f"{what}: HTTP {err.code}: {text[:BODY_SHOWN]}",
                              status=err.code) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            reason = getattr(err, "reason", err)
            raise ServerError(f"{what}: no answer ({reason}); is the server running at "
                              f"{self.root}?") from None

    @staticmethod
    def _json(answer, route: str) -> dict:
        with answer:
            try:
                text = answer.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as err:
                raise ServerError(f"{route}: the answer broke off ({err})") from None
        try:
            value = json.loads(text)
        except ValueError:
            raise ServerError(f"{route}: the answer is not JSON: {text[:BODY_SHOWN]!r}") from None
        if not isinstance(value, dict):
            raise ServerError(f"{route}: the answer is not a JSON object: {text[:BODY_SHOWN]!r}")
        return value
