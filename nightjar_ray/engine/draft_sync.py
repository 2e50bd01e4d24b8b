"""Worker side of the true gamma=0: skip the draft, then catch its KV up.

Installed on a vLLM V1 model runner by :mod:`nightjar_ray.engine.worker`. It
shadows the runner's ``propose_draft_token_ids`` (the one place the runner
runs the drafter after sampling)::

    propose_draft_token_ids(scheduler_output, ...)
      K = scheduler_output.num_spec_tokens_to_schedule
      K == 0, mode != "stock"  -> no draft forward at all; requests go stale
      K > 0,  mode "catch-up"  -> draft-only forward over each stale span
                                  [stale_from, start) of a drafted request
                                  (= C_switch), then the proposal:
        no request undrafted   -> vLLM's own propose (first pass over the
                                  step's tokens + K-1 decode passes)
        some undrafted         -> the same passes over the drafted requests
                                  only (``draft_batch.propose_for``); the
                                  undrafted ones go stale
      otherwise                -> vLLM's own propose

The scheduler names the undrafted requests of a step (per-request draft
eligibility) in its ``StepMessage``; it gives them no drafts to verify next step.

The catch-up reuses vLLM's proposer with ``num_speculative_tokens=0`` on a
hand-built batch whose queries are the missed spans (``draft_batch.py``): that
is exactly the first pass vLLM itself runs to keep the drafter in sync, so KV
layout, slot mapping and attention metadata are vLLM's. Spans longer than the
drafter's token buffer are split and run in position order.

Only the ``draft_model`` method has a draft KV cache that can be caught up
from tokens alone (EAGLE needs target hidden states of the skipped tokens,
which are gone): :func:`supports_true_skip` says which methods skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from nightjar_ray.engine.config import DraftSyncMode
from nightjar_ray.engine.draft_batch import catch_up_forward, propose_for
from nightjar_ray.engine.lag import CatchUpSpan, DraftLagTracker
from nightjar_ray.engine.messages import read_step_message

TRUE_SKIP_METHODS = ("draft_model", "ngram")
"""Methods where gamma=0 runs no draft forward (ngram has no model at all)."""


def supports_true_skip(method: str) -> bool:
    return method in TRUE_SKIP_METHODS


@dataclass
class DraftStepRecord:
    """What the drafter did in one step (worker view)."""

    num_spec_tokens: int
    num_reqs: int
    num_draft_forwards: int
    num_catch_up_reqs: int
    num_catch_up_tokens: int
    catch_up_s: float
    num_undrafted_reqs: int = 0
    """Requests of the step the draft skipped while it ran over the others."""


@dataclass
class DraftSyncStats:
    """Counters readable over ``collective_rpc`` (see ``worker.py``)."""

    num_steps: int = 0
    num_skipped_steps: int = 0
    num_draft_forwards: int = 0
    num_catch_ups: int = 0
    num_catch_up_tokens: int = 0
    catch_up_s: float = 0.0
    num_partial_steps: int = 0
    """Steps whose draft ran over part of the batch (some requests undrafted)."""
    num_draft_kv_slots: dict[str, int] = field(default_factory=dict)
    """Per req_id, the draft KV slots draft forwards wrote for it (catch-up, proposal
    and decode passes); kept only with ``testing.count_draft_slots``."""
    steps: list[DraftStepRecord] = field(default_factory=list)
    max_steps_kept: int = 100_000

    def record(self, step: DraftStepRecord) -> None:
        self.num_steps += 1
        self.num_skipped_steps += step.num_spec_tokens == 0
        self.num_partial_steps += step.num_undrafted_reqs > 0
        self.num_catch_ups += step.num_catch_up_reqs > 0
        self.num_catch_up_tokens += step.num_catch_up_tokens
        self.catch_up_s += step.catch_up_s
        if len(self.steps) < self.max_steps_kept:
            self.steps.append(step)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "steps"}
        out["num_draft_kv_slots"] = dict(self.num_draft_kv_slots)
        out["steps"] = [s.__dict__ for s in self.steps]
        return out


class DraftSlotCounter:
    """Counts, per request, the draft KV slots each draft forward writes: the slot
    mapping in vLLM's forward context, mapped to requests through the step's block
    table (a host copy per forward; ``testing.count_draft_slots`` only). A block that
    prefix caching shares counts for one of its requests."""

    def __init__(self, runner: Any, counts: dict[str, int]) -> None:
        self._runner = runner
        self.counts = counts
        self._owner_of_block: dict[int, str] = {}

    def begin_step(self) -> None:
        """Which request owns each KV block in this step (block 0 is vLLM's null block)."""
        batch = self._runner.input_batch
        table = batch.block_table[0]
        blocks, num_blocks = table.block_table.np, table.num_blocks_per_row
        self._owner_of_block = {
            int(block): req_id
            for row, req_id in enumerate(batch.req_ids)
            for block in blocks[row, : num_blocks[row]]
            if block != 0
        }

    def on_forward(self) -> None:
        from vllm.forward_context import get_forward_context

        mapping: Any = get_forward_context().slot_mapping
        if isinstance(mapping, list):
            mapping = mapping[0]
        if not mapping:
            return
        slots = next(iter(mapping.values()))
        written = slots[slots >= 0].cpu() // self._runner.drafter.block_size
        for block in written.tolist():
            req_id = self._owner_of_block.get(block, "?")
            self.counts[req_id] = self.counts.get(req_id, 0) + 1


class DraftSync:
    """Owns the draft lag state of one model runner; see module docstring."""

    def __init__(
        self,
        runner: Any,
        mode: DraftSyncMode,
        clock: Callable[[], float] = time.perf_counter,
        count_slots: bool = False,
    ) -> None:
        self._runner = runner
        self._mode = mode
        self._clock = clock
        self._method: str = runner.speculative_config.method
        self._lag = DraftLagTracker()
        self.stats = DraftSyncStats()
        self._slots: DraftSlotCounter | None = None
        self._stock_propose = runner.propose_draft_token_ids
        runner.propose_draft_token_ids = self.propose_draft_token_ids
        model = getattr(runner.drafter, "model", None)
        if isinstance(model, torch.nn.Module):
            model.register_forward_pre_hook(self._count_forward)
            if count_slots:
                self._slots = DraftSlotCounter(runner, self.stats.num_draft_kv_slots)

    def invalidate_draft_kv(self) -> None:
        """Every request's draft KV must be rebuilt (after a draft reload)."""
        self._lag.invalidate_all()

    def reset_stats(self) -> None:
        self.stats = DraftSyncStats()
        if self._slots is not None:
            self._slots.counts = self.stats.num_draft_kv_slots

    def _count_forward(self, *_: Any) -> None:
        self.stats.num_draft_forwards += 1
        if self._slots is not None:
            self._slots.on_forward()

    def _skips(self, num_spec_tokens: int) -> bool:
        return num_spec_tokens == 0 and self._mode != "stock" and supports_true_skip(self._method)

    def propose_draft_token_ids(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        """Replacement for ``GPUModelRunner.propose_draft_token_ids``."""
        k = scheduler_output.num_spec_tokens_to_schedule
        starts = self._step_starts(scheduler_output)
        self._lag.begin_step(
            starts,
            scheduler_output.finished_req_ids,
            scheduler_output.scheduled_cached_reqs.resumed_req_ids,
        )
        if self._slots is not None:
            self._slots.begin_step()
        forwards_before = self.stats.num_draft_forwards
        undrafted = self._undrafted(scheduler_output, starts)
        drafted = {} if self._skips(k) else {r: s for r, s in starts.items() if r not in undrafted}
        spans, catch_up_s = self._catch_up_drafted(drafted, args)
        if self._skips(k):
            result = self._skip(args)
        elif undrafted:
            result = propose_for(self._runner, scheduler_output, drafted, args)
        else:
            result = self._stock_propose(scheduler_output, *args, **kwargs)
        self._lag.end_step(starts, drafted)
        record = DraftStepRecord(
            num_spec_tokens=k,
            num_reqs=len(starts),
            num_draft_forwards=self.stats.num_draft_forwards - forwards_before,
            num_catch_up_reqs=len(spans),
            num_catch_up_tokens=sum(s.num_tokens for s in spans),
            catch_up_s=catch_up_s,
            num_undrafted_reqs=len(undrafted) if drafted else 0,
        )
        self.stats.record(record)
        return result

    def _catch_up_drafted(
        self, drafted: dict[str, int], args: tuple[Any, ...]
    ) -> tuple[list[CatchUpSpan], float]:
        """The catch-up of the drafted requests that lag (``catch-up`` mode, draft
        model): its spans and seconds."""
        if self._mode != "catch-up" or self._method != "draft_model":
            return [], 0.0
        spans = self._lag.spans(drafted)
        return spans, self._timed_catch_up(spans, args[1], args[6]) if spans else 0.0

    def _undrafted(self, scheduler_output: Any, starts: dict[str, int]) -> frozenset[str]:
        """The step's requests the scheduler says the draft skips (only a draft model
        runs over part of a batch; a step at K = 0 skips them all anyway)."""
        message = read_step_message(scheduler_output)
        if message is None or not message.undrafted_req_ids or self._method != "draft_model":
            return frozenset()
        return message.undrafted_req_ids & starts.keys()

    def _step_starts(self, scheduler_output: Any) -> dict[str, int]:
        """req_id -> tokens computed before this step, batch order."""
        batch = self._runner.input_batch
        scheduled = scheduler_output.num_scheduled_tokens
        return {
            req_id: int(batch.num_computed_tokens_cpu[i])
            for i, req_id in enumerate(batch.req_ids)
            if req_id in scheduled
        }

    def _skip(self, args: tuple[Any, ...]) -> torch.Tensor:
        """No draft forward; keep the async-scheduling bookkeeping vLLM expects."""
        runner = self._runner
        if runner.use_async_scheduling and isinstance(args[0], torch.Tensor):
            # NOTE: with async scheduling the next step corrects its optimistic
            # token counts from these (vLLM computes them inside propose).
            next_ids, valid_counts = runner.drafter.prepare_next_token_ids_padded(
                args[0], runner.requests, runner.input_batch, runner.discard_request_mask.gpu
            )
            runner._copy_valid_sampled_token_count(next_ids, valid_counts)
        num_reqs = runner.input_batch.num_reqs
        return torch.empty((num_reqs, 0), dtype=torch.int64, device=runner.device)

    def _timed_catch_up(self, spans: list[CatchUpSpan], sampling_metadata: Any, cad: Any) -> float:
        """Run the catch-up; its wall time in seconds (device synchronized)."""
        self._sync_device()
        t0 = self._clock()
        self._catch_up(spans, sampling_metadata, cad)
        self._sync_device()
        return self._clock() - t0

    def _sync_device(self) -> None:
        # NOTE: only on switch steps; without it a GPU catch-up would time its launch.
        if self._runner.device.type == "cuda":
            torch.cuda.synchronize(self._runner.device)

    def _catch_up(self, spans: list[CatchUpSpan], sampling_metadata: Any, cad: Any) -> None:
        """Draft-only forwards over ``spans``, in chunks the drafter's buffers hold."""
        drafter = self._runner.drafter
        budget = drafter.max_num_tokens - drafter.max_batch_size
        for chunk in _chunk_spans(spans, budget, drafter.max_batch_size):
            catch_up_forward(self._runner, chunk, sampling_metadata, cad)


def _chunk_spans(
    spans: list[CatchUpSpan], max_tokens: int, max_reqs: int
) -> list[list[CatchUpSpan]]:
    """Split spans into forwards of at most ``max_tokens`` tokens and ``max_reqs``
    requests; a long span is cut into consecutive pieces (earlier pieces first)."""
    assert max_tokens > 0 and max_reqs > 0
    chunks: list[list[CatchUpSpan]] = [[]]
    used = 0
    for span in spans:
        start = span.start_pos
        while start < span.end_pos:
            if used == max_tokens or len(chunks[-1]) == max_reqs:
                chunks.append([])
                used = 0
            end = min(span.end_pos, start + max_tokens - used)
            chunks[-1].append(CatchUpSpan(span.req_id, start, end))
            used += end - start
            start = end
    return [c for c in chunks if c]
