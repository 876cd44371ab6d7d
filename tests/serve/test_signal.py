"""SIGTERM to a real ``batchlab serve`` process: a stream that outlives the grace period
ends with a finish_reason, an error event and [DONE]; the process exits 0. A second
signal stops it at once, whatever the grace period."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import httpx2
from serve_live import MODEL


def _start(grace: str) -> tuple[subprocess.Popen, str, list[str]]:
    """A ``batchlab serve`` process, its URL once /health answers, and its output so far."""
    process = subprocess.Popen(
        [sys.executable, "-m", "batchlab", "serve", "--model", MODEL, "--port", "0",
         "--grace", grace, "--max-tokens", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = None
    lines = []
    while url is None:
        line = process.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
        found = re.search(r"http://127\.0\.0\.1:\d+", "".join(lines).replace("\n", ""))
        url = found and found.group(0)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx2.get(url + "/health").status_code == 200:
                return process, url, lines
        except httpx2.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_sigterm_ends_open_streams_cleanly_and_the_process_exits():
    process, url, lines = _start("0.5")
    try:
        events = []
        with httpx2.Client(timeout=30) as http, http.stream(
                "POST", url + "/v1/completions",
                json={"prompt": [5, 6], "max_tokens": 100000, "stream": True,
                      "stop_token_ids": []}) as r:
            for line in r.iter_lines():
                if line:
                    events.append(line)
                if len(events) == 3:
                    process.send_signal(signal.SIGTERM)
        code = process.wait(60)
        assert code == 0, "".join(lines) + process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-3][6:])["choices"][0]["finish_reason"] == "error"
    assert "shut down" in json.loads(events[-2][6:])["error"]["message"]


def test_a_second_signal_stops_at_once_whatever_the_grace():
    process, url, lines = _start("600")  # the first signal alone would wait ten minutes
    try:
        with httpx2.Client(timeout=30) as http, http.stream(
                "POST", url + "/v1/completions",
                json={"prompt": [5, 6], "max_tokens": 100000, "stream": True,
                      "stop_token_ids": []}) as r:
            lines_seen = r.iter_lines()
            next(lines_seen)
            process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while httpx2.get(url + "/health").json()["status"] != "shutting_down":
                assert time.monotonic() < deadline, "the first signal was not taken"
                time.sleep(0.02)
            process.send_signal(signal.SIGINT)
            code = process.wait(60)  # raises TimeoutExpired if the grace still runs
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, "".join(lines) + process.stdout.read()
