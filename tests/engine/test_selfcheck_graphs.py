"""The self-check's graph-modes and switch-cost lines, without engines.

Graph modes come from vLLM's own config of the check's Nightjar engines
(``EngineArgs.create_engine_config`` on the generated pair) and vLLM's dispatcher, as a
CUDA host builds them (tests/engine/test_cudagraphs.py checks the dispatcher itself).
The switch-cost line reads CSVs written by the policy's own table.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.engine.config import CudaGraphs
from nightjar_ray.engine.cudagraphs import cuda_host_config, cudagraph_modes_per_gamma
from nightjar_ray.engine.offline import ModelSources
from nightjar_ray.engine.selfcheck import SelfCheckSetup, check_graph_modes, run_selfcheck
from nightjar_ray.engine.selfcheck_graphs import engine_config, graph_modes, graph_modes_line
from nightjar_ray.engine.selfcheck_switch_cost import (
    SELFCHECK_GRID,
    profiler_of,
    switch_cost_line,
)
from nightjar_ray.engine.switch_cost_profiler import ProfileGrid
from nightjar_ray.models.pair import ModelPair
from nightjar_ray.policy import SwitchCostTable

DOWNGRADE = "(cuda_graphs: per-gamma keeps FULL, docs/cuda-graphs.md)"


@pytest.fixture(scope="module")
def setup(lossy_pair: ModelPair) -> SelfCheckSetup:
    return SelfCheckSetup(ModelSources.of(lossy_pair), num_speculative_tokens=3)


def test_stock_graphs_pass_with_full_at_k_and_name_the_downgraded_gammas(
    setup: SelfCheckSetup,
) -> None:
    line = check_graph_modes(setup)
    assert line.passed, line.detail
    assert line.figures["modes"] == {0: "PIECEWISE", 1: "PIECEWISE", 2: "PIECEWISE", 3: "FULL"}
    assert line.detail == (
        "cuda_graphs stock (on a CUDA host): 0:PIECEWISE, 1:PIECEWISE, 2:PIECEWISE, 3:FULL; "
        f"gammas [0, 1, 2] downgrade to PIECEWISE {DOWNGRADE}"
    )
    assert line.figures["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert not line.figures["on_cuda_host"]


def test_per_gamma_graphs_pass_with_full_at_every_gamma(setup: SelfCheckSetup) -> None:
    line = check_graph_modes(replace(setup, cuda_graphs="per-gamma", num_speculative_tokens=4))
    assert line.passed, line.detail
    assert line.figures["modes"] == dict.fromkeys(range(5), "FULL")
    assert line.figures["num_tokens_padded"] == {g: g + 1 for g in range(5)}  # one request
    assert line.detail.endswith("4:FULL; FULL at every gamma")


@pytest.mark.parametrize("cuda_graphs", ["stock", "per-gamma"])
def test_eager_fails_on_a_cuda_device_naming_the_reason(
    setup: SelfCheckSetup, cuda_graphs: CudaGraphs
) -> None:
    eager = replace(setup, cuda_graphs=cuda_graphs, engine_overrides={"enforce_eager": True})
    line = check_graph_modes(replace(eager, device="cuda"))
    assert not line.passed
    assert line.detail == (
        "CUDA graphs off (enforce_eager): every gamma 0..3 runs eager (on a CUDA host); "
        "drop enforce_eager (docs/cuda-graphs.md)"
    )
    assert set(line.figures["modes"].values()) == {"NONE"}
    on_cpu = check_graph_modes(eager)  # a CPU run captures no graphs anyway: a note
    assert on_cpu.passed and on_cpu.detail.endswith("; this CPU run captures none")


def test_full_missing_where_it_is_due_fails(setup: SelfCheckSetup) -> None:
    """An attention backend that keeps FULL graphs to single-token decodes (FlashInfer
    without TRT-LLM) downgrades gamma K too; per-gamma cannot run with data parallelism."""
    gpu_kwargs = replace(setup, device="cuda").engine_kwargs()
    config = engine_config(setup.models, "stock", setup.spec_extra(), gpu_kwargs)
    figures = graph_modes(config, "stock", on_cuda_host=False)
    single = cudagraph_modes_per_gamma(
        cuda_host_config(config), range(4), attention_support="UNIFORM_SINGLE_TOKEN_DECODE"
    )
    figures["modes"] = {g: d.runtime_mode for g, d in single.items()}
    line = graph_modes_line("graph-modes", figures, "cuda")
    assert not line.passed and line.detail.endswith("; gamma 3 runs PIECEWISE, not FULL")
    per_gamma = {**figures, "cuda_graphs": "per-gamma"}
    line = graph_modes_line("graph-modes", per_gamma, "cuda")
    assert not line.passed and line.detail.endswith("not FULL at gammas [0, 1, 2, 3]")
    config.parallel_config.data_parallel_size = 2
    refused = graph_modes_line(
        "graph-modes", graph_modes(config, "per-gamma", on_cuda_host=False), "cuda"
    )
    assert refused.detail == (
        "cuda_graphs per-gamma is not supported with data parallelism "
        "(ranks pad to one shared batch descriptor)"
    )


def _profile(path: Path, grid: ProfileGrid, cost_ms: float = 1.5) -> Path:
    rows = [(s, b, cost_ms * b) for s in grid.skip_tokens for b in grid.batch_sizes]
    SwitchCostTable.from_rows(rows).save(path)
    return path


def test_the_switch_cost_line_passes_on_a_profile_the_policy_loads(tmp_path: Path) -> None:
    out = _profile(tmp_path / "switch-cost.csv", SELFCHECK_GRID)
    line = switch_cost_line("switch-cost", out, SELFCHECK_GRID)
    assert line.passed, line.detail
    assert line.detail == (
        "C_switch 1.5..3 ms over L_max [16, 64] x B [1, 2], loads as a profile; deploy "
        f"config: switch_cost_profile: {out.resolve()}"
    )
    assert line.figures["switch_cost_ms"][0] == [16, 1, 1.5]


def test_the_switch_cost_line_fails_on_a_bad_profile(tmp_path: Path) -> None:
    missing = switch_cost_line("switch-cost", tmp_path / "none.csv", SELFCHECK_GRID)
    assert not missing.passed and "none.csv does not load: [Errno 2]" in missing.detail
    other = _profile(tmp_path / "other.csv", ProfileGrid((16,), (1, 2)))
    line = switch_cost_line("switch-cost", other, SELFCHECK_GRID)
    assert line.detail.endswith("holds L_max [16] x B [1, 2], not the profiled [16, 64] x [1, 2]")
    zero = _profile(tmp_path / "zero.csv", SELFCHECK_GRID, cost_ms=0.0)
    line = switch_cost_line("switch-cost", zero, SELFCHECK_GRID)
    assert line.detail == "C_switch not positive at (L_max, B) [(16, 1), (16, 2), (64, 1), (64, 2)]"
    garbled = tmp_path / "garbled.csv"
    garbled.write_text("a,b\n1,2\n")
    assert "switch-cost header must be" in switch_cost_line("x", garbled, SELFCHECK_GRID).detail


def test_the_profiler_gets_the_setups_pair_and_not_its_geometry(setup: SelfCheckSetup) -> None:
    overrides = {"max_model_len": 512, "tensor_parallel_size": 4, "model": "elsewhere"}
    engine = profiler_of(setup.models, "cuda", 2, 7, overrides)
    assert (engine.target, engine.draft, engine.device) == (
        setup.models.target,
        setup.models.draft,
        "cuda",
    )
    assert engine.tensor_parallel_size == 2
    assert engine.engine_args == {"dtype": setup.models.dtype, "seed": 7, "max_model_len": 512}


def test_run_selfcheck_needs_a_directory_for_the_profile(setup: SelfCheckSetup) -> None:
    with pytest.raises(ValueError, match="out_dir must be given for the switch-cost check"):
        run_selfcheck(setup, ("switch-cost",))
    report = run_selfcheck(setup, ("graph-modes",))
    assert [line.name for line in report.lines] == ["graph-modes"] and report.exit_code == 0


def test_the_cli_runs_the_graph_line_alone_with_the_cuda_graphs_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NIGHTJAR_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["selfcheck", "--device", "cpu", "--checks", "graph-modes", "--out", str(out)]
    assert main([*argv, "--cuda-graphs", "per-gamma"]) == 0
    rows = [row.split() for row in capsys.readouterr().out.splitlines()]
    assert ["graph-modes", "PASS", "cuda_graphs", "per-gamma"] in [r[:4] for r in rows]
    report = json.loads((out / "selfcheck.json").read_text())
    assert report["setup"]["cuda_graphs"] == "per-gamma"
    assert set(report["lines"][0]["figures"]["modes"].values()) == {"FULL"}
    assert not (out / "switch-cost.csv").exists()
