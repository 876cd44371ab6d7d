"""Seeded bugs in prompt-cache history, per-row processors and per-row samplers
(``batchlab/engine/{history,processors,scheduler}.py``): one per feature, each a slip a
port of BatchGenerator's ``insert(caches=, samplers=, logits_processors=)`` can make."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from batchlab.engine.core import layers, scheduler
from batchlab.selftest.inject import Patch, original


def processor_reads_neighbour_token() -> list[Patch]:
    """Each row's processors append the token fed to the NEXT row (batch order, wrapping)
    to its context instead of its own: a penalty applied to another row's history."""

    def process_rows(logits, inputs, seqs):
        rows = []
        for e, seq in enumerate(seqs):
            row = logits[e : e + 1]
            if seq.processors:
                other = (e + 1) % len(seqs)
                seq.context = mx.concatenate(
                    [seq.context, inputs[other : other + 1].astype(mx.int32)])
                for processor in seq.processors:
                    row = processor(seq.context, row)
            rows.append(row)
        return mx.concatenate(rows, axis=0)

    return [Patch(owner=scheduler, name="process_rows", value=process_rows)]


def parked_offset_not_restored() -> list[Patch]:
    """A parked row's kept full-attention caches stop at the ids it came with: the offset
    is not advanced past the tokens it decoded, so the resumed row merges (and attends
    over) a cache that has lost its newest keys."""
    Scheduler = scheduler.Scheduler
    clean = original(Scheduler, "remove")

    def remove(self, names, keep_history=False):
        decoded = {s.name: len(s.emitted) + 1 for s in self.decode.seqs}  # + the last prompt id
        kept = clean(self, names, keep_history)
        for name, history in kept.items():
            for cache in history.caches:
                if type(cache) is KVCache and cache.keys is not None and name in decoded:
                    cache.offset = max(cache.offset - decoded[name], 0)
        return kept

    return [Patch(owner=Scheduler, name="remove", value=remove)]


def history_merged_right_aligned() -> list[Patch]:
    """Rows that join with caches of different lengths are merged aligned on the LEFT
    (zeros appended after the shorter ones, no left padding): the padding keys sit where
    the newest keys should be, unmasked, and the rows' positions come out too long."""
    clean = original(layers, "merge_rows")

    def merge_rows(rows, *args, **kwargs):
        if type(rows[0]) is not KVCache or all(r.keys is None for r in rows):
            return clean(rows, *args, **kwargs)
        width = max(r.offset for r in rows)
        full = next(r for r in rows if r.keys is not None)
        padded = []
        for r in rows:
            shape = list(full.keys.shape)
            have = r.keys[..., : r.offset, :] if r.keys is not None else None
            pad = width - (r.offset if r.keys is not None else 0)
            parts_k = [] if have is None else [have]
            parts_v = [] if have is None else [r.values[..., : r.offset, :]]
            if pad:
                parts_k.append(mx.zeros(shape[:2] + [pad, shape[3]], full.keys.dtype))
                parts_v.append(mx.zeros(shape[:2] + [pad, full.values.shape[3]],
                                        full.values.dtype))
            c = KVCache()
            c.keys, c.values = mx.concatenate(parts_k, axis=2), mx.concatenate(parts_v, axis=2)
            c.offset = width
            padded.append(c)
        return clean(padded, *args, **kwargs)

    return [Patch(owner=layers, name="merge_rows", value=merge_rows)]


def row_samplers_drawn_in_reverse() -> list[Patch]:
    """With per-row samplers the rows are sampled one at a time, but from the last row to
    the first: each row's draw takes another row's turn of MLX's global key."""
    clean = original(scheduler, "sample_rows")

    def sample_rows(logprobs, samplers):
        if all(s is samplers[0] for s in samplers) or all(s.params.greedy for s in samplers):
            return clean(logprobs, samplers)
        out = [None] * len(samplers)
        for i in reversed(range(len(samplers))):
            out[i] = samplers[i](logprobs[i : i + 1])
        return mx.concatenate(out, axis=0)

    return [Patch(owner=scheduler, name="sample_rows", value=sample_rows)]


def context_forgets_history() -> list[Patch]:
    """A row's processor context starts at its new prompt: the ids its kept or prefix
    caches hold are not in it, so a repetition penalty ignores the conversation so far."""
    from batchlab.engine.core.batch import Sequence

    def start_context(self):
        if self.processors:
            self.context = mx.array(list(self.request.prompt[:-1]), dtype=mx.int32)

    return [Patch(owner=Sequence, name="start_context", value=start_context)]


def xtc_coin_per_row() -> list[Patch]:
    """XTC tosses one coin per ROW of the call instead of one scalar for the call: a batch
    that shares a sampler no longer shares the coin (and the key advances differently)."""
    from batchlab.engine.core import sampler

    def xtc(logits, xtc_probability, xtc_threshold):
        probs = mx.softmax(logits, -1)
        mask = probs > mx.where(probs > xtc_threshold, probs, mx.inf).min(axis=-1, keepdims=True)
        coins = mx.random.uniform(0, 1, shape=(logits.shape[0], 1))
        return mx.where(coins > xtc_probability, logits, mx.where(mask, -mx.inf, logits))

    return [Patch(owner=sampler, name="_xtc", value=xtc)]


def finished_row_keeps_neighbours_cache() -> list[Patch]:
    """A finished row's caches are extracted at the NEXT row's position (as if the batch
    had already dropped the finished row): the continued turn attends over its
    neighbour's keys and state."""
    clean = original(layers, "extract_layers")

    def extract_layers(caches, idx):
        leaf = next(layers.leaves(caches))
        rows = leaf.batch_size if hasattr(leaf, "batch_size") else len(leaf.offset_host)
        return clean(caches, idx + 1 if idx + 1 < rows else idx - 1 if idx else idx)

    return [Patch(owner=layers, name="extract_layers", value=extract_layers)]

