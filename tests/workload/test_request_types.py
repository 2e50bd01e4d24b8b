"""RequestSpec and RequestRecord: one request asked for, one request measured."""

from __future__ import annotations

import pytest

from nightjar_ray.workload import RequestRecord, RequestSpec


def test_a_token_id_prompt_must_have_the_stated_length() -> None:
    assert RequestSpec(3, 0.5, 2, 8, (11, 12)).prompt == (11, 12)
    assert RequestSpec(3, 0.5, 0, 8, "def parse(").num_prompt_tokens == 0
    with pytest.raises(ValueError, match="request 3: prompt has 2 token IDs but num_prompt"):
        RequestSpec(3, 0.5, 5, 8, (11, 12))


def test_latencies_are_measured_from_sending() -> None:
    r = RequestRecord(7, arrival_s=1.0, sent_s=1.25, num_prompt_tokens=10, num_output_tokens=5,
                      first_token_s=1.5, finish_s=2.5)  # fmt: skip
    assert r.ok
    assert r.ttft_s == pytest.approx(0.25)
    assert r.e2e_s == pytest.approx(1.25)
    assert r.tpot_s == pytest.approx(0.25)  # (2.5 - 1.5) / (5 - 1)


def test_the_simulator_sends_at_arrival_as_before() -> None:
    r = RequestRecord(0, 2.0, 2.0, 100, 3, first_token_s=2.75, finish_s=3.25, num_preemptions=1)
    assert (r.ttft_s, r.e2e_s, r.tpot_s) == (0.75, 1.25, 0.25)


def test_failed_or_short_requests_have_no_tpot() -> None:
    failed = RequestRecord(1, 0.0, 0.0, 4, 3, 0.5, None, status="error", error="stream cut short")
    assert not failed.ok and failed.e2e_s is None and failed.tpot_s is None
    assert failed.ttft_s == 0.5
    one_token = RequestRecord(2, 0.0, 0.0, 4, 1, 0.5, 0.5)
    assert one_token.ok and one_token.tpot_s is None
    never_sent = RequestRecord(3, 0.0, 0.1, 4, 0, None, None, status="http_503")
    assert never_sent.ttft_s is None and never_sent.e2e_s is None
