"""Worker side of a contraction: move KV pages and remap every persistent block table.

The scheduler sends the moves ``{src: dst}`` of a contraction on the step's
``SchedulerOutput`` (the ``MemoryEvent`` of its ``StepMessage``, ``engine/messages.py``).
Before that step's forward pass, every rank (the same code under the mp and the Ray executor) does::

    1. copy each arena layer's page src -> dst (kernels.BLOCK_MOVERS, one call)
    2. rewrite ids in the persistent batch     (InputBatch.block_table, numpy rows)
       and in every cached request's block_ids (rows rebuilt from them later)

NOTE: the scheduler already uses the new ids in this step's ``new_block_ids``; step 2
must run before vLLM's ``_update_states`` appends them, i.e. first in ``execute_model``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nightjar_ray.memory.arena import KVArena
from nightjar_ray.memory.kernels import BlockMover, PageLayout


def remap_block_tables(model_runner: Any, moves: Mapping[int, int]) -> int:
    """Rewrite ``src`` ids as ``dst`` in the persistent batch and the cached request
    states; returns how many table entries changed."""
    if not moves:
        return 0
    lut = np.arange(max(*moves, *moves.values()) + 1, dtype=np.int64)
    lut[list(moves)] = list(moves.values())
    changed = 0
    for table in model_runner.input_batch.block_table.block_tables:
        rows = table.block_table.np
        inside = rows < len(lut)
        remapped = np.where(inside, lut[np.where(inside, rows, 0)], rows)
        changed += int(np.count_nonzero(remapped != rows))
        rows[...] = remapped
    for state in model_runner.requests.values():
        state.block_ids = tuple([moves.get(b, b) for b in group] for group in state.block_ids)
    return changed


def apply_block_moves(
    model_runner: Any,
    mover: BlockMover,
    arena: KVArena,
    moves: Mapping[int, int],
    layers: Sequence[int] | None = None,
    *,
    remap: bool = True,
) -> int:
    """Steps 1 and 2 of the module docstring on this rank; returns changed table entries.
    ``layers``: move only these arena layers (default: all); ``remap=False`` skips step 2
    (``TestingConfig.fault_wrong_block_remap``)."""
    if not moves:
        return 0
    layout = arena.layout
    if layers is not None:
        layout = PageLayout(
            tuple(layout.layer_offsets_bytes[i] for i in layers),
            tuple(layout.page_bytes[i] for i in layers),
        )
    mover(layout, arena.buffer, moves)
    return remap_block_tables(model_runner, moves) if remap else 0
