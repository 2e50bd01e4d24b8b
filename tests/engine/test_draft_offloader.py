"""DraftOffloader on a small torch module: the store, the background reload, the digest."""

import time
from pathlib import Path

import torch

from nightjar_ray.engine.draft_offload import DraftOffloader


def _pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    target = torch.nn.Linear(64, 64)
    draft = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))
    draft[1].bias = target.bias  # shared with the target: stays resident
    return draft, target


def test_background_reload_returns_at_once_and_restores_bit_identical_weights(
    tmp_path: Path,
) -> None:
    draft, target = _pair()
    before = {n: p.detach().clone() for n, p in draft.named_parameters()}
    offloader = DraftOffloader(draft, target, str(tmp_path), verify=True, reload_delay_s=0.2)
    assert offloader.stats.draft_bytes == (64 * 256 + 256 + 256 * 64) * 4
    offloader.offload()
    assert draft[0].weight.numel() == 0 and draft[1].bias.numel() == 64
    assert list((tmp_path / "nightjar-ray-draft").iterdir())  # the CPU store is a file
    start = time.perf_counter()
    offloader.start_reload()
    assert time.perf_counter() - start < 0.1 and offloader.reloading
    assert not offloader.reload_ready() and draft[0].weight.numel() == 0
    while not offloader.reload_ready():
        time.sleep(0.01)
    offloader.finish_reload()
    assert all(torch.equal(p, before[n]) for n, p in draft.named_parameters())
    stats = offloader.stats
    assert stats.resident and stats.weights_identical and stats.num_verified_reloads == 1
    assert stats.reload_background_s >= 0.2 > stats.reload_dispatch_s
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
