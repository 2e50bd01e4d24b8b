"""PrepackCapture on vLLM's real CPU GEMM dispatch: capture, drop the handle, pack again."""

import pytest
import torch

from nightjar_ray.engine.draft_prepack import PrepackCapture, drop_handle


class Linear(torch.nn.Module):
    """What vLLM's dispatch needs of a linear layer: ``weight`` and ``bias``."""

    def __init__(self, n: int, k: int, dtype: torch.dtype) -> None:
        super().__init__()
        torch.manual_seed(n)
        self.weight = torch.nn.Parameter(torch.randn(n, k, dtype=dtype), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.randn(n, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cpu_linear(x, self.weight, self.bias)  # type: ignore[no-any-return]


def test_capture_drop_and_redispatch_give_the_same_outputs() -> None:
    """Which layers vLLM packs depends on the CPU, dtype and shape (oneDNN, sgl or the
    torch fallback); both dtypes run, and at least one layer must have been packed."""
    num_packed = sum(_round_trip(dtype) for dtype in (torch.bfloat16, torch.float32))
    if num_packed == 0:
        pytest.skip("this CPU's vLLM build packs none of these layers")


def _round_trip(dtype: torch.dtype) -> int:
    from vllm.model_executor.layers import utils

    capture = PrepackCapture()
    layers = [Linear(256, 256, dtype), Linear(512, 256, dtype)]
    original = utils.dispatch_cpu_unquantized_gemm
    with capture.capturing():
        for layer in layers:
            utils.dispatch_cpu_unquantized_gemm(layer, True)
    assert utils.dispatch_cpu_unquantized_gemm is original  # restored after loading
    x = torch.randn(4, 256, dtype=dtype)
    before = [layer(x) for layer in layers]
    packed = {id(p.module) for p in capture.layers}
    # packed layers lost their weight (the handle holds it); the others kept it
    assert all((layer.weight.numel() == 0) == (id(layer) in packed) for layer in layers)
    for p in capture.layers:
        assert p.weight is not None and p.weight.numel() > 0
        drop_handle(p.module)
        with pytest.raises(RuntimeError, match="offloaded"):
            p.module(x)
        capture.redispatch(p, p.weight.clone())
        assert p.module.weight.numel() == 0  # packed again
    after = [layer(x) for layer in layers]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    return len(capture.layers)
