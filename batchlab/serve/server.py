"""The server's life: load, bind, serve (uvicorn), and stop with a grace period.

``start_server`` loads the model, starts the engine thread and binds the socket (so a
port in use fails before anything serves); ``Server.serve`` runs uvicorn on it, in the
calling thread. On SIGTERM / SIGINT (or ``stop()``): the listening socket closes and the
engine admits nothing new; rows still running after ``grace_s`` end with an error, so
every open stream gets a ``finish_reason``, an error event and ``[DONE]`` and every
waiting non-streaming client a JSON error; then uvicorn closes the connections. A
second signal stops at once: every row ends now, and uvicorn does not wait for the
connections (a stream may lose its last events).
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn

from batchlab.defaults import DEFAULT_GRACE_S
from batchlab.serve.app import build_app
from batchlab.serve.engine_thread import ServeEngine
from batchlab.serve.http_protocol import JSONErrorsH11Protocol
from batchlab.serve.limits import TokenLimits, model_context
from batchlab.serve.metrics import ServeMetrics
from batchlab.serve.state import ChatTemplate, SamplingDefaults, ServeState

BACKLOG = 2048  # the kernel's queue of connections not yet accepted (a burst waits there)
KEEP_ALIVE_S = 15  # an idle keep-alive connection closes after this
CONCURRENCY_LIMIT = 4096  # connections beyond this get a 503 at once
log = logging.getLogger("batchlab.serve")


class _Uvicorn(uvicorn.Server):
    """uvicorn that, on a signal, drains the engine before it stops listening."""

    def __init__(self, config: uvicorn.Config, owner: Server):
        super().__init__(config)
        self.owner = owner

    def handle_exit(self, sig, frame) -> None:
        self.owner.stop()


class Server:
    def __init__(self, state: ServeState, sock: socket.socket, *, grace_s: float,
                 access_log: bool, allowed_origins: tuple[str, ...] = ()):
        self.state, self.engine, self.sock, self.grace_s = state, state.engine, sock, grace_s
        app = build_app(state, allowed_origins=allowed_origins)
        config = uvicorn.Config(app, http=JSONErrorsH11Protocol, backlog=BACKLOG,
                                timeout_keep_alive=KEEP_ALIVE_S,
                                limit_concurrency=CONCURRENCY_LIMIT, log_config=None,
                                access_log=access_log, lifespan="off",
                                timeout_graceful_shutdown=int(grace_s) + 10)
        self.uvicorn = _Uvicorn(config, self)
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def model_name(self) -> str:
        return self.state.model_name

    def serve(self) -> None:
        """Serve until stopped (blocks). Signal handlers are installed when this runs on
        the main thread (uvicorn's own rule)."""
        try:
            self.uvicorn.run(sockets=[self.sock])
        finally:
            self.engine.close()

    def stop(self) -> None:
        """Stop admitting, let running rows finish within the grace period, then stop."""
        if self._stopping.is_set():  # a second signal: stop now
            log.info("second signal: stopping now")
            self.engine.begin_shutdown(0.0)
            self.uvicorn.force_exit = True
            self.uvicorn.should_exit = True
            return
        self._stopping.set()
        log.info("shutting down: running rows get %.0f s to finish", self.grace_s)
        self.engine.begin_shutdown(self.grace_s)
        threading.Thread(target=self._exit_when_drained, daemon=True).start()

    def _exit_when_drained(self) -> None:
        deadline = time.monotonic() + self.grace_s + 2
        while not self.engine.idle and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # the handlers write the rows' last events
        self.uvicorn.should_exit = True


def start_server(model_name: str, *, path: str = "l1", host: str = "127.0.0.1",
                 port: int = 0, max_batch: int = 32, prompt_concurrency: int = 8,
                 prefill_step_size: int = 512, kv_budget: int | None = None,
                 max_tokens: int = 512, max_prompt_tokens: int | None = None,
                 api_key: str | None = None, grace_s: float = DEFAULT_GRACE_S,
                 access_log: bool = False, sampling: SamplingDefaults | None = None,
                 chat_template: ChatTemplate | None = None,
                 allowed_origins: tuple[str, ...] = (),
                 engine_class: type[ServeEngine] = ServeEngine, **engine_args) -> Server:
    """Load the model, start the engine thread and bind (not yet serving: call
    ``serve``). ``max_tokens``: what a request that names none gets (lowered to what
    the context leaves). Raises ValueError for a bad model, path or setting
    (``Unsupported``, a ValueError, for a path that is unknown or refuses the model)."""
    from batchlab.engine.paths.registry import resolve_path
    from batchlab.zoo import load
    from batchlab.zoo.load import vocab_size
    from batchlab.zoo.text import tokenizer_for

    limits = TokenLimits(context=None, max_prompt_tokens=max_prompt_tokens,
                         default_max_tokens=max_tokens)  # checks the flags before loading
    resolve_path(path)  # an unknown name fails before the model loads
    loaded = load(model_name)
    engine_path = resolve_path(path, loaded.model, model_name=loaded.name, use="serve")
    tokenizer = tokenizer_for(model_name)
    engine = engine_class(loaded.model, scheduler_class=engine_path.scheduler,
                          max_batch=max_batch, prompt_concurrency=prompt_concurrency,
                          prefill_step_size=prefill_step_size, kv_budget=kv_budget,
                          vocab_size=vocab_size(loaded.model),
                          stop_ids=frozenset(getattr(tokenizer, "eos_token_ids", None) or ()),
                          **engine_args)
    try:
        sock = socket.create_server((host, port), backlog=BACKLOG)
    except OSError as err:
        raise ValueError(f"cannot listen on {host}:{port}: {err.strerror}; "
                         "pick another --port") from None
    limits = TokenLimits(context=model_context(loaded.path), max_prompt_tokens=max_prompt_tokens,
                         default_max_tokens=max_tokens)
    state = ServeState(engine=engine.start(), tokenizer=tokenizer, model_name=loaded.name,
                       model_aliases=frozenset({model_name, str(loaded.path)}), limits=limits,
                       api_key=api_key, metrics=ServeMetrics(),
                       sampling=sampling or SamplingDefaults(),
                       chat_template=chat_template or ChatTemplate())
    return Server(state, sock, grace_s=grace_s, access_log=access_log,
                  allowed_origins=allowed_origins)
