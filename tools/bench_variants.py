"""Quick developer benchmark: every kernel variant vs eager PyTorch on suite shapes.

Checks each variant against eager (fresh random input, atol = rtol = 1e-2) before
timing it; times with CUDA events, L2 flushed before every call, median of --iters.
No torch.compile here (that is utils.profiling's job): this is the fast loop for
kernel work.

    python tools/bench_variants.py                    # whole suite
    python tools/bench_variants.py default vgg_b3     # some shapes
    python tools/bench_variants.py --dtype float16 --variants tiled_16bit_mma,direct_16bit
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cuda_extension  # noqa: E402
from utils.suite import SUITE, find_case  # noqa: E402


def time_ms(fn, iters: int, flush: torch.Tensor) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", help="suite case names (default: all)")
    parser.add_argument("--iters", type=int, default=30, help="timed calls per measurement")
    parser.add_argument("--variants", default="tiled_tf32,tiled_3xtf32,tiled_fp32",
                        help="comma-separated variant names to time")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                        help="dtype of x, weight and bias (eager runs in it too; a variant's "
                             "16-bit and float32 names run the member of this dtype)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    cases = [find_case(n) for n in args.shapes] if args.shapes else SUITE
    variants = cuda_extension.conv2d_relu_maxpool_variants()
    flush = torch.empty(256 * 2**20 // 4, device="cuda")
    rows = []
    for case in cases:
        torch.manual_seed(0)
        x = torch.randn(case.input_shape(), device="cuda").to(dtype)
        w = (torch.randn(case.weight_shape(), device="cuda") / (case.weight_shape()[1] * case.kernel_size[0] * case.kernel_size[1]) ** 0.5).to(dtype)
        b = torch.randn(case.out_channels, device="cuda").to(dtype)
        ref = lambda: F.max_pool2d(F.relu(F.conv2d(x, w, b, case.stride, case.padding, case.dilation)),
                                   case.pool_kernel, case.effective_pool_stride, case.pool_padding, 1, case.ceil_mode)
        expected = ref()
        row = {"case": case.name, "eager": time_ms(ref, args.iters, flush)}
        for name in args.variants.split(","):
            config = variants[name]
            op = lambda: cuda_extension.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), config)
            try:
                out = op()
            except RuntimeError as error:
                row[name] = "n/a"
                print(f"{case.name} {name}: {str(error).splitlines()[0]}", flush=True)
                continue
            err = ((out.double() - expected.double()).norm() / expected.double().norm()).item()
            tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-2  # 8 significant bits
            ok = torch.allclose(out, expected, atol=tolerance, rtol=tolerance)
            row[name] = time_ms(op, args.iters, flush) if ok else "WRONG"
            print(f"{case.name:12s} {name:14s} rel_l2={err:.2e} ok={ok} "
                  f"ms={row[name] if isinstance(row[name], str) else round(row[name], 4)}", flush=True)
        row["gflop"] = case.flops() / 1e9
        rows.append(row)
    names = args.variants.split(",")
    print(f"\n{'case':12s} {'eager ms':>9s} " + " ".join(f"{n:>13s}" for n in names) + "  best TFLOP/s")
    for row in rows:
        cells, best = [], None
        for n in names:
            v = row[n]
            cells.append(f"{v:13.4f}" if isinstance(v, float) else f"{v:>13s}")
            if isinstance(v, float):
                best = v if best is None else min(best, v)
        tf = f"{row['gflop'] / best:.0f}" if best else "-"
        print(f"{row['case']:12s} {row['eager']:9.4f} " + " ".join(cells) + f"  {tf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
