"""uvicorn's h11 protocol, with its one plain-text answer in OpenAI's JSON shape.

Bytes that are not HTTP (a bad request line, a Content-Length that is not a number,
a header without a colon) never reach the app: h11 refuses them and uvicorn answers
``400 Invalid HTTP request received.`` as text/plain. A client of this API parses every
answer as JSON, so this one is ``{"error": {...}}`` too. h11, not httptools, always:
the same parser (and the same answers) wherever the server runs.
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from batchlab.serve.errors import error_body


class JSONErrorsH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(error_body(f"{msg} Send well-formed HTTP/1.1.",
                                     code="invalid_http")).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers,
                                                         reason=b"Bad Request")))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()  # the request's framing is lost: nothing after it can be read
