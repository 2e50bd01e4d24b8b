"""The Serve app on real Ray, real Ray Serve LLM and real vLLM (CPU), tiny generated pair.

One local Ray cluster and one app for the module (deploying takes minutes on 2 cores):
OpenAI endpoints, greedy outputs against an offline engine, bad requests, the
``nightjar_*`` metrics on Ray's metrics port, autoscaling to two replicas (warm start and
pooling through the policy actor), and killing the policy actor under load.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.engine.offline import offline_engine, run_batch
from nightjar_ray.metrics.definitions import METRICS_BY_NAME
from nightjar_ray.models.pair import generate_pair
from nightjar_ray.serve.config import GENERATED_PAIRS, cache_dir
from nightjar_ray.serve.context import NAMESPACE

from .conftest import AUTOSCALING, MODEL_ID, app_args, free_port, get, post

pytestmark = pytest.mark.engine

APP = "nj"
PROMPTS = ["def parse(self, args):", "import json\nclass Config:", "return value if"]


@dataclass
class App:
    url: str
    metrics_url: str
    snapshot_dir: Path
    idle_gauges: dict[str, float] = field(default_factory=dict)
    """The Nightjar gauges scraped once the app was up, before any request."""

    def completion(self, prompt: Any, max_tokens: int = 24, **extra: Any) -> tuple[int, Any]:
        body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": max_tokens, **extra}
        return post(f"{self.url}/v1/completions", {"temperature": 0.0, **body})


def _wait(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _actor() -> Any:
    import ray

    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == NAMESPACE and a["name"].startswith(f"nightjar-policy.{APP}.")
    ]
    assert len(names) == 1, names
    return ray.get_actor(names[0], namespace=NAMESPACE)


def _status() -> dict[str, Any]:
    import ray

    status: dict[str, Any] = ray.get(_actor().status.remote(), timeout=30)
    return status


def _status_or_none() -> dict[str, Any] | None:
    """The status, or ``None`` while the actor is restarting."""
    from ray.exceptions import RayError

    try:
        return _status()
    except RayError:
        return None


def _deploy(snapshot_dir: Path) -> None:
    from ray import serve

    from nightjar_ray.serve import build_app

    args = app_args(snapshot_dir, {"autoscaling_config": AUTOSCALING})
    serve.run(build_app(args), name=APP, route_prefix="/")


@pytest.fixture(scope="module")
def app(nightjar_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    import ray
    from ray import serve

    http_port, metrics_port = free_port(), free_port()
    snapshot_dir = tmp_path_factory.mktemp("pool")
    ray.init(num_cpus=8, _metrics_export_port=metrics_port, include_dashboard=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        _deploy(snapshot_dir)
        app = App(f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{metrics_port}", snapshot_dir)
        app.idle_gauges.update(_idle_gauges(app))
        yield app
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()


def _idle_gauges(app: App) -> dict[str, float]:
    """The Nightjar gauges once the KV ones are exported (what the soak reads idle)."""
    from nightjar_ray.loadgen.soak import metrics_sampler, wait_for_gauges

    sampler = metrics_sampler(f"{app.metrics_url}/metrics")
    wait_for_gauges(sampler, timeout_s=60.0)
    return sampler()[1]


def _stream(app: App, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        f"{app.url}{path}",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    chunks = []
    with urllib.request.urlopen(req, timeout=300) as resp:
        assert resp.status == 200
        lines = resp.read().decode().splitlines()
    assert lines[-1] == "" or lines[-1] == "data: [DONE]"
    assert "data: [DONE]" in lines
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line[6:]))
    return chunks


def test_openai_endpoints_serve_concurrent_streaming_and_plain_requests(app: App) -> None:
    status, models = get(f"{app.url}/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == [MODEL_ID]
    chat = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    comp = {"model": MODEL_ID, "prompt": PROMPTS[0], "max_tokens": 16}
    jobs: list[Callable[[], Any]] = [
        lambda: post(f"{app.url}/v1/completions", comp),
        lambda: post(f"{app.url}/v1/completions", {**comp, "prompt": PROMPTS[1]}),
        lambda: post(f"{app.url}/v1/chat/completions", chat),
        lambda: _stream(app, "/v1/completions", comp),
        lambda: _stream(app, "/v1/completions", {**comp, "prompt": PROMPTS[2]}),
        lambda: _stream(app, "/v1/chat/completions", chat),
    ]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = [f.result() for f in [pool.submit(job) for job in jobs]]
    for status, body in results[:3]:
        assert status == 200, body
        assert body["usage"]["completion_tokens"] > 0
        choice = body["choices"][0]
        assert choice["finish_reason"] in ("length", "stop")
        assert isinstance(choice.get("text", choice.get("message", {}).get("content")), str)
    for chunks in results[3:]:
        assert chunks and all(c["model"] == MODEL_ID for c in chunks)
        assert any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks)


def test_greedy_outputs_through_the_endpoint_equal_plain_offline_decoding(app: App) -> None:
    prompts = [[(7 * i + 3 * j) % 1000 + 2 for j in range(5 + 9 * i)] for i in range(4)]
    served = []
    for prompt in prompts:
        status, body = app.completion(prompt, 32, ignore_eos=True, return_token_ids=True)
        assert status == 200, body
        served.append(body["choices"][0]["token_ids"])
    pair = generate_pair(cache_dir() / "pairs" / "tiny", GENERATED_PAIRS["tiny"])
    engine = app_args(app.snapshot_dir)["engine_kwargs"]
    limits = {k: engine[k] for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens")}
    with offline_engine(pair, None, **limits) as llm:
        reference = run_batch(llm, prompts, 32).token_ids
    assert served == reference


def test_bad_requests_get_4xx_with_a_message_and_the_replica_keeps_serving(app: App) -> None:
    cases = {
        "bad json": post(f"{app.url}/v1/completions", None, raw=b"{not json"),
        "unknown model": post(
            f"{app.url}/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 4}
        ),
        "negative max_tokens": app.completion("x", -1),
        "over context": app.completion([5] * 400, 8),
    }
    for name, (status, body) in cases.items():
        assert 400 <= status < 500, (name, status, body)
        assert len(_message(body)) > 10, (name, body)
    assert "max_tokens" in _message(cases["negative max_tokens"][1])
    assert "nope" in _message(cases["unknown model"][1])
    status, body = app.completion(PROMPTS[0], 8)
    assert status == 200 and body["usage"]["completion_tokens"] == 8


def _message(body: Any) -> str:
    """The error text of an OpenAI-style (``error.message``) or FastAPI (``detail``) body."""
    if isinstance(body, dict):
        error = body.get("error")
        return str(error.get("message") if isinstance(error, dict) else body.get("detail", ""))
    return str(body)


def _scrape(app: App) -> list[Any]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{app.metrics_url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def _series(samples: list[Any], name: str) -> list[Any]:
    return [s for s in samples if s.name == METRICS_BY_NAME[name].exported_name]


def test_metrics_expose_nightjar_series_consistent_with_the_load(app: App) -> None:
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: app.completion(p, 24), PROMPTS * 2))
    report = _wait(
        lambda: next(iter(_status()["replicas"].values()))["report"], 60, "a replica report"
    )

    def settled() -> list[Any] | None:  # idle engine: metrics equal the latest report
        samples = _scrape(app)
        now = next(iter(_status()["replicas"].values()))["report"]
        steps = sum(s.value for s in _series(samples, "nightjar_steps"))
        return samples if steps == now["num_steps"] > report["num_steps"] - 1 else None

    samples = _wait(settled, 90, "nightjar_steps_total to reach the engine's step count")
    steps = sum(s.value for s in _series(samples, "nightjar_steps"))
    assert steps > 0
    decisions = sum(s.value for s in _series(samples, "nightjar_decisions"))
    assert 0 < decisions <= steps
    observed = _series(samples, "nightjar_observed_steps")[0].value
    assert 0 < observed <= steps
    assert _series(samples, "nightjar_goodput_tokens")[0].value > observed - 1
    total = _series(samples, "nightjar_kv_blocks")[0].value
    assert 0 < _series(samples, "nightjar_kv_free_blocks")[0].value <= total
    assert _series(samples, "nightjar_waiting_requests")[0].value == 0
    assert _series(samples, "nightjar_draft_resident")[0].value == 1
    assert _series(samples, "nightjar_policy_sync_age_seconds")[0].value < 30
    labels = _series(samples, "nightjar_steps")[0].labels
    assert labels["model"] == MODEL_ID and labels["deployment"]
    vllm = [s for s in samples if s.name.startswith("ray_vllm_")]
    assert {s.labels.get("ReplicaId") for s in vllm} >= {labels["replica"]}
    assert any("spec_decode" in s.name for s in vllm)


def test_a_fresh_idle_replica_exports_its_kv_gauges(app: App) -> None:
    """Before its first request a replica reports its KV blocks, all free (an idle engine
    never schedules; the soak's idle reading and the dashboards need the series)."""
    gauges = app.idle_gauges
    assert gauges.get("ray_nightjar_kv_blocks", 0) > 0, gauges
    assert gauges["ray_nightjar_kv_free_blocks"] == gauges["ray_nightjar_kv_blocks"], gauges
    assert gauges["ray_nightjar_running_requests"] == 0, gauges


def test_soak_sampler_reads_the_real_servers_memory_and_kv_blocks(app: App) -> None:
    """A short `soak` run: RSS of the replica, engine-core and worker processes and the KV
    gauges come from the real server; no request fails; every KV block comes back."""
    from nightjar_ray.loadgen.soak import metrics_sampler, run_soak
    from nightjar_ray.workload import RequestSpec

    sampler = metrics_sampler(f"{app.metrics_url}/metrics")
    reqs = [RequestSpec(i, 0.5 * i, 40, 16, tuple(range(20 + i, 60 + i))) for i in range(16)]
    samples, before, _, run = run_soak(app.url, MODEL_ID, reqs, sampler, 2.0, settle_s=0.0)
    assert all(r.ok for r in run.records) and len(run.records) == 16
    assert len(samples) >= 3
    assert all(v > 50 * 2**20 for v in samples[-1].rss_bytes.values()), samples[-1].rss_bytes
    idle_free = before.gauges["ray_nightjar_kv_free_blocks"]
    assert 0 < idle_free <= before.gauges["ray_nightjar_kv_blocks"]
    _wait(
        lambda: sampler()[1].get("ray_nightjar_kv_free_blocks") == idle_free or None,
        60,
        "the free KV blocks to return to their idle count",
    )


def _expected_count(fingerprint: dict[str, Any], report: dict[str, Any]) -> float:
    """The pool's count for a replica's observations: steps (step-mean), tokens
    (token-weighted), tokens in each of two tables (factored)."""
    estimator = fingerprint.get("latency_estimator")
    if estimator == "step-mean":
        return float(report["num_observed_steps"])
    return (2.0 if estimator == "factored" else 1.0) * report["observed_tokens"]


def test_a_second_replica_warm_starts_and_the_pool_is_the_sum_of_both(app: App) -> None:
    """Autoscaling (more than 8 requests in flight) starts a second replica."""
    before = _status()
    assert len(before["replicas"]) == 1 and before["pool_count"] > 0
    stop = threading.Event()

    def worker(i: int) -> list[int]:
        codes = []
        while not stop.is_set():
            codes.append(app.completion(PROMPTS[i % 3], 48, ignore_eos=True)[0])
        return codes

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(worker, i) for i in range(16)]
        try:
            status = _wait(
                lambda: len((s := _status())["replicas"]) == 2 and s, 420, "a second replica"
            )
        finally:
            stop.set()
        codes = [c for f in futures for c in f.result()]
    assert codes and set(codes) == {200}
    (new,) = set(status["replicas"]) - set(before["replicas"])
    assert status["replicas"][new]["warm_start_count"] >= before["pool_count"] > 0

    def both_observed() -> bool:  # the router may send a short burst to one replica only
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(lambda i: app.completion(PROMPTS[i % 3], 24), range(18)))
        time.sleep(2.0)  # a sync
        reps = _status()["replicas"].values()
        return all(r["report"]["num_observed_steps"] > 0 for r in reps)

    _wait(both_observed, 180, "both replicas to observe steps")

    def quiet() -> dict[str, Any] | None:  # both replicas synced twice since the load
        first = _status()
        time.sleep(2.0)
        second = _status()
        reps = second["replicas"].values()
        same = first["pool_count"] == second["pool_count"]
        return second if same and all(r["report"]["policy_count"] for r in reps) else None

    status = _wait(quiet, 60, "the pool to settle")
    reps = status["replicas"].values()
    assert all(r["report"]["num_observed_steps"] > 0 for r in reps)
    fingerprint = status["fingerprint"]
    assert status["pool_count"] == pytest.approx(sum(r["pushed_count"] for r in reps))
    expected = sum(_expected_count(fingerprint, r["report"]) for r in reps)
    assert status["pool_count"] == pytest.approx(expected)
    for r in reps:  # every replica decides from the merged table
        assert r["report"]["policy_count"] == pytest.approx(status["pool_count"])


def test_killing_one_of_two_replicas_under_load(app: App) -> None:
    """The chaos scenario: kill one of the two replicas (after the autoscaling test) under
    open-loop load. Only requests in flight at the kill may fail; Serve replaces the
    replica; every successful greedy output equals its prompt's reference."""
    from nightjar_ray.cli import faults
    from nightjar_ray.loadgen.chaos import chaos_requests, reference_texts, run_chaos

    assert len(faults.llm_replicas(APP)) == 2
    prompts = [tuple(range(20 + i, 40 + i)) for i in range(3)]
    references = reference_texts(app.url, MODEL_ID, prompts, 16)
    requests = chaos_requests(prompts, 3.0, 20.0, 16, seed=0)
    killed: dict[str, str] = {}

    def fault() -> None:
        killed["name"] = faults.kill_one_replica(APP)

    def recovered() -> bool:
        return "name" in killed and faults.replicas_replaced(APP, killed["name"], 2)

    report, run = run_chaos(
        "replica-kill", app.url, MODEL_ID, requests, references, fault, recovered, 6.0, 420.0
    )
    assert report.recovery_s is not None, report
    assert report.num_compared > 0 and report.num_mismatched == 0, report
    for r in run.records:
        if not r.ok:  # sent before the kill (in flight on the killed replica)
            assert r.start_s <= report.fault_at_s + 1.0, (r.status, r.start_s, report)
    assert report.num_failed < len(run.records) / 2, report


def test_killing_the_policy_actor_under_load_fails_no_request(app: App) -> None:
    import ray

    before = _status()
    results: list[tuple[int, Any]] = []
    stop = threading.Event()

    def worker(i: int) -> None:
        while not stop.is_set():
            results.append(app.completion(PROMPTS[i % 3], 16))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(4.0)
    # replicas that exchanged lately (a replica killed by an earlier test stays listed)
    live = sum(r["last_exchange_s"] > time.time() - 10 for r in _status()["replicas"].values())
    assert live >= 1
    ray.kill(_actor(), no_restart=False)
    killed_at = time.time()
    after = _wait(
        lambda: (
            (s := _status_or_none()) is not None
            and s["restored"]
            and sum(r["last_exchange_s"] > killed_at for r in s["replicas"].values()) >= live
            and s
        ),
        120,
        "the restarted actor to restore its snapshot and every replica to re-sync",
    )
    time.sleep(2.0)
    stop.set()
    for t in threads:
        t.join()
    assert results and all(status == 200 for status, _ in results), results[:3]
    assert after["pool_count"] >= before["pool_count"]


def test_open_loop_load_generator_records_every_request(app: App, tmp_path: Path) -> None:
    """`nightjar-ray loadgen` against the endpoint: token-ID prompts, exact output lengths
    (ignore_eos), per-chunk latencies; a request the server rejects is a failed record,
    not a missing one; the same greedy prompt gives the same text under load."""
    import asyncio

    from nightjar_ray.cli.main import main
    from nightjar_ray.loadgen.client import run_open_loop
    from nightjar_ray.loadgen.summary import summarize
    from nightjar_ray.workload import RequestSpec

    prompt = tuple(range(20, 40))
    specs = [RequestSpec(i, 0.2 * i, 20, 12, prompt) for i in range(6)]
    specs.append(RequestSpec(6, 0.5, 300, 12, tuple(range(20, 320))))  # over max_model_len: 400
    result = asyncio.run(run_open_loop(app.url, MODEL_ID, specs))
    records = {r.req_id: r for r in result.records}
    assert len(records) == 7 and records[6].status == "http_400" and records[6].error
    ok = [records[i] for i in range(6)]
    assert all(r.ok and r.num_output_tokens == 12 and r.ttft_s is not None for r in ok)
    assert all(r.itl_s and r.e2e_s is not None and r.e2e_s >= r.ttft_s for r in ok)  # type: ignore[operator]
    assert len({r.text for r in ok}) == 1  # greedy: one text for one prompt
    summary = summarize(result)
    assert summary["completed"] == 6 and summary["failed"] == 1
    assert summary["total_output_tokens"] == 72

    out = tmp_path / "run"
    args = ["loadgen", "--url", app.url, "--model", MODEL_ID, "--rate", "2", "--duration-s",
            "6", "--input-len", "8:24", "--output-len", "8:16", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    saved = json.loads((out / "summary.json").read_text())
    lines = (out / "records.jsonl").read_text().splitlines()
    assert saved["failed"] == 0 and saved["completed"] == len(lines) > 0
    assert (out / "throughput.png").stat().st_size > 0 and (out / "latency_cdf.png").exists()
