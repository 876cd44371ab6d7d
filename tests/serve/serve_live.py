"""A live server for a test (uvicorn in a thread, on a free port) and an OpenAI client."""

from __future__ import annotations

import contextlib
import threading
import time

from openai import OpenAI

from batchlab.serve.server import Server, start_server

MODEL = "llama"


@contextlib.contextmanager
def live_server(model: str = MODEL, **settings):
    server = start_server(model, port=0, **settings)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.uvicorn.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    try:
        yield server
    finally:
        server.uvicorn.should_exit = True
        thread.join(30)


def client(server: Server, **kw) -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "none"),
                  max_retries=0, timeout=60, **kw)

