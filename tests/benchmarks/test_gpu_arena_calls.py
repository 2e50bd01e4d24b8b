"""The arena driver-call script: its flags are checked, and without CUDA it refuses with
a message saying so (its measurements need a GPU: docs/benchmarks.md, GPU figures)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import gpu_arena_calls as tool


def test_bad_flags_are_rejected_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):
        tool.main(["--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a host without CUDA")
def test_without_cuda_it_refuses_with_a_clear_message() -> None:
    with pytest.raises(
        SystemExit, match=r"needs a CUDA GPU: torch\.cuda\.is_available\(\) is False"
    ):
        tool.main(["--chunks", "4", "--calls", "2", "--rounds", "1"])
