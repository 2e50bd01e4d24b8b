"""bfloat16 versus float32 matmuls on this CPU, for the default pair's layer shapes.

    python benchmarks/bench_dtype.py [--threads 1] [--rounds 5]

Why the CPU demo serves in float32 (docs/serve.md, "Model dtype on CPU"): on a CPU without
AVX512-BF16 or AMX, PyTorch's bfloat16 matmul falls back to a dot-product loop
(``bf16_dot_with_fp32_arith``; a profile of the serving worker spent half its time there),
while float32 goes to the BLAS GEMM. This times ``torch.nn.functional.linear`` on the
target's four projection shapes (hidden 768, intermediate 2048, 4 KV heads) at several
token counts, both dtypes interleaved round by round, and prints the median time of a
12-layer stack of them and the ratio bf16 / fp32 per token count.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

# (in_features, out_features) of one target layer: qkv, o, gate_up, down.
SHAPES = ((768, 1280), (768, 768), (768, 4096), (2048, 768))
NUM_LAYERS = 12


def _layer_time_s(tokens: int, dtype: torch.dtype, reps: int) -> float:
    weights = [torch.randn(out, inp, dtype=dtype) for inp, out in SHAPES]
    inputs = [torch.randn(tokens, inp, dtype=dtype) for inp, _ in SHAPES]
    for x, w in zip(inputs, weights, strict=True):
        torch.nn.functional.linear(x, w)
    start = time.perf_counter()
    for _ in range(reps):
        for x, w in zip(inputs, weights, strict=True):
            torch.nn.functional.linear(x, w)
    return (time.perf_counter() - start) / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="Torch threads (a replica: 1).")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", default="1,4,16,64")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    print(f"{torch.__version__}, {args.threads} thread(s), {args.rounds} interleaved rounds")
    print("| tokens | bf16 ms (12 layers) | fp32 ms (12 layers) | bf16 / fp32 |")
    print("| --- | --- | --- | --- |")
    for tokens in (int(t) for t in args.tokens.split(",")):
        times: dict[str, list[float]] = {k: [] for k in dtypes}
        for rnd in range(args.rounds):
            order = list(dtypes) if rnd % 2 == 0 else list(reversed(dtypes))
            for name in order:
                times[name].append(NUM_LAYERS * _layer_time_s(tokens, dtypes[name], 5))
        ratios = [b / f for b, f in zip(times["bf16"], times["fp32"], strict=True)]
        med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        print(
            f"| {tokens} | {med['bf16']:.1f} | {med['fp32']:.1f} | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )


if __name__ == "__main__":
    main()
