"""Nightjar's metrics: what the engine counts, and their Prometheus definitions.

- ``telemetry``: plain counters the scheduler's step loop bumps (pure Python,
  no locks on the hot path) and :class:`LoadSnapshot`, the queue depth and
  free-block counts the memory triggers read and the metrics export.
- ``definitions``: every ``nightjar_*`` metric (name, kind, unit, labels) in one
  table, read by the exporter, the docs and the tests.
- ``ray_export``: publishes telemetry through Ray's metrics pipeline
  (``ray.util.metrics``), next to vLLM's ``ray_vllm_*``.
"""
