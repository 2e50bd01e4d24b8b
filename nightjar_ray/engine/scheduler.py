"""vLLM V1 scheduler that asks a Nightjar policy for gamma every step.

Pass it as the engine argument ``scheduler_cls`` (``nightjar_engine_args``
does). vLLM's ``Scheduler.schedule()`` runs unchanged; just before it
advances the requests (``_update_after_schedule``) we read the step, ask the
policy, and set ``num_spec_tokens_to_schedule``. Hooking there (not after
``schedule()`` returns) matters for async scheduling: vLLM's
``AsyncScheduler`` sizes the next step's draft placeholders from that field
inside ``_update_after_schedule``.

With ``async_scheduling`` the class builds :class:`NightjarAsyncScheduler`
(same logic on top of vLLM's ``AsyncScheduler``), so one ``scheduler_cls``
serves both modes.

Every step also leaves a :class:`LoadSnapshot` (waiting queue, free blocks) in
the engine's telemetry, after scheduling and again after the step's output
(finished requests' blocks freed), and one is there from start, so an idle
engine reports its KV blocks too: the one object both the metrics and the
memory triggers read. When the engine arguments name a start hook
(``engine/args.py``, ``START_HOOK_KEY``; Ray Serve's builder names its link), the
scheduler calls it once with its config and step driver; under Serve it starts a
background thread that joins the Ray cluster, pools statistics with the policy actor
and exports the metrics; the step loop never waits on it (docs/serve.md, "The process
boundary"). The engine imports nothing from ``serve/``.
"""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from nightjar_ray.driver.draft_gate import remaining_after_step
from nightjar_ray.driver.observation import depth_counts
from nightjar_ray.driver.queue import QueueState, joins_batch_ahead
from nightjar_ray.driver.step import StepBatch
from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.engine.block_pool import ElasticBlockPool
from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.eligibility import ForcedUndrafted, drafted_req_ids, undrafted_req_ids
from nightjar_ray.engine.lag import DraftLagTracker
from nightjar_ray.engine.messages import (
    DraftEventCounts,
    StepMessage,
    attach_step_message,
    read_worker_report,
)
from nightjar_ray.engine.scheduler_setup import (
    controller_params,
    draft_cost_ratio,
    open_decision_log,
    run_start_hook,
)
from nightjar_ray.memory.controller import ElasticController
from nightjar_ray.memory.cycles import CompactionCycle, DraftCycle
from nightjar_ray.memory.events import MemoryEvent
from nightjar_ray.metrics.telemetry import EngineTelemetry, LoadSnapshot


class NightjarScheduler(Scheduler):
    """Scheduler + per-step policy; see module docstring and docs/engine.md."""

    def __new__(cls, vllm_config: Any, *args: Any, **kwargs: Any) -> NightjarScheduler:
        if cls is NightjarScheduler and vllm_config.scheduler_config.async_scheduling:
            cls = NightjarAsyncScheduler
        instance: NightjarScheduler = super().__new__(cls)
        return instance

    def __init__(self, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(vllm_config, *args, **kwargs)
        self.nightjar_config = NightjarConfig.from_additional_config(vllm_config.additional_config)
        cfg = self.nightjar_config
        self.telemetry = EngineTelemetry(
            self.num_spec_tokens, draft_resident=self.num_spec_tokens > 0
        )
        self.step_driver = self._build_step_driver(vllm_config)
        self._catch_up_seen = (0.0, 0)
        self._draft_events_seen: list[tuple[int, float]] = [(0, 0.0), (0, 0.0)]
        self._worker_event_times: dict[str, list[float]] = {}
        """Rank 0's share of the memory events (``WorkerEventTimes.to_json``), as last reported."""
        # NOTE: the KV gauges exist from start: an idle engine never schedules.
        self.telemetry.set_load(self.load_snapshot())
        self.start_hook_result = (
            run_start_hook(vllm_config.additional_config, cfg, self.step_driver)
            if self.num_spec_tokens > 0
            else None
        )
        self._tracks_lag = cfg.draft_sync != "stock"
        spec = vllm_config.speculative_config
        drafts = getattr(spec, "method", None) == "draft_model"
        self._gates = self._tracks_lag and drafts and self.step_driver.policy.draft_gate
        """Only a draft model skipped at gamma = 0 saves work when the draft gate stops;
        a policy that does not opt in is spared the per-request sums."""
        self.draft_lag = DraftLagTracker()
        self.undrafted_req_ids: frozenset[str] = frozenset()
        """The requests the draft skips in the last scheduled step (sent to the workers;
        they verify no drafts in the next one)."""
        self.forced_undrafted = self._build_forced_undrafted(drafts)
        self._schedule_start_s = 0.0
        self.num_preemptions = 0
        """Requests preempted (KV blocks taken back) so far; sent to the workers' stats."""
        self.compaction = self._build_compaction()
        steps = cfg.testing.chaos_offload_steps
        self.draft_cycle = DraftCycle(steps) if steps and self.num_spec_tokens > 0 else None
        self.memory_controller = self._build_memory_controller()

    def _build_forced_undrafted(self, drafts: bool) -> ForcedUndrafted | None:
        testing = self.nightjar_config.testing
        if testing.forced_undrafted_cycle is None:
            return None
        if not (self._tracks_lag and drafts):
            raise ValueError(
                "testing.forced_undrafted_cycle needs the draft_model method with "
                "draft_sync='catch-up' (only a draft model runs over part of a batch)"
            )
        return ForcedUndrafted(testing)

    def _build_step_driver(self, vllm_config: Any) -> StepDriver:
        cfg = self.nightjar_config
        return StepDriver(
            cfg.build_policy(),
            gamma_cap=self.num_spec_tokens,
            clock=time.perf_counter,
            count_scheduled=cfg.testing.batch_size_rule == "scheduled",
            observation_rule=cfg.testing.observation_rule,
            log_file=open_decision_log(cfg.decision_log_path),
            log_interval_steps=cfg.log_interval_steps,
            telemetry=self.telemetry,
            draft_cost_ratio=draft_cost_ratio(vllm_config),
            pinned_prefill_price_s_per_token=cfg.testing.draft_gate_price_s_per_token,
        )

    def _build_memory_controller(self) -> ElasticController | None:
        """The §6.1 controller on vLLM's block pool (elastic memory on, speculating)."""
        elastic = self.nightjar_config.elastic_memory
        if not elastic.on or self.num_spec_tokens == 0:
            return None
        block_pool = self.kv_cache_manager.block_pool
        return ElasticController(
            lambda num_max_blocks: ElasticBlockPool(block_pool, num_max_blocks),
            block_pool.num_gpu_blocks,
            controller_params(elastic),
            self.telemetry,
            max_num_reqs=self.max_num_running_reqs,
        )

    def _build_compaction(self) -> CompactionCycle | None:
        cfg = self.nightjar_config.testing
        if cfg.chaos_cycle_steps is None:
            return None
        pool = self.kv_cache_manager.block_pool
        elastic = ElasticBlockPool(pool, max_num_blocks=pool.num_gpu_blocks)
        return CompactionCycle(
            elastic, cfg.chaos_region_blocks, cfg.chaos_cycle_steps, telemetry=self.telemetry
        )

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._schedule_start_s = time.perf_counter()
        self.undrafted_req_ids = frozenset()
        event = self._memory_event()
        if "resume" in event.draft_commands:
            self.draft_lag.invalidate_all()  # the workers do the same with this step
        out = super().schedule(*args, **kwargs)
        load = self.load_snapshot()
        self.telemetry.set_load(load)
        if self.memory_controller is not None:
            self.memory_controller.after_schedule(
                load, self.step_driver.sd_disabled, self.step_driver.draft_value
            )
        message = StepMessage(event or None, self._memory_counts(), self.undrafted_req_ids)
        attach_step_message(out, message)
        return out

    def _memory_event(self) -> MemoryEvent:
        """This step boundary's memory work (controller or chaos cycles)."""
        event = MemoryEvent()
        for driver in (self.memory_controller, self.compaction, self.draft_cycle):
            if driver is not None:
                event = event.merge(driver.before_schedule())
        return event

    def _memory_counts(self) -> dict[str, Any]:
        """The scheduler's cumulative memory counts, sent to the workers with each step."""
        counts: dict[str, Any] = {
            "num_preemptions": self.num_preemptions,
            "memory_events": {k: list(v) for k, v in self.telemetry.memory_events.items()},
            "worker_memory_events": self._worker_event_times,
        }
        for driver in (self.memory_controller, self.compaction, self.draft_cycle):
            if driver is not None:
                counts.update(driver.stats.to_json())
        return counts

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> None:
        self.num_preemptions += 1
        super()._preempt_request(request, *args, **kwargs)

    @property
    def draft_away(self) -> bool:
        """The draft is offloaded or reloading (elastic memory or the chaos cycle)."""
        if self.memory_controller is not None and self.memory_controller.draft_away:
            return True
        return self.draft_cycle is not None and not self.draft_cycle.resident

    def load_snapshot(self) -> LoadSnapshot:
        """Queue depth and KV blocks now (block 0 is vLLM's null block, never handed out)."""
        pool = self.kv_cache_manager.block_pool
        return LoadSnapshot(
            num_waiting_reqs=len(self.waiting),
            num_running_reqs=len(self.running),
            num_free_blocks=pool.get_num_free_blocks(),
            num_total_blocks=pool.num_gpu_blocks - 1,
        )

    def _update_after_schedule(self, scheduler_output: Any) -> None:
        if self.num_spec_tokens > 0:
            self._choose_gamma(scheduler_output)
        super()._update_after_schedule(scheduler_output)

    def _choose_gamma(self, out: Any) -> None:
        """Coordinator: read the step, ask the policy, record draft lag."""
        starts = {r: self.requests[r].num_computed_tokens for r in out.num_scheduled_tokens}
        self.draft_lag.begin_step(
            starts, out.finished_req_ids, out.scheduled_cached_reqs.resumed_req_ids
        )
        if self.forced_undrafted is not None:
            self.forced_undrafted.begin_step(starts, out.finished_req_ids)
        batch = self._step_batch(out, starts)
        gamma = self.step_driver.on_schedule(
            batch, self._schedule_start_s, draft_away=self.draft_away
        )
        undrafted = undrafted_req_ids(self.step_driver.last_undrafted, starts)
        if self.forced_undrafted is not None and gamma > 0:
            undrafted = self.forced_undrafted.undrafted(starts)
            if len(undrafted) == len(starts):
                gamma, undrafted = 0, frozenset()
        out.num_spec_tokens_to_schedule = gamma
        self.undrafted_req_ids = undrafted
        if self._tracks_lag:
            self.draft_lag.end_step(starts, drafted_req_ids(starts, gamma, undrafted))

    def _step_batch(self, out: Any, starts: dict[str, int]) -> StepBatch:
        num_decode = num_sampling = num_prefill_tokens = 0
        num_queued = num_queued_sampling = 0  # prompts in prefill that join B'
        owed: list[int] = []
        remaining: list[int] = []
        spec = out.scheduled_spec_decode_tokens
        for req_id, num_new in out.num_scheduled_tokens.items():
            request = self.requests[req_id]
            start = starts[req_id]
            decodes = samples = False
            if start + num_new >= request.num_tokens + request.num_output_placeholders:
                num_sampling, samples = num_sampling + 1, True
                decodes = num_new == 1 + len(spec.get(req_id, ()))
            num_decode += decodes
            num_prefill_tokens += 0 if decodes else num_new
            if not decodes and joins_batch_ahead(request.max_tokens - request.num_output_tokens):
                num_queued += 1
                num_queued_sampling += samples
            if self._gates:
                owed.append(self.draft_lag.lag_tokens(req_id, start) + (0 if decodes else num_new))
                remaining.append(
                    remaining_after_step(request.max_tokens, request.num_output_tokens)
                )
        return StepBatch(
            num_decode_reqs=num_decode,
            num_sampling_reqs=num_sampling,
            num_scheduled_reqs=len(out.num_scheduled_tokens),
            max_skip_tokens=self.draft_lag.max_lag_tokens(starts),
            num_prefill_tokens=num_prefill_tokens,
            owed_tokens=tuple(owed),
            remaining_tokens=tuple(remaining),
            # with no decodes B counts the sampling requests (batch_size): not queued twice
            queue=self._queue_state(num_queued - (0 if num_decode else num_queued_sampling)),
        )

    def _queue_state(self, num_prefilling_reqs: int) -> QueueState:
        load = self.load_snapshot()
        return QueueState(
            num_waiting_reqs=load.num_waiting_reqs,
            num_prefilling_reqs=num_prefilling_reqs,
            max_num_reqs=self.max_num_running_reqs,
            num_free_blocks=load.num_free_blocks,
            num_total_blocks=load.num_total_blocks,
        )

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        """vLLM's update, then no drafts for the requests the draft skipped: the
        workers' rows for them hold no proposal, so they verify none next step."""
        super().update_draft_token_ids(draft_token_ids)
        for req_id in self.undrafted_req_ids:
            request = self.requests.get(req_id)
            if request is not None:
                request.spec_token_ids = []

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        if self.num_spec_tokens > 0:
            self._observe(scheduler_output, model_runner_output)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        # NOTE: after finished requests freed their blocks: what an idle engine reports.
        self.telemetry.set_load(self.load_snapshot())
        return outputs

    def _observe(self, out: Any, runner_output: Any) -> None:
        sampled = runner_output.sampled_token_ids or []
        num_tokens = sum(len(ids) for ids in sampled)
        num_draft = num_accepted = 0
        index = runner_output.req_id_to_index or {}
        depths: list[tuple[int, int]] = []  # (drafts, accepted) per drafted request
        for req_id, drafts in out.scheduled_spec_decode_tokens.items():
            i = index.get(req_id)
            if i is None or i >= len(sampled) or not sampled[i]:
                continue
            accepted = min(len(sampled[i]) - 1, len(drafts))
            num_draft += len(drafts)
            num_accepted += accepted
            depths.append((len(drafts), accepted))
        # a request verifying fewer drafts than the step's gamma (near its length limit)
        # does not say how deep it would have gone: left out of the depths
        gamma = max((d for d, _ in depths), default=0)
        reaching = depth_counts([a for d, a in depths if d == gamma], gamma)
        self.step_driver.on_output(num_tokens, num_draft, num_accepted, num_reqs_reaching=reaching)
        report = read_worker_report(runner_output)
        if report is None:
            return
        self._count_catch_up(report.catch_up_s, report.num_catch_up_tokens)
        self._count_draft_events(report.draft_events)
        if report.event_times is not None:
            self._worker_event_times = report.event_times.to_json()
        if self.memory_controller is not None:
            self.memory_controller.on_worker_output(report.num_max_blocks, report.draft_ready)

    def _count_draft_events(self, events: DraftEventCounts | None) -> None:
        """Rank 0's cumulative offloads and reloads into the telemetry the metrics export
        (each kind once its count moves)."""
        if events is None:
            return
        counts = (
            (events.num_offloads, events.offload_s),
            (events.num_reloads, events.reload_s),
        )
        for i, kind in enumerate(("offload", "reload")):
            (seen_n, seen_s), (now_n, now_s) = self._draft_events_seen[i], counts[i]
            if now_n > seen_n:
                for _ in range(now_n - seen_n):
                    self.telemetry.record_memory_event(kind, (now_s - seen_s) / (now_n - seen_n))
                self._draft_events_seen[i] = (now_n, now_s)

    def _count_catch_up(self, seconds: float, tokens: int) -> None:
        """Rank 0's cumulative catch-up work (its ``WorkerReport``) into the telemetry."""
        seen_s, seen_tokens = self._catch_up_seen
        if seconds < seen_s or tokens < seen_tokens:  # the worker's stats were reset
            seen_s, seen_tokens = 0.0, 0
        if seconds > seen_s or tokens > seen_tokens:
            self.telemetry.on_catch_up(seconds - seen_s, tokens - seen_tokens)
            self._catch_up_seen = (seconds, tokens)


class NightjarAsyncScheduler(NightjarScheduler, AsyncScheduler):
    """The same scheduler on top of vLLM's ``AsyncScheduler``."""

    def _update_after_schedule(self, scheduler_output: Any) -> None:
        super()._update_after_schedule(scheduler_output)
        # NOTE: vLLM's AsyncScheduler gives every decoding request draft placeholders
        # for the next step; the requests the draft skips get none, so they verify no
        # drafts. Untested: vLLM forces async scheduling off on CPU.
        for req_id in self.undrafted_req_ids:
            self.requests[req_id].spec_token_ids = []
