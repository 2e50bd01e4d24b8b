"""WorkerMemory's own share of each elastic-memory event, on a stand-in runner.

The runner holds real tensors laid out as vLLM 0.32's CPU backend lays out a KV cache
(one buffer, one view per layer, a draft layer among them), a real draft module and a
block table; WorkerMemory rebinds them to a real CPU arena and applies the scheduler's
events as the memory controller builds them. The real engine runs it in
tests/engine/test_engine_selfcheck.py.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from nightjar_ray.engine.config import ElasticMemoryConfig
from nightjar_ray.engine.kv_rebind import KVArenaPlan, arena_budget
from nightjar_ray.engine.messages import WORKER_EVENT_KINDS, WorkerEventTimes, WorkerReport
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.engine.worker_memory import WorkerMemory, _size_arena
from nightjar_ray.memory.events import MemoryEvent

NUM_BLOCKS, HEADS, BLOCK_SIZE, HEAD_DIM = 8, 2, 16, 32
NAMES = ("model.layers.0.attn", "model.layers.1.attn", "draft_model.layers.0.attn")


@dataclass
class Layer:
    kv_cache: torch.Tensor

    def bind_kv_cache(self, kv: torch.Tensor) -> None:
        self.kv_cache = kv


def _runner() -> SimpleNamespace:
    buf = torch.zeros(3 * NUM_BLOCKS * HEADS * BLOCK_SIZE * 2 * HEAD_DIM, dtype=torch.float32)
    views = list(buf.view(3, NUM_BLOCKS, HEADS, BLOCK_SIZE, 2 * HEAD_DIM).unbind(0))
    torch.manual_seed(0)
    table = np.array([[1, 2, 0, 0]], dtype=np.int32)
    return SimpleNamespace(
        kv_caches=views,
        kv_cache_config=SimpleNamespace(num_blocks=NUM_BLOCKS),
        compilation_config=SimpleNamespace(
            static_forward_context={n: Layer(v) for n, v in zip(NAMES, views, strict=True)}
        ),
        model=torch.nn.Linear(16, 16),
        drafter=SimpleNamespace(model=torch.nn.Linear(16, 256)),
        input_batch=SimpleNamespace(
            block_table=SimpleNamespace(
                block_tables=[SimpleNamespace(block_table=SimpleNamespace(np=table))]
            )
        ),
        requests={},
    )


def _memory(clock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkerMemory:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the CPU draft store
    sync: Any = SimpleNamespace(invalidate_draft_kv=lambda: None)  # the catch-up's hook
    testing = TestingConfig(self_check=True)
    return WorkerMemory(
        _runner(), ElasticMemoryConfig(enabled=True), sync, testing=testing, clock=clock
    )


def _cycle(memory: WorkerMemory) -> None:
    """One expand/contract/reload cycle as the memory controller sends it."""
    n_max, n_stock = memory.num_max_blocks, memory.num_stock_blocks
    memory.apply(MemoryEvent(draft_commands=("offload",), num_blocks=n_max))
    memory.apply(MemoryEvent())
    moves = {n_max - 1: 3}
    release = (n_stock, n_max)
    memory.apply(
        MemoryEvent(moves=moves, release=release, draft_commands=("reload",), num_blocks=n_stock)
    )
    memory.apply(MemoryEvent(draft_commands=("resume",)))


def test_each_event_kind_counts_its_own_parts_once_per_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock that ticks one second per read: every timed part takes exactly 1 s."""
    ticks = itertools.count()
    memory = _memory(lambda: float(next(ticks)), tmp_path, monkeypatch)
    assert memory.num_max_blocks > memory.num_stock_blocks
    _cycle(memory)
    _cycle(memory)
    # expand: the offload and the region's commit; contract: moves and release as one
    # part; reload: the draft pages' commit and the dispatch as one part; resume: none
    assert memory.event_times == WorkerEventTimes((2, 2, 2), (4.0, 2.0, 2.0))
    assert memory.stats()["worker_events"] == {
        "expand": [2, 4.0],
        "contract": [2, 2.0],
        "reload": [2, 2.0],
    }
    report = memory.report(WorkerReport())
    assert report.event_times == memory.event_times
    assert memory.num_blocks == memory.num_stock_blocks and memory.num_moved_blocks == 2


def test_the_real_clock_times_every_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = _memory(time.perf_counter, tmp_path, monkeypatch)
    _cycle(memory)
    times = memory.stats()["worker_events"]
    assert sorted(times) == sorted(WORKER_EVENT_KINDS)
    assert all(n == 1 and s > 0 for n, s in times.values())


def test_event_times_refuse_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match=r"kind must be one of .* got 'resume'"):
        WorkerEventTimes().with_event("resume", 1.0)


def _plan(num_blocks: int, page_bytes: tuple[int, ...], draft: tuple[int, ...]) -> KVArenaPlan:
    return KVArenaPlan(num_blocks, (), (), (), page_bytes, draft)


def test_a_fixed_pool_counts_its_rounded_commit_as_stock_and_still_grows_within_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 36 blocks of 32 KiB target pages and 8 KiB draft pages in 2 MiB units (the
    # selfcheck's pool on a GPU): the pool's commit rounds up to whole units per layer.
    unit, draft_bytes = 2 << 20, 4 << 20
    plan = _plan(36, (32 << 10, 32 << 10, 8 << 10), (2,))
    with pytest.raises(ValueError, match="num_gpu_blocks_override"):
        _size_arena(plan, True, draft_bytes, unit, 0)
    with caplog.at_level(logging.WARNING):
        stock_kv, num_max = _size_arena(plan, True, draft_bytes, unit, 0, fixed_pool=True)
    assert "comes on top of stock" in caplog.text
    budget = arena_budget(plan, draft_bytes, unit)
    assert stock_kv == budget.baseline_bytes(36) > 36 * sum(plan.page_bytes)
    assert num_max > 36 and budget.expanded_bytes(num_max) <= stock_kv + draft_bytes
    assert budget.expanded_bytes(num_max + 1) > stock_kv + draft_bytes


def test_a_pool_sized_by_memory_keeps_stock_as_vllm_would_have_it() -> None:
    unit = 4096
    plan = _plan(40, (8192, 8192, 4096), (2,))
    stock_kv, num_max = _size_arena(plan, True, 1 << 16, unit, 0)
    assert stock_kv == 40 * (8192 + 8192 + 4096)
    assert num_max == arena_budget(plan, 1 << 16, unit).largest_num_max_blocks(stock_kv + (1 << 16))
