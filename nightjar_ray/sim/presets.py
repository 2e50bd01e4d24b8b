"""The paper's three settings (§7.1, §7.3.5), dataset lengths, and acceptance assumptions.

Sources for every number are in ``docs/simulator.md`` ("Constants and their sources").
Model shapes are the public config.json values; hardware peaks are datasheet values;
acceptance and length distributions are assumptions (the paper reports neither as numbers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nightjar_ray.sim.acceptance import AcceptanceProfile
from nightjar_ray.sim.hardware import GIB, MIB, EngineOverheads, HardwareProfile, ModelShape
from nightjar_ray.sim.workload import DatasetLengths, LogNormalLength

QWEN25_7B = ModelShape(
    "DeepSeek-R1-Distill-Qwen-7B", 7_615_616_512, 28, 3584, 28, 4, 128, 152_064, False, 32_768
)
QWEN25_05B = ModelShape(
    "Qwen2.5-0.5B (R1 draft)", 494_032_768, 24, 896, 14, 2, 64, 151_936, True, 32_768
)
VICUNA_13B = ModelShape(
    "vicuna-13b-v1.5", 13_015_864_320, 40, 5120, 40, 40, 128, 32_000, False, 4_096
)
VICUNA_68M = ModelShape("vicuna-68m", 68_030_208, 2, 768, 12, 12, 64, 32_000, False, 2_048)
QWEN25_32B = ModelShape(
    "Qwen2.5-32B-Instruct", 32_763_876_352, 64, 5120, 40, 8, 128, 152_064, False, 32_768
)

RTX_4090 = HardwareProfile("RTX 4090", 24 * GIB, 1008e9, 165.2e12, 25e9, 25e9, 20e-6)
A100_40G = HardwareProfile("A100-SXM4-40GB", 40 * GIB, 1555e9, 312e12, 25e9, 25e9, 20e-6)
L20 = HardwareProfile("L20", 48 * GIB, 864e9, 119.5e12, 25e9, 20e9, 25e-6)

VLLM_OVERHEADS = EngineOverheads(
    step_overhead_s=4e-3, spec_step_overhead_s=2e-3, per_layer_overhead_s=12e-6
)

DATASETS: Mapping[str, DatasetLengths] = {
    "sharegpt": DatasetLengths(
        "sharegpt", LogNormalLength(160, 1.1, 4, 2048), LogNormalLength(200, 0.9, 4, 1024)
    ),
    "alpaca": DatasetLengths(
        "alpaca", LogNormalLength(22, 0.6, 4, 512), LogNormalLength(120, 0.8, 4, 1024)
    ),
    "specbench": DatasetLengths(
        "specbench", LogNormalLength(220, 1.0, 8, 2048), LogNormalLength(180, 0.7, 8, 1024)
    ),
}


@dataclass(frozen=True)
class Setting:
    """One deployment: GPUs, target/draft pair, vLLM memory knobs, acceptance per dataset."""

    name: str
    hw: HardwareProfile
    target: ModelShape
    draft: ModelShape
    tp: int
    acceptance: Mapping[str, AcceptanceProfile]
    overheads: EngineOverheads = VLLM_OVERHEADS
    gpu_memory_utilization: float = 0.90
    activation_reserve_bytes: int = 2 * GIB
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    expand_stall_s: float = 0.1439
    """KV-cache expansion (draft offload) stall: Table 6 (143.9 ms, 32B on 2x L20)."""
    contract_fixed_s: float = 0.0119
    """KV-cache contraction fixed cost: Table 6 (11.9 ms, Triton migration)."""
    qps_sweep: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 12.0, 16.0)
    trace_qps: float = 1.0
    """Mean rate the Azure trace is replayed at by ``simulate compare`` (its shape is kept):
    the load near this setting's SD/plain crossover in the ShareGPT Poisson sweep."""

    def acceptance_for(self, dataset: str) -> AcceptanceProfile:
        try:
            return self.acceptance[dataset]
        except KeyError:
            raise ValueError(
                f"setting {self.name!r} has no acceptance profile for dataset {dataset!r}; "
                f"choose from {sorted(self.acceptance)}"
            ) from None


SETTINGS: Mapping[str, Setting] = {
    "rtx4090-7b": Setting(
        "rtx4090-7b",
        RTX_4090,
        QWEN25_7B,
        QWEN25_05B,
        1,
        {
            "sharegpt": AcceptanceProfile(0.62),
            "alpaca": AcceptanceProfile(0.58),
            "specbench": AcceptanceProfile(0.60),
        },
        activation_reserve_bytes=int(1.5 * GIB),
        qps_sweep=(2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0),
        trace_qps=10.0,
    ),
    "a100-13b": Setting(
        "a100-13b",
        A100_40G,
        VICUNA_13B,
        VICUNA_68M,
        1,
        {
            "sharegpt": AcceptanceProfile(0.60),
            "alpaca": AcceptanceProfile(0.52),
            "specbench": AcceptanceProfile(0.55),
        },
        activation_reserve_bytes=int(1.5 * GIB),
        qps_sweep=(1.0, 2.0, 4.0, 6.0, 8.0, 10.0),
        trace_qps=4.0,
    ),
    "l20x2-32b": Setting(
        "l20x2-32b",
        L20,
        QWEN25_32B,
        QWEN25_05B,
        2,
        {
            "sharegpt": AcceptanceProfile(0.70),
            "alpaca": AcceptanceProfile(0.68),
            "specbench": AcceptanceProfile(0.68),
        },
        activation_reserve_bytes=int(1.5 * GIB),
        qps_sweep=(0.5, 1.0, 2.0, 3.0, 4.0, 6.0),
        trace_qps=3.0,
    ),
}


def get_setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise ValueError(f"unknown setting {name!r}; choose from {sorted(SETTINGS)}") from None


def get_dataset(name: str) -> DatasetLengths:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose from {sorted(DATASETS)}") from None


__all__ = ["DATASETS", "MIB", "SETTINGS", "Setting", "get_dataset", "get_setting"]
