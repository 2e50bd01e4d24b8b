"""What vLLM's V1 cudagraph dispatcher runs at each gamma, stock and per-gamma (CPU).

Configs are vLLM's own (``EngineArgs.create_engine_config`` on the generated pair) with
the graph settings a CUDA host gives them (``cuda_host_config``); decisions come from
vLLM's ``CudagraphDispatcher`` and the V1 runner's own dispatch method. No engine starts.
"""

from __future__ import annotations

from math import ceil
from typing import Any

import numpy as np
import pytest
from vllm.config import CUDAGraphMode, VllmConfig
from vllm.engine.arg_utils import EngineArgs

from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.cudagraph_runner import (
    PerGammaGraphsRunner,
    capture_query_len,
    per_gamma_supported,
    uniform_query_len,
)
from nightjar_ray.engine.cudagraphs import (
    PerGammaCudagraphDispatcher,
    build_dispatcher,
    cuda_host_config,
    cudagraph_modes_per_gamma,
    full_decode_descs_by_query_len,
)
from nightjar_ray.models.pair import ModelPair


def _config(pair: ModelPair, k: int, max_num_seqs: int, **extra: Any) -> VllmConfig:
    args = EngineArgs(
        model=str(pair.target_dir),
        speculative_config={
            "method": "draft_model",
            "model": str(pair.draft_dir),
            "num_speculative_tokens": k,
        },
        max_model_len=256,
        max_num_seqs=max_num_seqs,
        **extra,
    )
    return args.create_engine_config()


@pytest.fixture(scope="module", params=[(4, 256), (3, 8)], ids=["k4-seqs256", "k3-seqs8"])
def host_config(request: pytest.FixtureRequest, lossy_pair: ModelPair) -> VllmConfig:
    k, max_num_seqs = request.param
    return cuda_host_config(_config(lossy_pair, k, max_num_seqs))


def test_cuda_host_config_turns_vllms_graphs_on_without_touching_the_input(
    lossy_pair: ModelPair,
) -> None:
    cpu = _config(lossy_pair, 4, 256)
    assert cpu.compilation_config.cudagraph_mode.name == "NONE"
    host = cuda_host_config(cpu)
    assert host.compilation_config.cudagraph_mode.name == "FULL_AND_PIECEWISE"
    assert host.compilation_config.cudagraph_capture_sizes[:3] == [1, 2, 4]
    assert cpu.compilation_config.cudagraph_mode.name == "NONE"
    assert cpu.compilation_config.cudagraph_capture_sizes == []


@pytest.mark.parametrize("num_reqs", [1, 3, 8])
def test_stock_vllm_runs_full_graphs_only_at_the_largest_gamma(
    host_config: VllmConfig, num_reqs: int
) -> None:
    """The downgrade: vLLM keys FULL decode graphs on 1 + K alone."""
    k = host_config.num_speculative_tokens
    decisions = cudagraph_modes_per_gamma(host_config, range(k + 1), num_reqs=num_reqs)
    assert {g: d.runtime_mode for g, d in decisions.items()} == {
        **{g: "PIECEWISE" for g in range(k)},
        k: "FULL",
    }
    assert decisions[k].num_reqs_padded == decisions[k].num_tokens_padded // (k + 1)
    for gamma in range(k):
        assert decisions[gamma].num_reqs_padded is None
        # PIECEWISE sizes are multiples of K+1 too: gamma 0 at one request pads to K+1.
        assert decisions[gamma].num_tokens_padded % (k + 1) == 0


@pytest.mark.parametrize("num_reqs", [1, 3, 8])
def test_per_gamma_graphs_run_full_at_every_gamma(host_config: VllmConfig, num_reqs: int) -> None:
    k = host_config.num_speculative_tokens
    stock = cudagraph_modes_per_gamma(host_config, [k], num_reqs=num_reqs)
    decisions = cudagraph_modes_per_gamma(
        host_config, range(k + 1), num_reqs=num_reqs, per_gamma=True
    )
    assert {d.runtime_mode for d in decisions.values()} == {"FULL"}
    assert decisions[k] == stock[k]
    for gamma, d in decisions.items():
        assert d.uniform and d.num_reqs_padded is not None
        assert d.num_tokens_padded == (gamma + 1) * d.num_reqs_padded
        assert num_reqs <= d.num_reqs_padded <= host_config.scheduler_config.max_num_seqs


def test_per_gamma_keys_add_full_decode_graphs_and_keep_vllms(host_config: VllmConfig) -> None:
    k = host_config.num_speculative_tokens
    stock = build_dispatcher(host_config)
    patched = build_dispatcher(host_config, per_gamma=True)
    assert isinstance(patched, PerGammaCudagraphDispatcher)
    for mode, keys in stock.cudagraph_keys.items():
        assert keys <= patched.cudagraph_keys[mode]
    piecewise = CUDAGraphMode.PIECEWISE
    assert patched.cudagraph_keys[piecewise] == stock.cudagraph_keys[piecewise]
    by_q = full_decode_descs_by_query_len(patched)
    assert sorted(by_q) == list(range(1, k + 2))
    assert by_q[k + 1] == full_decode_descs_by_query_len(stock)[k + 1]
    extra = sum(len(v) for q, v in by_q.items() if q != k + 1)
    assert extra == sum(len(patched.sizes_by_query_len[q]) for q in range(1, k + 1))
    max_size = host_config.compilation_config.max_cudagraph_capture_size
    for q, descs in by_q.items():
        for desc in descs:
            assert capture_query_len(desc, k + 1) == q
            assert desc.num_tokens % q == 0 and desc.num_tokens <= max_size
            assert desc.num_reqs <= host_config.scheduler_config.max_num_seqs


def test_a_batch_mixing_query_lengths_stays_piecewise(host_config: VllmConfig) -> None:
    """Requests the draft gate skipped (query length 1) among drafted ones: not uniform."""
    k = host_config.num_speculative_tokens
    lens = [1 + k, 1, 1 + k]
    assert uniform_query_len(max(lens), sum(lens), len(lens), None, range(1, k + 2)) is None
    runner = _bare_runner(build_dispatcher(host_config, per_gamma=True), host_config)
    mode, desc, *_ = runner._determine_batch_execution_and_padding(
        num_tokens=sum(lens),
        num_reqs=len(lens),
        num_scheduled_tokens_np=np.array(lens, dtype=np.int32),
        max_num_scheduled_tokens=max(lens),
        force_has_lora=False,
        force_num_active_loras=0,
    )
    assert mode.name == "PIECEWISE" and not desc.uniform


def _bare_runner(dispatcher: Any, config: VllmConfig) -> PerGammaGraphsRunner:
    """A PerGammaGraphsRunner holding only what vLLM's
    ``_determine_batch_execution_and_padding`` reads (building a whole runner needs CUDA)."""
    runner = object.__new__(PerGammaGraphsRunner)
    runner.vllm_config = config
    runner.model_config = config.model_config
    runner.parallel_config = config.parallel_config
    runner.cudagraph_dispatcher = dispatcher
    runner.uniform_decode_query_len = 1 + config.num_speculative_tokens
    return runner


@pytest.mark.parametrize("num_reqs", [1, 3, 8])
def test_the_runner_dispatches_each_gamma_to_its_full_graph(
    host_config: VllmConfig, num_reqs: int
) -> None:
    """Through vLLM's own ``_determine_batch_execution_and_padding`` (execute path)."""
    k = host_config.num_speculative_tokens
    runner = _bare_runner(build_dispatcher(host_config, per_gamma=True), host_config)
    expected = cudagraph_modes_per_gamma(
        host_config, range(k + 1), num_reqs=num_reqs, per_gamma=True
    )
    for gamma in range(k + 1):
        q = gamma + 1
        mode, desc, *_ = runner._determine_batch_execution_and_padding(
            num_tokens=q * num_reqs,
            num_reqs=num_reqs,
            num_scheduled_tokens_np=np.full(num_reqs, q, dtype=np.int32),
            max_num_scheduled_tokens=q,
            force_has_lora=False,
            force_num_active_loras=0,
        )
        assert mode.name == "FULL"
        assert (desc.num_tokens, desc.num_reqs) == (
            expected[gamma].num_tokens_padded,
            expected[gamma].num_reqs_padded,
        )
        assert runner.cudagraph_dispatcher.uniform_decode_query_len == k + 1


def test_capture_keys_every_full_descriptor_as_the_dispatcher_expects(
    host_config: VllmConfig,
) -> None:
    """At capture, vLLM's dummy run asks for ``num_tokens`` at the runner's decode query
    length (``_dummy_run``: ceil(num_tokens / q) requests, forced uniform); with the
    length set from the descriptor, the dispatcher returns that very descriptor."""
    k = host_config.num_speculative_tokens
    dispatcher = build_dispatcher(host_config, per_gamma=True)
    runner = _bare_runner(dispatcher, host_config)
    for descs in full_decode_descs_by_query_len(dispatcher).values():
        for desc in descs:
            q = capture_query_len(desc, k + 1)
            num_reqs = ceil(desc.num_tokens / q)
            mode, got, *_ = runner._determine_batch_execution_and_padding(
                num_tokens=desc.num_tokens,
                num_reqs=num_reqs,
                num_scheduled_tokens_np=np.full(num_reqs, q, dtype=np.int32),
                max_num_scheduled_tokens=q,
                force_uniform_decode=True,
                force_has_lora=False,
                force_num_active_loras=0,
            )
            assert (mode.name, got) == ("FULL", desc)


def test_uniform_query_len_follows_vllms_test_and_the_capture_override() -> None:
    lens = range(1, 5)
    assert uniform_query_len(3, 9, 3, None, lens) == 3
    assert uniform_query_len(1, 6, 6, None, lens) == 1
    assert uniform_query_len(3, 7, 3, None, lens) is None
    assert uniform_query_len(5, 10, 2, None, lens) is None
    assert uniform_query_len(3, 9, 3, False, lens) is None
    assert uniform_query_len(2, 7, 4, True, lens) == 2


def test_eager_and_single_token_backends_get_no_full_graph_at_any_gamma(
    lossy_pair: ModelPair,
) -> None:
    eager = cuda_host_config(_config(lossy_pair, 3, 8, enforce_eager=True))
    for per_gamma in (False, True):
        modes = cudagraph_modes_per_gamma(eager, range(4), per_gamma=per_gamma)
        assert {d.runtime_mode for d in modes.values()} == {"NONE"}
    host = cuda_host_config(_config(lossy_pair, 3, 8))
    for per_gamma in (False, True):
        # FlashInfer without TRT-LLM decode: vLLM drops FULL decode graphs with SD.
        modes = cudagraph_modes_per_gamma(
            host, range(4), per_gamma=per_gamma, attention_support="UNIFORM_SINGLE_TOKEN_DECODE"
        )
        assert {d.runtime_mode for d in modes.values()} == {"PIECEWISE"}
    always = cudagraph_modes_per_gamma(host, range(4), attention_support="ALWAYS")
    assert [always[g].runtime_mode for g in range(4)] == ["PIECEWISE"] * 3 + ["FULL"]


def test_bad_arguments_name_what_is_wrong(lossy_pair: ModelPair) -> None:
    host = cuda_host_config(_config(lossy_pair, 3, 8))
    with pytest.raises(ValueError, match=r"gamma must be in 0\.\.num_speculative_tokens=3"):
        cudagraph_modes_per_gamma(host, [4])
    with pytest.raises(ValueError, match="attention_support must be one of"):
        cudagraph_modes_per_gamma(host, [0], attention_support="SOMETIMES")
    with pytest.raises(ValueError, match="num_reqs must be >= 1"):
        cudagraph_modes_per_gamma(host, [0], num_reqs=0)
    with pytest.raises(ValueError, match="cuda_graphs"):
        NightjarConfig.model_validate({"cuda_graphs": "always"})


def test_per_gamma_is_supported_on_a_plain_v1_config(lossy_pair: ModelPair) -> None:
    config = _config(lossy_pair, 3, 8)
    assert per_gamma_supported(config) is None
    config.parallel_config.data_parallel_size = 2
    assert per_gamma_supported(config) == (
        "data parallelism (ranks pad to one shared batch descriptor)"
    )
