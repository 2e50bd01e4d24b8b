"""Batch-size keys: which batch sizes share learned statistics.

The paper keeps one state per batch size (``exact``). With ``pow2`` a batch
size maps to the next power of two (1, 2, 4, 8, ...), so neighbouring batch
sizes share their samples (evidence: docs/benchmarks.md, "Regret").
"""

from __future__ import annotations

from collections.abc import Callable

BucketFn = Callable[[int], int]
SpanFn = Callable[[int], tuple[int, int]]
"""A key's batch sizes: ``(lo, hi)``, exactly those ``n`` with ``lo <= n <= hi`` share it."""


def exact_key(num_reqs: int) -> int:
    """One key per batch size (the paper's Algorithm 1)."""
    return num_reqs


def pow2_key(num_reqs: int) -> int:
    """Smallest power of two >= ``num_reqs``: 1, 2, 4, 4, 8, 8, 8, 8, 16, ..."""
    return 1 << (num_reqs - 1).bit_length()


def exact_span(key: int) -> tuple[int, int]:
    """The one batch size of an ``exact`` key."""
    return key, key


def pow2_span(key: int) -> tuple[int, int]:
    """The batch sizes of a ``pow2`` key: ``key // 2 + 1`` to ``key`` (1 for key 1)."""
    return key // 2 + 1, key


BUCKETINGS: dict[str, BucketFn] = {"exact": exact_key, "pow2": pow2_key}
BUCKET_SPANS: dict[str, SpanFn] = {"exact": exact_span, "pow2": pow2_span}
"""Per bucketing, its keys' spans: a range test replaces a key computation where only
"the same key as before?" is asked (the queue-aware lock, every queued step)."""


def bucket_span_fn(name: str) -> SpanFn:
    """The span function of the bucketing registered as ``name``."""
    bucket_fn(name)  # the same error for an unknown name
    return BUCKET_SPANS[name]


def bucket_fn(name: str) -> BucketFn:
    """The key function registered as ``name``."""
    try:
        return BUCKETINGS[name]
    except KeyError:
        raise ValueError(f"unknown bucketing {name!r}; choose from {sorted(BUCKETINGS)}") from None
