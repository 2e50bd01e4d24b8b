"""Continuous batching over paged KV blocks (vLLM v1 style, simplified).

Each step::

    1. decodes  = running requests whose prefill is done; gamma = choose(B, L_max)
    2. reserve KV slots for every decode (context + 1 + gamma lookahead), oldest first;
       when blocks run out, preempt the newest running request (free its blocks, put it
       back at the head of the waiting queue: preemption by recompute)
    3. spend the remaining token budget on prefill chunks: running prefills first, then
       waiting requests FCFS (not in a step that preempted), while blocks and seats last

A request's token state (``num_computed`` tokens have KV; a prefill runs until
``prefill_target``, then one token is sampled; a decode has exactly one pending token)::

    prompt+generated: [########## computed ##########][pending]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from nightjar_ray.sim.acceptance import AcceptanceProcess
from nightjar_ray.sim.kv_pool import BlockPool
from nightjar_ray.workload import RequestSpec

ChooseFn = Callable[[int, int], int]
"""(num_decode_reqs, max_skip_tokens) -> gamma."""


class SimRequest:
    """Mutable serving state of one request."""

    __slots__ = (
        "acceptance",
        "draft_lag",
        "finish_s",
        "first_token_s",
        "is_running",
        "num_computed",
        "num_generated",
        "num_preemptions",
        "prefill_target",
        "spec",
    )

    def __init__(self, spec: RequestSpec, acceptance: AcceptanceProcess) -> None:
        self.spec = spec
        self.acceptance = acceptance
        self.num_computed = 0
        self.num_generated = 0
        self.prefill_target = 0
        self.draft_lag = 0
        """Tokens with target KV that the draft has not processed (skipped steps)."""
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.num_preemptions = 0
        self.is_running = False

    @property
    def req_id(self) -> int:
        return self.spec.req_id

    @property
    def num_known_tokens(self) -> int:
        return self.spec.num_prompt_tokens + self.num_generated

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed < self.prefill_target

    @property
    def num_remaining_output(self) -> int:
        return self.spec.num_output_tokens - self.num_generated


@dataclass(frozen=True)
class ScheduledStep:
    """What one engine step runs."""

    decodes: tuple[SimRequest, ...]
    prefills: tuple[tuple[SimRequest, int], ...]
    """(request, chunk tokens) pairs."""
    gamma: int
    num_preempted: int

    @property
    def is_empty(self) -> bool:
        return not self.decodes and not self.prefills


class SimScheduler:
    """Waiting queue, running list and the block pool (see module docstring)."""

    def __init__(self, pool: BlockPool, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.pool = pool
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.num_preemptions = 0

    def add(self, req: SimRequest) -> None:
        self.waiting.append(req)

    def schedule(self, choose: ChooseFn) -> ScheduledStep:
        decodes = [r for r in self.running if not r.is_prefilling]
        gamma = 0
        if decodes:
            gamma = choose(len(decodes), max(r.draft_lag for r in decodes))
        preempted_before = self.num_preemptions
        decodes = self._reserve_decodes(decodes, gamma)
        num_preempted = self.num_preemptions - preempted_before
        budget = self.max_num_batched_tokens - len(decodes) * (1 + gamma)
        prefills = self._schedule_prefills(budget, admit_new=num_preempted == 0)
        return ScheduledStep(tuple(decodes), tuple(prefills), gamma, num_preempted)

    def _reserve_decodes(self, decodes: list[SimRequest], gamma: int) -> list[SimRequest]:
        """KV slots for every decode, preempting the newest running request when short."""
        budget_reqs = self.max_num_batched_tokens // (1 + gamma)
        kept: list[SimRequest] = []
        for req in decodes[:budget_reqs]:
            need = req.num_computed + 1 + gamma
            while req.is_running and not self.pool.can_allocate(req.req_id, need):
                self.preempt(self.running[-1])
            if req.is_running:
                self.pool.allocate(req.req_id, need)
                kept.append(req)
        return [r for r in kept if r.is_running]

    def _schedule_prefills(self, budget: int, admit_new: bool) -> list[tuple[SimRequest, int]]:
        out: list[tuple[SimRequest, int]] = []
        for req in self.running:
            if budget <= 0:
                return out
            if req.is_prefilling:
                chunk = self._try_chunk(req, budget)
                if chunk:
                    out.append((req, chunk))
                    budget -= chunk
        while admit_new and budget > 0 and self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            req.prefill_target = req.num_known_tokens
            chunk = self._try_chunk(req, budget)
            if not chunk:
                break
            self.waiting.popleft()
            self.running.append(req)
            req.is_running = True
            out.append((req, chunk))
            budget -= chunk
        return out

    def _try_chunk(self, req: SimRequest, budget: int) -> int:
        """Allocate the next prefill chunk of ``req`` (0 if no blocks)."""
        chunk = min(req.prefill_target - req.num_computed, budget)
        if not self.pool.can_allocate(req.req_id, req.num_computed + chunk):
            return 0
        self.pool.allocate(req.req_id, req.num_computed + chunk)
        return chunk

    def preempt(self, req: SimRequest) -> None:
        """Preemption by recompute: drop the KV, requeue at the head of the waiting queue."""
        self.running.remove(req)
        req.is_running = False
        self.pool.free(req.req_id)
        req.num_computed = 0
        req.prefill_target = 0
        req.draft_lag = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def finish(self, req: SimRequest) -> None:
        self.running.remove(req)
        req.is_running = False
        self.pool.free(req.req_id)
