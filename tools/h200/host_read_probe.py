"""Issue 28, item 3: what the host's per-step reads and uploads cost a B=256 decode step.

Nsight put the first kernel of llama-3.1-8b B=256's fast step, the embedding gather, at
287-398 us and the argmax at 33-233 us (reports/bench/cuda-sm90/issue28-split/
s33-profile/), against 5.5 us for one row. On CUDA, MLX 0.32 gives a kernel's output
device memory, and the first host read of an array moves it into managed memory
(``Buffer::raw_ptr`` -> ``move_to_unified_memory``); managed buffers then return to the
buffer cache and are handed to later kernels. The scheduler reads the tokens it fed
(``fed.tolist()``) right after queueing the forward whose gather reads them, and uploads
each step's RoPE offsets from numpy. Each variant below changes one of those, in one
process, interleaved (the shape of ``looped_step_ab.py``):

- ``as-is``: the scheduler as it is;
- ``no-read``: the fed tokens are never read on the host (timing only: rows emit 0);
- ``read-copy``: the host reads a device copy of the sampled tokens, made in the same
  graph as the sample, so the buffer the next gather reads is never touched by the host;
- ``offsets-on-device``: each step's RoPE offsets are a lazy add on the last step's
  device array (the CPU backend's way), not a numpy upload;
- ``no-read+offsets``: both.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/host_read_probe.py \
        [--model llama-3.1-8b] [--batch 256] [--rounds 4] [--variants as-is,no-read,...]
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from unittest import mock

import mlx.core as mx

from batchlab.engine.caches import rowints
from batchlab.engine.core.sampler import sample_rows
from batchlab.engine.core.scheduler import Scheduler
from paired import paired_steps  # tools/h200, first on sys.path when run as a script


def _sample_with_copy(self, batch, logprobs):
    shared = self.shared_sampler
    batch.inputs = sample_rows(logprobs, [s.sampler or shared for s in batch.seqs])
    copy = mx.add(batch.inputs, 0)  # a second buffer, for the host alone
    batch.input_logprobs = logprobs
    mx.async_eval(batch.inputs, copy, logprobs)
    self.host_copies[id(batch.inputs)] = (batch.inputs, copy)


def _copy_read(self, batch, fed):
    kept = self.host_copies.pop(id(fed), None)
    return kept[1].tolist() if kept is not None and kept[0] is fed else fed.tolist()


def patches(name: str) -> list:
    out = []
    if "no-read" in name:
        out.append(mock.patch.object(Scheduler, "_fed_tokens",
                                     lambda self, batch, fed: [0] * fed.shape[0]))
    if "read-copy" in name:
        out.append(mock.patch.object(Scheduler, "host_copies", {}, create=True))
        out.append(mock.patch.object(Scheduler, "_sample", _sample_with_copy))
        out.append(mock.patch.object(Scheduler, "_fed_tokens", _copy_read))
    if "offsets" in name:
        out.append(mock.patch.object(rowints, "_adds_offsets_on_device", lambda: True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--path", default="fast")
    ap.add_argument("--variants",
                    default="as-is,no-read,read-copy,offsets-on-device,no-read+offsets")
    args = ap.parse_args()
    names = args.variants.split(",")

    def variant(name: str) -> ExitStack:
        stack = ExitStack()
        for p in patches(name):
            stack.enter_context(p)
        return stack

    paired_steps(args.model, args.batch, args.rounds, names, variant, path=args.path,
                 label=f" {args.path}")


if __name__ == "__main__":
    main()
