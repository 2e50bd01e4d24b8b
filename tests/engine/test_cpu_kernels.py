"""The CPU rejection-sampler kernel fix (engine/cpu_kernels.py) against vLLM's own."""

import torch

from nightjar_ray.engine.cpu_kernels import expand_kernel

CU = torch.tensor([2, 5, 6], dtype=torch.int32)
TEMPERATURES = torch.tensor([0.05, 0.7, 0.0])


def test_expand_kernel_writes_each_requests_value_over_its_tokens() -> None:
    out = torch.full((6,), -1.0)
    expand_kernel(out, TEMPERATURES, CU, 0.0, 1.0, MAX_NUM_TOKENS=8)
    assert out.tolist() == torch.tensor([0.05, 0.05, 0.7, 0.7, 0.7, 1.0]).tolist()
    ids = torch.zeros(6, dtype=torch.int64)
    expand_kernel(ids, torch.tensor([3, 0, 9]), CU, 0, 7)
    assert ids.tolist() == [3, 3, 7, 7, 7, 9]
    expand_kernel(ids, torch.tensor([]), torch.tensor([], dtype=torch.int32), 0, 0)


def test_vllms_cpu_expand_leaves_a_float_output_unwritten() -> None:
    """Why the fix exists: vLLM 0.32's CPU override converts a float output to int64 and
    never copies back. If this starts failing, vLLM fixed it and the fix can go."""
    from vllm.platforms import current_platform
    from vllm.utils.cpu_triton_utils import _expand_kernel_impl

    current_platform.import_kernels()  # loads the C++ ops (torch.ops._C)
    out = torch.full((6,), -1.0)
    _expand_kernel_impl(out, TEMPERATURES, CU, 0, 1)
    assert out.tolist() == [-1.0] * 6


def test_the_fix_reaches_vllms_expand_batch_to_tokens() -> None:
    """As in a CPU worker: vLLM installs its overrides first, then the fix swaps the
    expand kernel's implementation under every caller."""
    from vllm.platforms import current_platform
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    from nightjar_ray.engine.cpu_kernels import register_cpu_kernel_fixes

    current_platform.import_kernels()
    current_platform.register_triton_kernel_overrides()
    assert register_cpu_kernel_fixes()
    expanded = expand_batch_to_tokens(TEMPERATURES, CU, 6, replace_from=0, replace_to=1)
    assert expanded.tolist() == torch.tensor([0.05, 0.05, 0.7, 0.7, 0.7, 1.0]).tolist()
