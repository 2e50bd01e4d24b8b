"""Keep what vLLM's CPU backend throws away when it prepacks the draft's linear weights.

On CPU, vLLM hands every unquantized linear layer to ``dispatch_cpu_unquantized_gemm``
after loading: with oneDNN or the sgl kernels it packs the weight into an opaque handle
held by ``layer.cpu_linear`` and (for linear layers) replaces ``layer.weight`` with an
empty tensor. Such a draft cannot be offloaded from its parameters alone: the handle
holds the memory and the weight to rebuild it is gone.

:class:`PrepackCapture` wraps that function while the *drafter* loads (and only then) and
records, per prepacked layer, a host copy of the weight it was given. The offloader then
drops the handle on offload and, on reload, puts the weight back and dispatches again::

    load:     weight -> [capture: host copy] -> dispatch -> handle (weight removed)
    offload:  layer.cpu_linear = <raises>          (the handle and its memory go)
    reload:   layer.weight = host copy -> dispatch -> a new handle (weight removed)

NOTE: re-dispatching packs the same bits the same way, so outputs do not change (the
engine test compares greedy outputs with and without offload cycles on a bf16 pair).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class PrepackedLayer:
    """One draft layer vLLM dispatched: its module, how it was called, and (when the
    dispatch removed the weight) a host copy of it, until the offloader stores it."""

    module: torch.nn.Module
    remove_weight: bool
    weight: torch.Tensor | None


class PrepackCapture:
    """Records the draft's prepacked layers (see module docstring)."""

    def __init__(self) -> None:
        self.layers: list[PrepackedLayer] = []
        self.dispatch: Callable[[torch.nn.Module, bool], None] | None = None

    @contextmanager
    def capturing(self) -> Iterator[None]:
        """Wrap vLLM's CPU GEMM dispatch while the drafter loads."""
        from vllm.model_executor.layers import utils

        original = utils.dispatch_cpu_unquantized_gemm
        self.dispatch = original

        def capture(layer: torch.nn.Module, remove_weight: bool) -> None:
            weight = layer.weight.detach().to("cpu", copy=True) if remove_weight else None
            original(layer, remove_weight)
            if not remove_weight:  # the weight stays a parameter; the handle is rebuilt
                self.layers.append(PrepackedLayer(layer, remove_weight, None))
            elif layer.weight.numel() == 0:  # packed: the handle holds the only copy
                self.layers.append(PrepackedLayer(layer, remove_weight, weight))

        utils.dispatch_cpu_unquantized_gemm = capture
        try:
            yield
        finally:
            utils.dispatch_cpu_unquantized_gemm = original

    def wrap_drafter(self, drafter: Any) -> None:
        """Make ``drafter.load_model`` run inside :meth:`capturing`."""
        load = drafter.load_model

        def load_model(*args: Any, **kwargs: Any) -> Any:
            with self.capturing():
                return load(*args, **kwargs)

        drafter.load_model = load_model

    def redispatch(self, layer: PrepackedLayer, weight: torch.Tensor | None) -> None:
        """Give ``layer`` its removed weight back (``None``: it kept its parameter, which
        the offloader restored) and let vLLM pack it again."""
        assert self.dispatch is not None
        if layer.remove_weight:
            assert weight is not None
            layer.module.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.dispatch(layer.module, layer.remove_weight)


def drop_handle(module: torch.nn.Module) -> None:
    """Offload: the packed handle goes (a forward through this layer now raises)."""

    def away(*_args: Any) -> torch.Tensor:
        raise RuntimeError("the draft is offloaded: its layers cannot run")

    module.cpu_linear = away


def store_removed_weights(layers: list[PrepackedLayer], path: Any) -> dict[str, torch.Tensor]:
    """Write the removed weights to ``path`` (keys: the layer's index) and drop the host
    copies, so the process holds the draft once (as handles); returns them for digests."""
    weights = {str(i): layer.weight for i, layer in enumerate(layers) if layer.weight is not None}
    torch.save(weights, path)
    for layer in layers:
        layer.weight = None
    return weights
