"""The §6.1 memory controller on vLLM's own BlockPool (scheduler side, no engine)."""

import pytest
from vllm.v1.core.block_pool import BlockPool

from nightjar_ray.engine.block_pool import ElasticBlockPool
from nightjar_ray.engine.config import ElasticMemoryConfig
from nightjar_ray.engine.scheduler_setup import controller_params
from nightjar_ray.memory.controller import ElasticController
from nightjar_ray.metrics.telemetry import EngineTelemetry, LoadSnapshot

CONFIG = ElasticMemoryConfig(enabled=True, expand_persist_steps=2, contract_persist_steps=2)
"""tau_low = ceil(10% of the 20 usable blocks) = 2."""


def _on_vllm_pool(
    pool: BlockPool, config: ElasticMemoryConfig, telemetry: EngineTelemetry, **kw: object
) -> ElasticController:
    """The controller as the scheduler builds it, on vLLM's own BlockPool."""
    return ElasticController(
        lambda num_max_blocks: ElasticBlockPool(pool, num_max_blocks),
        pool.num_gpu_blocks,
        controller_params(config),
        telemetry,
        **kw,  # type: ignore[arg-type]
    )


def _controller() -> tuple[ElasticController, BlockPool, EngineTelemetry]:
    pool = BlockPool(21, enable_caching=True, hash_block_size=16)
    telemetry = EngineTelemetry(3)
    ticks = iter(range(1000))
    controller = _on_vllm_pool(pool, CONFIG, telemetry, clock=lambda: float(next(ticks)))
    return controller, pool, telemetry


def _load(pool: BlockPool, num_waiting: int = 0) -> LoadSnapshot:
    return LoadSnapshot(num_waiting, 0, pool.get_num_free_blocks(), pool.num_gpu_blocks - 1)


def _step(c: ElasticController, pool: BlockPool, sd_disabled: bool, waiting: int = 0) -> object:
    event = c.before_schedule()
    c.after_schedule(_load(pool, waiting), sd_disabled)
    return event


def test_nothing_happens_before_the_workers_report_n_max() -> None:
    c, pool, _ = _controller()
    pool.get_new_blocks(20)
    assert all(_step(c, pool, sd_disabled=True, waiting=3) is None for _ in range(5))
    assert pool.num_gpu_blocks == 21 and not c.draft_away


def test_expands_only_when_speculation_is_off_and_scarcity_persists() -> None:
    c, pool, telemetry = _controller()
    c.on_worker_output(num_max_blocks=31, draft_ready=False)
    held = pool.get_new_blocks(19)  # 1 free < tau_low 2
    assert [_step(c, pool, sd_disabled=False, waiting=2) for _ in range(4)] == [None] * 4
    assert [_step(c, pool, sd_disabled=True, waiting=2) for _ in range(2)] == [None, None]
    event = c.before_schedule()  # the action decided after the second scarce step
    assert event is not None and event.draft_commands == ("offload",) and not event.moves
    assert event.num_blocks == 31
    assert pool.num_gpu_blocks == 31 and c.draft_away and not telemetry.draft_resident
    assert c.stats.num_expansions == 1 and c.stats.peak_num_blocks == 31
    assert telemetry.memory_events["expand"][0] == 1
    assert len(held) == 19


def _expanded() -> tuple[ElasticController, BlockPool, EngineTelemetry, list[object]]:
    c, pool, telemetry = _controller()
    c.on_worker_output(31, draft_ready=False)
    held = pool.get_new_blocks(19)
    for _ in range(2):
        _step(c, pool, sd_disabled=True, waiting=2)
    event = c.before_schedule()
    assert event is not None and event.draft_commands == ("offload",)
    return c, pool, telemetry, list(held)


def test_contraction_waits_for_room_then_moves_reloads_and_resumes() -> None:
    c, pool, telemetry, held = _expanded()
    region = pool.get_new_blocks(6)[1:]  # the old free block 20, then ids 21..25
    assert [b.block_id for b in region] == [21, 22, 23, 24, 25]
    # queue empty but 5 free: not > N_region 10 + tau_low 2
    assert [_step(c, pool, sd_disabled=True) for _ in range(3)] == [None] * 3
    assert c.stats.num_expansions == 1 and c.stats.num_contractions == 0
    pool.free_blocks(held[:15])  # 20 free now, and the region's live blocks fit below
    assert _step(c, pool, sd_disabled=True, waiting=1) is None  # the queue is not empty
    assert [_step(c, pool, sd_disabled=True) for _ in range(2)] == [None, None]
    event = c.before_schedule()
    assert event is not None and event.draft_commands == ("reload",)
    assert sorted(event.moves) == [21, 22, 23, 24, 25]
    assert all(b.block_id < 21 for b in region) and event.release == (21, 31)
    assert event.num_blocks == 21
    assert pool.num_gpu_blocks == 21 and c.draft_away  # reloading: still no speculation
    c.after_schedule(_load(pool), sd_disabled=True)
    assert c.before_schedule() is None and c.stats.num_reload_wait_steps == 1
    c.on_worker_output(31, draft_ready=True)
    event = c.before_schedule()
    assert event is not None and event.draft_commands == ("resume",)
    assert not c.draft_away and telemetry.draft_resident
    assert telemetry.memory_events["contract"][0] == 1 and c.stats.reload_wall_s > 0


def test_a_contraction_that_no_longer_fits_is_refused_and_retried() -> None:
    c, pool, _, held = _expanded()
    pool.free_blocks(held)
    for _ in range(2):
        _step(c, pool, sd_disabled=True)
    pool.get_new_blocks(29)  # the region fills between the trigger and the action
    assert c.before_schedule() is None and c.stats.num_refused == 1
    assert pool.num_gpu_blocks == 31 and c.draft_away


def test_a_draft_that_frees_no_block_leaves_the_controller_off() -> None:
    c, pool, _ = _controller()
    c.on_worker_output(21, draft_ready=False)
    pool.get_new_blocks(20)
    assert all(_step(c, pool, sd_disabled=True, waiting=1) is None for _ in range(5))
    with pytest.raises(ValueError, match="max_num_blocks"):
        _on_vllm_pool(pool, CONFIG, EngineTelemetry(3)).on_worker_output(20, False)


@pytest.mark.parametrize(
    ("gain", "offload_outvalued", "expands"),
    [(1.2, True, True), (2.0, True, False), (1.2, False, False), (None, True, False)],
)
def test_a_draft_outvalued_by_its_memory_is_offloaded_while_speculating(
    gain: float | None, offload_outvalued: bool, expands: bool
) -> None:
    pool = BlockPool(21, enable_caching=True, hash_block_size=16)
    config = CONFIG.model_copy(update={"offload_outvalued": offload_outvalued})
    c = _on_vllm_pool(pool, config, EngineTelemetry(3), max_num_reqs=8)
    c.on_worker_output(num_max_blocks=31, draft_ready=False)
    pool.get_new_blocks(19)  # 1 free < tau_low 2; 4 requests on 19 blocks -> 6 on 29 (x1.5)
    for _ in range(2):
        assert c.before_schedule() is None
        c.after_schedule(_load(pool, num_waiting=2), False, lambda: (gain, 4))
    event = c.before_schedule()
    assert (event is not None and event.draft_commands == ("offload",)) is expands


def test_the_draft_is_valued_only_where_the_value_can_decide() -> None:
    """Pricing the draft against its memory ranks the policy's arms; it is asked for only
    with ``offload_outvalued`` on and requests waiting (the rule's only case)."""
    calls: list[int] = []

    def draft_value() -> tuple[float | None, int]:
        calls.append(1)
        return 2.0, 4

    for offload_outvalued, num_waiting, asked in ((True, 0, 0), (True, 2, 1), (False, 2, 0)):
        pool = BlockPool(21, enable_caching=True, hash_block_size=16)
        config = CONFIG.model_copy(update={"offload_outvalued": offload_outvalued})
        c = _on_vllm_pool(pool, config, EngineTelemetry(3), max_num_reqs=8)
        c.on_worker_output(num_max_blocks=31, draft_ready=False)
        pool.get_new_blocks(19)  # requests hold blocks and the draft a region to free
        calls.clear()
        c.after_schedule(_load(pool, num_waiting=num_waiting), False, draft_value)
        assert len(calls) == asked, (offload_outvalued, num_waiting)
