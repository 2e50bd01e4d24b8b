"""The discrete-event serving simulator: one continuous-batching engine, step by step.

Events are engine steps (the engine is never idle while work is queued) and arrivals
(the clock jumps to the next arrival when the engine is empty). Each step::

    admit arrivals -> schedule (policy.choose inside) -> roofline duration
    -> sample acceptance, emit tokens, finish requests -> policy.observe
    -> elastic-memory triggers (may stall the engine)

The policy is the very object the engine uses (``nightjar_ray.policy``). Clock and RNG
are explicit: a run is a pure function of (setting, policy, options, workload, seed).

Draft participation when a step plays gamma = 0 (``ServerOptions.draft_when_off``):

* ``sync``: the draft still runs one pass over the step's tokens (stock vLLM keeps the
  drafter's KV in sync this way; verified-facts), so re-enabling is free but gamma=0 is not;
* ``skip``: the draft does not run (Nightjar); its KV lags, and the next speculative step
  pays the catch-up (C_switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from nightjar_ray.memory.triggers import draft_outvalued
from nightjar_ray.policy.base import Policy, StepResult
from nightjar_ray.policy.bucketing import BucketFn, bucket_fn
from nightjar_ray.policy.draft_gate import DraftGate, remaining_after_step
from nightjar_ray.policy.nightjar import NightjarPolicy
from nightjar_ray.policy.observation import DEFAULT_OBSERVATION_RULE, ObservationRule, StepSample
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

SimObservation = Literal["prefill-corrected", "pure", "step", "decode"]

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
    played gamma = 0; ``exploited``: also, for Nightjar, that gamma = 0 came from an
    exploitation bin (an exploration probe of gamma = 0 does not count)."""
    observed_time: SimObservation = DEFAULT_OBSERVATION_RULE
    """What ``policy.observe`` is told: one of the engine's observation rules
    (``nightjar_ray.policy.observation``, the same object the engine runs), or ``decode``,
    a simulator-only diagnostic: every decode step with the time its decodes alone would
    take per the cost model (prefill chunks, target's and draft's, removed)."""
    seed: int = 0
    check_invariants: bool = False
    """Check block accounting after every step (slow; tests)."""


class SimServer:
    """See module docstring."""

    def __init__(self, setting: Setting, policy: Policy, options: ServerOptions) -> None:
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
        self.last_gamma = 0
        self.last_num_reqs = 0
        self._bin_explored: dict[int, bool] = {}
        self._bucket: BucketFn | None = None
        if isinstance(policy, NightjarPolicy) and options.offload_trigger == "exploited":
            self._bucket = bucket_fn(policy.config.bucketing)
            policy.bin_listener = self._on_bin
        rule = options.observed_time
        ratio = setting.draft.num_params / setting.target.num_params
        self.observation = None if rule == "decode" else ObservationRule(rule, ratio)
        self.records: list[RequestRecord] = []
        self.timeline: list[StepRecord] = []
        self.num_steps = 0
        self.catchup_s = 0.0
        self.gate = DraftGate(ratio)

    @property
    def max_request_tokens(self) -> int:
        """Largest prompt + output a request may have: it must fit the pool alone, with room
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
        if not self._draft_available():
            return 0
        return self.policy.choose(num_reqs, max_skip_tokens)

    def _step(self) -> None:
        step = self.scheduler.schedule(self._choose)
        if step.is_empty:
            # NOTE: every running request is a prefill that found no blocks; free some.
            self.scheduler.preempt(self.scheduler.running[-1])
            return
        step, draft_runs = self._draft_runs(step)
        cost = self.cost.cost(step, draft_runs)
        decode_s = self._decode_only_s(step, draft_runs, cost.total_s)  # before state changes
        self.now_s += cost.total_s
        self.catchup_s += cost.catchup_s
        num_tokens, num_accepted = self._apply(step, draft_runs)
        self.num_steps += 1
        if step.decodes:
            sample = StepSample(
                len(step.decodes),
                self.last_gamma,
                step.gamma,
                num_tokens,
                cost.total_s,
                sum(chunk for _, chunk in step.prefills),
                len(step.decodes) * step.gamma,
                num_accepted,
            )
            self.last_gamma = step.gamma
            self.last_num_reqs = len(step.decodes)
            self._observe(sample, decode_s)
        elif self.observation is not None:
            # NOTE: as the engine, a step of prompt chunks alone is shown to the rule
            # (it prices the target's prefill from it; never a policy sample).
            drafted = self.last_gamma if draft_runs else 0
            prompt_tokens = sum(chunk for _, chunk in step.prefills)
            self.observation.observe(
                StepSample(0, self.last_gamma, drafted, 0, cost.total_s, prompt_tokens)
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

    def _observe(self, sample: StepSample, decode_s: float) -> None:
        """Feed the policy what the engine would (its observation rule), or the diagnostic."""
        if self.observation is not None:
            result = self.observation.observe(sample)
        else:
            result = StepResult(
                sample.num_reqs,
                sample.next_gamma,
                sample.num_tokens,
                decode_s,
                sample.num_draft_tokens,
                sample.num_accepted_tokens,
            )
        if result is not None:
            self.policy.observe(result)

    def _decode_only_s(self, step: ScheduledStep, draft_runs: bool, total_s: float) -> float:
        """The ``decode`` diagnostic: the step's time without its prefill chunks."""
        if self.options.observed_time != "decode" or not step.prefills:
            return total_s
        return self.cost.cost(replace(step, prefills=()), draft_runs).total_s

    def _draft_outvalued(self) -> bool:
        """The engine's rule (``memory/triggers.py: draft_outvalued``) on this step."""
        assert self.elastic is not None
        if not self.elastic.params.offload_outvalued:
            return False
        num_reqs = self.last_num_reqs
        return draft_outvalued(
            self.policy.speculation_gain(num_reqs) if num_reqs > 0 else None,
            num_reqs,
            len(self.scheduler.waiting),
            self.pool.num_blocks - self.pool.num_free_blocks,
            self.elastic.num_offload_blocks,
            self.setting.max_num_seqs,
        )

    def _on_bin(self, key: int, _j: int, _b: int, explored: bool, _gamma: int) -> None:
        self._bin_explored[key] = explored

    def sd_disabled(self) -> bool:
        """§6.1 condition (1) after the last step (see ``ServerOptions.offload_trigger``)."""
        if self.last_gamma != 0:
            return False
        if self._bucket is None:
            return True
        return not self._bin_explored.get(self._bucket(self.last_num_reqs), False)

    def _draft_runs(self, step: ScheduledStep) -> tuple[ScheduledStep, bool]:
        """The step as it runs (gamma 0 if the draft gate stops it) and whether the draft
        takes part; a step without decodes drafts with the last gamma, as the engine's."""
        if not self._draft_available():
            return step, False
        if self.options.draft_when_off == "sync":
            return step, True
        gamma = step.gamma if step.decodes else self.last_gamma
        if gamma > 0 and self.policy.draft_gate and not self._gate_allows(step, gamma):
            if not step.decodes:
                self.last_gamma = 0  # NOTE: as the engine's Stepper, the step played 0
            return replace(step, gamma=0), False
        return step, gamma > 0

    def _gate_allows(self, step: ScheduledStep, gamma: int) -> bool:
        """The engine's draft gate (``policy/draft_gate.py``) on this step's requests."""
        chunks = [*((r, 0) for r in step.decodes), *step.prefills]
        owed = sum(r.draft_lag + chunk for r, chunk in chunks)
        if owed == 0:
            return True
        remaining = sum(
            remaining_after_step(r.spec.num_output_tokens, r.num_generated) for r, _ in chunks
        )
        # as the engine's: the requests that sample this step (decodes, last chunks)
        num_sampling = sum(r.num_computed + chunk >= r.prefill_target for r, chunk in step.prefills)
        num_reqs = max(1, len(step.decodes) + num_sampling)
        explored = bool(step.decodes) and self.policy.last_explored
        estimates = self.policy.latency_estimates(num_reqs)
        price = None if self.observation is None else self.observation.prefill_s_per_token
        at_zero = self.policy.latency_at_zero_s(num_reqs)
        return self.gate.allows(
            gamma, estimates, owed, remaining, price, explored=explored, latency_at_zero_s=at_zero
        )

    def _apply(self, step: ScheduledStep, draft_runs: bool) -> tuple[int, int]:
        """Emit tokens; returns (decode tokens emitted, draft tokens accepted)."""
        gamma, num_tokens, num_accepted = step.gamma, 0, 0
        for req in step.decodes:
            accepted = req.acceptance.accepted(gamma) if gamma else 0
            emitted = min(1 + accepted, req.num_remaining_output)
            num_accepted += accepted
            num_tokens += emitted
            req.num_computed += emitted
            req.num_generated += emitted
            req.draft_lag = 0 if draft_runs else req.draft_lag + 1
            if req.num_remaining_output == 0:
                self._finish(req)
        for req, chunk in step.prefills:
            req.num_computed += chunk
            req.draft_lag = 0 if draft_runs else req.draft_lag + chunk
            if not req.is_prefilling:
                req.num_generated += 1
                if req.first_token_s is None:
                    req.first_token_s = self.now_s
                if req.num_remaining_output == 0:
                    self._finish(req)
        return num_tokens, num_accepted

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
