"""What a channels-last input costs ModelNew: NCHW vs channels-last input, same weights.

    python tools/bench_layouts.py                 # default problem
    python tools/bench_layouts.py vgg_b3 --iters 50

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
    parser.add_argument("case", nargs="?", default="default", help="suite case (default)")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    case = find_case(args.case)
    torch.manual_seed(0)
    model = Model(**case.model_kwargs()).cuda().eval()
    fused = ModelNew(**case.model_kwargs()).cuda().eval()
    fused.load_state_dict(model.state_dict())
    x = torch.randn(case.input_shape(), device="cuda")
    x_cl = x.contiguous(memory_format=torch.channels_last)
    flush = torch.empty(256 * 2**20 // 4, device="cuda")
    with torch.no_grad():
        expected = model(x)
        for name, value in (("nchw", fused(x)), ("channels_last", fused(x_cl))):
            torch.testing.assert_close(value, expected, atol=1e-2, rtol=1e-2, msg=name)
        rows = {
            "ModelNew, NCHW input": time_ms(lambda: fused(x), args.iters, flush),
            "ModelNew, channels-last input": time_ms(lambda: fused(x_cl), args.iters, flush),
            "x.contiguous() + ModelNew": time_ms(lambda: fused(x_cl.contiguous()), args.iters,
                                                   flush),
        }
    print(f"{case.label()}: both layouts match eager (atol = rtol = 1e-2)")
    for name, ms in rows.items():
        print(f"  {name:32s} {ms:8.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
