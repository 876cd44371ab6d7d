"""``batchlab serve``: one model behind an OpenAI-compatible HTTP API (FastAPI, uvicorn).

    batchlab serve --model llama [--path l1] [--port 8000] [--decode-concurrency 32] \
        [--prompt-concurrency 8] [--prefill-step-size 2048] [--max-tokens 512] \
        [--kv-budget 2e9] [--prompt-cache-size 10] [--prompt-cache-bytes 2GB] \
        [--api-key KEY] [--grace 30]

The flags follow mlx_lm.server's. Requests are batched continuously by the path's
scheduler (``l1`` serves the bit-exact schedule); at most ``--decode-concurrency`` rows
are in it at once. ``--max-tokens`` is both the default and the cap of a request's
``max_tokens``. ``--kv-budget`` caps the projected KV bytes of the admitted rows; a
request that could never fit gets a 400. ``--prompt-cache-size`` finished requests' caches
are kept (LRU, within ``--prompt-cache-bytes``) for later prompts that start with the same
tokens; they prefill only the rest. SIGTERM / Ctrl-C: running rows get ``--grace``
seconds to finish. Routes and fields: docs/serving.md.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys

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
    p.add_argument("--prefill-step-size", type=int, default=2048,
                   help="prompt tokens per prefill chunk (default 2048)")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="default and cap of a request's max_tokens (default 512)")
    p.add_argument("--kv-budget", type=float, default=None,
                   help="bytes of KV cache the admitted rows may project to (e.g. 2e9)")
    p.add_argument("--prompt-cache-size", type=int, default=DEFAULT_PROMPT_CACHE_SIZE,
                   help="finished requests' caches kept for reuse by prompts that start "
                   f"with their tokens (default {DEFAULT_PROMPT_CACHE_SIZE}; 0 = off)")
    p.add_argument("--prompt-cache-bytes", type=parse_size, default=None,
                   help="cap on the prompt cache's bytes, apart from --kv-budget "
                   "(e.g. 2e9, 500M, 2GB; default: no cap)")
    p.add_argument("--api-key", default=os.environ.get("BATCHLAB_API_KEY"),
                   help="require Authorization: Bearer KEY (default: $BATCHLAB_API_KEY)")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE_S,
                   help=f"seconds running rows get to finish on shutdown ({DEFAULT_GRACE_S:g})")
    p.add_argument("--access-log", action="store_true",
                   help="log one JSON line per request on stderr")
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


def serve_command(args, console) -> int:
    from batchlab.serve.server import start_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not args.access_log:
        logging.getLogger("batchlab.serve.access").setLevel(logging.WARNING)
    kv_budget = None if args.kv_budget is None else int(args.kv_budget)
    if args.kv_bits is not None:
        from batchlab.engine.paths.registry import kv_path_for

        args.path = kv_path_for(args.kv_bits, args.kv_group_size, args.quantized_kv_start)
    server = start_server(args.model, path=args.path, host=args.host, port=args.port,
                          max_batch=args.max_batch, prompt_concurrency=args.prompt_concurrency,
                          prefill_step_size=args.prefill_step_size, kv_budget=kv_budget,
                          max_tokens=args.max_tokens, api_key=args.api_key, grace_s=args.grace,
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
