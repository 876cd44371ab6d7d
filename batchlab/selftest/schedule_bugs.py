"""Seeded bugs in the scheduler and its batches (``batchlab/engine/{scheduler,batch}.py``):
where joiners go, when they take their first step, how greedy picks a token."""

from __future__ import annotations

import dataclasses

import mlx.core as mx

from batchlab.engine.core import scheduler
from batchlab.engine.core.batch import DecodeBatch
from batchlab.selftest.inject import Patch, applied, during, original, wrapped


def joiner_cache_rows_first() -> list[Patch]:
    """The joiner's cache rows are put FIRST while its sequence (and input token) is
    appended last: row i's token then attends over another row's cache."""

    def make(clean):
        def buggy(self, other):
            if self.caches and other.caches:
                self.caches, other.caches = other.caches, self.caches
            clean(self, other)
        return buggy

    return [wrapped(DecodeBatch, "extend", make)]


def joiner_first_step_batched() -> list[Patch]:
    """The joiner's first step is not taken alone: it is appended with its last prompt
    token as input and decoded with the running rows next tick, so every token of it
    comes one step late (and, on sliding models, from another batch layout)."""
    Scheduler = scheduler.Scheduler
    clean_join = original(Scheduler, "_join_prefilled")
    clean_decode = original(Scheduler, "_decode_step")
    echoes: set[str] = set()  # joiners whose next emission is their own prompt token

    def join(self):
        ready = [i for i, s in enumerate(self.prompt.seqs) if not s.unprefilled]
        if not ready or not len(self.decode):
            return clean_join(self)
        joiners = self.prompt.split(ready)
        running = self.decode.inputs
        last = mx.array([s.request.prompt[-1] for s in joiners.seqs], dtype=running.dtype)
        lp = self.decode.input_logprobs  # placeholder rows, never emitted
        self.decode.extend(DecodeBatch(
            seqs=joiners.seqs, caches=joiners.caches, inputs=last,
            input_logprobs=mx.zeros((len(joiners), *lp.shape[1:]), lp.dtype)))
        echoes.update(s.name for s in joiners.seqs)

    def decode(self):
        emitted = clean_decode(self)
        for seq in self.decode.seqs:
            if seq.name in echoes:
                seq.num_emitted -= 1
        kept = [e for e in emitted if e.name not in echoes]
        echoes.clear()
        return kept

    return [Patch(owner=Scheduler, name="_join_prefilled", value=join),
            Patch(owner=Scheduler, name="_decode_step", value=decode)]


def join_offset_not_advanced() -> list[Patch]:
    """The joiner's solo first step writes its K/V but its per-row offsets are not
    advanced (a 'peek' forward that skips the bookkeeping): every later token of the
    joiner is roped one position early."""
    Scheduler = scheduler.Scheduler
    clean_join = original(Scheduler, "_join_prefilled")
    clean_forward = original(Scheduler, "_forward_logprobs")

    def forward(self, inputs, caches):
        out = clean_forward(self, inputs, caches)
        for c in _position_caches(caches):
            c.offset = c.offset_host - 1
        return out

    def join(self):
        with applied([Patch(owner=Scheduler, name="_forward_logprobs", value=forward)]):
            clean_join(self)

    return [Patch(owner=Scheduler, name="_join_prefilled", value=join)]


def _position_caches(caches):
    """The caches of a layer list that carry RoPE offsets (BatchList holds several)."""
    for c in caches:
        if hasattr(c, "caches"):
            yield from _position_caches(c.caches)
        elif hasattr(c, "offset_host"):
            yield c


def greedy_ties_to_last() -> list[Patch]:
    """Greedy breaks ties toward the LAST index (an argsort/top-k based pick) instead of
    the first, as ``mx.argmax`` does: random bf16 models tie on ~2% of steps."""
    clean = original(scheduler, "sample_rows")

    def sample_rows(logprobs, samplers):
        if all(s.params.greedy for s in samplers):
            return logprobs.shape[-1] - 1 - mx.argmax(logprobs[:, ::-1], axis=-1)
        return clean(logprobs, samplers)

    return [Patch(owner=scheduler, name="sample_rows", value=sample_rows)]


def argmax_over_logits() -> list[Patch]:
    """Greedy takes argmax over the raw logits instead of the logprobs
    (``logits - logsumexp``) the oracle's sampler sees. In bf16 the subtraction rounds
    distinct logits onto one logprob, so the two argmaxes part on ~5% of steps when the
    logits are flat (FACTS.md; the zoo's ``llama-flat`` is built for it)."""
    Scheduler = scheduler.Scheduler
    clean_sample = original(Scheduler, "_sample")

    def forward_logprobs(self, inputs, caches):
        logits = self.model(inputs[:, None], cache=caches)[:, -1, :]
        self.selftest_logits = logits  # what the buggy sampler reads
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def sample(self, batch, logprobs):
        clean_sample(self, batch, logprobs)
        batch.inputs = mx.argmax(self.selftest_logits, axis=-1)
        mx.async_eval(batch.inputs)

    return [Patch(owner=Scheduler, name="_forward_logprobs", value=forward_logprobs),
            Patch(owner=Scheduler, name="_sample", value=sample)]


# -- the scheduler's limits: holes mutation testing found in the default matrix as it
# was (docs/mutation.md); the regime cells (docs/regimes.md) now catch each of them.


def admit_ignores_prefill_batch_size() -> list[Patch]:
    """The admit step takes every queued row at once (the ``prefill_batch_size`` cap
    dropped): a 9th row inserted with 8 others is prefilled in the same wide forward
    instead of the next step's, so it starts a step early and in another batch."""

    def wide(self):
        return dataclasses.replace(self.config, prefill_batch_size=max(
            self.config.prefill_batch_size, len(self.prompt) + len(self.queue)))

    return [during(scheduler.Scheduler, "_admit", "config", wide)]


def step_ignores_completion_cap() -> list[Patch]:
    """A step goes on to join and prefill when ``completion_batch_size`` rows already
    decode (the early return dropped): rows waiting in the prompt batch join a full
    decode batch, which then runs more rows than BatchGenerator's."""
    Scheduler = scheduler.Scheduler

    def step(self):
        with mx.stream(scheduler.engine_stream()):
            emitted = self._decode_step() if len(self.decode) else []
            self._admit()
            self._join_prefilled()
            self._prefill_chunk()
            return emitted

    return [Patch(owner=Scheduler, name="step", value=step)]


def prefill_ignores_step_size() -> list[Patch]:
    """Prompts are prefilled whole, in one forward (``prefill_step_size`` ignored): a
    prompt longer than a chunk joins steps early, and a ring's keys are never cut
    between chunks."""
    return [during(scheduler.Scheduler, "_prefill_chunk", "config",
                   lambda self: dataclasses.replace(self.config, prefill_step_size=1 << 30))]


def remove_only_decoding_rows() -> list[Patch]:
    """``remove`` evicts only rows that are decoding: a row removed while it waits in
    the queue or in the prompt batch stays, is prefilled, joins and emits tokens."""
    Scheduler = scheduler.Scheduler
    clean = original(Scheduler, "remove")

    def remove(self, names, keep_history=False):
        if keep_history:  # a park: the bug is in plain evictions
            return clean(self, names, keep_history)
        gone = set(names)
        keep = [i for i, s in enumerate(self.decode.seqs) if s.name not in gone]
        if len(keep) < len(self.decode):
            self.decode.filter(keep)
        return {}

    return [Patch(owner=Scheduler, name="remove", value=remove)]
