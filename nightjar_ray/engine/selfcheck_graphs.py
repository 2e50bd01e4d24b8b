"""The self-check's graph-modes line: the CUDA graph vLLM's V1 runner replays for a
uniform decode batch at every gamma 0..K under ``nightjar.cuda_graphs``.

No engine starts: the check builds the Nightjar engines' own ``VllmConfig`` with vLLM's
``EngineArgs.create_engine_config`` and asks vLLM's dispatcher (``engine/cudagraphs.py``)
what it runs for one request per gamma (single stream, where speculation matters most).
On a host without CUDA, vLLM's platform turns graphs off while it builds the config, so
the check shows what a CUDA host gives the same engine kwargs (``cuda_host_config``, with
the GPU defaults under the user's kwargs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm.config import VllmConfig
from vllm.engine.arg_utils import EngineArgs

from nightjar_ray.engine.config import CudaGraphs, NightjarConfig
from nightjar_ray.engine.cudagraph_runner import per_gamma_supported
from nightjar_ray.engine.cudagraphs import cuda_host_config, cudagraph_modes_per_gamma
from nightjar_ray.engine.offline import ModelSources, engine_kwargs
from nightjar_ray.engine.selfcheck_report import CheckLine

ATTENTION_SUPPORT = "UNIFORM_BATCH"
"""The attention backends' graph support assumed (FlashAttention 2, FlashInfer's TRT-LLM
decode; vLLM picks the backend only when the model runner starts)."""
DOC = "docs/cuda-graphs.md"
V2_RUNNER = "vLLM's model runner V2 (set VLLM_USE_V2_MODEL_RUNNER=0)"


def engine_config(
    models: ModelSources,
    cuda_graphs: CudaGraphs,
    spec_extra: dict[str, Any],
    engine: dict[str, Any],
) -> VllmConfig:
    """The ``VllmConfig`` vLLM builds for a Nightjar engine of these kwargs (``engine``:
    ``vllm.LLM`` kwargs over the offline defaults), without starting it."""
    config = NightjarConfig(cuda_graphs=cuda_graphs)
    kwargs = engine_kwargs(models, config, spec_extra=spec_extra, **engine)
    return EngineArgs(**kwargs).create_engine_config()


def graph_modes(
    vllm_config: VllmConfig, cuda_graphs: CudaGraphs, *, on_cuda_host: bool
) -> dict[str, Any]:
    """Figures of the graph-modes line: the mode and padded batch per gamma, the
    compilation's graph mode, eager, why the setting cannot run (or None), and whether
    the config was built on a CUDA host (else as a CUDA host builds it)."""
    host = vllm_config if on_cuda_host else cuda_host_config(vllm_config)
    k = host.num_speculative_tokens
    decisions = cudagraph_modes_per_gamma(
        host,
        range(k + 1),
        per_gamma=cuda_graphs == "per-gamma",
        attention_support=ATTENTION_SUPPORT,
    )
    if cuda_graphs == "per-gamma":
        unsupported = per_gamma_supported(host)
    else:
        unsupported = V2_RUNNER if host.use_v2_model_runner else None
    return {
        "cuda_graphs": cuda_graphs,
        "num_speculative_tokens": k,
        "modes": {g: d.runtime_mode for g, d in decisions.items()},
        "num_tokens_padded": {g: d.num_tokens_padded for g, d in decisions.items()},
        "cudagraph_mode": host.compilation_config.cudagraph_mode.name,
        "enforce_eager": bool(host.model_config.enforce_eager),
        "unsupported": unsupported,
        "attention_support": ATTENTION_SUPPORT,
        "on_cuda_host": on_cuda_host,
    }


def _modes_text(modes: Mapping[int, str]) -> str:
    return ", ".join(f"{g}:{m}" for g, m in sorted(modes.items()))


def graph_modes_line(name: str, figures: dict[str, Any], device: str) -> CheckLine:
    """PASS: per-gamma runs FULL at every gamma; stock runs FULL at gamma K (the gammas
    below it downgrade to PIECEWISE: informational). FAIL: graphs off on a CUDA device
    (``enforce_eager``), a setting the V1 runner refuses, or FULL missing where it is due.
    On a CPU device, graphs off only note that a CUDA host would run eager."""
    modes: dict[int, str] = figures["modes"]
    k, setting = figures["num_speculative_tokens"], figures["cuda_graphs"]
    where = "" if figures["on_cuda_host"] else " (on a CUDA host)"
    eager = figures["enforce_eager"] or set(modes.values()) == {"NONE"}
    if eager:
        detail = f"CUDA graphs off (enforce_eager): every gamma 0..{k} runs eager{where}"
        if device != "cuda":
            return CheckLine(name, True, f"{detail}; this CPU run captures none", figures)
        return CheckLine(name, False, f"{detail}; drop enforce_eager ({DOC})", figures)
    if figures["unsupported"]:
        reason = f"cuda_graphs {setting} is not supported with {figures['unsupported']}"
        return CheckLine(name, False, reason, figures)
    text = f"cuda_graphs {setting}{where}: {_modes_text(modes)}"
    not_full = [g for g, m in sorted(modes.items()) if m != "FULL"]
    if setting == "per-gamma":
        if not_full:
            return CheckLine(name, False, f"{text}; not FULL at gammas {not_full}", figures)
        return CheckLine(name, True, f"{text}; FULL at every gamma", figures)
    if modes[k] != "FULL":
        return CheckLine(name, False, f"{text}; gamma {k} runs {modes[k]}, not FULL", figures)
    if not_full:
        below = "/".join(sorted({modes[g] for g in not_full}))
        downgrade = (
            f"; gammas {not_full} downgrade to {below} (cuda_graphs: per-gamma keeps FULL, {DOC})"
        )
        return CheckLine(name, True, text + downgrade, figures)
    return CheckLine(name, True, f"{text}; FULL at every gamma", figures)
