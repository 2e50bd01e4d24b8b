"""The user-facing config: every field is described, and test-only switches stay out of
the product schema (the JSON schema the Helm chart validates and the docs describe)."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.ops.chart_schema import build_values_schema
from nightjar_ray.policy.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
CHART_SCHEMA = ROOT / "k8s" / "nightjar-ray" / "values.schema.json"
TEST_ONLY = ("testing", "chaos_", "self_check", "forced_", "skip_catch_up", "policy_overrides")


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models a field's annotation holds (``X``, ``X | None``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _nested_models(arg)


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model reachable through its fields."""
    seen: list[type[BaseModel]] = []
    todo = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo.extend(_nested_models(field.annotation))
    return seen


def _user_facing_models() -> list[type[BaseModel]]:
    """The Serve app's ``nightjar:`` block and what it nests, plus the config of each policy
    an operator can pick (what ``policy_params`` may hold)."""
    models = _models(NightjarConfig)
    for spec in REGISTRY.values():
        models += [m for m in _models(spec.operator_cls or spec.config_cls) if m not in models]
    return models


def _undescribed(models: list[type[BaseModel]]) -> list[str]:
    return [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]


def test_every_user_facing_field_has_a_description() -> None:
    models = _user_facing_models()
    assert {"NightjarConfig", "PoolingConfig", "ElasticMemoryConfig", "FixedPolicyConfig"} <= {
        m.__name__ for m in models
    }
    assert _undescribed(models) == []


def test_a_field_without_a_description_is_caught() -> None:
    class Pooling(BaseModel):
        interval_s: float = Field(1.0, description="Seconds between syncs.")
        retries: int = 3

    class Block(BaseModel):
        name: str = Field("x", description="A name.")
        pooling: Pooling | None = Field(None, description="Nested.")

    assert _undescribed(_models(Block)) == ["Pooling.retries"]


def _property_names(schema: Any) -> Iterator[str]:
    """Every property name anywhere in a JSON schema document."""
    if isinstance(schema, dict):
        for name, sub in schema.get("properties", {}).items():
            yield name
            yield from _property_names(sub)
        for key, sub in schema.items():
            if key != "properties":
                yield from _property_names(sub)
    elif isinstance(schema, list):
        for item in schema:
            yield from _property_names(item)


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(NightjarConfig.model_json_schema(), id="NightjarConfig"),
        pytest.param(build_values_schema(), id="chart-generated"),
        pytest.param(json.loads(CHART_SCHEMA.read_text()), id="chart-committed"),
    ],
)
def test_the_product_schema_holds_no_test_only_field(schema: dict[str, Any]) -> None:
    names = set(_property_names(schema))
    assert {"policy", "gamma_max", "elastic_memory", "draft_sync"} <= names  # walked it all
    assert [n for n in names if n.startswith(TEST_ONLY)] == []
    assert names.isdisjoint(TestingConfig.model_fields)
    assert "TestingConfig" not in schema["$defs"]
    nightjar = schema["$defs"].get("NightjarConfig", schema)  # the chart hoists it to $defs
    assert nightjar["properties"]["draft_sync"]["enum"] == ["catch-up", "stock"]


def test_the_testing_block_still_validates_where_tests_set_it() -> None:
    """Left out of the schema, not out of validation: a typo or a bad value is an error."""
    assert NightjarConfig(testing={"chaos_cycle_steps": 2}).testing.chaos_cycle_steps == 2
    with pytest.raises(ValueError, match=r"testing\.chaos_cycle_stps"):
        NightjarConfig(testing={"chaos_cycle_stps": 2})
    with pytest.raises(ValueError, match=r"testing\.forced_steps_per_gamma"):
        NightjarConfig(testing={"forced_steps_per_gamma": 0})


def test_no_test_policy_is_registered() -> None:
    description = NightjarConfig.model_fields["policy"].description or ""
    assert "cyclic" not in REGISTRY and "forced" not in REGISTRY
    assert all(name in description for name in REGISTRY)
