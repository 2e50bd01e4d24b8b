"""Worker side of the draft's residency: offload its weights, bring them back (§6.4).

::

    offload:  draft-only parameters -> host store;  parameters become empty tensors
              (their device memory is freed); draft KV pages are released by the caller
    reload:   host store -> parameters (same tensors, bit-identical, checked by digest);
              every request's draft KV is then rebuilt by the catch-up path

The host store is pinned host memory on GPU. On CPU the process has one memory, so the
store is a file (``store_dir``): an offload then really returns the RAM.

NOTE: parameters the draft shares with the target (same storage) stay resident.
NOTE: on CPU, vLLM may prepack linear weights into oneDNN/sgl handles and drop
``layer.weight``; such a draft cannot be offloaded yet (``ValueError`` at install).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass
class OffloadStats:
    """Cumulative counts of one worker's offloads and reloads (JSON-able)."""

    num_offloads: int = 0
    num_reloads: int = 0
    offload_s: float = 0.0
    reload_s: float = 0.0
    draft_bytes: int = 0
    """Bytes of draft-only parameters an offload frees."""
    weights_identical: bool = True
    """Every reload so far restored bit-identical weights."""
    resident: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().contiguous().cpu().view(torch.uint8).numpy()
    return hashlib.sha256(data.tobytes()).hexdigest()


def _check_not_prepacked(model: torch.nn.Module) -> None:
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and weight is not None and weight.numel() == 0:
            raise ValueError(
                f"draft layer {name!r} is prepacked for the CPU (its weight was dropped); "
                "elastic draft offload needs the unpacked path (docs/memory.md)"
            )


class DraftOffloader:
    """Moves the draft's own parameters between the device and a host store."""

    def __init__(
        self, draft: torch.nn.Module, target: torch.nn.Module, store_dir: str | None = None
    ) -> None:
        _check_not_prepacked(draft)
        shared = {p.untyped_storage().data_ptr() for p in target.parameters()}
        self._params = [
            (name, p)
            for name, p in draft.named_parameters()
            if p.numel() > 0 and p.untyped_storage().data_ptr() not in shared
        ]
        self._digests = {name: _digest(p.data) for name, p in self._params}
        self._dir = Path(store_dir or tempfile.gettempdir()) / "nightjar-ray-draft"
        self._host: dict[str, torch.Tensor] = {}
        self.stats = OffloadStats(draft_bytes=sum(p.nbytes for _, p in self._params))

    @property
    def _file(self) -> Path:
        return self._dir / f"draft-{os.getpid()}.pt"

    def offload(self) -> None:
        """Copy the draft's parameters to the host store and free their device memory."""
        assert self.stats.resident, "offload() of an offloaded draft"
        start = time.perf_counter()
        host = {name: p.data.to("cpu", copy=True) for name, p in self._params}
        if all(p.device.type == "cpu" for _, p in self._params):
            self._dir.mkdir(parents=True, exist_ok=True)
            torch.save(host, self._file)
            host = {}
        else:
            host = {name: t.pin_memory() for name, t in host.items()}
        self._host = host
        for _, p in self._params:
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        self.stats.num_offloads += 1
        self.stats.offload_s += time.perf_counter() - start
        self.stats.resident = False

    def reload(self) -> None:
        """Bring the parameters back from the host store and check they are unchanged."""
        assert not self.stats.resident, "reload() of a resident draft"
        start = time.perf_counter()
        host = self._host or torch.load(self._file, weights_only=True)
        for name, p in self._params:
            p.data = host[name].to(p.device, non_blocking=True)
        self._host = {}
        if self._file.exists():
            self._file.unlink()
        identical = all(_digest(p.data) == self._digests[name] for name, p in self._params)
        self.stats.weights_identical &= identical
        self.stats.num_reloads += 1
        self.stats.reload_s += time.perf_counter() - start
        self.stats.resident = True
