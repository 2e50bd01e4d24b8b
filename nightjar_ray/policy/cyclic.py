"""``cyclic``: a forced, load-blind schedule of gammas (tests and profiling).

Plays ``gammas[0]`` for ``steps_per_gamma`` consecutive steps, then
``gammas[1]``, ... and wraps around. It learns nothing; it exists to drive
the engine through known switch patterns (e.g. 0/3 alternation for the
lossless and catch-up tests, 0 then 1 for the switch-cost profiler).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from nightjar_ray.policy.base import validate_context
from nightjar_ray.policy.config import PolicyConfig
from nightjar_ray.policy.static import _StatelessPolicy


class CyclicPolicyConfig(PolicyConfig):
    """A fixed cycle of gammas."""

    gammas: list[int] = Field(
        default_factory=lambda: [0, 3], min_length=1, description="Gammas played in turn."
    )
    steps_per_gamma: int = Field(4, ge=1, description="Consecutive steps per entry.")

    @model_validator(mode="after")
    def _gammas_in_range(self) -> CyclicPolicyConfig:
        bad = [g for g in self.gammas if not 0 <= g <= self.gamma_max]
        if bad:
            raise ValueError(f"gammas {bad} outside [0, gamma_max={self.gamma_max}]")
        return self


class CyclicPolicy(_StatelessPolicy):
    """Plays the configured cycle, one step per ``choose``."""

    name = "cyclic"

    def __init__(self, config: CyclicPolicyConfig) -> None:
        super().__init__(config.gamma_max)
        self._gammas = tuple(config.gammas)
        self._steps = config.steps_per_gamma
        self._t = 0

    def choose(self, num_reqs: int, max_skip_tokens: int) -> int:
        validate_context(num_reqs, max_skip_tokens)
        gamma = self._gammas[(self._t // self._steps) % len(self._gammas)]
        self._t += 1
        return gamma

    def local_state(self) -> dict[str, Any]:
        return {"t": self._t}

    def load_local_state(self, state: dict[str, Any]) -> None:
        self._t = int(state.get("t", 0))
