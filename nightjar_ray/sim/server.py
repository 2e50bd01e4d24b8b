"""The discrete-event serving simulator: one continuous-batching engine, step by step.

Events are engine steps (the engine is never idle while work is queued) and arrivals
(the clock jumps to the next arrival when the engine is empty). Each step::

    admit arrivals -> schedule (StepDriver.choose inside) -> StepDriver.commit (draft gate)
    -> roofline duration -> sample acceptance, emit tokens, finish requests
    -> StepDriver.on_output (observation rule, policy.observe)
    -> elastic-memory triggers (may stall the engine)

The policy is the very object the engine uses (``nightjar_ray.policy``), driven by the
engine's own :class:`~nightjar_ray.driver.step_driver.StepDriver`: B, the draft gate, the
observation rule and "is speculation disabled" (§6.1 condition 1) are the engine's code.
Clock and RNG are explicit: a run is a pure function of (setting, policy, options,
workload, seed).

Draft participation when a step plays gamma = 0 (``ServerOptions.draft_when_off``):

* ``sync``: the draft still runs one pass over the step's tokens (stock vLLM keeps the
  drafter's KV in sync this way), so re-enabling is free but gamma=0 is not;
* ``skip``: the draft does not run (Nightjar); its KV lags, and the next speculative step
  pays the catch-up (C_switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import IO, Literal

from nightjar_ray.driver.draft_gate import remaining_after_step
from nightjar_ray.driver.observation import (
    DEFAULT_OBSERVATION_RULE,
    ObservationRuleName,
    depth_counts,
)
from nightjar_ray.driver.queue import QueueState, joins_batch_ahead
from nightjar_ray.driver.step import Choice, StepBatch
from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.memory.triggers import draft_outvalued
from nightjar_ray.policy.base import Policy
from nightjar_ray.sim.acceptance import AcceptanceProcess
from nightjar_ray.sim.elastic import DraftState, ElasticMemory, ElasticParams
from nightjar_ray.sim.hardware import plan_memory
from nightjar_ray.sim.kv_pool import BlockPool
from nightjar_ray.sim.metrics import SimResult, StepRecord
from nightjar_ray.sim.presets import Setting
from nightjar_ray.sim.roofline import Roofline
from nightjar_ray.sim.scheduler import ScheduledStep, SimRequest, SimScheduler
from nightjar_ray.sim.step_cost import StepCostModel
from nightjar_ray.workload import RequestRecord, RequestSpec

LOOKAHEAD_MARGIN_TOKENS = 32
"""Pool tokens kept free of any single request's prompt + output (gamma_max <= 16)."""


@dataclass(frozen=True)
class ServerOptions:
    """How the simulated engine runs around the policy."""

    dataset: str = "sharegpt"
    """Acceptance profile of the setting to use."""
    use_draft: bool = True
    """False: no draft model is loaded at all (plain decoding; all its memory is KV)."""
    draft_when_off: Literal["sync", "skip"] = "sync"
    elastic: ElasticParams | None = None
    """Elastic draft offload (needs ``draft_when_off='skip'``); None keeps the draft resident."""
    offload_trigger: Literal["played", "exploited"] = "exploited"
    """§6.1 condition (1), "speculative decoding is disabled": ``played``: the last step
    played gamma = 0; ``exploited``: also, that gamma = 0 was not an exploration probe
    (``StepDriver.sd_disabled``, the engine's rule)."""
    observed_time: ObservationRuleName = DEFAULT_OBSERVATION_RULE
    """What ``policy.observe`` is told: one of the engine's observation rules
    (``nightjar_ray.driver.observation``, the same object the engine runs)."""
    seed: int = 0
    check_invariants: bool = False
    """Check block accounting after every step (slow; tests)."""


class SimServer:
    """See module docstring."""

    def __init__(
        self,
        setting: Setting,
        policy: Policy,
        options: ServerOptions,
        decision_log: IO[str] | None = None,
    ) -> None:
        """``decision_log``: where the step driver writes one JSON line per step, the
        engine's decision log (docs/engine.md, "Seeing the decisions")."""
        if options.elastic is not None and options.draft_when_off != "skip":
            raise ValueError("elastic draft offload needs draft_when_off='skip'")
        self.setting, self.policy, self.options = setting, policy, options
        draft = setting.draft if options.use_draft else None
        self.plan = plan_memory(
            setting.hw,
            setting.target,
            draft,
            setting.tp,
            setting.gpu_memory_utilization,
            setting.activation_reserve_bytes,
        )
        self.pool = BlockPool(self.plan.num_orig_blocks, self.plan.block_size_tokens)
        self.scheduler = SimScheduler(
            self.pool, setting.max_num_seqs, setting.max_num_batched_tokens
        )
        self.cost = StepCostModel(
            Roofline(setting.hw, setting.target, setting.tp, setting.overheads),
            Roofline(setting.hw, setting.draft, setting.tp, setting.overheads) if draft else None,
            setting.overheads,
        )
        self.elastic = (
            ElasticMemory(options.elastic, self.plan, self.pool) if options.elastic else None
        )
        self.acceptance = setting.acceptance_for(options.dataset)
        self.now_s = 0.0
        self.driver = StepDriver(
            policy,
            gamma_cap=policy.gamma_max,
            clock=lambda: self.now_s,
            observation_rule=options.observed_time,
            draft_cost_ratio=setting.draft.num_params / setting.target.num_params,
            max_history=1,
            log_file=decision_log,
        )
        self._choice: Choice | None = None
        self.records: list[RequestRecord] = []
        self.timeline: list[StepRecord] = []
        self.num_steps = 0
        self.catchup_s = 0.0

    @property
    def max_request_tokens(self) -> int:
        """Largest prompt + output a request may have: it must fit the block pool alone, with room
        for the speculative lookahead (gamma + 1 <= 17 slots)."""
        cap = self.plan.num_orig_blocks * self.plan.block_size_tokens
        return min(self.setting.target.max_model_len, cap - LOOKAHEAD_MARGIN_TOKENS)

    def run(self, workload: Sequence[RequestSpec]) -> SimResult:
        """Serve ``workload`` (sorted by arrival) to completion; one run per server."""
        if self.num_steps or self.records:
            raise ValueError("a SimServer runs one workload; build a new one")
        self._validate(workload)
        pending = [
            SimRequest(s, AcceptanceProcess(self.acceptance, self.options.seed, s.req_id))
            for s in workload
        ]
        next_idx = 0
        while next_idx < len(pending) or self.scheduler.waiting or self.scheduler.running:
            while next_idx < len(pending) and pending[next_idx].spec.arrival_s <= self.now_s:
                self.scheduler.add(pending[next_idx])
                next_idx += 1
            if not self.scheduler.waiting and not self.scheduler.running:
                self.now_s = pending[next_idx].spec.arrival_s
                continue
            self._step()
        return SimResult(
            tuple(sorted(self.records, key=lambda r: r.req_id)),
            tuple(self.timeline),
            tuple(self.elastic.events) if self.elastic else (),
            self.num_steps,
            self.scheduler.num_preemptions,
            self.catchup_s,
        )

    def _validate(self, workload: Sequence[RequestSpec]) -> None:
        last = 0.0
        for spec in workload:
            if spec.arrival_s < last:
                raise ValueError("workload must be sorted by arrival_s")
            if spec.num_prompt_tokens + spec.num_output_tokens > self.max_request_tokens:
                raise ValueError(
                    f"request {spec.req_id} needs {spec.num_prompt_tokens} + "
                    f"{spec.num_output_tokens} tokens > {self.max_request_tokens} that fit"
                )
            last = spec.arrival_s

    def _draft_available(self) -> bool:
        if not self.options.use_draft:
            return False
        return self.elastic is None or self.elastic.draft_available(self.now_s)

    def _choose(self, num_reqs: int, max_skip_tokens: int) -> int:
        """The scheduler's callback: the step driver's choice (kept for :meth:`_commit`)."""
        away = not self._draft_available()
        self._choice = self.driver.choose(num_reqs, max_skip_tokens, away, self._queue_state())
        return self._choice.gamma

    def _queue_state(self) -> QueueState:
        return QueueState(
            num_waiting_reqs=len(self.scheduler.waiting),
            num_prefilling_reqs=sum(
                r.is_prefilling and joins_batch_ahead(r.num_remaining_output)
                for r in self.scheduler.running
            ),
            max_num_reqs=self.setting.max_num_seqs,
            num_free_blocks=self.pool.num_free_blocks,
            num_total_blocks=self.pool.num_blocks,
        )

    def _step(self) -> None:
        self._choice = None
        step = self.scheduler.schedule(self._choose)
        if step.is_empty:
            # NOTE: every running request is a prefill that found no blocks; free some.
            self.scheduler.preempt(self.scheduler.running[-1])
            return
        step, draft_runs, undrafted = self._commit(step)
        cost = self.cost.cost(step, draft_runs, undrafted)
        self.now_s += cost.total_s
        self.catchup_s += cost.catchup_s
        num_tokens, num_accepted, reaching = self._apply(step, draft_runs, undrafted)
        self.num_steps += 1
        num_first_tokens = sum(not r.is_prefilling for r, _ in step.prefills)
        num_drafted = sum(r not in undrafted for r in step.decodes)
        self.driver.on_output(
            num_tokens + num_first_tokens,
            num_drafted * step.gamma,
            num_accepted,
            duration_s=cost.total_s,
            num_reqs_reaching=reaching,
        )
        self._record(step, cost.total_s)
        if self.elastic is not None:
            self._elastic_step()
        if self.options.check_invariants:
            self.pool.check()

    def _elastic_step(self) -> None:
        """Memory triggers after a step; an offload that frees the draft's KV share
        leaves every live request's drafter a whole context behind."""
        elastic = self.elastic
        assert elastic is not None
        was_resident = elastic.state is DraftState.RESIDENT
        self.now_s += elastic.after_step(
            self.now_s, self.sd_disabled(), len(self.scheduler.waiting), self._draft_outvalued()
        )
        offloaded = was_resident and elastic.state is DraftState.OFFLOADED
        if offloaded and elastic.params.reclaim_draft_kv:
            for req in self.scheduler.running:
                req.draft_lag = req.num_computed

    def _draft_outvalued(self) -> bool:
        """The engine's rule (``memory/triggers.py: draft_outvalued``) on this step."""
        assert self.elastic is not None
        if not self.elastic.params.offload_outvalued:
            return False
        return draft_outvalued(
            self.driver.draft_value,
            len(self.scheduler.waiting),
            self.pool.num_blocks - self.pool.num_free_blocks,
            self.elastic.num_offload_blocks,
            self.setting.max_num_seqs,
        )

    def sd_disabled(self) -> bool:
        """§6.1 condition (1) after the last step (see ``ServerOptions.offload_trigger``)."""
        if self.options.offload_trigger == "played":
            return self.driver.last_gamma == 0
        return self.driver.sd_disabled

    def _commit(self, step: ScheduledStep) -> tuple[ScheduledStep, bool, frozenset[SimRequest]]:
        """Hand the step to the driver (the draft gate may play gamma 0 or skip requests);
        returns the step as it runs, whether the draft takes part (always, in ``sync``
        mode) and the requests it skips."""
        available = self._draft_available()
        choice = self._choice or self.driver.not_consulted(draft_away=not available)
        if choice.consulted and choice.num_reqs != len(step.decodes):
            # NOTE: reserving slots preempted decodes after the choice; B is what runs.
            choice = replace(choice, num_reqs=len(step.decodes))
        gamma = self.driver.commit(self._step_batch(step), choice, self.now_s)
        if step.decodes and gamma != step.gamma:
            step = replace(step, gamma=gamma)
        reqs = [*step.decodes, *(r for r, _ in step.prefills)]
        undrafted = frozenset(reqs[i] for i in self.driver.last_undrafted)
        return step, available and (self.options.draft_when_off == "sync" or gamma > 0), undrafted

    def _step_batch(self, step: ScheduledStep) -> StepBatch:
        """The step in the driver's terms, as the engine's scheduler reduces its own."""
        chunks = [*((r, 0) for r in step.decodes), *step.prefills]
        num_sampling = sum(r.num_computed + chunk >= r.prefill_target for r, chunk in step.prefills)
        drafts_skipped = self.options.draft_when_off == "skip"
        return StepBatch(
            num_decode_reqs=len(step.decodes),
            num_sampling_reqs=len(step.decodes) + num_sampling,
            num_scheduled_reqs=len(chunks),
            max_skip_tokens=max((r.draft_lag for r in step.decodes), default=0),
            num_prefill_tokens=sum(chunk for _, chunk in step.prefills),
            owed_tokens=tuple(r.draft_lag + c for r, c in chunks) if drafts_skipped else (),
            remaining_tokens=tuple(
                remaining_after_step(r.spec.num_output_tokens, r.num_generated) for r, _ in chunks
            )
            if drafts_skipped
            else (),
        )

    def _apply(
        self, step: ScheduledStep, draft_runs: bool, undrafted: frozenset[SimRequest]
    ) -> tuple[int, int, tuple[int, ...]]:
        """Emit tokens; returns (decode tokens emitted, draft tokens accepted, drafted
        requests reaching each depth: ``StepResult.num_reqs_reaching``)."""
        gamma, num_tokens, num_accepted = step.gamma, 0, 0
        depths: list[int] = []
        for req in step.decodes:
            drafted = draft_runs and req not in undrafted
            accepted = req.acceptance.accepted(gamma) if gamma and drafted else 0
            if gamma and drafted:
                depths.append(accepted)
            emitted = min(1 + accepted, req.num_remaining_output)
            num_accepted += accepted
            num_tokens += emitted
            req.num_computed += emitted
            req.num_generated += emitted
            req.draft_lag = 0 if drafted else req.draft_lag + 1
            if req.num_remaining_output == 0:
                self._finish(req)
        for req, chunk in step.prefills:
            req.num_computed += chunk
            req.draft_lag = 0 if draft_runs and req not in undrafted else req.draft_lag + chunk
            if not req.is_prefilling:
                req.num_generated += 1
                if req.first_token_s is None:
                    req.first_token_s = self.now_s
                if req.num_remaining_output == 0:
                    self._finish(req)
        return num_tokens, num_accepted, depth_counts(depths, gamma)

    def _finish(self, req: SimRequest) -> None:
        self.scheduler.finish(req)
        assert req.first_token_s is not None
        spec = req.spec
        self.records.append(
            RequestRecord(
                req_id=spec.req_id,
                arrival_s=spec.arrival_s,
                sent_s=spec.arrival_s,
                num_prompt_tokens=spec.num_prompt_tokens,
                num_output_tokens=spec.num_output_tokens,
                first_token_s=req.first_token_s,
                finish_s=self.now_s,
                num_preemptions=req.num_preemptions,
            )
        )

    def _record(self, step: ScheduledStep, duration_s: float) -> None:
        self.timeline.append(
            StepRecord(
                self.now_s,
                duration_s,
                len(step.decodes),
                step.gamma,
                len(self.scheduler.running),
                len(self.scheduler.waiting),
                self.pool.num_free_blocks,
            )
        )
