"""Times the kernels for layers of few channels: the small kernels (small_fp32, small_tf32,
small_16bit) on layers of few output channels, and, when asked for, any variant (e.g. the flat
kernels on strided stems). One line per (layer, dtype, variant): CUDA-event median of 200 calls (L2 flushed,
inputs rotated) and the torch.profiler kernel time per call over 30 (utils.profiling's
time_calls and profiler_kernel_us), after a relative-L2 check against
F.conv2d + relu + max_pool2d in float64. A variant the module does not have, or that cannot run
the layer, is skipped. For an A/B run, run it once per build, alternating, with a tag first:

    PYTHONPATH=path/to/old/tree python tools/bench_small.py old
    python tools/bench_small.py new lenet_c1,lenet_b256 float32
    python tools/bench_small.py new alexnet_c1,resnet_stem float32,float16 \
        tiled_tf32_flat,tiled_16bit_flat

    python tools/bench_small.py new alexnet_c1 float32 auto,tiled_3xtf32_flat,eager no-tf32
    python tools/bench_small.py new alexnet_c1,c3_k64_5x5 float32 \
        tiled_tf32_flat,tiled_tf32_flat_wgmma          # docs/PERF.md v37

(arguments: tag, layers, dtypes, variants, precision; an empty one keeps its default; variant
"auto" is the automatic choice, "eager" PyTorch's F.conv2d + relu + max_pool2d (cuDNN) on the
same operands; precision "no-tf32" sets torch.backends.cudnn.allow_tf32 = False for the run,
which the automatic choice and cuDNN follow;

the module on PYTHONPATH wins over this checkout's).
"""
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.append(str(Path(__file__).resolve().parents[1]))
import cuda_extension as ext  # noqa: E402
from utils.profiling import L2_FLUSH_BYTES, profiler_kernel_us, time_calls  # noqa: E402
from utils.suite import ConvPoolCase, find_case  # noqa: E402

C = ConvPoolCase
LAYERS = [
    C("lenet_c1", 1024, 1, 6, 32, 32, (5, 5)),                      # the suite's
    C("lenet_b256", 256, 1, 6, 32, 32, (5, 5)),
    C("mnist_pad2", 1024, 1, 6, 28, 28, (5, 5), padding=(2, 2)),    # unaligned rows
    C("c3_k8_3x3", 64, 3, 8, 64, 64, (3, 3), padding=(1, 1)),
    C("c2_k16_5x5", 256, 2, 16, 32, 32, (5, 5)),                     # > 8 channels
    C("c3_k4_5x5_s2", 128, 3, 4, 96, 96, (5, 5), stride=(2, 2), padding=(2, 2)),
    # Strided stems and few-channel layers with many outputs (the flat kernels: `variants`).
    C("alexnet_c1", 32, 3, 64, 224, 224, (11, 11), stride=(4, 4), padding=(2, 2),
      pool_kernel=(3, 3), pool_stride=(2, 2)),                       # the suite's
    C("alexnet_k96", 32, 3, 96, 224, 224, (11, 11), stride=(4, 4), padding=(2, 2),
      pool_kernel=(3, 3), pool_stride=(2, 2)),                       # AlexNet's 96 channels
    C("c3_k96_7x7_s2", 32, 3, 96, 224, 224, (7, 7), stride=(2, 2), padding=(3, 3),
      pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    C("c3_k128_5x5", 32, 3, 128, 128, 128, (5, 5), padding=(2, 2)),
    C("c4_k256_3x3_s2", 32, 4, 256, 112, 112, (3, 3), stride=(2, 2), padding=(1, 1)),
    C("resnet_stem", 32, 3, 64, 224, 224, (7, 7), stride=(2, 2), padding=(3, 3),
      pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    C("c3_k32_5x5", 64, 3, 32, 128, 128, (5, 5), padding=(2, 2)),
    C("c3_k64_5x5", 64, 3, 64, 128, 128, (5, 5), padding=(2, 2)),
    C("c3_k64_7x7_s3", 32, 3, 64, 192, 192, (7, 7), stride=(3, 3), padding=(3, 3)),
    C("rgb_stem", 64, 3, 64, 224, 224, (3, 3), padding=(1, 1)),     # the suite's
    C("vgg_b1", 32, 64, 64, 224, 224, (3, 3), padding=(1, 1)),      # VGG-16 block 1's 2nd conv
    # 64 channels on the 16 x 16 tile (whole 14 x 14 images; 112 = 7 squares of 16).
    C("narrow_sq14", 256, 64, 64, 14, 14, (3, 3), padding=(1, 1)),
    C("narrow_sq112", 32, 64, 64, 112, 112, (3, 3), padding=(1, 1)),
    # Layers of many channels (the chunked kernels: tiled_3xtf32 for allow_tf32 = False).
    *(find_case(name) for name in ("default", "vgg_b2", "vgg_b3", "vgg_b5", "batch1")),
    C("vgg_b4", 32, 256, 512, 28, 28, (3, 3), padding=(1, 1)),      # VGG-16 block 4's 1st conv
    C("vgg_b3_batch1", 1, 256, 256, 56, 56, (3, 3), padding=(1, 1)),
    C("vgg_b5_batch1", 1, 512, 512, 14, 14, (3, 3), padding=(1, 1)),
    # 3x3 layers of 17..32 output channels: the mma.sync kernels' 32-channel blocks, or the
    # wgmma kernels' N = 64 ones (half of them zeros).
    C("c3_k32_3x3", 64, 3, 32, 224, 224, (3, 3), padding=(1, 1)),
    C("c16_k32_3x3", 64, 16, 32, 128, 128, (3, 3), padding=(1, 1)),
    C("c32_k24_3x3", 32, 32, 24, 112, 112, (3, 3), padding=(1, 1)),
    C("c64_k32_3x3", 32, 64, 32, 56, 56, (3, 3), padding=(1, 1)),
    # First layers for the stem kernel (stem_tf32 / stem_16bit): odd widths, 1 channel in.
    C("rgb_stem_odd", 64, 3, 64, 223, 223, (3, 3), padding=(1, 1)),
    C("c1_k32_3x3", 256, 1, 32, 28, 28, (3, 3), padding=(1, 1)),
    C("c3_k24_3x3", 64, 3, 24, 224, 224, (3, 3), padding=(1, 1)),
]
VARIANTS = {torch.float32: ("small_fp32", "small_tf32"),
            torch.float16: ("small_16bit",), torch.bfloat16: ("small_16bit",)}


def time_us(fn, inputs, flush: torch.Tensor) -> tuple[float, float]:
    """(event median over 200 calls, profiler kernel time per call over 30), microseconds."""
    times = time_calls(fn, inputs, iters=200, warmup=10, flush=flush)
    return statistics.median(times), profiler_kernel_us(fn, inputs, calls=30)


def torch_ops(case: ConvPoolCase, x, weight, bias):
    """Model's ops on `case`: F.conv2d + relu + max_pool2d (cuDNN on the GPU)."""
    return F.max_pool2d(F.relu(F.conv2d(x, weight, bias, case.stride, case.padding,
                                        case.dilation)),
                        case.pool_kernel, case.effective_pool_stride, case.pool_padding,
                        ceil_mode=case.ceil_mode)


def main() -> int:
    tag = sys.argv[1] if len(sys.argv) > 1 else "run"
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else None
    dtypes = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else "float32"
    asked = sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else None
    precision = sys.argv[5] if len(sys.argv) > 5 else ""
    if precision not in ("", "no-tf32"):
        raise SystemExit(f"the fifth argument is 'no-tf32' or nothing, got {precision!r}")
    if precision:
        torch.backends.cudnn.allow_tf32 = False
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    variants = ext.conv2d_relu_maxpool_variants()
    torch.manual_seed(0)
    for case in LAYERS:
        if only and case.name not in only:
            continue
        for dtype in (getattr(torch, d) for d in dtypes.split(",")):
            xs = [torch.randn(case.input_shape(), device="cuda", dtype=dtype) for _ in range(3)]
            fan_in = case.in_channels * case.kernel_size[0] * case.kernel_size[1]
            weight = (torch.randn(case.weight_shape(), device="cuda") / fan_in ** 0.5).to(dtype)
            bias = torch.randn(case.out_channels, device="cuda").to(dtype)
            reference = torch_ops(case, xs[0].double(), weight.double(), bias.double())
            for name in asked or VARIANTS[dtype]:
                if name not in variants and name not in ("auto", "eager"):
                    continue
                if name == "eager":
                    def fn(x, case=case, weight=weight, bias=bias):
                        return torch_ops(case, x, weight, bias)
                else:
                    args = (*case.op_args(), -1 if name == "auto" else variants[name])

                    def fn(x, weight=weight, bias=bias, args=args):
                        return ext.conv2d_relu_maxpool_forward(x, weight, bias, *args)
                try:
                    out = fn(xs[0])
                except RuntimeError:
                    continue
                error = ((out.double() - reference).norm() / reference.norm()).item()
                event, kernel = time_us(fn, xs, flush)
                kernel_text = "    n/a" if kernel is None else f"{kernel:7.1f}"
                print(f"{tag:4s} {case.name:12s} {str(dtype)[6:]:8s} {name:17s} event "
                      f"{event:7.1f} us  kernel {kernel_text} us  relerr {error:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
