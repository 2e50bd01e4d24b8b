"""Worker side of the true gamma=0: skip the draft, then catch its KV up.

Installed on a vLLM V1 model runner by :mod:`nightjar_ray.engine.worker`. It
shadows the runner's ``propose_draft_token_ids`` (the one place the runner
runs the drafter after sampling)::

    propose_draft_token_ids(scheduler_output, ...)
      K = scheduler_output.num_spec_tokens_to_schedule
      K == 0, mode != "stock"  -> no draft forward at all; requests go stale
      K > 0,  mode "catch-up"  -> draft-only forward over each stale span
                                  [stale_from, start)   (= C_switch)
                                  then vLLM's own propose (first pass over
                                  the step's tokens + K-1 decode passes)
      otherwise                -> vLLM's own propose

The catch-up reuses vLLM's proposer with ``num_speculative_tokens=0`` on a
hand-built batch whose queries are the missed spans: that is exactly the
first pass vLLM itself runs to keep the drafter in sync, so KV layout, slot
mapping and attention metadata are vLLM's. Spans longer than the drafter's
token buffer are split and run in position order.

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
from vllm.v1.attention.backend import CommonAttentionMetadata

from nightjar_ray.engine.config import DraftSyncMode
from nightjar_ray.engine.lag import CatchUpSpan, DraftLagTracker

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


@dataclass
class DraftSyncStats:
    """Counters readable over ``collective_rpc`` (see ``worker.py``)."""

    num_steps: int = 0
    num_skipped_steps: int = 0
    num_draft_forwards: int = 0
    num_catch_ups: int = 0
    num_catch_up_tokens: int = 0
    catch_up_s: float = 0.0
    steps: list[DraftStepRecord] = field(default_factory=list)
    max_steps_kept: int = 100_000

    def record(self, step: DraftStepRecord) -> None:
        self.num_steps += 1
        self.num_skipped_steps += step.num_spec_tokens == 0
        self.num_catch_ups += step.num_catch_up_reqs > 0
        self.num_catch_up_tokens += step.num_catch_up_tokens
        self.catch_up_s += step.catch_up_s
        if len(self.steps) < self.max_steps_kept:
            self.steps.append(step)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "steps"}
        out["steps"] = [s.__dict__ for s in self.steps]
        return out


class DraftSync:
    """Owns the draft lag state of one model runner; see module docstring."""

    def __init__(
        self, runner: Any, mode: DraftSyncMode, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._runner = runner
        self._mode = mode
        self._clock = clock
        self._method: str = runner.speculative_config.method
        self._lag = DraftLagTracker()
        self.stats = DraftSyncStats()
        self._stock_propose = runner.propose_draft_token_ids
        runner.propose_draft_token_ids = self.propose_draft_token_ids
        model = getattr(runner.drafter, "model", None)
        if isinstance(model, torch.nn.Module):
            model.register_forward_pre_hook(self._count_forward)

    def invalidate_draft_kv(self) -> None:
        """Every request's draft KV must be rebuilt (after a draft reload)."""
        self._lag.invalidate_all()

    def reset_stats(self) -> None:
        self.stats = DraftSyncStats()

    def _count_forward(self, *_: Any) -> None:
        self.stats.num_draft_forwards += 1

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
        forwards_before = self.stats.num_draft_forwards
        spans: list[CatchUpSpan] = []
        catch_up_s = 0.0
        if self._skips(k):
            result = self._skip(args)
        else:
            if self._mode == "catch-up" and self._method == "draft_model":
                spans = self._lag.spans(starts)
                if spans:
                    catch_up_s = self._timed_catch_up(spans, args[1], args[6])
            result = self._stock_propose(scheduler_output, *args, **kwargs)
        self._lag.end_step(starts, () if self._skips(k) else starts)
        self.stats.record(
            DraftStepRecord(
                num_spec_tokens=k,
                num_reqs=len(starts),
                num_draft_forwards=self.stats.num_draft_forwards - forwards_before,
                num_catch_up_reqs=len(spans),
                num_catch_up_tokens=sum(s.num_tokens for s in spans),
                catch_up_s=catch_up_s,
            )
        )
        return result

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
            self._catch_up_chunk(chunk, sampling_metadata, cad)

    def _catch_up_chunk(self, chunk: list[CatchUpSpan], sampling_metadata: Any, cad: Any) -> None:
        runner, drafter = self._runner, self._runner.drafter
        batch = runner.input_batch
        device = runner.device
        rows = [batch.req_id_to_index[s.req_id] for s in chunk]
        tokens = [
            batch.token_ids_cpu[r, s.start_pos : s.end_pos]
            for r, s in zip(rows, chunk, strict=True)
        ]
        next_ids = [
            int(batch.token_ids_cpu[r, s.end_pos]) for r, s in zip(rows, chunk, strict=True)
        ]
        positions = torch.cat([torch.arange(s.start_pos, s.end_pos) for s in chunk])
        lens = torch.tensor([s.num_tokens for s in chunk], dtype=torch.int32)
        query_start_loc = torch.zeros(len(chunk) + 1, dtype=torch.int32)
        torch.cumsum(lens, 0, out=query_start_loc[1:])
        seq_lens = torch.tensor([s.end_pos for s in chunk], dtype=torch.int32)
        block_table = cad.block_table_tensor[torch.tensor(rows, device=device)]
        block_size = drafter.block_size
        req_of_token = torch.repeat_interleave(torch.arange(len(chunk)), lens.long())
        block_ids = block_table[req_of_token.to(device), positions.to(device) // block_size]
        slot_mapping = block_ids * block_size + positions.to(device) % block_size
        common = CommonAttentionMetadata(
            query_start_loc=query_start_loc.to(device),
            query_start_loc_cpu=query_start_loc,
            seq_lens=seq_lens.to(device),
            num_reqs=len(chunk),
            num_actual_tokens=int(lens.sum()),
            max_query_len=int(lens.max()),
            max_seq_len=int(seq_lens.max()),
            block_table_tensor=block_table,
            slot_mapping=slot_mapping.long(),
            seq_lens_cpu_upper_bound=seq_lens,
        )
        target_ids = torch.from_numpy(_concat(tokens)).to(device=device, dtype=torch.int32)
        drafter.propose(
            num_speculative_tokens=0,
            target_token_ids=target_ids,
            target_positions=positions.to(device),
            target_hidden_states=torch.empty(0, device=device),
            next_token_ids=torch.tensor(next_ids, dtype=torch.int32, device=device),
            token_indices_to_sample=None,
            common_attn_metadata=common,
            sampling_metadata=sampling_metadata,
        )


def _concat(arrays: list[Any]) -> Any:
    import numpy as np

    return np.concatenate(arrays).astype(np.int32)


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
