"""A correct CPU implementation of vLLM 0.32's rejection-sampler ``expand_kernel``.

vLLM's CPU platform routes ``vllm.v1.sample.rejection_sampler.expand_kernel`` to a C++
op through ``_ensure_int64(output)`` (``vllm/utils/cpu_triton_utils.py``,
``_expand_kernel_impl``). For a float output, the per-token temperature, top-p and top-k
that ``expand_batch_to_tokens`` builds, that is a converted copy which is never copied
back: the rejection sampler then reads uninitialised memory, and sampled (temperature > 0)
speculative outputs stop following the target's distribution. Greedy decoding never reads
those tensors. :func:`register_cpu_kernel_fixes` replaces the override, in each CPU worker
process, with the kernel's semantics in plain torch (``tests/engine/test_engine_sampling.py``
shows the difference).
"""

from __future__ import annotations

from typing import Any

import torch


def expand_kernel(
    output: torch.Tensor,
    input_val: torch.Tensor,
    cu_num_tokens: torch.Tensor,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: Any = None,
) -> None:
    """``output[cu[i-1]:cu[i]] = input[i]`` (``replace_from`` mapped to ``replace_to``)."""
    del MAX_NUM_TOKENS
    if cu_num_tokens.numel() == 0:
        return
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    values = torch.where(
        input_val == replace_from, torch.full_like(input_val, replace_to), input_val
    )
    total = int(cu_num_tokens[-1])
    output[:total] = torch.repeat_interleave(values, counts).to(output.dtype)


def register_cpu_kernel_fixes() -> bool:
    """Point the CPU platform's ``expand_kernel`` override at :func:`expand_kernel`.

    vLLM's worker wrapper installs its overrides (``KernelOverride`` objects that every
    reference to the kernel is rebound to) before the worker class is built, so swapping
    the override's implementation reaches every caller. (Registering a new override would
    rescan every loaded module, which fails on some of them.) Returns whether an override
    was there to fix."""
    import vllm.v1.sample.rejection_sampler as rejection_sampler
    from vllm.triton_utils.dispatcher import KernelOverride

    override = rejection_sampler.expand_kernel
    if not isinstance(override, KernelOverride):
        return False
    override._impl = expand_kernel
    return True
