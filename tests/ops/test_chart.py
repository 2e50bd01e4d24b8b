"""The Helm chart, rendered and linted by Helm's Go SDK, checked against KubeRay's CRD
schema and the app's own config model."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightjar_ray.engine.config import PoolingConfig
from nightjar_ray.serve.config import parse_app_config

from .conftest import CHART, PRESETS, ROOT, preset, render
from .crd import rayservice_errors

CASES = {"default": None, **{name: name for name in PRESETS}}
ALERTS = {
    "NightjarPolicySyncStale",
    "NightjarPolicySyncFailing",
    "NightjarDraftThrashing",
    "NightjarQueueGrowingWhileSpeculating",
    "NightjarKVFreeBelowTauLow",
    "NightjarMetricsAbsent",
}


def _values(case: str | None) -> dict[str, Any] | None:
    return preset(case) if case else None


@pytest.fixture(scope="module", params=sorted(CASES))
def rendered(request: pytest.FixtureRequest) -> tuple[str, dict[str, list[Any]]]:
    return request.param, render(_values(CASES[request.param]))


def test_presets_exist() -> None:
    assert set(PRESETS) == {"gpu-7b", "gpu-32b-tp2"}


def test_lint_clean_for_defaults_and_presets() -> None:
    import helm_python as helm

    for case in CASES.values():
        result = helm.lint(CHART, _values(case))
        assert result["errors"] == [], (case, result)
        bad = [m for m in result["messages"] if m["severity"] > 1]  # 1 = INFO
        assert bad == [], (case, bad)


def test_manifests_are_the_expected_objects(rendered: tuple[str, dict[str, list[Any]]]) -> None:
    _, docs = rendered
    assert {k: len(v) for k, v in docs.items()} == {
        "ConfigMap": 1,
        "NOTES": 1,
        "PodMonitor": 2,
        "PrometheusRule": 1,
        "RayService": 1,
    }
    for kind in ("ConfigMap", "PodMonitor", "PrometheusRule", "RayService"):
        for doc in docs[kind]:
            assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "nj"


def test_rayservice_validates_against_kuberay_crd(
    rendered: tuple[str, dict[str, list[Any]]],
) -> None:
    _, docs = rendered
    (service,) = docs["RayService"]
    assert service["apiVersion"] == "ray.io/v1"
    assert rayservice_errors(service) == []


def test_crd_validation_can_fail() -> None:
    (service,) = render()["RayService"]
    bad = copy.deepcopy(service)
    bad["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicaz"] = 1
    errors = rayservice_errors(bad)
    assert any("num-cpus" in e for e in errors), errors
    assert any("replicaz" in e for e in errors), errors


def test_serve_config_parses_into_the_app_config(
    rendered: tuple[str, dict[str, list[Any]]],
) -> None:
    case, docs = rendered
    (service,) = docs["RayService"]
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    deploy_file = {"default": "gpu-7b", "gpu-7b": "gpu-7b", "gpu-32b-tp2": "gpu-32b-tp2"}[case]
    # One schema: the chart's serveConfig is a deploy/ file's content, value for value.
    assert serve_config == yaml.safe_load((ROOT / "deploy" / f"{deploy_file}.yaml").read_text())
    for app in serve_config["applications"]:
        parsed = parse_app_config(app["args"])
        spec = app["args"]["engine_kwargs"]["speculative_config"]
        assert parsed.nightjar.num_speculative_tokens == spec["num_speculative_tokens"]


def test_worker_groups_request_the_gpus_tensor_parallelism_needs(
    rendered: tuple[str, dict[str, list[Any]]],
) -> None:
    _, docs = rendered
    (service,) = docs["RayService"]
    apps = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    tp = apps[0]["args"]["engine_kwargs"].get("tensor_parallel_size", 1)
    (group,) = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    (container,) = group["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == str(tp)
    assert group["rayStartParams"]["num-gpus"] == str(tp)
    scaling = apps[0]["args"]["deployment_config"]["autoscaling_config"]
    assert group["maxReplicas"] == scaling["max_replicas"]


def test_policy_pool_volume_is_mounted_on_the_head_where_the_actor_writes() -> None:
    """The actor runs on the head (``pooling.actor_node: head``): the snapshot volume is
    mounted there only, so a ReadWriteOnce claim never keeps a worker pod pending."""
    (service,) = render()["RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    (head,) = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    assert {m["name"]: m["mountPath"] for m in head["volumeMounts"]}["policy-pool"] == (
        PoolingConfig().snapshot_dir
    )
    for group in cluster["workerGroupSpecs"]:
        (worker,) = group["template"]["spec"]["containers"]
        assert "policy-pool" not in {m["name"] for m in worker["volumeMounts"]}


def test_the_policy_actor_stays_on_the_head(
    rendered: tuple[str, dict[str, list[Any]]],
) -> None:
    _, docs = rendered
    (service,) = docs["RayService"]
    for app in yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]:
        assert parse_app_config(app["args"]).nightjar.pooling.actor_node == "head"


def test_an_actor_off_the_head_is_refused_at_install() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match="nightjar/pooling/actor_node"):
        render(_app_with({"pooling": {"actor_node": "any"}}))


def test_the_chart_works_as_a_subchart_with_global_values(tmp_path: Path) -> None:
    """A parent chart depending on this one through a file:// dependency (Helm copies
    ``global`` into every subchart's values, which its schema must allow)."""
    import helm_python as helm

    parent = tmp_path / "parent"
    parent.mkdir()
    dependency = {"name": "nightjar-ray", "version": "0.1.0", "repository": f"file://{CHART}"}
    chart = {"apiVersion": "v2", "name": "parent", "version": "0.0.1", "dependencies": [dependency]}
    (parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
    values = {
        "global": {"imageRegistry": "registry.example.com"},
        "nightjar-ray": {"serviceAccount": {"create": True}},
    }
    (parent / "values.yaml").write_text(yaml.safe_dump(values))
    helm.dependency_update(parent, skip_refresh=True)
    with helm.Chart.load(parent) as loaded:
        out = loaded.render(None, name="app", namespace="llm", is_install=True)
    docs = [
        d
        for path, text in out.items()
        if path.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if d
    ]
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    assert rayservice_errors(service) == []
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == "app-nightjar-ray"


def test_monitoring_objects() -> None:
    docs = render()
    monitors = {
        m["spec"]["selector"]["matchLabels"]["ray.io/node-type"] for m in docs["PodMonitor"]
    }
    assert monitors == {"head", "worker"}
    for m in docs["PodMonitor"]:
        assert m["metadata"]["labels"]["release"] == "prometheus"
        assert m["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    (rule,) = docs["PrometheusRule"]
    assert {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]} == ALERTS
    (dash,) = docs["ConfigMap"]
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = dash["data"].values()
    assert json.loads(text) == json.loads((ROOT / "dashboards" / "nightjar-ray.json").read_text())
    (notes,) = docs["NOTES"]
    assert "nj-nightjar-ray-serve-svc" in notes and "8080" in notes


def test_monitoring_toggles_off() -> None:
    off = {"enabled": False}
    docs = render({"monitoring": {"podMonitor": off, "prometheusRule": off, "dashboards": off}})
    assert set(docs) == {"NOTES", "RayService"}


def test_thresholds_reach_the_rules() -> None:
    docs = render({"monitoring": {"prometheusRule": {"kvFreeLowFraction": 0.25}}})
    (rule,) = docs["PrometheusRule"]
    exprs = {r["alert"]: r["expr"] for r in rule["spec"]["groups"][0]["rules"]}
    assert "< 0.25 * sum" in exprs["NightjarKVFreeBelowTauLow"]


BAD_VALUES = [
    ({"workerGroups": [{"name": "g", "replicas": 1, "minReplicas": 0, "maxReplicas": 1,
                        "gpusPerPod": 0, "resources": {}}]}, "/workerGroups/0/gpusPerPod"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"monitoring": {"prometheusRule": {"kvFreeLowFraction": 2}}},
     "/monitoring/prometheusRule/kvFreeLowFraction"),
    ({"workerGroup": []}, "workerGroup"),
]  # fmt: skip


def _app_with(nightjar: dict[str, Any]) -> dict[str, Any]:
    values = preset("gpu-7b")
    values["serveConfig"]["applications"][0]["args"]["nightjar"] = nightjar
    return values


@pytest.mark.parametrize(("values", "field"), BAD_VALUES)
def test_bad_values_fail_with_the_field_named(values: dict[str, Any], field: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match=field):
        render(values)


@pytest.mark.parametrize(
    ("nightjar", "field"),
    [
        ({"gamma_max": 0}, "nightjar/gamma_max"),
        ({"pooling": {"sync_interval_s": -1}}, "nightjar/pooling/sync_interval_s"),
        ({"draft_sync": "sometimes"}, "nightjar/draft_sync"),
        ({"draft_sync": "none"}, "nightjar/draft_sync"),
        ({"gama_max": 4}, "gama_max"),
    ],
)
def test_bad_nightjar_block_fails_at_install(nightjar: dict[str, Any], field: str) -> None:
    """The nightjar block is checked by NightjarConfig's own schema at `helm install`."""
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match=field):
        render(_app_with(nightjar))
    with pytest.raises(ValueError, match="invalid config: nightjar"):
        parse_app_config(_app_with(nightjar)["serveConfig"]["applications"][0]["args"])


def test_the_deprecated_gamma_max_installs_and_warns_naming_its_replacement() -> None:
    """The alias still installs (the schema marks it deprecated); the app warns."""
    values = _app_with({"gamma_max": 4})
    (service,) = render(values)["RayService"]
    assert rayservice_errors(service) == []
    replacement = r"nightjar\.gamma_max is deprecated: set engine_kwargs\.speculative_config\."
    with pytest.warns(DeprecationWarning, match=replacement):
        parsed = parse_app_config(values["serveConfig"]["applications"][0]["args"])
    assert parsed.nightjar.num_speculative_tokens == 4


def test_the_testing_block_is_not_part_of_the_chart() -> None:
    """Test-only switches (chaos runs set them through Serve) are refused at install."""
    import helm_python as helm

    nightjar = {"policy": "nightjar", "testing": {"chaos_cycle_steps": 3}}
    with pytest.raises(helm.HelmValuesError, match="testing"):
        render(_app_with(nightjar))
    parsed = parse_app_config(_app_with(nightjar)["serveConfig"]["applications"][0]["args"])
    assert parsed.nightjar.testing.chaos_cycle_steps == 3


def _two_model_app(second: dict[str, Any]) -> dict[str, Any]:
    """gpu-7b's application as Ray Serve LLM's `llm_configs` shape, plus `second`."""
    values = preset("gpu-7b")
    app = values["serveConfig"]["applications"][0]
    first = app["args"]
    app["args"] = {"llm_configs": [first, second]}
    return values


def _second_model(**nightjar: Any) -> dict[str, Any]:
    return {
        "model_loading_config": {"model_id": "b", "model_source": "org/b"},
        "engine_kwargs": {
            "speculative_config": {
                "method": "draft_model",
                "model": "org/b-draft",
                "num_speculative_tokens": 5,
            }
        },
        "nightjar": nightjar,
    }


def test_an_llm_configs_app_installs_and_matches_the_app_config() -> None:
    """Both config shapes pass the chart's schema; the app's own parser agrees."""
    values = _two_model_app(_second_model(policy="nightjar"))
    (service,) = render(values)["RayService"]
    assert rayservice_errors(service) == []
    args = values["serveConfig"]["applications"][0]["args"]
    assert [m.llm_config.model_id for m in parse_app_config(args).models] == [
        args["llm_configs"][0]["model_loading_config"]["model_id"],
        "b",
    ]


@pytest.mark.parametrize(
    ("second", "field"),
    [
        (_second_model(gamma_max=0), "llm_configs/1/nightjar/gamma_max"),
        (_second_model(policy="nightjar", pooling={"actor_node": "any"}), "actor_node"),
        ({"engine_kwargs": {}}, "model_loading_config"),
    ],
)
def test_a_bad_model_of_an_llm_configs_app_fails_at_install(
    second: dict[str, Any], field: str
) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match=field):
        render(_two_model_app(second))


def test_each_models_snapshot_dir_must_lie_under_the_mount() -> None:
    import helm_python as helm

    values = _two_model_app(_second_model(pooling={"snapshot_dir": "/elsewhere"}))
    with pytest.raises(helm.HelmError, match=r"applications\[0\].args.llm_configs\[1\].nightjar"):
        render(values)


def test_the_install_notes_name_every_model_of_an_llm_configs_app() -> None:
    (notes,) = render(_two_model_app(_second_model()))["NOTES"]
    assert "models deepseek-r1-distill-qwen-7b, b" in notes
