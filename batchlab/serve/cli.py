"""``batchlab serve``: one model behind an OpenAI-compatible HTTP API (FastAPI, uvicorn).

    batchlab serve --model llama [--path l1] [--port 8000] [--decode-concurrency 32] \
        [--prompt-concurrency 8] [--prefill-step-size 512] [--max-tokens 512] \
        [--max-prompt-tokens N] [--kv-budget 2e9] [--prompt-cache-size 10] \
        [--prompt-cache-bytes 2GB] [--temp 0] [--top-p 1] [--top-k 0] [--min-p 0] \
        [--chat-template FILE] [--chat-template-args JSON] [--allowed-origins '*'] \
        [--api-key KEY] [--grace 30] [--log-level INFO]

The flags follow mlx_lm.server's. Requests are batched continuously by the path's
scheduler (``l1`` serves the bit-exact schedule); at most ``--decode-concurrency`` rows
are in it at once, and a step prefills at most ``--prefill-step-size`` prompt tokens
(all rows together), so a long prompt never stalls the running rows for more than one
chunk. A prompt must fit the model's context (and ``--max-prompt-tokens``); a request
without ``max_tokens`` gets ``--max-tokens`` (lowered to what the context leaves).
``--kv-budget`` caps the projected KV bytes of the admitted rows; a request that could
never fit gets a 400. ``--prompt-cache-size`` finished requests' caches are kept (LRU,
within ``--prompt-cache-bytes``) for later prompts that start with the same tokens; they
prefill only the rest. SIGTERM / Ctrl-C: running rows get ``--grace`` seconds to
finish; a second one stops at once. Routes and fields: docs/serving.md.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import sys
from pathlib import Path

from batchlab.defaults import DEFAULT_GRACE_S, DEFAULT_PROMPT_CACHE_SIZE


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="zoo name or mlx-lm model directory")
    p.add_argument("--path", default="l1",
                   help="engine path: l1 (default), fast, compiled, invariant (an answer "
                        "equals the same request sent alone), kv8, kv4, kvmix, ... "
                        "(batchlab/engine/paths/registry.py)")
    p.add_argument("--kv-bits", type=int, default=None, choices=(4, 8),
                   help="quantize the KV cache (mlx-lm's flag): runs the matching kv path")
    p.add_argument("--kv-group-size", type=int, default=64, help="KV quantization group (64)")
    p.add_argument("--quantized-kv-start", type=int, default=5000,
                   help="offset from which rows are quantized (mlx-lm's default 5000)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any)")
    p.add_argument("--decode-concurrency", "--max-batch", dest="max_batch", type=int,
                   default=32, help="most rows in the batch at once (default 32)")
    p.add_argument("--prompt-concurrency", type=int, default=8,
                   help="most prompts prefilled together (default 8)")
    p.add_argument("--prefill-step-size", type=int, default=512,
                   help="prompt tokens a step prefills, all rows together: a running row "
                        "waits at most one such chunk for its next token (default 512)")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="max_tokens of a request that names none (default 512; lowered to "
                        "what the model's context leaves)")
    p.add_argument("--max-prompt-tokens", type=int, default=None,
                   help="refuse longer prompts (400); default: the model's context alone")
    p.add_argument("--kv-budget", type=float, default=None,
                   help="bytes of KV cache the admitted rows may project to (e.g. 2e9)")
    p.add_argument("--prompt-cache-size", type=int, default=DEFAULT_PROMPT_CACHE_SIZE,
                   help="finished requests' caches kept for reuse by prompts that start "
                   f"with their tokens (default {DEFAULT_PROMPT_CACHE_SIZE}; 0 = off)")
    p.add_argument("--prompt-cache-bytes", type=parse_size, default=None,
                   help="cap on the prompt cache's bytes, apart from --kv-budget "
                   "(e.g. 2e9, 500M, 2GB; default: no cap)")
    p.add_argument("--temp", type=float, default=0.0,
                   help="temperature of a request that names none (default 0: greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="default top_p (1: off)")
    p.add_argument("--top-k", type=int, default=0, help="default top_k (0 or -1: off)")
    p.add_argument("--min-p", type=float, default=0.0, help="default min_p (0: off)")
    p.add_argument("--chat-template", default=None,
                   help="a chat template (Jinja) instead of the tokenizer's: a file, or "
                        "the template's text")
    p.add_argument("--chat-template-args", type=_json_object, default={},
                   help="JSON keyword arguments of every chat template render, e.g. "
                        "'{\"enable_thinking\": false}' (a request's chat_template_kwargs "
                        "override them)")
    p.add_argument("--allowed-origins", type=lambda s: tuple(o for o in s.split(",") if o),
                   default=(), help="CORS: origins whose browser pages may call the API, "
                   "comma-separated, or '*' (default: none; mlx_lm.server's default is *)")
    p.add_argument("--api-key", default=os.environ.get("BATCHLAB_API_KEY"),
                   help="require Authorization: Bearer KEY on every route but /health "
                        "(default: $BATCHLAB_API_KEY)")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE_S,
                   help=f"seconds running rows get to finish on shutdown ({DEFAULT_GRACE_S:g})")
    p.add_argument("--access-log", action="store_true",
                   help="log one JSON line per request on stderr")
    p.add_argument("--log-level", default="INFO", type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="the server's log level (default INFO)")
    p.set_defaults(func=serve_command)


def parse_size(text: str) -> int:
    """Bytes from ``2e9``, ``500M``, ``2GB`` (mlx_lm.server's M / G / MB / GB, powers of
    ten)."""
    units = {"": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9,
             "GB": 10**9, "T": 10**12, "TB": 10**12}
    number = text.strip().upper().rstrip("KMGTB")
    unit = text.strip().upper()[len(number):]
    try:
        size = float(number) * units[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size: give bytes, e.g. 2e9, 500M or 2GB") from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be positive")
    return int(size)


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("give a JSON object, e.g. '{\"enable_thinking\": "
                                         "false}'")
    return value


def _template_text(value: str | None) -> str | None:
    """A template file's text, or the value itself (a template given inline)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if "{" not in value and path.is_file():
        return path.read_text()
    if "{" not in value:
        raise ValueError(f"--chat-template {value!r} is neither a file nor a Jinja template")
    return value


def serve_command(args, console) -> int:
    from batchlab.serve.server import start_server
    from batchlab.serve.state import ChatTemplate, SamplingDefaults

    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not args.access_log:
        logging.getLogger("batchlab.serve.access").setLevel(logging.WARNING)
    kv_budget = None if args.kv_budget is None else int(args.kv_budget)
    if args.kv_bits is not None:
        from batchlab.engine.paths.registry import kv_path_for

        args.path = kv_path_for(args.kv_bits, args.kv_group_size, args.quantized_kv_start)
    sampling = SamplingDefaults(temperature=args.temp, top_p=args.top_p, top_k=args.top_k,
                                min_p=args.min_p)
    template = ChatTemplate(source=_template_text(args.chat_template),
                            args=args.chat_template_args)
    server = start_server(args.model, path=args.path, host=args.host, port=args.port,
                          max_batch=args.max_batch, prompt_concurrency=args.prompt_concurrency,
                          prefill_step_size=args.prefill_step_size, kv_budget=kv_budget,
                          max_tokens=args.max_tokens, max_prompt_tokens=args.max_prompt_tokens,
                          api_key=args.api_key, grace_s=args.grace, sampling=sampling,
                          chat_template=template, allowed_origins=args.allowed_origins,
                          prompt_cache_size=args.prompt_cache_size,
                          prompt_cache_bytes=args.prompt_cache_bytes)
    cost = server.engine.row_cost
    console.print(f"serving [bold]{server.model_name}[/] on the {args.path} path at "
                  f"{server.url} (decode concurrency {args.max_batch}, KV {cost.per_token} "
                  f"B/token{f', budget {kv_budget} B' if kv_budget else ''}"
                  f"{', API key required' if args.api_key else ''}); Ctrl-C stops",
                  highlight=False)
    faulthandler.enable()  # a native crash prints every thread's stack, not just "-6"
    server.serve()
    if server.engine.running_thread:
        console.print("[bold red]the engine thread did not stop; exiting anyway[/]")
        code = 1
    else:
        console.print("stopped")
        code = 0
    # The engine has joined and every stream has its last event. Skip the interpreter's
    # finalization: on Python < 3.14 a daemon thread (uvicorn's, anyio's) that wakes
    # while it runs is killed by pthread_exit, which aborts (SIGABRT) inside C++ frames.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
