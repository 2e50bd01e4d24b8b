"""Elastic memory for the draft model: the engine's §6.1 triggers
(:class:`~nightjar_ray.memory.triggers.ElasticTriggers`) and the paper's §6.2-6.4 costs.

::

    RESIDENT --(SD disabled or outvalued, N_free < tau_low for T_persist steps)--> OFFLOADED
        expand the block pool by N_draft blocks; the engine stalls ``expand_stall_s``
    OFFLOADED --(|Q_wait| = 0 and N_free > N_draft + tau_low
                 for contract_persist_steps steps)--> RELOADING
        contract: migrate live blocks above K_boundary (stall = fixed + bytes*2 / HBM BW),
        then copy S_draft host->device asynchronously (S_draft / PCIe BW, no stall)
    RELOADING --(copy done)--> RESIDENT

While the draft is not resident the engine plays gamma = 0 without asking the policy.

What an offload frees (``ElasticParams.reclaim_draft_kv``)::

    one KV block (16 tokens), draft resident:  [ target KV | draft KV ]
    paper (weights only):   N_draft = ceil(S_draft / B_block) new blocks; every block
                            keeps its draft share, unused while the draft is away
    reclaim_draft_kv=True:  the draft layers' KV tensors are freed too and the target
                            layers' tensors grow: N_reclaim new blocks, as many tokens as
                            a deployment without a draft (``off``) holds. The drafter's KV
                            of every live request is dropped, so after the reload its
                            catch-up re-prefills the whole context (a larger C_switch).
"SD disabled" is decided by the caller (``ServerOptions.offload_trigger``): the last step
played gamma = 0, or, stricter, the planner *chose* gamma = 0 (not an exploration probe).
"""

from __future__ import annotations

from dataclasses import dataclass

from nightjar_ray.memory.triggers import (
    DraftResidency,
    ElasticTriggers,
    MemoryAction,
    MemoryView,
    TriggerConfig,
)
from nightjar_ray.sim.hardware import MemoryPlan
from nightjar_ray.sim.kv_pool import BlockPool

DraftState = DraftResidency
"""The engine's residency states (``nightjar_ray.memory.triggers``)."""


@dataclass(frozen=True)
class ElasticParams:
    """Trigger thresholds and operation costs."""

    tau_low_blocks: int
    """Critical scarcity threshold tau_low (blocks)."""
    persist_steps: int
    """T_persist: consecutive scheduling steps the scarcity must last."""
    expand_stall_s: float
    contract_fixed_s: float
    reload_s: float
    """S_draft / PCIe bandwidth."""
    migrate_s_per_block: float
    """Read + write of one block through HBM."""
    contract_persist_steps: int = 1
    """Consecutive steps the contraction condition must hold (1 = the paper: at once)."""
    reclaim_draft_kv: bool = False
    """Also free the draft's per-block KV share on offload (see module docstring)."""
    offload_outvalued: bool = False
    """An outvalued draft (``memory/triggers.py: draft_outvalued``) counts as off for the
    offload trigger, as the engine's ``elastic_memory.offload_outvalued``; False: the
    paper's condition (1) alone."""


@dataclass(frozen=True)
class MemoryEvent:
    """One elastic-memory transition, for the timeline."""

    time_s: float
    kind: str
    """'expand' (offload draft), 'contract' (start reload) or 'reloaded'."""
    num_blocks: int
    num_migrated_blocks: int = 0


class ElasticMemory:
    """Drives ``pool`` capacity between N_orig and N_scale (see module docstring)."""

    def __init__(self, params: ElasticParams, plan: MemoryPlan, pool: BlockPool) -> None:
        self.params = params
        self.plan = plan
        self.pool = pool
        self.state = DraftState.RESIDENT
        self.ready_s = 0.0
        self.events: list[MemoryEvent] = []
        self.num_offload_blocks = (
            plan.num_reclaim_blocks if params.reclaim_draft_kv else plan.num_draft_blocks
        )
        """Blocks an offload adds to the block pool and a reload takes back."""
        self.triggers = ElasticTriggers(
            TriggerConfig(
                tau_low_blocks=params.tau_low_blocks,
                num_region_blocks=self.num_offload_blocks,
                expand_persist_steps=params.persist_steps,
                contract_persist_steps=params.contract_persist_steps,
            )
        )

    def draft_available(self, now_s: float) -> bool:
        """Whether a step starting at ``now_s`` may speculate."""
        if self.state is DraftState.RELOADING and now_s >= self.ready_s:
            self.state = DraftState.RESIDENT
            self.events.append(MemoryEvent(self.ready_s, "reloaded", 0))
        return self.state is DraftState.RESIDENT

    def after_step(
        self, now_s: float, sd_disabled: bool, num_waiting: int, draft_outvalued: bool = False
    ) -> float:
        """Apply the triggers after a step; returns the stall (seconds) the engine pays."""
        view = MemoryView(
            residency=self.state,
            sd_disabled=sd_disabled,
            draft_outvalued=draft_outvalued,
            num_free_blocks=self.pool.num_free_blocks,
            num_waiting_reqs=num_waiting,
            can_contract=self.pool.can_contract(self.num_offload_blocks),
        )
        action = self.triggers.step(view)
        if action is MemoryAction.EXPAND:
            return self._expand(now_s)
        if action is MemoryAction.CONTRACT:
            return self._contract(now_s)
        return 0.0

    def _expand(self, now_s: float) -> float:
        self.pool.expand(self.num_offload_blocks)
        self.state = DraftState.OFFLOADED
        self.events.append(MemoryEvent(now_s, "expand", self.num_offload_blocks))
        return self.params.expand_stall_s

    def _contract(self, now_s: float) -> float:
        migrated = self.pool.contract(self.num_offload_blocks)
        stall = self.params.contract_fixed_s + migrated * self.params.migrate_s_per_block
        self.state = DraftState.RELOADING
        self.ready_s = now_s + stall + self.params.reload_s
        self.events.append(MemoryEvent(now_s, "contract", self.num_offload_blocks, migrated))
        return stall
