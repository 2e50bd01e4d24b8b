"""§6.1 triggers: persistence, hysteresis, and what each residency state allows."""

import pytest

from nightjar_ray.memory import (
    DraftResidency,
    ElasticTriggers,
    MemoryAction,
    MemoryView,
    TriggerConfig,
    draft_outvalued,
    plan_migration,
)

RES, OFF, RELOAD = DraftResidency.RESIDENT, DraftResidency.OFFLOADED, DraftResidency.RELOADING


def _view(residency: DraftResidency, free: int, *, sd_off: bool = True, waiting: int = 0,
          can_contract: bool = True) -> MemoryView:  # fmt: skip
    return MemoryView(residency, sd_off, free, waiting, can_contract)


def test_expansion_needs_scarcity_with_sd_off_for_t_persist_steps() -> None:
    triggers = ElasticTriggers(TriggerConfig(10, 30, expand_persist_steps=3))
    assert triggers.step(_view(RES, 5)) is None
    assert triggers.step(_view(RES, 5)) is None
    assert triggers.step(_view(RES, 5)) is MemoryAction.EXPAND
    # a calm step or speculation on resets the count
    for interrupt in (_view(RES, 10), _view(RES, 5, sd_off=False)):
        triggers.step(_view(RES, 5))
        triggers.step(_view(RES, 5))
        assert triggers.step(interrupt) is None
        assert triggers.step(_view(RES, 5)) is None


def test_contraction_needs_empty_queue_and_room_for_the_region_plus_tau() -> None:
    triggers = ElasticTriggers(TriggerConfig(10, 30, contract_persist_steps=2))
    assert triggers.step(_view(OFF, 40)) is None  # not > 30 + 10: hysteresis
    assert triggers.step(_view(OFF, 41)) is None
    assert triggers.step(_view(OFF, 41)) is MemoryAction.CONTRACT
    assert triggers.step(_view(OFF, 41, waiting=1)) is None
    assert triggers.step(_view(OFF, 41)) is None
    assert triggers.step(_view(OFF, 41, can_contract=False)) is None
    assert triggers.step(_view(OFF, 41)) is None
    assert triggers.step(_view(OFF, 41)) is MemoryAction.CONTRACT


def test_no_decision_while_reloading_and_no_contraction_while_resident() -> None:
    triggers = ElasticTriggers(TriggerConfig(10, 30, 1, 1))
    assert triggers.step(_view(RELOAD, 0)) is None
    assert triggers.step(_view(RELOAD, 1000)) is None
    assert triggers.step(_view(RES, 1000)) is None


@pytest.mark.parametrize(
    "kwargs", [{"tau_low_blocks": -1}, {"num_region_blocks": -1}, {"expand_persist_steps": 0}]
)
def test_bad_thresholds_are_errors(kwargs: dict[str, int]) -> None:
    base = {"tau_low_blocks": 1, "num_region_blocks": 1}
    (field,) = kwargs
    with pytest.raises(ValueError, match=field):
        TriggerConfig(**{**base, **kwargs})


def test_migration_plan_is_one_to_one_or_none() -> None:
    assert plan_migration([3, 9, 12, 9, 15], [1, 2, 4, 11], 10) == {12: 1, 15: 2}
    assert plan_migration([12, 13, 14], [1, 2], 10) is None
    assert plan_migration([1, 2], [], 10) == {}
    with pytest.raises(ValueError, match="boundary must be >= 0"):
        plan_migration([], [], -1)


def test_an_outvalued_draft_counts_as_off_for_the_expansion() -> None:
    triggers = ElasticTriggers(TriggerConfig(10, 30, expand_persist_steps=2))
    outvalued = MemoryView(RES, False, 5, 4, draft_outvalued=True)
    assert triggers.step(outvalued) is None
    assert triggers.step(outvalued) is MemoryAction.EXPAND
    # speculating and not outvalued: the paper's condition alone, no expansion
    assert [triggers.step(_view(RES, 5, sd_off=False, waiting=4)) for _ in range(3)] == [None] * 3


def test_draft_outvalued_weighs_batch_growth_against_speculation_gain() -> None:
    # 8 requests hold 40 blocks; 20 more blocks would run 12 (x1.5)
    assert draft_outvalued(lambda: (1.4, 8), 3, 40, 20, 256)
    assert not draft_outvalued(lambda: (1.6, 8), 3, 40, 20, 256)
    # nobody waits for blocks: the draft keeps its memory whatever it is worth, and the
    # policy is not asked (its gain is a ranking of its arms)
    assert not draft_outvalued(lambda: (1.0, 8), 0, 40, 20, 256)
    asked: list[int] = []
    assert not draft_outvalued(lambda: (asked.append(1), (1.0, 8))[1], 0, 40, 20, 256)
    assert asked == []
    # the batch cannot grow past max_num_seqs: 8 -> 9 is x1.125
    assert not draft_outvalued(lambda: (1.2, 8), 3, 40, 20, 9)
    assert draft_outvalued(lambda: (1.1, 8), 3, 40, 20, 9)
    # a policy without estimates (None), no batch, or no region: never
    assert not draft_outvalued(lambda: (None, 8), 3, 40, 20, 256)
    assert not draft_outvalued(lambda: (1.0, 0), 3, 40, 20, 256)
    assert not draft_outvalued(lambda: (1.0, 8), 3, 40, 0, 256)
