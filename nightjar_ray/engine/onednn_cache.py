"""A bound on oneDNN's primitive cache in CPU workers, so their memory stays flat.

On CPU, vLLM runs every linear layer through a oneDNN matmul handle
(``dispatch_cpu_unquantized_gemm``). oneDNN builds one primitive (JIT code and
descriptors) per distinct input row count M, i.e. per distinct number of tokens
in a forward pass, and keeps it in two caches::

    per layer handle (vLLM)          process-wide (oneDNN)
    +----------------------+         +--------------------------------------+
    | LRU, 32 M sizes      |  ---->  | LRU, ONEDNN_PRIMITIVE_CACHE_CAPACITY  |
    +----------------------+         | entries (oneDNN default 1024), keyed |
                                     | by (M, K, N): layers of one shape    |
                                     | share an entry                       |
                                     +--------------------------------------+

A serving worker meets new token counts for hours (prompt lengths, batch sizes
and, with speculation, 1 + gamma tokens per request), so the process-wide cache
grows toward its capacity with entries of about half a megabyte each (default pair):
the worker's resident memory grows with the distinct shapes it has served. Without the
process-wide cache the per-layer caches still hold each layer's recent sizes, and
a size that fell out of them is built again on its next use. Evidence:
docs/benchmarks.md, "Worker memory growth: oneDNN's primitive cache".

The worker sets :data:`ONEDNN_CACHE_ENV` before the model loads (oneDNN reads it
once, when it creates its first primitive) unless the deployment set it, e.g. in
``runtime_env.env_vars``. GPU workers do not run linear layers through oneDNN;
the setting costs them nothing.
"""

from __future__ import annotations

from collections.abc import MutableMapping

ONEDNN_CACHE_ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
"""oneDNN's environment variable for its process-wide primitive cache (entries)."""

DEFAULT_ONEDNN_CACHE_CAPACITY = 0
"""Entries kept when the deployment does not say (oneDNN's own default is 1024): 0, no
process-wide cache; each layer handle's own cache of 32 sizes remains."""


def bound_onednn_cache(environ: MutableMapping[str, str]) -> int:
    """Set the primitive cache capacity in ``environ`` unless it is set already.

    Returns the capacity in effect. Raises ``ValueError`` when a value the
    deployment set is not a non-negative integer (oneDNN would ignore it).
    """
    raw = environ.setdefault(ONEDNN_CACHE_ENV, str(DEFAULT_ONEDNN_CACHE_CAPACITY))
    try:
        capacity = int(raw)
    except ValueError:
        capacity = -1
    if capacity < 0:
        raise ValueError(f"{ONEDNN_CACHE_ENV} must be a non-negative integer, got {raw!r}")
    return capacity
