"""``--engine mlx-lm``: mlx-lm's BatchGenerator as the subject under test.

The installed mlx-lm (an upgrade, a fork) driven through the protocol and judged against
the committed goldens, which an earlier mlx-lm wrote: the one place besides the oracle
that may import BatchGenerator, because here it is what is tested. Batch mode is one
path, ``l1``; its per-row samplers, processors and prompt caches are mlx-lm's own
(``oracle/batch.py``'s builders, so a row means the same thing to both).
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.generate import BatchGenerator

from batchlab.oracle.batch import mlx_lm_sampler, prefix_cache, row_options
from batchlab.subjects.protocol import Capabilities, Emission, RowRequest, Setup


class BatchGeneratorSubject:
    name = "mlx-lm"
    capabilities = Capabilities(paths=("l1",))

    def __init__(self):
        self.generator: BatchGenerator | None = None

    def open(self, setup: Setup) -> str:
        from batchlab.zoo import load

        loaded = load(setup.model)
        p, s = setup.sampling, setup.schedule
        # rows end at their own max_tokens (given per insert), never at a stop token
        self.generator = BatchGenerator(
            loaded.model, max_tokens=1 << 30, sampler=None if p.greedy else mlx_lm_sampler(p),
            prefill_batch_size=s.prefill_batch_size,
            completion_batch_size=s.completion_batch_size,
            prefill_step_size=s.prefill_step_size)
        self.uid_of: dict[str, int] = {}
        self.name_of: dict[int, str] = {}
        self.alive: set[str] = set()
        self.kept: dict[str, tuple[list, list[int]]] = {}  # parked or finished: caches, ids
        mx.random.seed(p.seed)
        return loaded.dtype

    def insert(self, rows: list[RowRequest]) -> None:
        g = self.generator
        caches, tokens = [], []
        for r in rows:
            if r.history != "none":
                if r.name not in self.kept:
                    raise RuntimeError(f"row {r.name!r} is resumed or continued but holds no "
                                       "caches (it never parked or finished)")
                c, t = self.kept.pop(r.name)
            elif r.prefix:
                c, t = prefix_cache(g.model, r.prefix, g.prefill_step_size), list(r.prefix)
            else:
                c, t = None, None
            caches.append(c)
            tokens.append([] if t is None else t)  # what the oracle passes for a fresh row
        has = any(c is not None for c in caches)
        uids = g.insert([list(r.prompt) for r in rows], max_tokens=[r.max_tokens for r in rows],
                        caches=caches if has else None, all_tokens=tokens if has else None,
                        **row_options(rows))
        for r, uid in zip(rows, uids):
            self.uid_of[r.name], self.name_of[uid] = uid, r.name
            self.alive.add(r.name)

    def remove(self, names: list[str], park: bool = False) -> None:
        live = [n for n in names if n in self.alive]
        kept = self.generator.remove([self.uid_of[n] for n in live], return_prompt_caches=park)
        if park:
            for n in live:
                caches, ids = kept[self.uid_of[n]]
                self.kept[n] = (caches, list(ids))
        self.alive.difference_update(live)

    def step(self) -> list[Emission]:
        _, responses = self.generator.next()
        out = []
        for r in responses:
            name = self.name_of[r.uid]
            out.append(Emission(name=name, token=int(r.token), logprobs=r.logprobs))
            if r.finish_reason is not None:
                self.alive.discard(name)
                self.kept[name] = (r.prompt_cache, list(r.all_tokens))
        return out

    @property
    def num_active(self) -> int:
        return len(self.alive)

    def close(self) -> None:
        if self.generator is not None:
            self.generator.close()
        self.generator = None
