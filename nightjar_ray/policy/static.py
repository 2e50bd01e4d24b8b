"""Policies that learn nothing: ``fixed``, ``off`` and ``vllm-static``."""

from __future__ import annotations

from nightjar_ray.policy.base import Policy, StepResult, validate_context, validate_result
from nightjar_ray.policy.config import (
    FixedPolicyConfig,
    OffPolicyConfig,
    VllmStaticPolicyConfig,
)
from nightjar_ray.policy.stats import PolicyStats


class _StatelessPolicy(Policy):
    """Shared plumbing: validate results, export empty statistics."""

    def __init__(self, gamma_max: int) -> None:
        self._gamma_max = gamma_max

    @property
    def gamma_max(self) -> int:
        return self._gamma_max

    def observe(self, result: StepResult) -> None:
        validate_result(result, self._gamma_max)

    def export_stats(self) -> PolicyStats:
        return PolicyStats(self.name)

    def load_stats(self, stats: PolicyStats) -> None:
        self.check_stats_owner(stats)


class FixedPolicy(_StatelessPolicy):
    """Plays the configured gamma on every step (standard SD)."""

    name = "fixed"

    def __init__(self, config: FixedPolicyConfig) -> None:
        super().__init__(config.gamma_max)
        self._gamma = config.gamma

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        validate_context(num_reqs, max_skip_tokens)
        return self._gamma


class OffPolicy(_StatelessPolicy):
    """Speculation off: gamma = 0 on every step (plain decoding)."""

    name = "off"

    def __init__(self, config: OffPolicyConfig) -> None:
        super().__init__(config.gamma_max)

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        validate_context(num_reqs, max_skip_tokens)
        return 0


class VllmStaticPolicy(_StatelessPolicy):
    """vLLM's ``num_speculative_tokens_per_batch_size`` semantics.

    Entries ``[bs_lo, bs_hi, k]`` map batch sizes in ``[bs_lo, bs_hi]`` to
    ``min(k, num_speculative_tokens)`` (here ``gamma_max``). A batch size in a
    gap between ranges takes the k of the range below it; one above the last
    range takes the last k (vLLM's ``build_dynamic_sd_schedule_lookup``). In
    vLLM the batch size is the number of scheduled requests, prefills included;
    the caller decides what it passes as ``num_reqs``.
    """

    name = "vllm-static"

    def __init__(self, config: VllmStaticPolicyConfig) -> None:
        super().__init__(config.gamma_max)
        self._table = [
            (lo, hi, min(k, config.gamma_max))
            for lo, hi, k in config.num_speculative_tokens_per_batch_size
        ]

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        validate_context(num_reqs, max_skip_tokens)
        gamma = self._table[0][2]
        for lo, _hi, k in self._table:
            if num_reqs < lo:
                break
            gamma = k
        return gamma
