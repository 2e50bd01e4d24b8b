"""Step-level environments: what a decoding step of (B, gamma) costs and yields.

These are the policy's view of an engine, with no queueing: the caller picks
the batch size of every step. They serve policy tests (stationary,
known-optimum environments) and the policy benchmarks under ``benchmarks/``.
The discrete-event simulator (``server.py``: queues, KV blocks, arrivals) is separate.

``measured_cpu_env`` replays the step throughput measured with vLLM 0.32 on a
2-core CPU with the generated s=0.05 target/draft pair (``models/pair.py``): tok/s
per batch size and gamma, and per-gamma acceptance. Between measured batch sizes
the throughput is interpolated linearly in log(B); outside it is clamped.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from nightjar_ray.policy.base import StepResult

LatencyFn = Callable[[int, int], float]
"""(num_reqs, gamma) -> expected seconds per emitted token."""

# NOTE: output tok/s of offline vLLM 0.32 runs, 128 output tokens per request, greedy.
CPU_S005_BATCHES = (1, 4, 16, 48)
CPU_S005_TOKENS_PER_S = {
    0: (143.0, 465.0, 1119.0, 1580.0),
    1: (151.0, 531.0, 927.0, 1256.0),
    2: (172.0, 504.0, 836.0, 1041.0),
    3: (166.0, 454.0, 692.0, 906.0),
    4: (152.0, 416.0, 616.0, 758.0),
}
CPU_S005_ACCEPTANCE = {0: 0.0, 1: 0.57, 2: 0.44, 3: 0.35, 4: 0.29}


@dataclass(frozen=True)
class StationaryEnv:
    """Latency per token per (B, gamma) with multiplicative log-normal noise.

    A step of ``B`` requests at ``gamma`` emits accepted runs drawn per request
    (each draft position accepted with probability ``acceptance[gamma]`` until the
    first rejection) plus one bonus token each. Its duration does not depend on
    what was accepted, as on a real engine: ``E[tokens] * latency(B, gamma) * noise``,
    so the long-run latency per token is ``latency(B, gamma)`` while a single step's
    ``duration / tokens`` varies with its draw. Re-enabling speculation after a
    gamma=0 step adds ``switch_cost_s(L_max, B)`` to the step (the draft catch-up).
    """

    latency_per_token_s: LatencyFn
    acceptance: Mapping[int, float]
    noise_sigma: float = 0.05
    switch_cost_s: Callable[[int, int], float] = field(default=lambda _l, _b: 0.0)

    def step(
        self, num_reqs: int, gamma: int, prev_gamma: int, max_skip_tokens: int, rng: random.Random
    ) -> StepResult:
        """Run one step and return what an engine would report."""
        alpha = self.acceptance.get(gamma, 0.0)
        accepted = sum(_accepted_run(gamma, alpha, rng) for _ in range(num_reqs))
        num_tokens = num_reqs + accepted
        expected = num_reqs * (1.0 + expected_accepted(gamma, alpha))
        duration = expected * self.latency_per_token_s(num_reqs, gamma)
        duration *= math.exp(rng.gauss(0.0, self.noise_sigma))
        if prev_gamma == 0 and gamma > 0:
            duration += self.switch_cost_s(max_skip_tokens, num_reqs)
        return StepResult(num_reqs, gamma, num_tokens, duration, num_reqs * gamma, accepted)

    def expected_latency(self, num_reqs: int, gamma: int) -> float:
        """Noise-free latency per token (the noise has median 1)."""
        return self.latency_per_token_s(num_reqs, gamma)

    def best_gamma(self, num_reqs: int, gamma_max: int) -> int:
        """Arm with the lowest expected latency per token at ``num_reqs``."""
        return min(range(gamma_max + 1), key=lambda g: self.expected_latency(num_reqs, g))


def _accepted_run(gamma: int, alpha: float, rng: random.Random) -> int:
    """Accepted drafts of one request: the run of successes before the first rejection."""
    n = 0
    while n < gamma and rng.random() < alpha:
        n += 1
    return n


def expected_accepted(gamma: int, alpha: float) -> float:
    """E[accepted drafts] of ``_accepted_run``: alpha + alpha^2 + ... + alpha^gamma."""
    return sum(alpha**i for i in range(1, gamma + 1))


def _interp_log(xs: Sequence[int], ys: Sequence[float], x: int) -> float:
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    hi = bisect.bisect_right(xs, x)
    lo = hi - 1
    w = (math.log(x) - math.log(xs[lo])) / (math.log(xs[hi]) - math.log(xs[lo]))
    return ys[lo] + (ys[hi] - ys[lo]) * w


def table_env(
    batches: Sequence[int],
    tokens_per_s: Mapping[int, Sequence[float]],
    acceptance: Mapping[int, float],
    noise_sigma: float = 0.05,
) -> StationaryEnv:
    """Environment from measured throughput ``tokens_per_s[gamma][i]`` at ``batches[i]``."""

    def latency(num_reqs: int, gamma: int) -> float:
        return 1.0 / _interp_log(batches, tokens_per_s[gamma], num_reqs)

    return StationaryEnv(latency, acceptance, noise_sigma)


def measured_cpu_env(noise_sigma: float = 0.05) -> StationaryEnv:
    """The s=0.05 CPU measurements (best gamma: 2 at B=1, 1 at B=4, 0 from B=16)."""
    return table_env(CPU_S005_BATCHES, CPU_S005_TOKENS_PER_S, CPU_S005_ACCEPTANCE, noise_sigma)
