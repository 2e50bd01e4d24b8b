"""DraftOffloader on a small torch module: the store, the background reload, the digest."""

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from nightjar_ray.engine.draft_offload import DraftOffloader
from tests.support import wait_until


def _pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    target = torch.nn.Linear(64, 64)
    draft = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))
    draft[1].bias = target.bias  # shared with the target: stays resident
    return draft, target


def test_background_reload_returns_at_once_and_restores_bit_identical_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft, target = _pair()
    before = {n: p.detach().clone() for n, p in draft.named_parameters()}
    offloader = DraftOffloader(draft, target, str(tmp_path), verify=True)
    assert offloader.stats.draft_bytes == (64 * 256 + 256 + 256 * 64) * 4
    offloader.offload()
    assert draft[0].weight.numel() == 0 and draft[1].bias.numel() == 64
    assert list((tmp_path / "nightjar-ray-draft").iterdir())  # the CPU store is a file
    # the background load reads the store through torch.load: hold it there until the
    # test lets it go, so start_reload must return while the load has not happened
    release, held = threading.Event(), []
    real_load = torch.load

    def held_load(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        assert release.wait(timeout=60), "the test never released the reload"
        held.append(time.perf_counter() - start)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", held_load)
    offloader.start_reload()
    assert offloader.reloading and not offloader.reload_ready()
    assert draft[0].weight.numel() == 0 and offloader.stats.num_reloads == 0
    release.set()
    wait_until(offloader.reload_ready, 60, 0.01, "the background reload to finish")
    offloader.finish_reload()
    assert all(torch.equal(p, before[n]) for n, p in draft.named_parameters())
    stats = offloader.stats
    assert stats.resident and stats.weights_identical and stats.num_verified_reloads == 1
    assert stats.num_reloads == 1 and len(held) == 1
    assert stats.reload_background_s >= held[0]  # the background time holds the load
    assert not list((tmp_path / "nightjar-ray-draft").iterdir())


def test_a_corrupted_store_is_caught_by_the_digest(tmp_path: Path) -> None:
    draft, target = _pair()
    offloader = DraftOffloader(draft, target, str(tmp_path), verify=True)
    offloader.offload()
    (store,) = (tmp_path / "nightjar-ray-draft").iterdir()
    saved = torch.load(store, weights_only=True)
    saved["0.weight"][0, 0] += 1.0
    torch.save(saved, store)
    offloader.reload()
    assert not offloader.stats.weights_identical


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to PyTorch")
def test_cuda_reload_from_pinned_memory_on_a_side_stream_restores_bit_identical_weights() -> None:
    """On a GPU the store is pinned host memory and the reload copies it back with
    non-blocking copies on a side stream: the parameters come back on the device, the
    same objects, bit for bit; the offload frees their device memory."""
    draft, target = _pair()
    draft, target = draft.cuda().to(torch.bfloat16), target.cuda().to(torch.bfloat16)
    draft[1].bias = target.bias
    params = dict(draft.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    offloader = DraftOffloader(draft, target, verify=True)
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    offloader.offload()
    assert torch.cuda.memory_allocated() <= allocated - offloader.stats.draft_bytes
    assert draft[0].weight.numel() == 0 and draft[1].bias.numel() == 64
    for cycle in range(2):  # the second offload stores the weights the first reload loaded
        offloader.start_reload()
        offloader.finish_reload()
        assert all(p is params[n] for n, p in draft.named_parameters())  # same objects
        for name, p in draft.named_parameters():
            assert p.device.type == "cuda" and torch.equal(p.detach(), before[name]), name
        if cycle == 0:
            offloader.offload()
    stats = offloader.stats
    assert stats.weights_identical and stats.num_verified_reloads == stats.num_reloads == 2
