"""What a channels-last input costs ModelNew: NCHW vs channels-last input, same weights.

    python tools/bench_layouts.py                 # default problem
    python tools/bench_layouts.py default vgg_b3 vgg_b5 --iters 50
    python tools/bench_layouts.py default --dtype float16

Times (CUDA events, L2 flushed before each call, median of --iters after warm-up):
ModelNew on the NCHW input, ModelNew on the same values in channels-last memory (the kernel
reads the strides as they are: no copy), and an explicit .contiguous() of the channels-last
input followed by ModelNew (what a copy would cost). Checks both outputs against eager first.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_variants import time_ms  # noqa: E402  (tools/ is sys.path[0] when run as a script)
from model import Model  # noqa: E402
from model_new import ModelNew  # noqa: E402
from utils.suite import find_case  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=["default"], help="suite cases (default)")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    # 16-bit: PyTorch's own result in that dtype is the comparison, hence the looser tolerance.
    tolerance = 1e-2 if dtype == torch.float32 else 5e-2
    flush = torch.empty(256 * 2**20 // 4, device="cuda")
    for name in args.cases:
        case = find_case(name)
        torch.manual_seed(0)
        model = Model(**case.model_kwargs()).cuda().eval().to(dtype)
        fused = ModelNew(**case.model_kwargs()).cuda().eval().to(dtype)
        fused.load_state_dict(model.state_dict())
        x = torch.randn(case.input_shape(), device="cuda", dtype=dtype)
        x_cl = x.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            expected = model(x)
            for layout, value in (("nchw", fused(x)), ("channels_last", fused(x_cl))):
                torch.testing.assert_close(value, expected, atol=tolerance, rtol=tolerance,
                                           msg=lambda m: f"{name} {layout}: {m}")
            rows = {
                "ModelNew, NCHW input": time_ms(lambda: fused(x), args.iters, flush),
                "ModelNew, channels-last input": time_ms(lambda: fused(x_cl), args.iters, flush),
                "x.contiguous() + ModelNew": time_ms(lambda: fused(x_cl.contiguous()),
                                                       args.iters, flush),
            }
        print(f"{case.label()} {args.dtype}: both layouts match eager "
              f"(atol = rtol = {tolerance:g})")
        for row, ms in rows.items():
            print(f"  {row:32s} {ms:8.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
