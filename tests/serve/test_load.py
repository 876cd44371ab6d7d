"""``batchlab load`` against a live server: every token it counts is one the server made."""

from __future__ import annotations

import json

import httpx2
from serve_live import MODEL, live_server

from batchlab.cli import main


def test_load_counts_the_servers_tokens_and_writes_its_report(tmp_path):
    with live_server(max_batch=8) as server:
        before = httpx2.get(server.url + "/stats").json()["tokens_generated"]
        rc = main(["load", "--target", f"me={server.url}", "--model", MODEL,
                   "--concurrency", "1,3", "--requests", "5", "--prompt-len", "4:1",
                   "--output-len", "6:2", "--warmup", "0", "--out", str(tmp_path)])
        made = httpx2.get(server.url + "/stats").json()["tokens_generated"] - before
        # with a warm-up round per level, the server makes more than the sweep counts
        rc_warm = main(["load", "--target", f"me={server.url}", "--model", MODEL,
                        "--concurrency", "1,3", "--requests", "5", "--prompt-len", "4:1",
                        "--output-len", "6:2", "--out", str(tmp_path / "warm")])
        made_warm = httpx2.get(server.url + "/stats").json()["tokens_generated"] - before - made
    warm = json.loads((tmp_path / "warm" / "load.json").read_text())
    counted_warm = sum(r["output_tokens"] for r in warm["results"])
    assert rc_warm == 0 and made_warm > counted_warm > 0
    report = json.loads((tmp_path / "load.json").read_text())
    assert rc == 0
    assert [(r["concurrency"], r["requests"], r["errors"]) for r in report["results"]] == [
        (1, 5, 0), (3, 5, 0)]
    assert sum(r["output_tokens"] for r in report["results"]) == made > 0
    assert (tmp_path / "load.png").stat().st_size > 0
