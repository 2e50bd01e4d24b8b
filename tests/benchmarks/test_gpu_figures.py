"""``benchmarks/gpu_figures.py`` on the CPU: its help, the arena figure on the CPU arena
(through ``build_kv_arena``), the refusal of the GPU figures without CUDA, and the
reading of ``gpu_graph_replay.py``'s output. The GPU figures themselves need a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_figures
from benchmarks._gpu_arena import SETTINGS, pool_sizes
from benchmarks._gpu_work import MoverBench, decode_step, qwen7b_decode_shapes
from nightjar_ray.memory import arena as arena_module
from nightjar_ray.memory.arena_budget import ArenaBudget

ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="refusals need a machine without CUDA"
)


def test_help_names_the_figures_and_the_cpu_arena() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_figures.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "{arena,mover,reload,graphs}" in proc.stdout
    assert "--device {cuda,cpu}" in proc.stdout


@pytest.mark.skipif(
    not hasattr(arena_module, "build_kv_arena"),
    reason="needs nightjar_ray.memory.arena.build_kv_arena (issue 41's arena)",
)
def test_cpu_arena_figure_in_a_child_process(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    argv = ["--only", "arena", "--device", "cpu", "--scale", "small"]
    argv += ["--rounds", "1", "--warmup", "0", "--isolate", "--out", str(out)]
    assert gpu_figures.main(argv) == 0
    figure = json.loads(out.read_text())["figures"]["arena"]
    assert [s["setting"] for s in figure["settings"]] == ["7b", "32b-tp2-rank"]
    for s in figure["settings"]:
        c = s["committed_bytes"]
        pool = s["num_orig_blocks"] * (s["page_bytes"]["target"] * s["num_layers"]["target"])
        pool += s["num_orig_blocks"] * (s["page_bytes"]["draft"] * s["num_layers"]["draft"])
        assert s["num_max_blocks"] > s["num_orig_blocks"] == 64
        assert c["before_expand"] == pool  # every page of the pool written once
        assert c["after_expand"] <= c["stock"]
        assert c["after_contract"] < c["before_expand"]
        assert c["after_draft_kv_commit"] <= c["before_expand"]
        assert c["after_release_all"] == 0
        assert 0.9 * pool <= c["plain_pool"] <= 1.1 * pool
        assert s["readback_identical"] == {"after_expand": True, "after_contract": True}
        assert s["moved_blocks"] >= 1
        assert all(v["median"] > 0 for v in s["ms"].values())
    rows = gpu_figures.markdown_rows(json.loads(out.read_text()))
    assert "| arena | 7b (64 -> 79 blocks) | bit-identical readback | True | True |" in rows


def test_pool_sizes_follow_the_engine_rule() -> None:
    """Pages that fill the CPU's unit need no reserve, and N_max x the target's block
    bytes = N_orig's pool + the draft's weights (floor). At CUDA's 2 MiB unit the pool
    drops by the rounding's blocks, as the engine's, so that the arena at start stays
    within stock's KV buffer and the expanded arena within stock's KV and draft weights,
    with no room for one more block."""
    for setting in SETTINGS:
        pages, unit = setting.page_bytes, 2 << 20
        cpu = pool_sizes(setting, "full", 4096)
        assert cpu.num_orig_blocks == cpu.num_stock_blocks
        target = setting.target.num_layers * setting.target.page_bytes
        given = cpu.num_orig_blocks * sum(pages) + cpu.draft_weight_bytes
        assert cpu.num_max_blocks * target <= given < (cpu.num_max_blocks + 1) * target
        cuda = pool_sizes(setting, "full", unit)
        draft = tuple(range(setting.target.num_layers, len(pages)))
        budget = ArenaBudget(pages, draft, cuda.num_orig_blocks, unit, cuda.draft_weight_bytes)
        assert cuda.num_orig_blocks < cuda.num_stock_blocks == cpu.num_stock_blocks
        stock_kv = cuda.num_stock_blocks * sum(pages)
        assert budget.baseline_bytes(cuda.num_max_blocks) <= stock_kv
        assert cuda.stock_bytes == stock_kv + cuda.draft_weight_bytes
        assert budget.expanded_bytes(cuda.num_max_blocks) <= cuda.stock_bytes
        assert budget.expanded_bytes(cuda.num_max_blocks + 1) > cuda.stock_bytes
    sizes = [pool_sizes(s, "full", 4096) for s in SETTINGS]
    assert [(s.num_orig_blocks, s.num_max_blocks) for s in sizes] == [
        (51635, 63776),
        (18442, 19542),
    ]
    with pytest.raises(ValueError, match="--scale small"):
        pool_sizes(SETTINGS[0], "small", 2 << 20)


@NO_CUDA
@pytest.mark.parametrize("figure", ["arena", "mover", "reload", "graphs"])
def test_gpu_figures_refuse_without_cuda(figure: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(gpu_figures.NoCUDAError, match=f"the {figure} figure needs CUDA"):
        gpu_figures.require_cuda(figure)
    assert gpu_figures.main(["--only", figure]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only `--only arena --device cpu` runs" in err


@NO_CUDA
def test_all_figures_refuse_before_running_any(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_figures.py", "--out", str(tmp_path / "f.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "the arena figure needs CUDA" in proc.stderr
    assert not (tmp_path / "f.json").exists()


def test_cpu_device_is_for_the_arena_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):
        gpu_figures.main(["--only", "mover", "--device", "cpu"])
    assert "only the arena figure runs on the CPU" in capsys.readouterr().err


def test_graph_replay_missing_and_present(tmp_path: Path) -> None:
    missing = gpu_figures.graph_replay_lines(tmp_path / "gpu_graph_replay.py", [])
    assert missing["status"] == "missing"
    script = tmp_path / "gpu_graph_replay.py"
    script.write_text(
        "import json\n"
        "def main(argv):\n"
        "    for q in (1, 5):\n"
        "        print(json.dumps({'query_len': q, 'argv': argv}))\n"
        "    return 0\n"
    )
    got = gpu_figures.graph_replay_lines(script, ["--x"])
    assert got["status"] == "ok"
    assert got["lines"] == [{"query_len": 1, "argv": ["--x"]}, {"query_len": 5, "argv": ["--x"]}]
    script.write_text("import sys\ndef main(argv):\n    print('header')\n    sys.exit('no GPU')\n")
    refused = gpu_figures.graph_replay_lines(script, [])
    assert refused == {"status": "exit no GPU", "argv": [], "lines": [], "other_output": ["header"]}


def test_graph_rows_show_full_piecewise_and_eager() -> None:
    line = {"num_reqs": 8, "query_len": 3, "full_ms": 2.0, "piecewise_ms": 2.5, "eager_ms": 4.0}
    rows = gpu_figures.graph_rows({"lines": [line, {"other": 1}]})
    assert rows == [
        "| graphs | 8 req x query length 3 | FULL / PIECEWISE / eager "
        "| 2.000 / 2.500 / 4.000 ms | 1.250x |",
        '| graphs | - | {"other": 1} | - | - |',
    ]


@NO_CUDA
@pytest.mark.skipif(
    not (ROOT / "benchmarks" / "gpu_graph_replay.py").exists(),
    reason="benchmarks/gpu_graph_replay.py is not in this checkout",
)
def test_the_real_graph_replay_script_refuses_without_cuda() -> None:
    got = gpu_figures.graph_replay_lines(ROOT / "benchmarks" / "gpu_graph_replay.py", [])
    assert got["status"].startswith("exit") and "CUDA" in got["status"]
    assert got["lines"] == []


def test_mover_bench_baselines_move_the_pages_the_mover_moves() -> None:
    """The index_copy_ baseline copies exactly the pages the block mover copies (CPU;
    the Triton mover itself: tests/memory/test_kernels_and_arena.py)."""
    from nightjar_ray.memory.kernels import build_block_mover

    bench = MoverBench(torch.device("cpu"), 8, torch.Generator().manual_seed(0))
    mover = build_block_mover("torch")
    assert bench.nbytes == 8 * 28 * 32768 == bench.flat_src.numel()
    assert not bench.moves_pages(lambda: None)
    assert bench.moves_pages(bench.index_copy)
    assert bench.moves_pages(lambda: mover(bench.layout, bench.buffer, bench.moves))


def test_decode_step_and_draft_shapes() -> None:
    """The reload figure's shapes on the meta device: a 7B decode step of 32 tokens ends in
    vocabulary logits, and the draft is Qwen2.5-0.5B's 494,032,768 parameters."""
    import math

    from benchmarks._gpu_arena import QWEN05B_BF16_BYTES, qwen05b_shapes

    meta = torch.device("meta")
    weights = [torch.empty(s, dtype=torch.bfloat16, device=meta) for s in qwen7b_decode_shapes()]
    x = torch.empty(32, 3584, dtype=torch.bfloat16, device=meta)
    assert decode_step(x, weights).shape == (32, 152064)
    assert sum(math.prod(s) for s in qwen05b_shapes()) == 494_032_768
    assert QWEN05B_BF16_BYTES == 2 * 494_032_768


def test_mover_result_renders() -> None:
    """The mover figure's result, from per-round times, renders as its two rows."""
    times = {
        "copy_": [1.0, 1.0],
        "copy_ (A/A)": [1.0, 1.0],
        "index_copy_": [3.0, 3.0],
        "triton mover": [1.25, 1.25],
        "torch mover": [4.0, 4.0],
    }
    result = gpu_figures._mover_result(times, 1 << 30, 2048, True)
    assert result["ratio_to_copy"]["triton mover"]["median"] == 0.8
    assert gpu_figures.markdown_rows({"figures": {"mover": result}}) == [
        "| mover | 7B pages | Triton / copy_ | 0.800 | >= 0.8 |",
        "| mover | 7B pages | Triton / index_copy_ | 2.400 | - |",
    ]
