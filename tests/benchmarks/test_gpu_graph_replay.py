"""The graph-replay figure script: its stand-in step runs (CPU, small shapes), its flags
are checked, and without CUDA it refuses with a message saying so."""

from __future__ import annotations

import pytest
import torch

from benchmarks import gpu_graph_replay as tool

SMALL = tool.Shape(hidden=64, intermediate=128, num_heads=4, num_kv_heads=2, head_dim=16)


def test_the_stand_in_step_keeps_the_batch_shape_at_every_query_length() -> None:
    torch.manual_seed(0)
    layers = [tool.Layer(SMALL, max_reqs=3, context=16, device=torch.device("cpu"))] * 2
    for query_len in (1, 2, 5):
        x = torch.randn(3 * query_len, SMALL.hidden, dtype=torch.bfloat16)
        out = tool._step(layers, x, num_reqs=3, query_len=query_len)
        assert out.shape == x.shape
        assert torch.isfinite(out.float()).all()


def test_bad_flags_are_rejected_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):
        tool.main(["--num-reqs", "0"])
    assert "--num-reqs" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a host without CUDA")
def test_without_cuda_it_refuses_with_a_clear_message() -> None:
    with pytest.raises(
        SystemExit, match=r"needs a CUDA GPU: torch\.cuda\.is_available\(\) is False"
    ):
        tool.main(["--max-gamma", "1", "--layers", "1", "--iters", "1"])
