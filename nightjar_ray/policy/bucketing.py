"""Batch-size keys: which batch sizes share learned statistics.

The paper keeps one state per batch size (``exact``). With ``pow2`` a batch
size maps to the next power of two (1, 2, 4, 8, ...), so neighbouring batch
sizes share their samples (evidence: docs/benchmarks.md, "Regret").
"""

from __future__ import annotations

from collections.abc import Callable

BucketFn = Callable[[int], int]


def exact_key(num_reqs: int) -> int:
    """One key per batch size (the paper's Algorithm 1)."""
    return num_reqs


def pow2_key(num_reqs: int) -> int:
    """Smallest power of two >= ``num_reqs``: 1, 2, 4, 4, 8, 8, 8, 8, 16, ..."""
    return 1 << (num_reqs - 1).bit_length()


BUCKETINGS: dict[str, BucketFn] = {"exact": exact_key, "pow2": pow2_key}


def bucket_fn(name: str) -> BucketFn:
    """The key function registered as ``name``."""
    try:
        return BUCKETINGS[name]
    except KeyError:
        raise ValueError(f"unknown bucketing {name!r}; choose from {sorted(BUCKETINGS)}") from None
