"""The chart's optional values (storage, scheduling, security, service account, API key):
each renders nothing when unset, and when set renders where KubeRay expects it, lints and
validates against KubeRay's CRD schema. Also the README generated from the schema."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from nightjar_ray.ops.artifacts import CHART_DIR
from nightjar_ray.ops.chart_readme import chart_readme, undescribed_keys
from nightjar_ray.ops.chart_schema import build_values_schema

from .conftest import CHART, ROOT, render
from .crd import rayservice_errors

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
            ]
        }
    }
}
EVERYTHING: dict[str, Any] = {
    "global": {"imageRegistry": "registry.example.com"},
    "serviceAccount": {"create": True, "annotations": {"iam.gke.io/gcp-service-account": "x"}},
    "podAnnotations": {"team": "llm"},
    "nodeSelector": {"pool": "gpu"},
    "affinity": AFFINITY,
    "tolerations": [TOLERATION],
    "priorityClassName": "llm-serving",
    "podSecurityContext": {"fsGroup": 1000},
    "securityContext": {"allowPrivilegeEscalation": False},
    "extraVolumes": [{"name": "profiles", "configMap": {"name": "switch-cost"}}],
    "extraVolumeMounts": [{"name": "profiles", "mountPath": "/profiles", "readOnly": True}],
    "modelCache": {"enabled": True, "storageClass": "filestore", "size": "200Gi"},
    "policyPool": {"persistence": {"enabled": True}},
    "auth": {"apiKeySecret": {"name": "nightjar-api", "key": "token"}},
    "head": {"nodeSelector": {"pool": "cpu"}, "podAnnotations": {"role": "head"}},
}


def _pods(docs: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    """Pod specs by group (``head`` and each worker group's name)."""
    (service,) = docs["RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    pods = {"head": cluster["headGroupSpec"]["template"]}
    pods.update({g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]})
    return pods


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod["spec"]["containers"]
    return container


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(pod).get("env", [])}


def test_every_value_set_renders_lints_and_validates() -> None:
    import helm_python as helm

    docs = render(EVERYTHING)
    (service,) = docs["RayService"]
    assert rayservice_errors(service) == []
    result = helm.lint(CHART, EVERYTHING)
    assert result["errors"] == [], result
    assert [m for m in result["messages"] if m["severity"] > 1] == []
    assert {d["metadata"]["name"] for d in docs["PersistentVolumeClaim"]} == {
        "nj-nightjar-ray-model-cache",
        "nj-nightjar-ray-policy-pool",
    }
    (account,) = docs["ServiceAccount"]
    assert account["metadata"]["annotations"] == EVERYTHING["serviceAccount"]["annotations"]


def test_unset_values_render_nothing() -> None:
    docs = render()
    assert "PersistentVolumeClaim" not in docs and "ServiceAccount" not in docs
    for pod in _pods(docs).values():
        spec = pod["spec"]
        assert "annotations" not in pod["metadata"]
        for key in ("serviceAccountName", "priorityClassName", "securityContext", "affinity"):
            assert key not in spec
        assert "nodeSelector" not in spec and "tolerations" not in spec
        assert "securityContext" not in _container(pod)
        assert {"HF_HOME", "NIGHTJAR_API_KEY"}.isdisjoint(_env(pod))
        assert {v["name"] for v in spec["volumes"]} <= {"dshm", "policy-pool"}


def test_scheduling_and_security_reach_every_group_with_head_overrides() -> None:
    pods = _pods(render(EVERYTHING))
    for name, pod in pods.items():
        spec = pod["spec"]
        assert spec["serviceAccountName"] == "nj-nightjar-ray"
        assert spec["priorityClassName"] == "llm-serving"
        assert spec["securityContext"] == {"fsGroup": 1000}
        assert spec["affinity"] == AFFINITY and spec["tolerations"] == [TOLERATION]
        assert _container(pod)["securityContext"] == {"allowPrivilegeEscalation": False}
        assert spec["nodeSelector"] == ({"pool": "cpu"} if name == "head" else {"pool": "gpu"})
        role = {"role": "head"} if name == "head" else {}
        assert pod["metadata"]["annotations"] == {"team": "llm", **role}
        mounts = {m["name"]: m["mountPath"] for m in _container(pod)["volumeMounts"]}
        assert mounts["profiles"] == "/profiles"
        assert {"name": "profiles", "configMap": {"name": "switch-cost"}} in spec["volumes"]


def test_worker_group_overrides_replace_the_top_level_value() -> None:
    group = yaml.safe_load((CHART / "values.yaml").read_text())["workerGroups"][0]
    group |= {"tolerations": [], "priorityClassName": "batch", "affinity": {}}
    pods = _pods(
        render({"priorityClassName": "llm", "tolerations": [TOLERATION], "workerGroups": [group]})
    )
    assert pods["head"]["spec"]["priorityClassName"] == "llm"
    assert pods["gpu"]["spec"]["priorityClassName"] == "batch"
    assert pods["gpu"]["spec"]["tolerations"] == [TOLERATION]  # empty: the top-level value


def test_service_account_by_name_without_creating_one() -> None:
    docs = render({"serviceAccount": {"name": "existing"}})
    assert "ServiceAccount" not in docs
    assert {p["spec"]["serviceAccountName"] for p in _pods(docs).values()} == {"existing"}


def test_model_cache_is_mounted_on_workers_with_hf_home() -> None:
    pods = _pods(render({"modelCache": {"enabled": True, "existingClaim": "weights"}}))
    assert "model-cache" not in {v["name"] for v in pods["head"]["spec"]["volumes"]}
    worker = pods["gpu"]
    volume = {v["name"]: v for v in worker["spec"]["volumes"]}["model-cache"]
    assert volume["persistentVolumeClaim"] == {"claimName": "weights"}
    mounts = {m["name"]: m["mountPath"] for m in _container(worker)["volumeMounts"]}
    assert _env(worker)["HF_HOME"] == mounts["model-cache"] == "/home/ray/.cache/huggingface"
    assert "PersistentVolumeClaim" not in render(
        {"modelCache": {"enabled": True, "existingClaim": "w"}}
    )


def test_policy_snapshot_claim_on_the_head() -> None:
    docs = render({"policyPool": {"persistence": {"enabled": True, "existingClaim": "pool"}}})
    volumes = {v["name"]: v for v in _pods(docs)["head"]["spec"]["volumes"]}
    assert volumes["policy-pool"] == {
        "name": "policy-pool",
        "persistentVolumeClaim": {"claimName": "pool"},
    }


def test_api_key_from_the_secret_on_head_and_workers_and_monitoring_needs_none() -> None:
    docs = render({"auth": {"apiKeySecret": {"name": "nightjar-api", "key": "token"}}})
    ref = {"secretKeyRef": {"name": "nightjar-api", "key": "token"}}
    for pod in _pods(docs).values():
        assert _env(pod)["NIGHTJAR_API_KEY"] == ref
        # KubeRay's own probes (Ray health, Serve's /-/healthz) stay: the chart sets none.
        assert not {"livenessProbe", "readinessProbe"} & set(_container(pod))
    for monitor in docs["PodMonitor"]:
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] == "metrics"
        assert not {"authorization", "bearerTokenSecret", "basicAuth"} & set(endpoint)
    (notes,) = docs["NOTES"]
    assert "Authorization: Bearer $NIGHTJAR_API_KEY" in notes


def _with_snapshot_dir(snapshot_dir: str, mount: str = "/tmp/nightjar-ray/policy-pool") -> Any:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["serveConfig"]["applications"][0]["args"]["nightjar"]["pooling"]["snapshot_dir"] = (
        snapshot_dir
    )
    return {"serveConfig": values["serveConfig"], "policyPool": {"mountPath": mount}}


@pytest.mark.parametrize(
    ("snapshot_dir", "mount"),
    [
        ("/tmp/nightjar-ray/policy-pool", "/tmp/nightjar-ray/policy-pool"),
        ("/data/pool/7b", "/data/pool"),
        ("file:///data/pool", "/data/pool"),
        ("s3://bucket/pools", "/tmp/nightjar-ray/policy-pool"),
        ("gs://bucket/pools?anonymous=false", "/data/pool"),
    ],
)
def test_snapshot_dir_under_the_mount_or_an_object_store_renders(
    snapshot_dir: str, mount: str
) -> None:
    (service,) = render(_with_snapshot_dir(snapshot_dir, mount))["RayService"]
    assert snapshot_dir in service["spec"]["serveConfigV2"]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (_with_snapshot_dir("/data/pool"), '"/data/pool" is not under policyPool.mountPath'),
        (_with_snapshot_dir("/tmp/nightjar-ray/policy-pool-2"), "policy-pool-2"),
        (
            {"policyPool": {"mountPath": "/data/pool"}},
            '"/tmp/nightjar-ray/policy-pool" is not under',
        ),
    ],
)
def test_a_local_snapshot_dir_off_the_mount_fails_with_the_field_named(
    values: Any, named: str
) -> None:
    import helm_python as helm

    with pytest.raises(
        helm.HelmError, match=r"applications\[0\]\.args\.nightjar\.pooling\.snapshot_dir"
    ):
        render(values)
    with pytest.raises(helm.HelmError, match=named):
        render(values)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"modelCache": {"accessModes": ["ReadWriteSometimes"]}}, "/modelCache/accessModes/0"),
        ({"policyPool": {"persistence": {"size": "a lot"}}}, "/policyPool/persistence/size"),
        ({"auth": {"apiKeySecret": {"name": "s", "key": ""}}}, "/auth/apiKeySecret/key"),
        ({"head": {"tolerations": {"key": "x"}}}, "/head/tolerations"),
        ({"serviceAccount": {"crate": True}}, "crate"),
    ],
)
def test_bad_new_values_fail_with_the_field_named(values: dict[str, Any], field: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match=field):
        render(values)


def test_every_chart_key_is_described() -> None:
    schema = build_values_schema()
    assert undescribed_keys(schema) == []
    schema["properties"]["image"]["properties"]["tag"].pop("description")
    assert undescribed_keys(schema) == ["image.tag"]


def test_committed_readme_is_the_generated_one() -> None:
    """Regenerate with `make generate` (`nightjar-ray dashboards generate`)."""
    text = chart_readme(ROOT / CHART_DIR)
    assert (ROOT / CHART_DIR / "README.md").read_text() == text
    for key in ("modelCache.existingClaim", "workerGroups[].affinity", "auth.apiKeySecret.name"):
        assert f"| `{key}` |" in text
    assert '| `modelCache.accessModes` | list of "ReadWriteOnce"' in text
    assert '| `auth.apiKeySecret.key` | string | `"api-key"` |' in text
