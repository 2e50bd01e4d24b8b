"""The batch size a waiting queue will produce: what the queue-aware objective prices.

One rule for the engine and the simulator (pure Python). While requests wait, the
batch grows as they are admitted, until seats or KV blocks run out::

    B' = min(B + W, max_num_reqs, B * total_blocks / used_blocks)

with B the decoding requests, W the waiting ones and ``used_blocks / B`` the KV a running
request holds now (so B' is also what the KV cache would hold at today's request sizes).
``None`` when nothing waits or the queue cannot grow the batch (B' <= B): the policy then
prices the current batch (Eq. 4 at B).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueueState:
    """What the scheduler already knows about its queue after scheduling a step."""

    num_waiting_reqs: int
    max_num_reqs: int
    """Seats: the scheduler's cap on running requests (vLLM's ``max_num_seqs``)."""
    num_free_blocks: int
    num_total_blocks: int


def batch_ahead(num_reqs: int, queue: QueueState | None) -> int | None:
    """B' of the module docstring for a step with ``num_reqs`` decoding requests."""
    if queue is None or queue.num_waiting_reqs <= 0 or num_reqs < 1:
        return None
    ahead = min(num_reqs + queue.num_waiting_reqs, queue.max_num_reqs)
    num_used = queue.num_total_blocks - queue.num_free_blocks
    if num_used > 0:
        ahead = min(ahead, num_reqs * queue.num_total_blocks // num_used)
    return ahead if ahead > num_reqs else None
