"""The step driver: one per-step loop around a policy, shared by the engine and the simulator.

::

    step_driver   StepDriver: B, gamma (policy + draft gate), decisions, observation
    step          StepBatch, Choice, StepDecision: what one step is to the driver
    observation   ObservationRule: which steps the policy learns from, with what time
    draft_gate    DraftGate: whether a step's speculation pays for the draft work it owes

Pure Python: no vLLM, Ray or torch; the clock is passed in.
"""

from nightjar_ray.driver.step import Choice, StepBatch, StepDecision
from nightjar_ray.driver.step_driver import StepDriver

__all__ = ["Choice", "StepBatch", "StepDecision", "StepDriver"]
