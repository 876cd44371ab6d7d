"""One llama server per test module; a test that needs other settings starts its own."""

from __future__ import annotations

import pytest
from serve_live import live_server


@pytest.fixture(scope="module")
def server():
    with live_server(max_batch=8, max_tokens=4096) as s:
        yield s
