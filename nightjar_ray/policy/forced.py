"""A forced, load-blind schedule of gammas: the testing seam of the engine.

Plays ``gammas[0]`` for ``steps_per_gamma`` consecutive steps, then ``gammas[1]``, ...
and wraps around. It learns nothing and is not a product policy (no registry name): the
engine builds it from ``NightjarConfig.testing.forced_gammas`` to drive known switch
patterns (0/3 alternation for the lossless and catch-up tests, 0 then 1 for the
switch-cost profiler).

>>> policy = ForcedSchedulePolicy([0, 3], steps_per_gamma=2, gamma_max=3)
>>> [policy.choose(1, 0) for _ in range(5)]
[0, 0, 3, 3, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nightjar_ray.policy.base import validate_context
from nightjar_ray.policy.static import _StatelessPolicy


class ForcedSchedulePolicy(_StatelessPolicy):
    """Plays the given cycle, one step per ``choose``."""

    name = "forced"

    def __init__(self, gammas: Sequence[int], steps_per_gamma: int, gamma_max: int) -> None:
        bad = [g for g in gammas if not 0 <= g <= gamma_max]
        if not gammas or bad:
            raise ValueError(f"gammas {list(gammas)} must be non-empty, in [0, {gamma_max}]")
        if steps_per_gamma < 1:
            raise ValueError(f"steps_per_gamma must be >= 1, got {steps_per_gamma}")
        super().__init__(gamma_max)
        self._gammas = tuple(gammas)
        self._steps = steps_per_gamma
        self._t = 0

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        validate_context(num_reqs, max_skip_tokens)
        gamma = self._gammas[(self._t // self._steps) % len(self._gammas)]
        self._t += 1
        return gamma

    def local_state(self) -> dict[str, Any]:
        return {"t": self._t}

    def load_local_state(self, state: dict[str, Any]) -> None:
        self._t = int(state.get("t", 0))
