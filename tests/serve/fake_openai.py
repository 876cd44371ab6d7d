"""A fake OpenAI completions server that answers from the goldens, with seeded faults.

It serves the zoo llama's cases of matrices/http.toml exactly as their goldens say
(token_ids, logprobs and top-5 named ``token_id:N``, usage, finish reasons, stop
strings, streaming), and any other prompt (a needle filler) a fixed answer; each fault
breaks one thing a check of ``batchlab http check`` must catch:

    token      step 3 of every golden answer is another token
    logprob    each token's reported logprob is its second alternative's
    usage      completion_tokens counts one token too many
    batch      a golden answer given while another request is in flight has its
               logprobs one float step lower (a batch-variant server)
    stop       stop strings are ignored
    garbage    every completion is answered with bytes that are not JSON
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from batchlab.commands.http import DEFAULT_HTTP_MATRIX
from batchlab.defaults import DEFAULT_GOLDENS
from batchlab.http_gate.cases import load_cases
from batchlab.zoo.text import tokenizer_for

MODEL = "llama"
STEP_S = 0.003  # a token's time: concurrent requests overlap


class FakeServer:
    def __init__(self, faults: frozenset[str] = frozenset()):
        self.faults = faults
        self.tokenizer = tokenizer_for(MODEL)
        self.cases = {c.prompt: c for c in load_cases(DEFAULT_HTTP_MATRIX, DEFAULT_GOLDENS,
                                                      MODEL, self.tokenizer)}
        self.in_flight = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, body: dict) -> tuple[list[int], list[float], list[dict], str, str]:
        """(tokens, logprobs, top dicts, text, finish_reason) of a completion."""
        prompt = body["prompt"]
        ids = tuple(prompt) if isinstance(prompt, list) else tuple(
            self.tokenizer.encode(prompt, add_special_tokens=False))
        max_tokens = body["max_tokens"]
        with self.lock:
            self.in_flight += 1
        try:
            time.sleep(STEP_S * max_tokens)
            with self.lock:
                crowded = self.in_flight > 1
        finally:
            with self.lock:
                self.in_flight -= 1
        case = self.cases.get(ids)
        if case is None:  # a filler
            tokens = [(sum(ids) + i) % 200 for i in range(max_tokens)]
            tops = [((t, -1.0), (t + 1, -2.0)) for t in tokens]
        else:
            tokens, tops = list(case.tokens[:max_tokens]), list(case.top[:max_tokens])
            if "token" in self.faults and len(tokens) > 3:
                tokens[3] = (tokens[3] + 1) % 256
        logprobs = [dict(top)[t] if t in dict(top) else top[0][1] for t, top in zip(tokens, tops)]
        if "logprob" in self.faults:
            logprobs = [top[1][1] for top in tops]
        if "batch" in self.faults and crowded and case is not None:
            logprobs = [float(np.nextafter(np.float32(v), np.float32(-np.inf))) for v in logprobs]
        pieces = [self.tokenizer.decode([t]) for t in tokens]
        finish = "length"
        stops = body.get("stop") or []
        if stops and "stop" not in self.faults:
            text = ""
            for i, piece in enumerate(pieces):
                hit = min((j for j in ((text + piece).find(s) for s in stops) if j >= 0),
                          default=-1)
                if hit >= 0:
                    tokens, logprobs, tops = tokens[:i + 1], logprobs[:i + 1], tops[:i + 1]
                    pieces = [*pieces[:i], (text + piece)[len(text):hit]]
                    finish = "stop"
                    break
                text += piece
        top_dicts = [{f"token_id:{t}": v for t, v in top} for top in tops]
        return tokens, logprobs, top_dicts, pieces, finish


def _handler(fake: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, payload: bytes, kind: str = "application/json"):
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):
            self._send(200, json.dumps({"data": [{"id": MODEL}]}).encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if "garbage" in fake.faults:
                return self._send(200, b"<html>not json</html>", "text/html")
            tokens, logprobs, tops, pieces, finish = fake.answer(body)
            top = body.get("logprobs")
            completion = len(tokens) + ("usage" in fake.faults)
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": completion,
                     "total_tokens": len(body["prompt"]) + completion}

            def logprobs_of(i, j):
                if top is None:
                    return None
                return {"tokens": [f"token_id:{t}" for t in tokens[i:j]],
                        "token_logprobs": logprobs[i:j],
                        "top_logprobs": [dict(list(d.items())[:top]) for d in tops[i:j]]}

            if not body.get("stream"):
                choice = {"index": 0, "text": "".join(pieces), "finish_reason": finish,
                          "token_ids": tokens, "logprobs": logprobs_of(0, len(tokens))}
                return self._send(200, json.dumps({"choices": [choice], "usage": usage}).encode())
            events = [{"choices": [{"index": 0, "text": p, "token_ids": [t],
                                    "finish_reason": None, "logprobs": logprobs_of(i, i + 1)}]}
                      for i, (t, p) in enumerate(zip(tokens, pieces))]
            events.append({"choices": [{"index": 0, "text": "", "token_ids": [],
                                        "finish_reason": finish, "logprobs": None}]})
            events.append({"choices": [], "usage": usage})
            payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            self._send(200, payload.encode(), "text/event-stream")

    return Handler
