"""Worker side of the draft's residency: offload its weights, bring them back (§6.4).

::

    offload:        draft-only parameters -> host store; parameters become empty
                    tensors (their device memory is freed); the caller releases the
                    draft's KV pages
    start_reload:   a background thread reads the host store back (CPU: from the file;
                    GPU: non-blocking copies on a side stream); returns at once
    finish_reload:  joins it and points the parameters at the loaded tensors (the same
                    parameter objects, bit-identical; checked by digest with ``verify``);
                    the caller then rebuilds every request's draft KV by the catch-up

The host store is pinned host memory on GPU. On CPU the process has one memory, so the
store is a file (``store_dir``): an offload then really returns the RAM.

NOTE: parameters the draft shares with the target (same storage) stay resident.
NOTE: on CPU, vLLM may prepack linear weights into oneDNN/sgl handles and drop
``layer.weight``; the worker captures those weights while the drafter loads
(``draft_prepack.py``), an offload drops the handles and a reload packs them again. A
prepacked layer that was not captured is a ``ValueError`` at install.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from nightjar_ray.engine.draft_prepack import PrepackCapture, drop_handle, store_removed_weights


@dataclass
class OffloadStats:
    """Cumulative counts of one worker's offloads and reloads (JSON-able)."""

    num_offloads: int = 0
    num_reloads: int = 0
    offload_s: float = 0.0
    reload_s: float = 0.0
    """Time the step loop spent in reloads: dispatch plus the wait in ``finish_reload``."""
    reload_dispatch_s: float = 0.0
    """Time ``start_reload`` took (the step loop's cost of starting a reload)."""
    reload_background_s: float = 0.0
    """Time the background loads took (overlapping the step loop)."""
    draft_bytes: int = 0
    """Bytes of draft-only parameters an offload frees."""
    weights_identical: bool = True
    """Every verified reload so far restored bit-identical weights."""
    num_verified_reloads: int = 0
    """Reloads checked by digest (``verify=True``)."""
    num_prepacked_layers: int = 0
    """Draft layers whose weight vLLM's CPU backend packed and dropped: the offload drops
    their handles and the reload packs them again (embeddings, which keep their weight,
    are dispatched again too and not counted)."""
    resident: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().contiguous().cpu().view(torch.uint8).numpy()
    return hashlib.sha256(data.tobytes()).hexdigest()


def _check_not_prepacked(model: torch.nn.Module, known: set[int]) -> None:
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        prepacked = hasattr(module, "cpu_linear") and weight is not None and weight.numel() == 0
        if prepacked and id(module) not in known:
            raise ValueError(
                f"draft layer {name!r} is prepacked for the CPU (its weight was dropped) "
                "and its weight was not captured at load (docs/memory.md)"
            )


class DraftOffloader:
    """Moves the draft's own parameters between the device and a host store."""

    def __init__(
        self,
        draft: torch.nn.Module,
        target: torch.nn.Module,
        store_dir: str | None = None,
        verify: bool = True,
        reload_delay_s: float = 0.0,
        prepack: PrepackCapture | None = None,
    ) -> None:
        modules = {id(m) for m in draft.modules()}
        self._packed = [x for x in (prepack.layers if prepack else []) if id(x.module) in modules]
        self._prepack = prepack
        _check_not_prepacked(draft, {id(x.module) for x in self._packed})
        shared = {p.untyped_storage().data_ptr() for p in target.parameters()}
        self._params = [
            (name, p)
            for name, p in draft.named_parameters()
            if p.numel() > 0 and p.untyped_storage().data_ptr() not in shared
        ]
        self._digests = {name: _digest(p.data) for name, p in self._params} if verify else {}
        self._dir = Path(store_dir or tempfile.gettempdir()) / "nightjar-ray-draft"
        self._host: dict[str, torch.Tensor] = {}
        self._loaded: dict[str, torch.Tensor] = {}
        self._loaded_packed: dict[str, torch.Tensor] = {}
        self._thread: threading.Thread | None = None
        self._reload_delay_s = reload_delay_s
        self._error: BaseException | None = None
        packed = self._store_packed(verify)
        for path in (self._file, self._packed_file):  # an engine may stop with the draft away
            weakref.finalize(self, path.unlink, missing_ok=True)
        self.stats = OffloadStats(
            draft_bytes=sum(p.nbytes for _, p in self._params) + packed,
            num_prepacked_layers=sum(layer.remove_weight for layer in self._packed),
        )

    def _store_packed(self, verify: bool) -> int:
        """Prepacked layers' removed weights go to their own file now (the handles hold
        the draft in memory); returns their bytes (the handles' size, approximately)."""
        if not any(x.weight is not None for x in self._packed):
            return 0
        self._dir.mkdir(parents=True, exist_ok=True)
        weights = store_removed_weights(self._packed, self._packed_file)
        if verify:
            self._digests.update({f"packed.{k}": _digest(w) for k, w in weights.items()})
        return sum(w.nbytes for w in weights.values())

    @property
    def _packed_file(self) -> Path:
        return self._dir / f"draft-packed-{os.getpid()}.pt"

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
        for layer in self._packed:
            drop_handle(layer.module)
        self.stats.num_offloads += 1
        self.stats.offload_s += time.perf_counter() - start
        self.stats.resident = False

    def reload(self) -> None:
        """Bring the parameters back and wait for them (``start`` + ``finish``)."""
        self.start_reload()
        self.finish_reload()

    def start_reload(self) -> None:
        """Start loading the parameters back in a background thread; returns at once."""
        assert not self.stats.resident and self._thread is None, "reload of a resident draft"
        start = time.perf_counter()
        self._error = None
        self._thread = threading.Thread(target=self._load, name="nightjar-draft-reload")
        self._thread.start()
        elapsed = time.perf_counter() - start
        self.stats.reload_dispatch_s += elapsed
        self.stats.reload_s += elapsed

    @property
    def reloading(self) -> bool:
        return self._thread is not None

    def reload_ready(self) -> bool:
        """Whether a started reload has finished loading (``finish_reload`` won't wait)."""
        return self._thread is not None and not self._thread.is_alive()

    def _load(self) -> None:
        start = time.perf_counter()
        time.sleep(self._reload_delay_s)
        try:
            host = self._host or torch.load(self._file, weights_only=True)
            if any(layer.remove_weight for layer in self._packed):
                self._loaded_packed = torch.load(self._packed_file, weights_only=True)
            device = self._params[0][1].device if self._params else torch.device("cpu")
            if device.type == "cpu":
                self._loaded = dict(host)
            else:
                side = torch.cuda.Stream(device)
                with torch.cuda.stream(side):
                    self._loaded = {n: t.to(device, non_blocking=True) for n, t in host.items()}
                side.synchronize()
        except BaseException as error:  # re-raised in the step loop by finish_reload
            self._error = error
        self.stats.reload_background_s += time.perf_counter() - start

    def _verify(self) -> None:
        """Digest every restored weight (parameters and prepacked layers' weights)."""
        now = {n: _digest(p.data) for n, p in self._params}
        now.update({f"packed.{k}": _digest(w) for k, w in self._loaded_packed.items()})
        self.stats.weights_identical &= now == self._digests
        self.stats.num_verified_reloads += 1

    def finish_reload(self) -> None:
        """Wait for the started reload and point the parameters at the loaded tensors."""
        assert self._thread is not None, "finish_reload() without start_reload()"
        start = time.perf_counter()
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise RuntimeError("draft reload failed") from self._error
        for name, p in self._params:
            p.data = self._loaded[name]
        if self._digests:
            self._verify()
        packed = self._loaded_packed
        for i, layer in enumerate(self._packed):
            assert self._prepack is not None
            self._prepack.redispatch(layer, packed.get(str(i)))
        self._loaded, self._host, self._loaded_packed = {}, {}, {}
        if self._file.exists():
            self._file.unlink()
        self.stats.num_reloads += 1
        self.stats.reload_s += time.perf_counter() - start
        self.stats.resident = True
