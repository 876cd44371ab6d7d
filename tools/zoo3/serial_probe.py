"""mlx-lm's BatchGenerator against each row alone, before any cell of a new zoo model.

    python tools/zoo3/serial_probe.py afm7 gpt2 ...

B=3 with ragged prompts (20, 1 and 7 ids), a 13-id row joining after 4 steps, 12 greedy
tokens a row; each row's tokens and logprob bytes against ``generate_step`` on the row
alone. Prints "equal" or the first difference per row, or the exception batch mode
raised. zoo3's run: every row equal on ministral3, llama-g4, qwen3-mqa, phi3, gpt2,
exaone4, cohere2, granite-hybrid; afm7 rows B, C, D differ (B token 2: 101 vs 9 alone);
llama-dynamic and gpt-bigcode raise "[convert] Only length-1 arrays can be converted".
"""

from __future__ import annotations

import sys

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, generate_step
from mlx_lm.sample_utils import greedy_sampler

from batchlab.zoo import load

PROMPTS = {"A": list(range(10, 30)), "B": [5], "C": list(range(40, 47))}
JOINER, JOIN_AT, STEPS = list(range(60, 73)), 4, 12


def batched(model) -> dict[str, list]:
    generator = BatchGenerator(model, max_tokens=STEPS)
    names = dict(zip(generator.insert(list(PROMPTS.values())), PROMPTS))
    out: dict[str, list] = {name: [] for name in [*PROMPTS, "D"]}
    for step in range(60):
        if step == JOIN_AT:
            names[generator.insert([JOINER])[0]] = "D"
        for r in generator.next()[1]:
            out[names[r.uid]].append((r.token, r.logprobs))
        if all(len(v) >= STEPS for v in out.values()):
            break
    return out


def first_difference(model, prompt: list[int], rows: list) -> str:
    alone = generate_step(mx.array(prompt), model, max_tokens=STEPS, sampler=greedy_sampler)
    for i, ((tb, lb), (ts, ls)) in enumerate(zip(rows, alone)):
        if tb != ts or not mx.array_equal(lb, ls).item():
            return (f"token {i}: batch {tb} vs alone {ts}, "
                    f"max |d logprob| {float(mx.abs(lb - ls).max()):.3g}")
    return "equal"


def main(names: list[str]) -> None:
    for name in names:
        model = load(name).model
        try:
            rows = batched(model)
        except Exception as err:  # noqa: BLE001 - batch mode's exception is the finding
            print(f"{name}: batch mode raised {type(err).__name__}: {err}")
            continue
        prompts = {**PROMPTS, "D": JOINER}
        print(name, {k: first_difference(model, prompts[k], rows[k]) for k in prompts})


if __name__ == "__main__":
    main(sys.argv[1:])
