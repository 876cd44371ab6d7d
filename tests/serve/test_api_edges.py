"""The server's flags and HTTP edges (issue 29): sampling defaults, a chat template of
one's own, CORS, the API key on /stats and /metrics, HEAD and trailing slashes, bytes
that are not HTTP, and a client that leaves mid-body."""

from __future__ import annotations

import logging
import socket
import time

import httpx2
from serve_live import MODEL, client, live_server

from batchlab.serve.state import ChatTemplate, SamplingDefaults

HI = [{"role": "user", "content": "hi"}]


def _ids(api, **kw) -> list[int]:
    return api.chat.completions.create(model=MODEL, messages=HI, max_tokens=8,
                                       **kw).choices[0].token_ids


def test_sampling_defaults_apply_where_a_request_names_none(server):
    with live_server(max_batch=4, sampling=SamplingDefaults(temperature=1.0, top_k=5)) as warm:
        defaulted = _ids(client(warm), seed=3)
        overridden = _ids(client(warm), seed=3, temperature=0.0)
    api = client(server)
    assert defaulted == _ids(api, seed=3, temperature=1.0, extra_body={"top_k": 5})
    assert overridden == _ids(api) != defaulted


def test_a_chat_template_of_ones_own_and_its_arguments():
    template = ("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                "{% if shout %}!{% endif %}>")
    with live_server(max_batch=4, max_tokens=1, chat_template=ChatTemplate(
            source=template, args={"shout": True})) as server:
        api = client(server)
        loud = api.chat.completions.create(model=MODEL, messages=HI)
        quiet = api.chat.completions.create(model=MODEL, messages=HI,
                                            extra_body={"chat_template_kwargs": {"shout": False}})
    assert loud.usage.prompt_tokens == len("[user:hi]!>")  # byte tokens: one a character
    assert quiet.usage.prompt_tokens == len("[user:hi]>")


def test_cors_and_the_api_key_on_every_route_but_health():
    with live_server(max_batch=2, api_key="k", allowed_origins=("http://app.example",)) as server, \
            httpx2.Client(base_url=server.url) as http:
            closed = [http.get(p).status_code for p in ("/stats", "/metrics", "/v1/models")]
            keyed = [http.get(p, headers={"Authorization": "Bearer k"}).status_code
                     for p in ("/stats", "/metrics", "/v1/models")]
            health = http.get("/health").status_code
            preflight = http.options("/v1/chat/completions", headers={
                "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization"})
            other = http.get("/health", headers={"Origin": "http://evil.example"})
    assert closed == [401, 401, 401] and keyed == [200, 200, 200] and health == 200
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "http://app.example"
    assert "access-control-allow-origin" not in other.headers


def _raw(server, data: bytes) -> bytes:
    host, port = server.sock.getsockname()[:2]
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(data)
        out = b""
        while part := conn.recv(65536):
            out += part
    return out


def test_head_trailing_slashes_and_bad_framing_answer_in_json(server):
    with httpx2.Client(base_url=server.url) as http:
        head = http.head("/health")
        slashed = http.post("/v1/completions/", json={"prompt": [5], "max_tokens": 2})
        models = http.get("/v1/models/")
    bad = [_raw(server, b"GARBAGE\r\n\r\n"),
           _raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc"
                b"\r\n\r\n{}"),
           _raw(server, b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n")]
    assert head.status_code == 200 and head.content == b""
    assert slashed.status_code == 200 and len(slashed.json()["choices"][0]["token_ids"]) == 2
    assert models.status_code == 200 and models.json()["data"][0]["id"] == MODEL
    for answer in bad:
        head_lines, _, body = answer.partition(b"\r\n\r\n")
        assert head_lines.startswith(b"HTTP/1.1 400") and b"application/json" in head_lines
        assert httpx2.Response(400, content=body).json()["error"]["code"] == "invalid_http"


def test_a_client_that_leaves_mid_body_is_one_log_line(server, caplog):
    caplog.set_level(logging.INFO)
    host, port = server.sock.getsockname()[:2]
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                     b"\r\n{\"prompt\"")
        time.sleep(0.2)  # the server is reading the body (not a timing assertion)
    deadline = time.monotonic() + 10
    while not any("left before its body" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.02)
    time.sleep(0.2)  # anything the server would log after it
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()
                or "Exception in ASGI" in r.getMessage()]
    ok = httpx2.post(server.url + "/v1/completions", json={"prompt": [5], "max_tokens": 1})
    assert ok.status_code == 200
