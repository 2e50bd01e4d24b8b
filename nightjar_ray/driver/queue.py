"""The batch size a queue will produce: what the queue-aware objective prices.

One rule for the engine and the simulator (pure Python). The queue is the requests in the
system that are not decoding yet: W waiting for a seat, and P admitted ones whose prompts
are still being prefilled in chunks and that will decode for a while
(:func:`joins_batch_ahead`; with long prompts and free seats, all of the backlog is
there). The batch grows as they reach decoding, until seats or KV blocks run out::

    B' = min(B + W + P, max_num_reqs, B * total_blocks / used_blocks)

with B the decoding requests and ``used_blocks / B`` the KV a running request holds now
(so B' is also what the KV cache would hold at today's request sizes). ``None`` when
nothing is queued or the queue cannot grow the batch (B' <= B): the policy then prices the
current batch (Eq. 4 at B).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_QUEUED_OUTPUT_TOKENS = 64
"""A request still prefilling counts toward B' only with at least this many output tokens
to come: one that emits a few tokens and leaves hardly adds to the batch that drains the
queue (measured: docs/benchmarks.md, "Workload suite (simulator)")."""


def joins_batch_ahead(num_output_tokens_to_come: int) -> bool:
    """Whether an admitted request still prefilling its prompt counts toward B'."""
    return num_output_tokens_to_come >= MIN_QUEUED_OUTPUT_TOKENS


@dataclass(frozen=True)
class QueueState:
    """What the scheduler already knows about its queue after scheduling a step."""

    num_waiting_reqs: int
    num_prefilling_reqs: int
    """Admitted requests not in the decode batch, their prompts still being prefilled,
    that :func:`joins_batch_ahead`."""
    max_num_reqs: int
    """Seats: the scheduler's cap on running requests (vLLM's ``max_num_seqs``)."""
    num_free_blocks: int
    num_total_blocks: int


def batch_ahead(num_reqs: int, queue: QueueState | None) -> int | None:
    """B' of the module docstring for a step with ``num_reqs`` decoding requests."""
    if queue is None or num_reqs < 1:
        return None
    num_queued = queue.num_waiting_reqs + queue.num_prefilling_reqs
    if num_queued <= 0:
        return None
    ahead = min(num_reqs + num_queued, queue.max_num_reqs)
    num_used = queue.num_total_blocks - queue.num_free_blocks
    if num_used > 0:
        ahead = min(ahead, num_reqs * queue.num_total_blocks // num_used)
    return ahead if ahead > num_reqs else None
