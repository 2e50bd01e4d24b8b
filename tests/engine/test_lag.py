"""DraftLagTracker: which draft KV positions a true gamma=0 leaves missing."""

from nightjar_ray.engine.lag import CatchUpSpan, DraftLagTracker


def test_skipped_steps_accumulate_lag_and_resume_clears_it() -> None:
    lag = DraftLagTracker()
    lag.begin_step({"a": 0})
    lag.end_step({"a": 0}, drafted=())  # prefill of 10 tokens skipped
    lag.begin_step({"a": 10})
    assert lag.lag_tokens("a", 10) == 10
    lag.end_step({"a": 10}, drafted=())  # one decode skipped
    assert lag.spans({"a": 11}) == [CatchUpSpan("a", 0, 11)]
    assert lag.max_lag_tokens({"a": 11}) == 11
    lag.end_step({"a": 11}, drafted={"a"})
    assert lag.spans({"a": 12}) == [] and lag.max_lag_tokens({"a": 12}) == 0


def test_in_sync_requests_do_not_lag() -> None:
    lag = DraftLagTracker()
    lag.begin_step({"a": 0, "b": 0})
    lag.end_step({"a": 0, "b": 0}, drafted={"a", "b"})
    lag.begin_step({"a": 5, "b": 7})
    lag.end_step({"a": 5, "b": 7}, drafted=())
    lag.begin_step({"a": 6, "b": 8})
    assert lag.spans({"a": 6, "b": 8}) == [CatchUpSpan("a", 5, 6), CatchUpSpan("b", 7, 8)]


def test_prefix_cache_hit_is_stale_from_zero_and_finish_forgets() -> None:
    lag = DraftLagTracker()
    lag.begin_step({"a": 32})  # new request with 32 cached tokens
    assert lag.lag_tokens("a", 32) == 32
    lag.begin_step({}, finished_req_ids=["a"])
    assert lag.num_stale == 0
    lag.begin_step({"a": 0})  # same id again: a new request
    assert lag.lag_tokens("a", 0) == 0


def test_resumed_request_is_treated_as_new() -> None:
    lag = DraftLagTracker()
    lag.begin_step({"a": 0})
    lag.end_step({"a": 0}, drafted=())
    lag.begin_step({"a": 16}, resumed_req_ids=["a"])  # recomputed after preemption
    assert lag.spans({"a": 16}) == [CatchUpSpan("a", 0, 16)]


def test_invalidate_all_makes_every_known_request_stale_from_zero() -> None:
    lag = DraftLagTracker()
    lag.begin_step({"a": 0, "b": 0})
    lag.end_step({"a": 0, "b": 0}, drafted={"a", "b"})
    lag.invalidate_all()  # the draft's KV pages were released
    assert lag.spans({"a": 9, "b": 4}) == [CatchUpSpan("a", 0, 9), CatchUpSpan("b", 0, 4)]
    lag.begin_step({"c": 0})  # a request that arrives later starts in sync
    assert lag.lag_tokens("c", 0) == 0


def test_undrafted_requests_go_stale_while_drafted_ones_stay_in_sync() -> None:
    lag = DraftLagTracker()
    lag.begin_step({"a": 0, "b": 0})
    lag.end_step({"a": 0, "b": 0}, drafted={"a"})  # b's prompt (9 tokens) skipped
    lag.begin_step({"a": 6, "b": 9})
    assert lag.spans({"a": 6, "b": 9}) == [CatchUpSpan("b", 0, 9)]
    lag.end_step({"a": 6, "b": 9}, drafted={"a"})  # b stays stale from its prompt
    lag.begin_step({"a": 7, "b": 10})
    assert lag.lag_tokens("a", 7) == 0 and lag.lag_tokens("b", 10) == 10
    lag.end_step({"a": 7, "b": 10}, drafted={"b"})  # b caught up; a skipped from 7
    lag.begin_step({"a": 8, "b": 11})
    assert lag.spans({"a": 8, "b": 11}) == [CatchUpSpan("a", 7, 8)]
    assert lag.max_lag_tokens({"a": 8, "b": 11}) == 1


def test_drafted_ids_outside_the_step_change_nothing() -> None:
    lag = DraftLagTracker()
    lag.begin_step({"a": 0, "b": 0})
    lag.end_step({"a": 0, "b": 0}, drafted=())
    lag.begin_step({"a": 4})  # b not scheduled this step
    lag.end_step({"a": 4}, drafted={"a", "b"})
    assert lag.spans({"a": 5, "b": 3}) == [CatchUpSpan("b", 0, 3)]
