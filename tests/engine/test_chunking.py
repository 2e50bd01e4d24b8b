"""Catch-up spans are split to fit the drafter's buffers, in position order."""

from nightjar_ray.engine.draft_sync import _chunk_spans
from nightjar_ray.engine.lag import CatchUpSpan


def test_long_span_is_cut_into_consecutive_pieces() -> None:
    chunks = _chunk_spans([CatchUpSpan("a", 0, 25), CatchUpSpan("b", 3, 8)], 10, 8)
    flat = [(s.req_id, s.start_pos, s.end_pos) for c in chunks for s in c]
    assert flat == [("a", 0, 10), ("a", 10, 20), ("a", 20, 25), ("b", 3, 8)]
    assert all(sum(s.num_tokens for s in c) <= 10 for c in chunks)
    assert [len(c) for c in chunks] == [1, 1, 2]


def test_request_limit_per_forward() -> None:
    spans = [CatchUpSpan(str(i), 0, 1) for i in range(5)]
    assert [len(c) for c in _chunk_spans(spans, 100, 2)] == [2, 2, 1]
