"""Hardware profiles and model shapes: the inputs of the roofline step-cost model.

Every constant is documented in ``docs/simulator.md`` with its source. Peak numbers are
vendor datasheet values; the achieved fractions (``*_efficiency``) and the overheads are
assumptions, calibrated against the paper's Fig. 2 (see the docs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class HardwareProfile:
    """One GPU (all GPUs of a TP group are identical)."""

    name: str
    memory_bytes: int
    """HBM/GDDR capacity of one GPU."""
    memory_bw_bytes_per_s: float
    """Peak memory bandwidth (datasheet)."""
    peak_flops: float
    """Peak dense BF16/FP16 tensor FLOP/s with FP32 accumulate (datasheet)."""
    pcie_bw_bytes_per_s: float
    """Host<->device copy bandwidth actually reached (pinned memory), for draft reloads."""
    interconnect_bw_bytes_per_s: float
    """GPU<->GPU bandwidth for TP all-reduce (PCIe peer-to-peer when there is no NVLink)."""
    allreduce_latency_s: float
    """Fixed latency of one all-reduce (NCCL over PCIe)."""
    bw_efficiency: float = 0.80
    """Fraction of peak bandwidth a decode GEMV / attention kernel reaches."""
    flops_efficiency: float = 0.60
    """Fraction of peak FLOP/s a large GEMM reaches."""
    device_type: str = "cuda"
    """The ``torch.device`` type an engine on this hardware runs on (elastic memory's
    ``auto`` resolves for it, as the engine's does)."""

    @property
    def effective_bw(self) -> float:
        return self.memory_bw_bytes_per_s * self.bw_efficiency

    @property
    def effective_flops(self) -> float:
        return self.peak_flops * self.flops_efficiency


@dataclass(frozen=True)
class ModelShape:
    """Decoder-only transformer shape (from the model's config.json)."""

    name: str
    num_params: int
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tied_embeddings: bool
    max_model_len: int
    dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer: 2 * layers * kv_heads * head_dim * dtype bytes (Table 1)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def body_params(self) -> int:
        """Parameters multiplied per token (everything but the embedding table and LM head)."""
        tables = 1 if self.tied_embeddings else 2
        return self.num_params - tables * self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size


@dataclass(frozen=True)
class EngineOverheads:
    """Software costs per step on top of the roofline (vLLM scheduler, sampling, launches)."""

    step_overhead_s: float
    """Fixed cost of every engine step (scheduling, input prep, sampling)."""
    spec_step_overhead_s: float
    """Extra fixed cost of a step that speculates (proposal bookkeeping, rejection sampler)."""
    per_layer_overhead_s: float
    """Kernel-launch floor per layer per forward pass."""


@dataclass(frozen=True)
class MemoryPlan:
    """How one GPU's memory splits (per GPU of the TP group)."""

    block_size_tokens: int
    block_bytes: int
    num_orig_blocks: int
    """KV blocks with the draft resident (N_orig)."""
    num_draft_blocks: int
    """ceil(S_draft / B_block): blocks the draft's weights are worth (N_draft)."""
    draft_weight_bytes: int
    """S_draft on one GPU."""
    num_reclaim_blocks: int = 0
    """Blocks gained when the draft's weights *and* its per-block KV share are freed
    (``ElasticParams.reclaim_draft_kv``): the block pool then holds as many tokens as ``off``."""

    @property
    def num_scale_blocks(self) -> int:
        """N_scale = N_orig + N_draft."""
        return self.num_orig_blocks + self.num_draft_blocks


def plan_memory(
    hw: HardwareProfile,
    target: ModelShape,
    draft: ModelShape | None,
    tp: int,
    gpu_memory_utilization: float,
    activation_reserve_bytes: int,
    block_size_tokens: int = 16,
) -> MemoryPlan:
    """KV blocks per GPU as vLLM sizes them: budget - weights - activations, over block bytes.

    With a draft, each block holds target and draft KV for ``block_size_tokens`` tokens
    (vLLM gives the draft's layers the same block table). Without one (``off``), blocks hold
    target KV only and the draft's weight bytes are KV space too.
    """
    budget = int(hw.memory_bytes * gpu_memory_utilization) - activation_reserve_bytes
    kv_per_token = target.kv_bytes_per_token + (draft.kv_bytes_per_token if draft else 0)
    block_bytes = block_size_tokens * kv_per_token // tp
    draft_bytes = draft.weight_bytes // tp if draft else 0
    free = budget - target.weight_bytes // tp - draft_bytes
    if free < block_bytes:
        raise ValueError(f"{target.name} does not fit on {tp} x {hw.name}: no KV space left")
    num_draft_blocks = math.ceil(draft_bytes / block_bytes) if draft else 0
    num_orig_blocks = free // block_bytes
    num_reclaim_blocks = 0
    if draft:
        # NOTE: with weights and KV share freed, the block pool is what a draft-less plan holds.
        without = plan_memory(
            hw,
            target,
            None,
            tp,
            gpu_memory_utilization,
            activation_reserve_bytes,
            block_size_tokens,
        )
        num_reclaim_blocks = max(num_draft_blocks, without.num_orig_blocks - num_orig_blocks)
    return MemoryPlan(
        block_size_tokens,
        block_bytes,
        num_orig_blocks,
        num_draft_blocks,
        draft_bytes,
        num_reclaim_blocks,
    )
