"""Times the fused op with and without packed weights on batch-1 / small-batch layers (the
layers of few tiles of docs/PERF.md v19, v20 and v27), in float32 and float16. One line per
(layer, dtype, target): CUDA-event median of 200 calls (L2 flushed, inputs rotated) and the
torch.profiler kernel-time mean of 30 (every kernel but the flush's), after a relative-L2 check
against F.conv2d + relu + max_pool2d in float64. Targets: new (the op), prepacked (the op
given conv2d_relu_maxpool_pack_weight's copy), eager (PyTorch's conv2d + relu + max_pool2d,
cuDNN, in the dtype; TF32 as PyTorch's defaults allow). For an A/B run, run it once per build,
alternating, with a tag first:

    PYTHONPATH=path/to/old/tree python tools/bench_few_tiles.py old
    python tools/bench_few_tiles.py new batch1,b5_n1 float32,float16 new,eager

(the module on PYTHONPATH wins over this checkout's).
"""
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.append(str(Path(__file__).resolve().parents[1]))
import cuda_extension as ext  # noqa: E402

# name, batch, in channels, out channels, height, width, padding (3x3 conv, 2x2 pool)
LAYERS = [("batch1", 1, 64, 128, 128, 128, 0), ("b2_n1", 1, 128, 128, 112, 112, 1),
          ("b3_n1", 1, 256, 256, 56, 56, 1), ("b4_n1", 1, 512, 512, 28, 28, 1),
          ("b5_n1", 1, 512, 512, 14, 14, 1), ("b5_n8", 8, 512, 512, 14, 14, 1),
          ("b3_n4", 4, 256, 256, 56, 56, 1), ("vgg_b5", 32, 512, 512, 14, 14, 1)]


def time_us(fn, flush: torch.Tensor) -> tuple[float, float, str]:
    """(event median over 200 calls, profiler kernel-time mean over 30, that mean per kernel
    as "name us, ..." with the op's kernels named pack and conv), microseconds."""
    for i in range(10):
        fn(i)
    times = []
    for i in range(200):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(30):
            flush.zero_()
            fn(i)
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages()
               if e.device_time_total > 0 and "FillFunctor<unsigned char>" not in e.key]
    parts = ", ".join(
        f"{'pack' if 'pack_weights' in e.key else 'conv' if 'conv_pool' in e.key else e.key[:24]}"
        f" {e.device_time_total / 30:.1f}" for e in kernels)
    return statistics.median(times), sum(e.device_time_total for e in kernels) / 30, parts


def main() -> int:
    tag = sys.argv[1] if len(sys.argv) > 1 else "run"
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else None
    dtypes = sys.argv[3] if len(sys.argv) > 3 else "float32,float16"
    targets = (sys.argv[4] if len(sys.argv) > 4 else "new,prepacked").split(",")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    torch.manual_seed(0)
    for name, n, c, k, h, w, pad in LAYERS:
        if only and name not in only:
            continue
        for dtype in (getattr(torch, d) for d in dtypes.split(",")):
            xs = [torch.randn(n, c, h, w, device="cuda", dtype=dtype) for _ in range(3)]
            weight = (torch.randn(k, c, 3, 3, device="cuda") / (3 * c ** 0.5)).to(dtype)
            bias = torch.randn(k, device="cuda").to(dtype)
            args = ([1, 1], [pad, pad], [1, 1], [2, 2], [2, 2], [0, 0], False, -1)
            reference = F.max_pool2d(F.relu(F.conv2d(xs[0].double(), weight.double(),
                                                     bias.double(), padding=pad)), 2)

            def eager(x):
                return F.max_pool2d(F.relu(F.conv2d(x, weight, bias, padding=pad)), 2)

            for label in targets:
                if label == "eager":
                    run = eager
                else:
                    packed = (ext.conv2d_relu_maxpool_pack_weight(weight)
                              if label == "prepacked" else None)
                    run = (lambda x, packed=packed:
                           ext.conv2d_relu_maxpool_forward(x, weight, bias, *args, packed))
                out = run(xs[0])
                error = ((out.double() - reference).norm() / reference.norm()).item()
                event, kernel, parts = time_us(lambda i: run(xs[i % 3]), flush)
                print(f"{tag:4s} {name:7s} {str(dtype)[6:]:8s} {label:9s} event {event:8.1f} us"
                      f"  kernel {kernel:8.1f} us  relerr {error:.1e}  ({parts})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
