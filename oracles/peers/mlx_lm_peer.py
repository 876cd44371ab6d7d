#!/usr/bin/env python3
"""A subject peer that is not built from batchlab: mlx-lm's BatchGenerator behind the
wire protocol `batchlab-subject/1` (docs/wire-protocol.md), in one file that imports
only mlx, mlx_lm and the standard library. Written from that document alone, it is the
template for a peer of your own engine: replace what `Peer` does with each message.

    batchlab matrix run --engine 'process:python oracles/peers/mlx_lm_peer.py' --jobs 2

It runs the cells of path l1 (mlx-lm's batch mode is one path) and declares the rest
of BatchGenerator's surface (history, sampling, processors, the schedule settings); any
other cell is UNSUPPORTED by the runner, from these capabilities.

    BATCHLAB_PEER_BUG=NAME   play one of the subject bugs of `batchlab selftest`
                             (SUBJECT_BUGS below), to prove the gate sees them through a
                             foreign peer; unset for the honest peer.
"""

import base64
import json
import os
import sys
from collections import Counter
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.utils import load_model

PROTOCOL = "batchlab-subject/1"
CAPABILITIES = {"paths": ["l1"], "history": True, "sampling": True, "processors": True,
                "schedule": ["prefill_batch_size", "completion_batch_size",
                             "prefill_step_size"], "controls_join": False}
SUBJECT_BUGS = ("subject-step-late", "subject-drops-parked-history",
                "subject-ignores-remove", "subject-stale-logprobs")
_MODELS = {}  # model_dir -> (model, dtype): the peer lives across cells


def load(model_dir):
    if model_dir not in _MODELS:
        model, _ = load_model(Path(model_dir))
        sizes = Counter()  # the floating dtype that holds most of the weights
        for _, p in tree_flatten(model.parameters()):
            if mx.issubdtype(p.dtype, mx.floating):
                sizes[str(p.dtype).removeprefix("mlx.core.")] += p.size
        _MODELS[model_dir] = (model, sizes.most_common(1)[0][0])
    return _MODELS[model_dir]


def sampler(s):
    """mlx-lm's own sampler for a SAMPLING object; a fresh one per call, never shared."""
    return make_sampler(s["temperature"], top_p=s.get("top_p", 1.0), min_p=s.get("min_p", 0.0),
                        top_k=s.get("top_k", 0),
                        xtc_probability=s.get("xtc_probability", 0.0),
                        xtc_threshold=s.get("xtc_threshold", 0.1))


def processors(p):
    """make_logits_processors' arguments; 0 (or an empty bias) switches one off."""
    return make_logits_processors(
        logit_bias={int(t): float(b) for t, b in p.get("logit_bias", [])} or None,
        repetition_penalty=p.get("repetition_penalty") or None,
        repetition_context_size=p.get("repetition_context_size", 20),
        presence_penalty=p.get("presence_penalty") or None,
        presence_context_size=p.get("presence_context_size", 20),
        frequency_penalty=p.get("frequency_penalty") or None,
        frequency_context_size=p.get("frequency_context_size", 20))


def logprobs(x):
    """The raw little-endian bytes of the (V,) row, base64 (bfloat16 as its uint16 bits)."""
    raw = x.view(mx.uint16) if x.dtype in (mx.bfloat16, mx.float16) else x
    return {"dtype": str(x.dtype).removeprefix("mlx.core."),
            "b64": base64.b64encode(bytes(memoryview(raw))).decode("ascii")}


class Peer:
    def __init__(self, bug=None):
        self.bug, self.gen = bug, None

    def hello(self, msg):
        return {"protocol": PROTOCOL, "name": "mlx-lm-peer" + (f"+{self.bug}" if self.bug else ""),
                "capabilities": CAPABILITIES, "plays": list(SUBJECT_BUGS)}

    def open(self, msg):
        setup = msg["setup"]
        if setup["path"] != "l1":
            return {"ok": False, "unsupported": f"mlx-lm's batch mode is path l1, not "
                                                f"{setup['path']}"}
        self.model, dtype = load(setup["model_dir"])
        s, shared = setup["schedule"], setup["sampling"]
        self.gen = BatchGenerator(
            self.model, sampler=None if shared["temperature"] == 0 else sampler(shared),
            prefill_batch_size=s["prefill_batch_size"],
            completion_batch_size=s["completion_batch_size"],
            prefill_step_size=s["prefill_step_size"])
        self.step_size = s["prefill_step_size"]
        self.keeps_finished = setup.get("keeps_finished", False)
        self.uid, self.name = {}, {}
        self.alive = set()
        self.kept = {}  # parked or finished row -> (its caches, the ids they hold)
        self.late, self.last = [], {}  # what the subject bugs hold back
        mx.random.seed(shared.get("seed", 0))
        return {"dtype": dtype}

    def _history(self, row):
        if row.get("history", "none") != "none":
            if self.bug == "subject-drops-parked-history" and row["history"] == "parked":
                self.kept.pop(row["name"])
                return None, []
            return self.kept.pop(row["name"])
        if row.get("prefix"):  # a single-stream prefill, as mlx-lm's generate_step does
            cache, ids = make_prompt_cache(self.model), mx.array(row["prefix"])[None]
            while ids.shape[1] > 0:
                self.model(ids[:, :self.step_size], cache=cache)
                mx.eval([c.state for c in cache])
                ids = ids[:, self.step_size:]
            return cache, list(row["prefix"])
        return None, []

    def insert(self, msg):
        rows = msg["rows"]
        held = [self._history(r) for r in rows]
        some = any(c is not None for c, _ in held)
        kw = {}
        if any("sampling" in r for r in rows):
            kw["samplers"] = [sampler(r["sampling"]) if "sampling" in r else None for r in rows]
        if any("processors" in r for r in rows):
            kw["logits_processors"] = [processors(r["processors"]) if "processors" in r
                                       else None for r in rows]
        uids = self.gen.insert([r["prompt"] for r in rows],
                               max_tokens=[r["max_tokens"] for r in rows],
                               caches=[c for c, _ in held] if some else None,
                               all_tokens=[t for _, t in held] if some else None, **kw)
        for r, uid in zip(rows, uids):
            self.uid[r["name"]], self.name[uid] = uid, r["name"]
            self.alive.add(r["name"])
        return self._active()

    def remove(self, msg):
        live = [n for n in msg["rows"] if n in self.alive]  # a row may have finished already
        park = bool(msg.get("park", False))
        if self.bug == "subject-ignores-remove" and not park:
            return self._active()
        kept = self.gen.remove([self.uid[n] for n in live], return_prompt_caches=park)
        if park:
            for n in live:
                caches, ids = kept[self.uid[n]]
                self.kept[n] = (caches, list(ids))
        self.alive.difference_update(live)
        return self._active()

    def step(self, msg):
        _, responses = self.gen.next()  # one decode step: generation responses only
        out, late = [], []
        for r in responses:
            name = self.name[r.uid]
            e = {"row": name, "token": int(r.token), "logprobs": logprobs(r.logprobs)}
            if self.bug == "subject-stale-logprobs":
                e["logprobs"], self.last[name] = self.last.get(name, e["logprobs"]), e["logprobs"]
            if self.bug == "subject-step-late" and name not in self.last:
                self.last[name] = None
                late.append(e)  # a row's first token reported one step late
            else:
                out.append(e)
            if r.finish_reason is not None:
                self.alive.discard(name)
                if self.keeps_finished:
                    self.kept[name] = (r.prompt_cache, list(r.all_tokens))
        out, self.late = self.late + out, late
        return {**self._active(), "emissions": out}

    def close(self, msg):
        if self.gen is not None:
            self.gen.close()
        self.gen = None
        return {}

    def _active(self):
        return {"active": len(self.alive) + len(self.late)}


def main():
    bug = os.environ.get("BATCHLAB_PEER_BUG") or None
    if bug is not None and bug not in SUBJECT_BUGS:
        sys.exit(f"BATCHLAB_PEER_BUG={bug!r}: this peer plays {', '.join(SUBJECT_BUGS)}")
    out, sys.stdout = sys.stdout, sys.stderr  # the protocol owns stdout; logs go to stderr
    peer = Peer(bug)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        op = msg.get("op")
        if op == "bye":
            return
        ops = ("hello", "open", "insert", "remove", "step", "close")
        handler = getattr(peer, op) if op in ops else None
        try:
            reply = handler(msg) if handler else {"ok": False, "error": f"unknown op {op!r}"}
            reply = reply if "ok" in reply else {"ok": True, **reply}
        except Exception as err:  # noqa: BLE001 - the engine's failure is its cell's ERROR
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
