"""One completion request from checked fields to OpenAI's answer, whole or streamed.

A request becomes ``len(prompts) x n`` engine jobs (choice ``i * n + j`` is prompt i's
j-th sample). Their events arrive on one asyncio queue, tagged with the choice index,
from the engine thread. A client that disconnects (streamed or not) cancels every job
of its request; a stop string cancels its own job once it has been seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from batchlab.serve.errors import APIError, error_body
from batchlab.serve.job import Done, EngineUnavailable, Job, Token
from batchlab.serve.job_args import processors_of, sampling_of, stop_ids_of
from batchlab.serve.schema import Common
from batchlab.serve.text import ChoiceText

access_log = logging.getLogger("batchlab.serve.access")


@dataclass(slots=True, kw_only=True)
class Choice:
    index: int
    prompt_tokens: int
    text: ChoiceText
    job: Job | None = None
    ids: list[int] = field(default_factory=list)
    logprobs: list[Token] = field(default_factory=list)
    text_offset: int = 0  # characters of the tokens' spellings sent in logprobs so far
    finish: str | None = None
    error: str | None = None
    first_at: float | None = None
    last_at: float | None = None


class Generation:
    """The jobs of one request and the choices they fill."""

    def __init__(self, state, req: Common, prompts: list[list[int]], *, chat: bool,
                 max_tokens: list[int], top_logprobs: int | None):
        """``max_tokens``: one per prompt (``limits.TokenLimits``)."""
        self.state, self.req, self.chat = state, req, chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.started = time.monotonic()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.prompt_tokens = sum(len(p) for p in prompts)
        tokenizer = state.tokenizer
        stop_ids = stop_ids_of(req, state.engine)
        processors = processors_of(req, state.engine.vocab_size)
        self.choices: list[Choice] = []
        jobs = []
        for i, prompt in enumerate(prompts):
            for j in range(req.n):
                index = i * req.n + j
                detok = None if tokenizer is None else tokenizer.detokenizer
                if detok is not None:
                    detok.reset()
                self.choices.append(Choice(index=index, prompt_tokens=len(prompt), text=ChoiceText(
                    detokenizer=detok, stop_strings=req.stop_strings(), stop_ids=stop_ids)))
                jobs.append({"prompt": prompt, "max_tokens": max_tokens[i],
                             "sampling": sampling_of(req, j, state.sampling,
                                                     state.engine.vocab_size),
                             "logprobs": top_logprobs,
                             "stop_ids": stop_ids, "processors": processors})
        try:
            for choice, args in zip(self.choices, jobs):
                choice.job = state.engine.submit(args, self._sink(choice.index))
        except ValueError as err:
            self.cancel()
            raise APIError(400, str(err), param=getattr(err, "param", "prompt")) from None
        except EngineUnavailable as err:
            self.cancel()
            raise APIError(503, str(err), type="service_unavailable") from None

    def _sink(self, index: int):
        def put(event):
            # RuntimeError: the loop is gone (the server stopped), nobody to tell
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.queue.put_nowait, (index, event))
        return put

    def cancel(self) -> None:
        for choice in self.choices:
            if choice.job is not None and choice.finish is None:
                self.state.engine.cancel(choice.job)

    @property
    def open(self) -> int:
        return sum(c.finish is None for c in self.choices)

    async def events(self):
        """(choice, new text, new ids, new logprob tokens) until every choice finished."""
        metrics = self.state.metrics
        while self.open:
            index, event = await self.queue.get()
            choice = self.choices[index]
            if choice.finish is not None:
                continue  # after a stop string: the job's remaining events
            if isinstance(event, Token):
                now = time.monotonic()
                if choice.first_at is None:
                    choice.first_at = now
                    metrics.ttft.observe(now - self.started)
                else:
                    metrics.itl.observe(now - choice.last_at)
                choice.last_at = now
                choice.ids.append(event.id)
                if event.logprob is not None:
                    choice.logprobs.append(event)
                text = choice.text.add(event.id)
                if choice.text.stopped_by_string:
                    choice.finish = "stop"  # a finish, not the client leaving: keep the cache
                    self.state.engine.cancel(choice.job, keep_cache=True)
                yield choice, text, [event.id], [event] if event.logprob is not None else []
                continue
            assert isinstance(event, Done)
            text = choice.text.finish()
            if event.reason in ("error", "shutdown"):
                choice.finish, choice.error = "error", event.error
            elif event.reason == "cancelled" or choice.text.stopped_by_string:
                choice.finish = "stop"
            else:
                choice.finish = event.reason
            yield choice, text, [], []

    # -- OpenAI's shapes ----------------------------------------------------------------

    def head(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created,
                "model": self.state.model_name}

    def usage(self) -> dict:
        completion = sum(len(c.ids) for c in self.choices)
        prompt = self.prompt_tokens
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": self.cached_tokens()}}

    def cached_tokens(self) -> int:
        """Prompt tokens served from the prompt cache (OpenAI's and mlx-lm's
        ``usage.prompt_tokens_details.cached_tokens``): per prompt, the most any of its
        choices reused (``prompt_tokens`` counts each prompt once, whatever ``n``)."""
        n = self.req.n
        return sum(max(c.job.cached_tokens if c.job else 0 for c in self.choices[i:i + n])
                   for i in range(0, len(self.choices), n))

    def logprobs_json(self, choice: Choice, tokens: list[Token]) -> dict | None:
        """OpenAI's logprobs of ``tokens``, the choice's next ones. Completions'
        ``text_offset``: where each token's spelling starts in the choice's tokens
        spelled one after another (vLLM's reading: from 0, the prompt not counted, as
        echo is not served), continued across a stream's chunks."""
        if self.chat:
            if not self.req.logprobs:
                return None
            return {"content": [self._chat_logprob(t) for t in tokens], "refusal": None}
        if self.req.logprobs is None:
            return None
        spell = self.spell
        offsets = []
        for t in tokens:
            offsets.append(choice.text_offset)
            choice.text_offset += len(self.state.spell(t.id))
        return {"tokens": [spell(t.id) for t in tokens],
                "token_logprobs": [t.logprob for t in tokens],
                "top_logprobs": [_top_dict(spell, t.top) for t in tokens],
                "text_offset": offsets}

    @property
    def spell(self):
        """How logprobs name a token: its text, or ``token_id:N`` when the request sets
        vLLM's ``return_tokens_as_token_ids`` (texts collide: every lone UTF-8
        continuation byte spells U+FFFD, so only ids name the alternatives)."""
        if self.req.return_tokens_as_token_ids:
            return lambda token: f"token_id:{token}"
        return self.state.spell

    def _chat_logprob(self, t: Token) -> dict:
        spell = self.spell

        def one(i, lp):
            s = spell(i)
            return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8", "replace"))}
        return {**one(t.id, t.logprob), "top_logprobs": [one(i, lp) for i, lp in t.top]}

    def whole(self) -> dict:
        choices = []
        for c in self.choices:
            choice = {"index": c.index, "finish_reason": c.finish, "token_ids": c.ids,
                      "logprobs": self.logprobs_json(c, c.logprobs)}
            if c.job is not None:  # whom the row decoded beside (an extension field)
                choice["batchlab"] = {"peak_decode_rows": c.job.peak_rows,
                                      "decode_steps_shared": c.job.shared_steps}
            if self.chat:
                choice["message"] = {"role": "assistant", "content": c.text.text}
            else:
                choice["text"] = c.text.text
            choices.append(choice)
        return {**self.head("chat.completion" if self.chat else "text_completion"),
                "choices": choices, "usage": self.usage()}

    def chunk(self, choice: Choice, text: str, ids: list[int], tokens: list[Token],
              *, first: bool = False) -> dict:
        part = {"index": choice.index, "finish_reason": choice.finish, "token_ids": ids,
                "logprobs": self.logprobs_json(choice, tokens) if tokens else None}
        if self.chat:
            part["delta"] = ({"role": "assistant", "content": text} if first
                             else ({"content": text} if text or choice.finish is None else {}))
        else:
            part["text"] = text
        chunk = {**self.head("chat.completion.chunk" if self.chat else "text_completion"),
                 "choices": [part]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    @property
    def include_usage(self) -> bool:
        return bool(self.req.stream_options and self.req.stream_options.include_usage)

    def log(self, status: int, *, streamed: bool, disconnected: bool = False) -> None:
        access_log.info(json.dumps({
            "id": self.id, "status": status, "stream": streamed, "choices": len(self.choices),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": sum(len(c.ids) for c in self.choices),
            "finish": [c.finish for c in self.choices], "disconnected": disconnected,
            "seconds": round(time.monotonic() - self.started, 4), "user": self.req.user,
            # chat's other caller tags (accepted, answered alike): kept where they are read
            "safety_identifier": getattr(self.req, "safety_identifier", None),
            "metadata": getattr(self.req, "metadata", None)}))


async def collect(gen: Generation) -> tuple[int, dict]:
    async for _ in gen.events():
        pass
    failed = [c for c in gen.choices if c.error]
    if failed:
        shutdown = any("shut down" in (c.error or "") for c in failed)
        status = 503 if shutdown else 500
        return status, error_body(failed[0].error, type="service_unavailable" if shutdown
                                  else "server_error")
    return 200, gen.whole()


async def stream(gen: Generation):
    """Server-sent events: a role delta first (chat), a chunk per token, a final chunk
    per choice with its finish_reason, an error event if a choice failed, usage if asked
    for, then ``[DONE]``."""
    def sse(payload) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    if gen.chat:
        for c in gen.choices:
            yield sse(gen.chunk(c, "", [], [], first=True))
    errors = []
    async for choice, text, ids, tokens in gen.events():
        yield sse(gen.chunk(choice, text, ids, tokens))
        if choice.error:
            errors.append(choice.error)
    for error in errors:
        yield sse(error_body(error, type="server_error"))
    if gen.include_usage:
        yield sse({**gen.head("chat.completion.chunk" if gen.chat else "text_completion"),
                   "choices": [], "usage": gen.usage()})
    yield b"data: [DONE]\n\n"


def _top_dict(spell, top) -> dict[str, float]:
    """OpenAI's {text: logprob}; tokens that spell alike keep the likelier one's value."""
    out: dict[str, float] = {}
    for token, logprob in top:
        out.setdefault(spell(token), logprob)
    return out
