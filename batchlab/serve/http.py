"""The OpenAI-compatible HTTP face of ``ServeEngine`` (standard library only).

    GET  /health                 {"status": "ok"} (503 once the engine has failed)
    GET  /v1/models              the one model served
    GET  /stats                  running / waiting jobs, projected KV bytes, budget
    POST /v1/completions         prompt: text or a list of token ids
    POST /v1/chat/completions    messages, for a tokenizer with a chat template

Both POSTs take ``max_tokens`` (default 16), ``temperature`` (default 0: greedy, as
the gates run), ``top_p``, ``top_k``, ``min_p``, ``seed``, ``presence_penalty``,
``frequency_penalty``, ``repetition_penalty``, ``logit_bias`` ({"id": bias}; the engine's
processors, mlx-lm's make_logits_processors op for op), ``stream`` (server-sent
events, ending with ``data: [DONE]``) and, beyond OpenAI, ``stop_token_ids`` (default:
the tokenizer's EOS ids). Every choice also carries its ``token_ids``. Unsupported
fields (``n`` > 1, ``logprobs``, ``stop`` strings) are refused with a 400 that says so,
never silently ignored. A client that disconnects mid-stream cancels its job.
"""

from __future__ import annotations

import json
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from batchlab.engine.processors import ProcessorParams
from batchlab.engine.sampler import SamplingParams
from batchlab.serve.engine import Done, Job, ServeEngine, Token

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
REFUSED = {"n": "only n = 1 is served", "logprobs": "logprobs are not served",
           "best_of": "best_of is not served", "echo": "echo is not served",
           "stop": "stop strings are not served; pass stop_token_ids (token ids) instead"}


class ClientError(ValueError):
    """A bad request: answered with 400 and this message."""


class OpenAIServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, engine: ServeEngine, tokenizer, model_name: str):
        super().__init__(address, _Handler)
        self.engine, self.tokenizer, self.model_name = engine, tokenizer, model_name

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: OpenAIServer

    def log_message(self, format, *args):
        pass  # one line per request on stderr is noise for a harness

    def do_GET(self):
        engine = self.server.engine
        if self.path == "/health":
            if engine.failure:
                return self._json({"status": "failed", "error": engine.failure},
                                  HTTPStatus.SERVICE_UNAVAILABLE)
            return self._json({"status": "ok"})
        if self.path == "/v1/models":
            return self._json({"object": "list", "data": [
                {"id": self.server.model_name, "object": "model", "owned_by": "batchlab"}]})
        if self.path == "/stats":
            s = engine.stats()
            return self._json({"running": s.running, "waiting": s.waiting,
                               "projected_kv_bytes": s.projected_kv_bytes,
                               "kv_budget": s.kv_budget, "steps": s.steps,
                               "tokens_generated": s.tokens_generated})
        self._error(HTTPStatus.NOT_FOUND, f"no route GET {self.path}")

    def do_POST(self):
        chat = self.path == "/v1/chat/completions"
        if self.path != "/v1/completions" and not chat:
            return self._error(HTTPStatus.NOT_FOUND, f"no route POST {self.path}")
        try:
            body = self._body()
            prompt = self._chat_prompt(body) if chat else self._prompt(body)
            job = self.server.engine.submit(prompt, **_generation_args(body, self.server))
        except (ClientError, ValueError) as err:
            return self._error(HTTPStatus.BAD_REQUEST, str(err))
        except RuntimeError as err:  # the engine has failed
            return self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(err))
        reply = _Reply(job, self.server, chat=chat, prompt_tokens=len(prompt))
        if body.get("stream"):
            return self._stream(reply)
        try:
            answer = reply.whole()
        except RuntimeError as err:  # the engine failed while this job ran
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, str(err))
        self._json(answer)

    # -- requests -----------------------------------------------------------------------

    def _body(self) -> dict:
        try:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, UnicodeDecodeError) as err:
            raise ClientError(f"the body is not JSON: {err}") from None
        if not isinstance(body, dict):
            raise ClientError("the body must be a JSON object")
        for key, why in REFUSED.items():
            value = body.get(key)
            unset = value is None or value is False or value == [] or (key == "n" and value == 1)
            if not unset:
                raise ClientError(f"{key!r}: {why}")
        return body

    def _prompt(self, body: dict) -> list[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return self._encode(prompt)
        if isinstance(prompt, list) and all(type(t) is int for t in prompt):
            return prompt
        raise ClientError("'prompt' must be one string or one list of token ids")

    def _chat_prompt(self, body: dict) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ClientError("'messages' must be a non-empty list of {role, content}")
        tokenizer = self.server.tokenizer
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise ClientError(f"{self.server.model_name} has no chat template: "
                              "use /v1/completions with a prompt")
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    def _encode(self, text: str) -> list[int]:
        if self.server.tokenizer is None:
            raise ClientError(f"{self.server.model_name} has no tokenizer: send the prompt "
                              "as a list of token ids")
        return list(self.server.tokenizer.encode(text, add_special_tokens=False))

    # -- replies ------------------------------------------------------------------------

    def _json(self, payload: dict, status: HTTPStatus = HTTPStatus.OK) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._json({"error": {"message": message, "type": status.phrase,
                              "code": status.value}}, status)

    def _stream(self, reply: _Reply) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        try:
            for chunk in reply.chunks():
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except RuntimeError as err:  # the engine failed while this job ran
            self.wfile.write(b"data: " + json.dumps({"error": {"message": str(err)}}).encode()
                             + b"\n\n")
        except (BrokenPipeError, ConnectionResetError):
            self.server.engine.cancel(reply.job)  # the client left: free its row


def _generation_args(body: dict, server: OpenAIServer) -> dict:
    def number(key, default, kind=float):
        value = body.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ClientError(f"{key!r} must be a number, got {value!r}")
        if kind is int and value != int(value):
            raise ClientError(f"{key!r} must be an integer, got {value!r}")
        return kind(value)

    max_tokens = number("max_tokens", number("max_completion_tokens", DEFAULT_MAX_TOKENS, int),
                        int)
    sampling = SamplingParams(temperature=number("temperature", 0.0),
                              top_p=number("top_p", 1.0), top_k=number("top_k", 0, int),
                              min_p=number("min_p", 0.0), seed=number("seed", 0, int))
    stop = body.get("stop_token_ids")
    if stop is not None and not (isinstance(stop, list) and all(type(t) is int for t in stop)):
        raise ClientError("'stop_token_ids' must be a list of token ids")
    bias = body.get("logit_bias") or {}
    if not isinstance(bias, dict) or not all(
            str(k).isdigit() and not isinstance(v, bool) and isinstance(v, (int, float))
            for k, v in bias.items()):
        raise ClientError("'logit_bias' must map token ids to numbers, e.g. {\"5\": 2.0}")
    try:
        processors = ProcessorParams(
            logit_bias=tuple((int(k), float(v)) for k, v in bias.items()),
            presence_penalty=number("presence_penalty", 0.0),
            frequency_penalty=number("frequency_penalty", 0.0),
            repetition_penalty=number("repetition_penalty", 0.0))
    except ValueError as err:
        raise ClientError(str(err)) from None
    return {"max_tokens": max_tokens, "sampling": sampling,
            "processors": processors if processors.active else None,
            "stop_ids": None if stop is None else frozenset(stop)}


class _Reply:
    """One job's answer in OpenAI's shapes, whole or as stream chunks."""

    def __init__(self, job: Job, server: OpenAIServer, *, chat: bool, prompt_tokens: int):
        self.job, self.server, self.chat = job, server, chat
        self.prompt_tokens = prompt_tokens
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{job.name}"
        self.created = int(time.time())
        self.ids: list[int] = []
        # mlx-lm's streaming detokenizer: each token's text once, not a re-decode of the
        # whole answer per token; it holds back bytes of an unfinished UTF-8 character
        tokenizer = server.tokenizer
        self.detokenizer = None if tokenizer is None else tokenizer.detokenizer

    def events(self):
        """(new token ids, new text, finish reason or None) as the engine produces them."""
        while True:
            event = self.job.events.get()
            if isinstance(event, Token):
                self.ids.append(event.id)
                yield [event.id], self._text(event.id), None
            elif isinstance(event, Done):
                if event.reason == "error":
                    raise RuntimeError(event.error)
                if self.detokenizer is not None:
                    self.detokenizer.finalize()
                finish = "stop" if event.reason in ("stop", "cancelled") else event.reason
                yield [], self._text(None), finish
                return

    def whole(self) -> dict:
        text, finish = [], None
        for _, piece, finish in self.events():  # noqa: B007 - the last finish is read below
            text.append(piece)
        return {**self._head("chat.completion" if self.chat else "text_completion"),
                "choices": [self._choice(self.ids, "".join(text), finish, whole=True)],
                "usage": self._usage()}

    def chunks(self):
        for ids, text, finish in self.events():
            chunk = {**self._head("chat.completion.chunk" if self.chat else "text_completion"),
                     "choices": [self._choice(ids, text, finish, whole=False)]}
            if finish is not None:
                chunk["usage"] = self._usage()
            yield chunk

    def _choice(self, ids: list[int], text: str, finish: str | None, *, whole: bool) -> dict:
        choice = {"index": 0, "finish_reason": finish, "token_ids": ids}
        if self.chat:
            choice["message" if whole else "delta"] = (
                {"role": "assistant", "content": text} if whole else {"content": text})
        else:
            choice.update(text=text, logprobs=None)
        return choice

    def _text(self, token: int | None) -> str:
        """The text that became printable with ``token`` (None: what finalize flushed)."""
        if self.detokenizer is None:
            return ""
        if token is not None:
            self.detokenizer.add_token(token)
        return self.detokenizer.last_segment

    def _head(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created,
                "model": self.server.model_name}

    def _usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": len(self.ids),
                "total_tokens": self.prompt_tokens + len(self.ids)}
