"""``batchlab serve``: one model behind an OpenAI-compatible HTTP API.

    batchlab serve --model llama [--path l1] [--port 8000] [--max-batch 32] \
        [--kv-budget 2e9]

Requests are batched continuously by the engine's scheduler (the path's, so ``l1``
serves the bit-exact schedule). ``--kv-budget`` caps the projected KV bytes of the rows
admitted at once; requests over it wait, a request that could never fit gets a 400.
See ``serve/http.py`` for the routes and fields.
"""

from __future__ import annotations

import argparse


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="zoo name or mlx-lm model directory")
    p.add_argument("--path", default="l1",
                   help="engine path: l1 (default), fast, compiled (batchlab/engine/paths.py)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any)")
    p.add_argument("--max-batch", type=int, default=32, help="most rows decoding at once")
    p.add_argument("--kv-budget", type=float, default=None,
                   help="bytes of KV cache the admitted rows may project to (e.g. 2e9)")
    p.set_defaults(func=serve_command)


def start_server(model_name: str, *, path: str = "l1", host: str = "127.0.0.1",
                 port: int = 0, max_batch: int = 32, kv_budget: int | None = None):
    """Load the model, start the engine thread and bind the server (not yet serving:
    call ``serve_forever``). Raises ValueError for a bad model, path or setting
    (``Unsupported``, a ValueError, for a path that is unknown or refuses the model)."""
    from batchlab.engine.paths import resolve_path
    from batchlab.serve.engine import ServeEngine
    from batchlab.serve.http import OpenAIServer
    from batchlab.zoo import load
    from batchlab.zoo.load import vocab_size
    from batchlab.zoo.text import tokenizer_for

    resolve_path(path)  # an unknown name fails before the model loads
    loaded = load(model_name)
    engine_path = resolve_path(path, loaded.model, model_name=loaded.name, use="serve")
    tokenizer = tokenizer_for(model_name)
    engine = ServeEngine(loaded.model, scheduler_class=engine_path.scheduler,
                         max_batch=max_batch, kv_budget=kv_budget,
                         vocab_size=vocab_size(loaded.model),
                         stop_ids=frozenset(getattr(tokenizer, "eos_token_ids", None) or ()))
    try:
        server = OpenAIServer((host, port), engine.start(), tokenizer, loaded.name)
    except OSError as err:
        engine.close()
        raise ValueError(f"cannot listen on {host}:{port}: {err.strerror}; "
                         "pick another --port") from None
    return server


def serve_command(args, console) -> int:
    kv_budget = None if args.kv_budget is None else int(args.kv_budget)
    server = start_server(args.model, path=args.path, host=args.host, port=args.port,
                          max_batch=args.max_batch, kv_budget=kv_budget)
    cost = server.engine.row_cost
    console.print(f"serving [bold]{server.model_name}[/] on the {args.path} path at "
                  f"{server.url} (max batch {args.max_batch}, KV {cost.per_token} B/token"
                  f"{f', budget {kv_budget} B' if kv_budget else ''}); Ctrl-C stops",
                  highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        server.server_close()
        server.engine.close()
    return 0
