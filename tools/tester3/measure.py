"""Does the default matrix catch a bug? The bugs of tools/tester3/bugs.py through the
outside testers' one driver (tools/tester_common/measure.py):

    python -m tools.tester3.measure BUG [BUG...] [--out FILE] [--matrix M] [--goldens G]
        [--filter PAT] [--live] [--all]
"""

from __future__ import annotations

from tools.tester_common.measure import main

# cell-id fragments to try first, per bug (speed only)
HINTS: dict[str, tuple[str, ...]] = {
    "cap-counted-before-finish": ("steps3_pb4_cb2", "steps1_pb4_cb2"),
    "admit-ignores-prompt-batch": ("/B3/ragged/staggered/ctx-wrap/ps8", "pb2"),
    "joiners-longest-first": ("/B4/ragged/static/ctx-short/t",),
    "finished-history-after-filter": ("/explicit/finish-continue/",),
    "cache-tokens-drop-emitted": ("/explicit/finish-continue/",),
    "decode-mask-memo-by-shape": ("/B34/ragged/trickle/",),
    "ring-extend-ignores-rotated": ("late-join", "@w"),
    "ring-filter-trims-padding": ("gemma3/B3/ragged/evict/", "gemma3/B8/ragged/evict-many"),
    "ring-prefill-keeps-window": ("gemma3/B3/ragged/static/ctx-wrap/ps8",),
    "ring-chunk-no-padding-roll": ("gemma3/B3/ragged/static/ctx-wrap/ps8",),
    "ring-merge-offset-is-size": ("l1/gemma3/B3/ragged/history/ctx-wrap",),
    "state-advance-skips-lengths": ("mamba2/B3/ragged/static/ctx-wrap/ps8",),
    "state-merge-zeros-float32": ("l1/mamba2/B3/ragged/prefix-join/", "mamba2/B3/ragged/history"),
    "state-filter-keeps-padding-rows": ("l1/mamba2/B3/ragged/join-evict/ctx-short",),
    "min-p-on-scaled": ("m0.1_r4",),
    "presence-counts-each-sighting": ("lp-",),
    "processor-context-no-history": ("/explicit/resume-one/", "/explicit/finish-continue/"),
    "processor-context-whole-prompt": ("lp-",),
    "row-samplers-grouped": ("rs-",),
    "compiled-offset-first-row": ("compiled/llama/B4/ragged/join-evict/ctx-wrap",),
    "paged-hash-unchained": ("/explicit/prefix-share/",),
    "paged-extend-aligns-only-both-written": ("paged/llama/B4/ragged/join-evict/ctx-wrap",),
    "window-view-one-wider": ("invariant/gemma3/",),
    "qkv-switch-before-first-forward": ("kv8/llama-hd64/",),
    "compiled-shapeless-trace": ("compiled/llama/B4/ragged/join-evict/ctx-wrap",),
    "cache-tokens-prefilling-off-by-one": ("/explicit/park-prefilling-lp/",),
    "sample-only-surviving-rows": ("/B4/ragged/join-evict/ctx-short/t1_r1",),
    "tapconv-model-dtype": ("invariant-blocked/mamba2/", "invariant-blocked/qwen3.5/"),
    "paged-skip-ignores-chunk-count": ("explicit/prefix-share/ctx-explicit/steps10_pb2",),
}



if __name__ == "__main__":
    main("tools.tester3.bugs", "tools.tester3.measure", HINTS)
