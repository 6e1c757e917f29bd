"""The host's cost of one call of the fused op, path by path, on a layer small enough that
the host and not the GPU sets the pace.

    python tools/op_overhead.py [N,C,K,H,W,k,s,p,pk,ps] [--dtype float16] [--calls 2000]

Paths: the pybind function itself (`binding`), model_new.conv2d_relu_maxpool (`eager`: what
ModelNew runs), the custom op under no_grad (`op`) and under inference_mode (`op-inference`),
a torch.compile'd function of the op (`compiled`), and the same computation in PyTorch's own
ops, eager and compiled (`torch`, `torch-compiled`), for scale. Each line: wall µs per call,
calls back to back, one synchronize at the end (median of 5 repeats). Needs a GPU.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cuda_extension  # noqa: E402
import model_new  # noqa: E402
from tools.kernel_breakdown import case_from_spec  # noqa: E402


def wall_us(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    repeats = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        repeats.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(repeats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", nargs="?", default="1,64,64,14,14,3,1,1,2,2")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    case = case_from_spec(args.spec)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    x = torch.randn(case.input_shape(), device="cuda").to(dtype)
    w = (torch.randn(case.weight_shape(), device="cuda") * 0.05).to(dtype)
    b = torch.randn(case.out_channels, device="cuda").to(dtype)
    settings = case.op_args()
    op = torch.ops.fused_conv.conv2d_relu_maxpool.default

    def torch_layer(x):
        y = F.relu(F.conv2d(x, w, b, case.stride, case.padding, case.dilation))
        return F.max_pool2d(y, case.pool_kernel, case.pool_stride, case.pool_padding,
                            ceil_mode=case.ceil_mode)

    compiled_op = torch.compile(lambda x: op(x, w, b, *settings, -1, None))
    compiled_torch = torch.compile(torch_layer)
    paths = {
        "binding": lambda: cuda_extension.conv2d_relu_maxpool_forward(x, w, b, *settings, -1),
        "eager": lambda: model_new.conv2d_relu_maxpool(x, w, b, *settings),
        "op": lambda: op(x, w, b, *settings, -1, None),
        "compiled": lambda: compiled_op(x),
        "torch": lambda: torch_layer(x),
        "torch-compiled": lambda: compiled_torch(x),
    }
    print(f"{case.label()} {args.dtype}: host wall µs per call")
    with torch.no_grad():
        reference = torch_layer(x)
        for name, fn in paths.items():
            torch.testing.assert_close(fn(), reference, atol=5e-2, rtol=5e-2)
            print(f"  {name:15s} {wall_us(fn, args.calls):8.1f}", flush=True)
    with torch.inference_mode():
        print(f"  {'op-inference':15s} {wall_us(paths['op'], args.calls):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
