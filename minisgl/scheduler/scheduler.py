"""The scheduler: continuous batching over one Engine.

Each step it picks a batch (prefill when prompts are waiting, alternating with decode so running
requests keep streaming), launches it, and turns the sampled tokens into per-request outputs.
Requests are admitted on what they need now (scheduler/cache.py); when a decode step cannot get the
pages it needs, the latest, lowest-priority request is preempted: its pages are freed (its computed
prefix stays in the prefix cache), it waits at the head of its class, and it resumes by recomputing
its prompt and output so far, so its stream goes on exactly where it stopped.
With overlap scheduling, step N+1 is prepared and launched before step N's tokens are read back,
so the CPU work hides behind the GPU's. A batch with constrained requests (grammars) keeps the
overlap too: its forward pass is launched first, and its grammar masks, which need step N's
tokens, are filled while the GPU runs it, before its sampling.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace

from minisgl.constrained.compiler import CompileLimits, CompilerUnavailable, GrammarCompilerPool
from minisgl.constrained.constraints import bound_problem
from minisgl.constrained.grammar import BatchMasks, GrammarState
from minisgl.core.batch import Batch, Req
from minisgl.core.params import SamplingParams
from minisgl.distributed import broadcast_objects
from minisgl.engine import BatchSamplingArgs, Engine, ForwardOutput
from minisgl.kvcache import create_prefix_cache
from minisgl.message import StepOutput
from minisgl.utils import env
from minisgl.utils.logger import get_logger

from .cache import CacheManager
from .config import SchedulerConfig
from .decode import DecodeManager
from .lora_updates import AdapterUpdates
from .prefill import PrefillManager
from .speculation import Speculator, engine_config
from .table import RequestTable

logger = get_logger(__name__)


@dataclass
class InFlight:
    """A launched batch whose tokens have not been read yet; `samples[i]` says whether request i
    sampled a real token (a non-final prompt chunk does not)."""

    batch: Batch
    out: ForwardOutput
    samples: list[bool]


@dataclass
class SchedulerStats:
    prompt_tokens: int = 0  # prompt tokens of admitted requests
    computed_prompt_tokens: int = 0  # of those, computed by prefill (not served from the prefix cache)
    prefix_hit_tokens: int = 0
    generated_tokens: int = 0
    preemptions: int = 0
    draft_tokens: int = 0  # speculative decoding: tokens drafted and verified
    accepted_tokens: int = 0  # of those, the ones the target model agreed with
    finished: dict[str, int] = field(default_factory=dict)


class Scheduler:
    def __init__(self, config: SchedulerConfig):
        self.config = config
        for_engine = engine_config(config)  # (the speculator reads it too: the draft head's local directory)
        self.engine = Engine(for_engine)
        e = self.engine
        self.table = RequestTable(config.max_running_requests)
        self.prefix_cache = create_prefix_cache(config.cache, e.page_size)
        reserve = None if config.admission == "reserve" else config.decode_reserve_tokens
        self.cache = CacheManager(e.num_pages, e.page_size, self.prefix_cache, e.page_table,
                                  max_pages_per_req=e.page_table.shape[1] // e.page_size, decode_reserve_tokens=reserve)
        self.stats = SchedulerStats()
        self.by_priority = config.scheduling_policy == "priority"
        self.prefill = PrefillManager(self.cache, self.table, e.token_pool, config.max_prefill_length, self.stats,
                                      self.by_priority, max(1, e.config.max_running_requests),
                                      config.prefill_delay_steps)
        self.arrivals = 0
        self.decode = DecodeManager(self.cache)
        try:
            self.speculator = Speculator(for_engine, e) if config.speculative else None
        except BaseException:  # a draft head refused at start: the engine's process group goes too
            e.shutdown()
            raise
        self.eos_token_ids = set(e.model_config.eos_token_ids) | _generation_eos(config.model_path)
        self.eos_ids = tuple(sorted(self.eos_token_ids))  # what min_tokens holds back
        self.reqs: dict[int, Req] = {}
        self.overlap = config.overlap and not env.DISABLE_OVERLAP.on()
        self._in_flight: InFlight | None = None
        self._last_phase = "decode"
        # Outputs decided outside a step (rejections, aborts, LoRA updates), sent with the next one.
        self._outputs_outside_steps: list[StepOutput] = []
        # Structured output: requests whose grammar is compiling (in the pool's worker processes)
        # wait here, out of the prefill queue, so they never hold up the others. With tensor
        # parallelism rank 0's budget decides for every rank (_grammar_outcomes).
        budget = config.grammar_compile_timeout if e.tp.is_primary else None
        limits = CompileLimits(budget, config.grammar_compile_workers, config.grammar_cache_bytes)
        self.grammars = GrammarCompilerPool(config.model_path, e.model_config.vocab_size, list(self.eos_ids), limits)
        self.compiling: list[tuple[Req, Future]] = []
        self.lora_updates = AdapterUpdates(e.lora, self.cache)  # adapters loaded and unloaded while serving

    # -- requests in and out ------------------------------------------------------------------

    def resolve(self, prompt_len: int, params: SamplingParams) -> SamplingParams:
        """`params` with max_tokens None made a number: the rest of the context (or of the whole KV
        cache, when that is smaller), at most the server's max_new_tokens. A ValueError when
        min_tokens is then above it."""
        if params.max_tokens is not None:
            return params
        rest = min(self.engine.max_seq_len, self.engine.num_pages * self.engine.page_size) - prompt_len
        return replace(params, max_tokens=max(1, min(rest, self.config.max_new_tokens or rest)))

    def check(self, prompt_ids: list[int], params: SamplingParams) -> str | None:
        """Why a request can never run here, or None; `params` as resolve returns them."""
        e = self.engine
        prompt_len = len(prompt_ids)
        vocab = e.model_config.vocab_size
        bad = next((t for t in prompt_ids if not 0 <= t < vocab), None)
        if bad is not None:
            return f"token id {bad} is outside the vocabulary (0..{vocab - 1})"
        if prompt_len < 1:
            return "the prompt is empty"
        # Every id a request carries indexes the logits somewhere (a bias, a ban under min_tokens):
        # one outside them would fail the whole batch's step, or on a GPU its context.
        for name, ids in params.token_ids():
            bad = next((t for t in ids if not 0 <= t < vocab), None)
            if bad is not None:
                return f"{name}: token id {bad} is outside the vocabulary (0..{vocab - 1})"
        if params.priority and not self.by_priority:
            return f"priority {params.priority} needs --scheduling-policy priority (this server schedules fcfs)"
        problem = self._lora_problem(params.lora)
        if problem:
            return problem
        problem = bound_problem(params.constraint, self.config.max_grammar_depth)
        if problem:
            return problem
        limit = self.config.max_prompt_tokens
        if limit and prompt_len > limit:
            return f"the prompt has {prompt_len} tokens, more than this server's limit of {limit}"
        if prompt_len + params.max_tokens > e.max_seq_len:
            return (f"this model's maximum context length is {e.max_seq_len} tokens, but {prompt_len + params.max_tokens}"
                    f" were requested ({prompt_len} in the prompt, {params.max_tokens} for the completion)")
        pages = self.cache.pages_for(prompt_len + params.max_tokens)
        if pages > e.num_pages:
            return f"the request needs {pages} KV pages but the whole cache has {e.num_pages}"
        return None

    def _lora_problem(self, name: str | None) -> str | None:
        pool = self.engine.lora
        if name is None or (pool is not None and name in pool.names):
            return None
        loaded = ", ".join(pool.names) if pool is not None else ""
        return f"unknown LoRA adapter {name!r} ({'loaded: ' + loaded if loaded else 'none is loaded'})"

    def admit(self, prompt_ids: list[int], params: SamplingParams) -> tuple[SamplingParams, str | None]:
        """`params` resolved, and why the request can never run here (None: it can). What the
        server's requests (add_request) and LLM.generate's both go through."""
        try:
            params = self.resolve(len(prompt_ids), params)
        except ValueError as e:  # min_tokens above what the context leaves
            return params, str(e)
        return params, self.check(prompt_ids, params)

    def add_request(self, uid: int, prompt_ids: list[int], params: SamplingParams) -> None:
        """A request that can never run gets an error output instead, as does one whose admission
        fails in any way: one request's fault never reaches the scheduler's loop."""
        try:
            params, problem = self.admit(prompt_ids, params)
        except Exception as e:  # noqa: BLE001
            logger.exception("admitting request %d failed", uid)
            params, problem = params, f"the request could not be admitted: {e}"
        if problem:
            self._outputs_outside_steps.append(StepOutput(uid, None, "error", problem, len(prompt_ids)))
            return
        req = Req(uid=uid, prompt_ids=list(prompt_ids), sampling_params=params, arrival=self.arrivals)
        self.arrivals += 1
        if params.lora is not None:  # counted from here, so the adapter cannot be unloaded under it
            req.lora_slot, req.lora_load_id = self.engine.lora.acquire(params.lora)
        self.reqs[uid] = req
        if params.constraint is None:
            self.prefill.enqueue(req)
            return
        self.compiling.append((req, self.grammars.submit(params.constraint, params.client)))

    def update_lora(self, uid: int, name: str, path: str | None) -> None:
        """Load the adapter at `path` under `name` (path None: unload it), answering request `uid` with
        its outcome (scheduler/lora_updates.py): a load is read off the loop and answered in the step that
        installs it; one that cannot be served, no free slot, or an unload of an adapter in use or
        still loading is an error with the reason, and nothing changes."""
        answer = self.lora_updates.update(uid, name, path)
        if answer is not None:
            self._outputs_outside_steps.append(answer)

    def abort(self, uid: int) -> None:
        req = self.reqs.get(uid)
        if req is None or req.finished:
            return
        if self._unqueue(req):  # never admitted: no pages or table row to give back
            req.finish_reason = "abort"
            self._count_finish(req)
            self._remove(req)
        else:
            self._finish(req, "abort")
        self._outputs_outside_steps.append(StepOutput(uid, None, "abort", prompt_tokens=req.prompt_len))

    def _unqueue(self, req: Req) -> bool:
        """Take a request that was not admitted yet out of its queue (grammar compiling, or
        waiting for prefill); False when it was admitted."""
        compiling = next((i for i, (r, _) in enumerate(self.compiling) if r is req), None)
        if compiling is not None:
            _, compiled = self.compiling.pop(compiling)
            self._forget_compile(compiled)
            return True
        if req in self.prefill.waiting:
            self.prefill.waiting.remove(req)
            return True
        return False

    @property
    def has_work(self) -> bool:
        return bool(self.prefill.has_work or self.decode.has_work or self._in_flight or self._outputs_outside_steps or self.compiling
                    or self.lora_updates.pending)

    @property
    def num_running(self) -> int:
        return len(self.decode.running) + len(self.prefill.chunked)

    @property
    def num_waiting(self) -> int:
        return len(self.prefill.waiting) + len(self.compiling)

    # -- the loop -----------------------------------------------------------------------------

    def _admit_compiled(self) -> None:
        """Requests whose grammar is ready join the prefill queue (in arrival order); a grammar
        that failed to compile (or ran past its budget) ends its request with the reason."""
        if not self.compiling:
            return
        if not (self.prefill.has_work or self.decode.has_work or self._in_flight):
            wait([f for _, f in self.compiling], timeout=0.01, return_when=FIRST_COMPLETED)  # idle: do not spin
        outcomes = self._grammar_outcomes()
        still, failed = [], []
        for req, fut in self.compiling:
            if req.uid not in outcomes:
                still.append((req, fut))
            elif outcomes[req.uid] is None:
                req.grammar = GrammarState.start(fut.result())  # a follower rank may wait for its own here
                self.prefill.enqueue(req)
            else:
                req.finish_reason, problem = outcomes[req.uid]
                self._count_finish(req)
                self._remove(req)
                self._outputs_outside_steps.append(StepOutput(req.uid, None, req.finish_reason, problem, req.prompt_len))
                failed.append(fut)
        self.compiling = still
        for fut in failed:  # a follower's own compile of what rank 0 gave up on
            self._forget_compile(fut)

    def _grammar_outcomes(self) -> dict[int, tuple[str, str] | None]:
        """uid -> None (its grammar is ready) or (finish reason, why it failed), for the compiling
        requests that are decided: "error" for the constraint's fault, "unavailable" (the API's 503)
        while no compile worker is up. With tensor parallelism rank 0 decides, by its own time
        budget, and tells the other ranks (whose compiles have none), so every rank admits a request
        in the same step."""
        outcomes: dict[int, tuple[str, str] | None] = {}
        if self.engine.tp.is_primary:
            for req, fut in self.compiling:
                if fut.done():
                    error = fut.exception()
                    reason = "unavailable" if isinstance(error, CompilerUnavailable) else "error"
                    outcomes[req.uid] = None if error is None else (reason, str(error))
        if self.engine.tp.size > 1:
            outcomes = broadcast_objects([outcomes])[0]
        return outcomes

    def _forget_compile(self, compiled: Future) -> None:
        """A compile no request waits for any more stops (its worker process is killed)."""
        if not any(f is compiled for _, f in self.compiling):
            self.grammars.cancel(compiled)

    def step(self) -> list[StepOutput]:
        self._admit_compiled()
        idle = not (self.prefill.has_work or self.decode.has_work or self._in_flight or self.compiling)
        self._outputs_outside_steps += self.lora_updates.finished(idle)
        previous, self._in_flight = self._in_flight, None
        processed: list[StepOutput] = []

        def read_previous() -> None:
            """The previous step's tokens, read once: after this step's launch (overlap: while the
            GPU runs it), or from inside it, before its sampling, when its grammars need them."""
            nonlocal previous
            if previous is not None:
                processed.extend(self._process(previous))
                previous = None

        if self.speculator is not None and self.speculator.wants_fresh_tokens(list(self.decode.running.values())):
            read_previous()  # the drafter continues from the previous step's tokens
        batch = self._schedule()
        launched = self._launch(batch, read_previous) if batch else None
        read_previous()
        outside, self._outputs_outside_steps = self._outputs_outside_steps, []
        outputs = outside + processed
        # A verify step's positions are known once its tokens are read: the next step waits for them.
        if self.overlap and not (launched and launched.batch.phase == "verify"):
            self._in_flight = launched
        elif launched:
            outputs += self._process(launched)
        return outputs

    def _schedule(self) -> Batch | None:
        want_prefill = self.prefill.has_work and (self._last_phase == "decode" or not self.decode.has_work)
        if want_prefill and self.decode.has_work and not self._head_outranks_running():
            want_prefill = self.prefill.gathered()
        if want_prefill:
            if self.by_priority:
                self._make_room_for_priority()
            reqs = self.prefill.schedule()
            if reqs:
                self._last_phase = "prefill"
                return Batch(reqs=reqs, phase="prefill")
        if self.decode.has_work:
            self._last_phase = "decode"
            drafts = self.speculator.propose(list(self.decode.running.values())) if self.speculator else {}
            reqs, drafts = self.decode.schedule(self._preempt, self._victim, drafts)
            drafts = {r.uid: drafts[r.uid] for r in reqs if r.uid in drafts}  # not the preempted ones'
            if reqs and drafts:
                Speculator.write(self.engine.token_pool, reqs, drafts)
                return Batch(reqs=reqs, phase="verify", drafts=drafts)
            if reqs:
                return Batch(reqs=reqs, phase="decode")
        return None

    def _victim(self, candidates: list[Req]) -> Req:
        """Whom to preempt: the lowest priority (under --scheduling-policy priority), then the latest arrival."""
        return max(candidates, key=self.prefill.order)

    def _outranked_by(self, head: Req) -> list[Req]:
        """The running requests of a lower priority (a higher number) than `head`."""
        return [r for r in self.decode.running.values() if r.sampling_params.priority > head.sampling_params.priority]

    def _head_outranks_running(self) -> bool:
        """Under --scheduling-policy priority: whether the head of the queue outranks a running request
        (it then preempts at once, never waiting for rows to gather)."""
        return self.by_priority and bool(self.prefill.waiting) and bool(self._outranked_by(self.prefill.waiting[0]))

    def _make_room_for_priority(self) -> None:
        """Preempt running requests of a lower priority than the head of the queue until it fits."""
        head = self.prefill.waiting[0] if self.prefill.waiting else None
        if head is None or len(head.all_ids) < head.prefill_len:
            return
        while True:
            lower = self._outranked_by(head)
            if not lower or (self.table.num_free > 0 and self.cache.fits(head)):
                return
            self._preempt(self._victim(lower))

    def _preempt(self, r: Req) -> None:
        """Free a running request's pages and table row and put it back in the queue; it resumes by
        recomputing every token it has (its computed full pages stay in the prefix cache, so mostly
        a cache hit). Its grammar, adapter, sampling state and output so far stay with it, and a token
        still in flight is read as usual before it may resume."""
        self.decode.remove(r)
        self.cache.release(r)
        self.table.release(r.table_idx)
        r.table_idx, r.cached_len, r.device_len = -1, 0, 0
        r.prefill_len = r.seq_len
        r.preemptions += 1
        self.stats.preemptions += 1
        self.prefill.enqueue(r)

    def _launch(self, batch: Batch, read_previous: Callable[[], None]) -> InFlight:
        out = self.engine.forward_batch(batch, self._sampling_args(batch, read_previous))
        if self.speculator is not None:
            self.speculator.after_forward(batch)
        if batch.phase == "verify":  # positions advance by what is accepted (_process_verify)
            return InFlight(batch, out, [True] * batch.size)
        samples = [r.samples_this_step for r in batch.reqs]
        # Advance positions now, so the next batch can be scheduled before these tokens are read.
        for r, sampled in zip(batch.reqs, samples):
            r.cached_len = r.device_len
            r.seq_len += sampled
        if batch.phase == "prefill":
            self.prefill.launched()
            for r, sampled in zip(batch.reqs, samples):
                if sampled:
                    self.decode.add(r)
        return InFlight(batch, out, samples)

    def _sampling_args(self, batch: Batch, read_previous: Callable[[], None]
                       ) -> BatchSamplingArgs | Callable[[], BatchSamplingArgs]:
        """The batch's sampling arguments or, when it has constrained requests, a callable the engine
        calls once the batch's forward pass is launched: their grammar masks need the previous
        step's tokens, which the host then reads while the GPU runs the forward (overlap kept)."""
        rows = Speculator.sampling_rows(batch.reqs, batch.drafts) if batch.drafts else batch.reqs
        if not any(r.grammar is not None and (r.samples_this_step or batch.drafts) for r in batch.reqs):
            return BatchSamplingArgs.from_reqs(rows, self.engine.device, self.eos_ids)

        def after_forward_launch() -> BatchSamplingArgs:
            read_previous()
            return BatchSamplingArgs.from_reqs(rows, self.engine.device, self.eos_ids, self._grammar_masks(batch))

        return after_forward_launch

    def _grammar_masks(self, batch: Batch) -> BatchMasks | None:
        """The grammar masks of the batch's constrained sampling rows (a request the previous step
        finished gets none: its token here is dropped), or None when there are none; a verify
        batch's request has a row per draft after its own, each masked after the drafts before it."""
        drafts = batch.drafts or {}
        constrained, along, row = [], [], 0
        for r in batch.reqs:
            mine = drafts.get(r.uid, [])
            if r.grammar is not None and (r.samples_this_step or mine) and not r.finished:
                constrained.append((row, r.grammar))
                along.append(mine)
            row += 1 + len(mine)
        if not constrained:
            return None
        return BatchMasks.fill(constrained, self.engine.model_config.vocab_size, along)

    def _process(self, done: InFlight) -> list[StepOutput]:
        if done.batch.phase == "verify":
            return self._process_verify(done)
        done.out.copy_done_event.synchronize()
        tokens = done.out.next_tokens_cpu.tolist()
        logprobs = self._logprob_lists(done)
        if done.out.prompt_scores is not None:
            self._keep_prompt_scores(done)
        outputs = []
        for i, (r, token, sampled) in enumerate(zip(done.batch.reqs, tokens, done.samples)):
            if not sampled or r.finished:
                continue  # a prompt chunk's sample is meaningless; a finished request wants no more
            outputs.append(self._emit(r, token, i, logprobs))
        return outputs

    def _process_verify(self, done: InFlight) -> list[StepOutput]:
        """A verify step's kept tokens, emitted one by one as decode steps would (a request that
        finishes keeps none after), and each request's positions moved past them."""
        done.out.copy_done_event.synchronize()
        logprobs = self._logprob_lists(done)
        verdicts = self.speculator.verdicts(done.batch.reqs, done.batch.drafts, done.out.next_tokens_cpu.tolist())
        outputs = []
        for r, v in zip(done.batch.reqs, verdicts):
            self.stats.draft_tokens += v.proposed
            self.stats.accepted_tokens += v.accepted
            base = r.seq_len  # its last token's KV was computed here, and the accepted drafts'
            r.seq_len = base + v.accepted + 1
            for j, (token, row) in enumerate(zip(v.tokens, v.rows)):
                r.cached_len = r.device_len = base + min(v.accepted, j + 1)  # KV of known tokens only
                outputs.append(self._emit(r, token, row, logprobs))
                if r.finished:
                    break
            else:
                self.cache.trim(r, r.seq_len)  # the pages of rejected drafts only
        return outputs

    @staticmethod
    def _keep_prompt_scores(done: InFlight) -> None:
        """The prompt logprobs of this step's chunks, kept on their requests until the first token."""
        spans, (chosen, top_values, top_ids) = done.out.prompt_scores
        chosen, top_values, top_ids = chosen.tolist(), top_values.tolist(), top_ids.tolist()
        row = 0
        for i, n in spans:
            r = done.batch.reqs[i]
            k = r.sampling_params.prompt_logprobs
            for j in range(row, row + n):
                token = r.prompt_ids[len(r.prompt_scores) + 1]
                r.prompt_scores.append([token, chosen[j], [list(pair) for pair in zip(top_ids[j][:k], top_values[j][:k])]])
            row += n

    @staticmethod
    def _logprob_lists(done: InFlight) -> tuple[list, list, list] | None:
        lp = done.out.logprobs_cpu
        return None if lp is None else (lp.chosen.tolist(), lp.top_values.tolist(), lp.top_ids.tolist())

    def _emit(self, r: Req, token: int, row: int, logprobs: tuple[list, list, list] | None) -> StepOutput:
        """`token` appended to `r`'s output (its logprobs at logits row `row`), `r` finished if it ends it."""
        r.output_ids.append(token)
        self.stats.generated_tokens += 1
        reason = self._finish_reason(r, token)
        if r.grammar is not None and not reason:
            if not r.grammar.accept(token):
                reason = "error"  # the grammar allowed no token of this vocabulary (the mask was empty)
            elif r.grammar.finished:
                reason = "stop"
        if reason:
            self._finish(r, reason)
        out = StepOutput(r.uid, token, reason, prompt_tokens=r.prompt_len, cached_tokens=r.prefix_hit)
        if r.sampling_params.prompt_logprobs is not None and len(r.output_ids) == 1 and self.engine.tp.is_primary:
            out.prompt_logprobs = [[r.prompt_ids[0], None, []], *r.prompt_scores]
            r.prompt_scores = []
        k = r.sampling_params.logprobs
        if k is not None and logprobs is not None:  # None on tensor-parallel followers
            chosen, top_values, top_ids = logprobs
            out.logprob = chosen[row]
            out.top_logprobs = [list(pair) for pair in zip(top_ids[row][:k], top_values[row][:k])]
        return out

    def _finish_reason(self, r: Req, token: int) -> str | None:
        p = r.sampling_params
        if (token in self.eos_token_ids and not p.ignore_eos) or token in p.stop_token_set:
            return "stop"
        if len(r.output_ids) >= p.max_tokens or r.prompt_len + len(r.output_ids) >= self.engine.max_seq_len:
            return "length"
        return None

    def _finish(self, r: Req, reason: str) -> None:
        r.finish_reason = reason
        self._count_finish(r)
        if r.table_idx < 0 and self._unqueue(r):  # preempted, its last token read while it waited: no pages, no row
            self._remove(r)
            return
        self.decode.remove(r)
        if r in self.prefill.chunked:
            self.prefill.chunked.remove(r)
        self.cache.release(r)
        self.table.release(r.table_idx)
        self._remove(r)

    def _remove(self, r: Req) -> None:
        """The request leaves the scheduler (finished, aborted, refused): its adapter is free of it."""
        del self.reqs[r.uid]
        if self.speculator is not None:
            self.speculator.forget(r.uid)
        if r.lora_slot:
            self.engine.lora.release(r.lora_slot)

    def _count_finish(self, r: Req) -> None:
        self.stats.finished[r.finish_reason] = self.stats.finished.get(r.finish_reason, 0) + 1

    def warm_up(self) -> None:
        """Serve bursts shaped like real traffic before the server says ready, and forget them: the
        first real burst then finds the kernels of its batch shapes and sampling path compiled,
        their plans made and the allocator's pools grown, instead of paying for them in its latency.
        First a burst of prompts of every length (log-uniform up to 2,048 tokens: chunked prefills,
        prefill batches of every size, decode over long contexts), then one short burst per
        sampling path, since a batch whose rows all sample alike takes its own kernel (greedy,
        temperature alone, top-k/top-p, seeded, penalties)."""
        start = time.perf_counter()
        n, new_tokens = self.table.rows, 8
        longest = max(1, min(self.engine.max_seq_len - 2 * new_tokens, 2048))
        short = max(1, min(longest, 2 * self.config.max_prefill_length // n))
        rng = random.Random(0)
        vocab = self.engine.model_config.vocab_size
        bursts = [(SamplingParams(temperature=0), lambda: int(longest ** rng.random())),
                  *((params, lambda: rng.randint(1, short)) for params in (
                      SamplingParams(temperature=0.7), SamplingParams(temperature=0.7, top_k=40, top_p=0.9),
                      SamplingParams(temperature=0.7, seed=0), SamplingParams(temperature=0.7, frequency_penalty=0.5)))]
        uid = -1
        for kind, length in bursts:
            for i in range(n):
                # The last request of a burst runs longer: decode steps at every batch size down to one.
                params = replace(kind, max_tokens=new_tokens * (2 if i == n - 1 else 1), ignore_eos=True)
                self.add_request(uid, [rng.randrange(vocab) for _ in range(length())], params)
                uid -= 1
            while self.has_work:
                self.step()
        # Nothing of it stays: its pages leave the prefix cache, its counts the statistics.
        self.cache.free_pages += self.prefix_cache.evict(self.prefix_cache.cached_pages)
        self.stats.__init__()
        self.prefill.admitted.clear()
        self.arrivals = 0
        logger.info("warmed up with %d bursts of %d requests in %.1f s", len(bursts), n, time.perf_counter() - start)

    def shutdown(self) -> None:
        self.grammars.shutdown()
        self.engine.shutdown()


def _generation_eos(model_path: str) -> set[int]:
    """generation_config.json may list more end tokens than config.json (e.g. Qwen's <|im_end|>)."""
    path = os.path.join(model_path, "generation_config.json")
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        eos = json.load(f).get("eos_token_id")
    return set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())
