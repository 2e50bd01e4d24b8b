"""Checks of the cost model against the paper (Table 1, Table 3) and a C_switch profile.

* ``kv_table``: KV bytes for a context (Table 1 is target-only, MiB).
* ``switch_cost_ms``: C_switch(L, B) = the draft's prefill of B requests x L lagging tokens
  (T_SD - T_base in the paper's profiling), on the simulated hardware.
* ``simulated_switch_cost``: a SwitchCostTable over a grid, the profile Nightjar uses in the
  simulator (what ``nightjar-ray profile-switch-cost`` produces on real hardware).
* ``token_latency``: expected seconds per emitted token at batch size B and gamma
  (steady decode, equal contexts): the per-step economics behind Fig. 1/2.
"""

from __future__ import annotations

from nightjar_ray.policy.switch_cost import SwitchCostTable
from nightjar_ray.sim.acceptance import AcceptanceProfile
from nightjar_ray.sim.hardware import MIB, ModelShape
from nightjar_ray.sim.presets import Setting
from nightjar_ray.sim.roofline import Roofline, decode_batch, draft_step_batch, prefill_batch

PAPER_TABLE1_MIB = {  # context tokens -> (Vicuna-13B, DeepSeek-R1-Distill-Qwen-7B)
    1024: (800, 56),
    4096: (3200, 224),
    8192: (6400, 448),
    32768: (25600, 1792),
}
PAPER_TABLE3_MS = {
    (128, 32): 17.87,
    (128, 64): 28.53,
    (256, 32): 20.65,
    (256, 64): 22.33,
    (512, 32): 24.30,
    (512, 64): 102.03,
}
SKIP_GRID = (16, 32, 64, 128, 256, 512, 1024)
BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def kv_mib(model: ModelShape, num_tokens: int) -> float:
    """KV cache of one sequence of ``num_tokens`` tokens, MiB."""
    return model.kv_bytes_per_token * num_tokens / MIB


def _draft_roofline(setting: Setting) -> Roofline:
    return Roofline(setting.hw, setting.draft, setting.tp, setting.overheads)


def switch_cost_ms(setting: Setting, skip_tokens: int, num_reqs: int) -> float:
    """Draft catch-up of ``num_reqs`` requests lagging ``skip_tokens`` tokens, in ms."""
    draft = _draft_roofline(setting)
    return 1e3 * draft.forward_s(prefill_batch(num_reqs, skip_tokens))


def simulated_switch_cost(setting: Setting) -> SwitchCostTable:
    """C_switch profile of ``setting`` on (SKIP_GRID x BATCH_GRID)."""
    rows = [(s, b, switch_cost_ms(setting, s, b)) for s in SKIP_GRID for b in BATCH_GRID]
    return SwitchCostTable.from_rows(rows)


def token_latency_s(
    setting: Setting, num_reqs: int, gamma: int, context_tokens: int, acc: AcceptanceProfile
) -> float:
    """Expected seconds per emitted token of a steady decode step (no prefill, no lag)."""
    target = Roofline(setting.hw, setting.target, setting.tp, setting.overheads)
    step = setting.overheads.step_overhead_s + target.forward_s(
        decode_batch(num_reqs, context_tokens, gamma)
    )
    if gamma > 0:
        draft = _draft_roofline(setting)
        step += setting.overheads.spec_step_overhead_s
        step += sum(
            draft.forward_s(draft_step_batch(num_reqs, context_tokens + i)) for i in range(gamma)
        )
    return step / (num_reqs * (1.0 + acc.expected_accepted(gamma)))
