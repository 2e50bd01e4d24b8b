"""§6.3 Step 2: the migration plan of a contraction.

::

    ids:  0 ............................ K_boundary ............ K_total
          [ kept: free ids are targets  ][ region: live ids move down ]
                         ^----------------------- src -> dst ------'

Every live block at or above ``K_boundary`` gets its own free block below it; if there
are not enough, there is no plan (the caller does not contract and retries later).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def plan_migration(
    live_block_ids: Iterable[int], free_block_ids: Sequence[int], boundary: int
) -> dict[int, int] | None:
    """One-to-one ``{src: dst}`` for every live id >= ``boundary``, or ``None`` when the
    free ids below ``boundary`` are too few. Sources keep their order of appearance
    (duplicates, e.g. a prefix block shared by two requests, move once); destinations
    are taken in the order of ``free_block_ids``."""
    if boundary < 0:
        raise ValueError(f"boundary must be >= 0, got {boundary}")
    sources = list(dict.fromkeys(b for b in live_block_ids if b >= boundary))
    targets = [b for b in free_block_ids if b < boundary]
    if len(targets) < len(sources):
        return None
    return dict(zip(sources, targets, strict=False))
