r"""``batchlab http check``: hold a running OpenAI-compatible server to the goldens.

    batchlab http check --url http://127.0.0.1:8000 --model llama \
        [--checks alone,needle,consistency] [--trials 4] [--fillers 6] [--junit PATH]

``--model`` is the zoo model the server serves (its goldens, its tokenizer); the
request's ``model`` field is ``--served-model``, else the one model ``/v1/models``
lists. Exit 0 when every check is PASS, 1 on a FAIL or ERROR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from batchlab.defaults import DEFAULT_GOLDENS, PROJECT_ROOT

DEFAULT_HTTP_MATRIX = PROJECT_ROOT / "matrices" / "http.toml"


def add_http_parser(sub) -> None:
    http = sub.add_parser("http", help="gate an OpenAI-compatible server over HTTP"
                          ).add_subparsers(dest="http_command", required=True)
    p = http.add_parser("check", help="lone requests vs the B=1 goldens, the needle test, "
                        "self-consistency", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the server's root, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True,
                   help="the zoo model it serves (whose goldens and tokenizer are used)")
    p.add_argument("--served-model", default=None,
                   help="the request's model field (default: the one /v1/models lists)")
    p.add_argument("--checks", default="alone,needle,consistency",
                   help="comma-separated: alone, needle, consistency (default: all)")
    p.add_argument("--trials", type=int, default=4, help="needle trials (default 4)")
    p.add_argument("--fillers", type=int, default=6,
                   help="concurrent fillers per needle trial (default 6)")
    p.add_argument("--matrix", type=Path, default=DEFAULT_HTTP_MATRIX,
                   help="where the B=1 cells are (default: matrices/http.toml)")
    p.add_argument("--goldens", type=Path, default=DEFAULT_GOLDENS)
    p.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds one request may take (default 120)")
    p.add_argument("--junit", type=Path, default=None, help="write a JUnit XML file here")
    p.add_argument("--json", type=Path, default=None, help="write the results as JSON lines")
    p.set_defaults(func=check_command)


def check_command(args, console) -> int:
    from batchlab.atomic import write_text_atomic
    from batchlab.http_gate.result import exit_code, junit, print_results
    from batchlab.http_gate.run import run_checks
    from batchlab.http_gate.wire import Api

    if args.trials < 1 or args.fillers < 1:
        raise ValueError("--trials and --fillers must be at least 1")
    checks = tuple(c.strip() for c in args.checks.split(",") if c.strip())
    api = Api(url=args.url, api_key=args.api_key, timeout_s=args.timeout)
    results, how = run_checks(api, model=args.model, served=args.served_model, checks=checks,
                              matrix=args.matrix, goldens=args.goldens, trials=args.trials,
                              fillers=args.fillers)
    console.print(f"{args.url} serving {args.model}: {how}", markup=False, highlight=False)
    print_results(console, results)
    passed = sum(r.status == "PASS" for r in results)
    console.print(f"[bold]{passed}/{len(results)} checks passed[/]")
    if args.junit:
        write_text_atomic(args.junit, junit(results, args.model))
    if args.json:
        write_text_atomic(args.json, "".join(r.to_json() + "\n" for r in results))
    return exit_code(results)
