"""Draft forwards over part of a step's batch: hand-built spans of positions.

vLLM's drafter runs over the whole batch the target ran. Two draft passes here run
over chosen requests only, each as a batch of position spans, one per request::

    catch-up   (K = 0)  span [stale_from, start) of each lagging request; the tokens
                        come from the request's token ids
    proposal   (K > 0)  span [start, start + valid) of each drafted request: this
                        step's input tokens minus its rejected drafts; next token =
                        the token the target sampled after them

Both call vLLM's ``propose`` (``llm_base_proposer.py``) with the same first pass it
runs itself: for the ``draft_model`` method ``set_inputs_first_pass`` appends each
request's next token after its span (one extra slot), and the K - 1 decode passes
follow. :func:`span_attention_metadata` builds the ``CommonAttentionMetadata`` of such a
batch from the step's block table, so KV layout and slot mapping are vLLM's.

A request left out writes nothing to the draft KV cache and costs no draft compute;
its draft row holds zeros (the scheduler gives it no drafts to verify).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from vllm.v1.attention.backend import CommonAttentionMetadata

from nightjar_ray.engine.lag import CatchUpSpan

Span = tuple[int, int]
"""Positions ``[start_pos, end_pos)`` of one request."""


def span_attention_metadata(
    block_table: torch.Tensor,
    rows: Sequence[int],
    spans: Sequence[Span],
    block_size: int,
    device: torch.device,
) -> tuple[CommonAttentionMetadata, torch.Tensor]:
    """Attention metadata of a batch whose request ``i`` (row ``rows[i]`` of the
    step's ``block_table``) computes positions ``spans[i]`` as its query; and those
    positions, concatenated, on ``device``."""
    positions = torch.cat([torch.arange(start, end) for start, end in spans])
    lens = torch.tensor([end - start for start, end in spans], dtype=torch.int32)
    query_start_loc = torch.zeros(len(spans) + 1, dtype=torch.int32)
    torch.cumsum(lens, 0, out=query_start_loc[1:])
    seq_lens = torch.tensor([end for _, end in spans], dtype=torch.int32)
    table = block_table[torch.tensor(rows, device=device)]
    req_of_token = torch.repeat_interleave(torch.arange(len(spans)), lens.long()).to(device)
    positions = positions.to(device)
    block_ids = table[req_of_token, positions // block_size]
    slot_mapping = block_ids * block_size + positions % block_size
    common = CommonAttentionMetadata(
        query_start_loc=query_start_loc.to(device),
        query_start_loc_cpu=query_start_loc,
        seq_lens=seq_lens.to(device),
        num_reqs=len(spans),
        num_actual_tokens=int(lens.sum()),
        max_query_len=int(lens.max()),
        max_seq_len=int(seq_lens.max()),
        block_table_tensor=table,
        slot_mapping=slot_mapping.long(),
        # NOTE: a copy: on CPU ``.to(device)`` aliases, and the decode passes advance
        # seq_lens and this bound each in place.
        seq_lens_cpu_upper_bound=seq_lens.clone(),
    )
    return common, positions


def catch_up_forward(
    runner: Any, chunk: Sequence[CatchUpSpan], sampling_metadata: Any, cad: Any
) -> None:
    """One draft-only forward (K = 0) over ``chunk`` (at most one span per request,
    fitting the drafter's buffers); tokens from the requests' token ids."""
    drafter, batch, device = runner.drafter, runner.input_batch, runner.device
    rows = [batch.req_id_to_index[s.req_id] for s in chunk]
    pairs = list(zip(rows, chunk, strict=True))
    tokens = [batch.token_ids_cpu[r, s.start_pos : s.end_pos] for r, s in pairs]
    next_ids = [int(batch.token_ids_cpu[r, s.end_pos]) for r, s in pairs]
    spans = [(s.start_pos, s.end_pos) for s in chunk]
    common, positions = span_attention_metadata(
        cad.block_table_tensor, rows, spans, drafter.block_size, device
    )
    drafter.propose(
        num_speculative_tokens=0,
        target_token_ids=torch.from_numpy(np.concatenate(tokens).astype(np.int32)).to(device),
        target_positions=positions,
        target_hidden_states=torch.empty(0, device=device),
        next_token_ids=torch.tensor(next_ids, dtype=torch.int32, device=device),
        token_indices_to_sample=None,
        common_attn_metadata=common,
        sampling_metadata=sampling_metadata,
    )


def propose_for(
    runner: Any,
    scheduler_output: Any,
    starts: Mapping[str, int],
    step_args: Sequence[Any],
) -> torch.Tensor:
    """Drafts ``[num_reqs, K]`` proposed for the requests in ``starts`` (req_id ->
    tokens computed before the step) only, with the step's K; the other rows are
    zeros. ``step_args``: ``propose_draft_token_ids``' arguments after the scheduler
    output (sampled token ids, sampling metadata, ..., common attention metadata)."""
    sampled, sampling_metadata, cad = step_args[0], step_args[1], step_args[6]
    drafter, batch, device = runner.drafter, runner.input_batch, runner.device
    next_ids, valid_counts = drafter.prepare_next_token_ids_padded(
        sampled, runner.requests, batch, runner.discard_request_mask.gpu
    )
    runner._copy_valid_sampled_token_count(next_ids, valid_counts)
    k = scheduler_output.num_spec_tokens_to_schedule
    out = torch.zeros((batch.num_reqs, k), dtype=torch.int64, device=device)
    if not starts:
        return out
    rows = torch.tensor([batch.req_id_to_index[req_id] for req_id in starts], device=device)
    lens = _valid_query_lens(scheduler_output, list(starts), valid_counts[rows].tolist())
    spans = [(start, start + n) for start, n in zip(starts.values(), lens, strict=True)]
    common, positions = span_attention_metadata(
        cad.block_table_tensor, rows.tolist(), spans, drafter.block_size, device
    )
    offsets = cad.query_start_loc_cpu[rows.cpu()].tolist()
    index = torch.cat([torch.arange(o, o + n) for o, n in zip(offsets, lens, strict=True)])
    drafts = drafter.propose(
        num_speculative_tokens=k,
        target_token_ids=runner.input_ids.gpu[index.to(device)],
        target_positions=positions,
        target_hidden_states=torch.empty(0, device=device),
        next_token_ids=next_ids[rows],
        token_indices_to_sample=None,
        common_attn_metadata=common,
        sampling_metadata=_rows_of(sampling_metadata, rows),
    )
    out[rows] = drafts.to(out.dtype)
    _keep_draft_probs(runner, list(starts))
    return out


def _valid_query_lens(
    scheduler_output: Any, req_ids: Sequence[str], valid_counts: Sequence[int]
) -> list[int]:
    """Per request, this step's input tokens that stay: all of a prompt chunk or a
    decode without drafts; of a decode that verified drafts, the ``valid`` ones
    (its input token and the accepted drafts), as vLLM's ``prepare_inputs_padded``."""
    num_scheduled = scheduler_output.num_scheduled_tokens
    spec = scheduler_output.scheduled_spec_decode_tokens
    lens = []
    for req_id, valid in zip(req_ids, valid_counts, strict=True):
        num_draft = len(spec.get(req_id, ()))
        rejected = num_draft + 1 - valid if num_draft > 0 else 0
        lens.append(num_scheduled[req_id] - rejected)
    return lens


def _rows_of(sampling_metadata: Any, rows: torch.Tensor) -> Any:
    """The sampling metadata of ``rows``: the drafter reads only ``temperature`` (and
    the batch-wide ``all_greedy``/``all_random``, true of any subset if of the whole)."""
    temperature = getattr(sampling_metadata, "temperature", None)
    if temperature is None:
        return sampling_metadata
    return dataclasses.replace(sampling_metadata, temperature=temperature[rows])


def _keep_draft_probs(runner: Any, req_ids: list[str]) -> None:
    """Probabilistic draft sampling: hand the drafted rows' probabilities to the
    runner's rejection sampler, keyed by req_id as vLLM's own propose does (requests
    without drafts are never looked up)."""
    take = getattr(runner.drafter, "take_last_draft_probs", None)
    probs = take() if take is not None else None
    if probs is not None:
        runner._draft_probs = probs
        runner._draft_prob_req_ids = req_ids
