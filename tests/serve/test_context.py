"""Policy actor names: one actor per (app, model, fingerprint), found by app and model."""

from __future__ import annotations

from nightjar_ray.serve.context import policy_actor_name, policy_actor_prefix

FINGERPRINT = {"policy": "nightjar", "gamma_max": 4}


def test_two_models_of_one_app_get_two_policy_actors() -> None:
    a = policy_actor_name("nj", "tiny", FINGERPRINT)
    b = policy_actor_name("nj", "tiny-b", FINGERPRINT)
    assert a != b
    assert a.startswith(policy_actor_prefix("nj", "tiny"))
    assert not b.startswith(policy_actor_prefix("nj", "tiny"))  # the prefix ends the model
    assert a.startswith(policy_actor_prefix("nj")) and b.startswith(policy_actor_prefix("nj"))
    assert not a.startswith(policy_actor_prefix("nj", "tiny-b"))


def test_names_are_name_safe_and_distinct_for_ids_that_read_alike() -> None:
    slash = policy_actor_name("my.app", "org/model-1.5", FINGERPRINT)
    under = policy_actor_name("my.app", "org_model-1_5", FINGERPRINT)
    assert slash != under  # the hash covers the model ID itself
    assert slash.startswith("nightjar-policy.my_app.org_model-1_5.")
    assert slash.count(".") == 3  # a dot ends each part: app, model, hash


def test_another_fingerprint_gets_a_fresh_actor() -> None:
    other = {**FINGERPRINT, "gamma_max": 5}
    assert policy_actor_name("nj", "tiny", FINGERPRINT) != policy_actor_name("nj", "tiny", other)
    assert policy_actor_name("nj", "tiny", FINGERPRINT) == policy_actor_name(
        "nj", "tiny", dict(reversed(FINGERPRINT.items()))
    )
