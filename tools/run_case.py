"""Run one suite case through one kernel variant a few times: a target for ncu.

    ncu --clock-control none -k regex:conv_pool --launch-skip 1 --launch-count 1 \
        python tools/run_case.py default tiled_tf32 --batch 16
    ... python tools/run_case.py rgb_stem tiled_16bit_wgmma --dtype float16
    ... python tools/run_case.py 128,512,512,14,14,3,2,1,3,2 general_wgmma
    ... python tools/run_case.py fuzz_76 general_wgmma --json docs/fuzz_h200.json
The case is a suite or grid name, or N,C,K,H,W,kernel,stride,padding,pool kernel,pool stride
(square sizes, bias on; as tools/kernel_breakdown.py --spec), or with --json a case name of a
utils.profiling JSON, in that case's dtype and layout unless --dtype or --channels-last say.
"""
import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cuda_extension  # noqa: E402
from tools.kernel_breakdown import case_from_spec, json_cases  # noqa: E402
from utils.suite import find_case  # noqa: E402


def resolve_case(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """args.case as a ConvPoolCase, with args.dtype and args.channels_last settled: with
    args.json the JSON case's dtype and layout unless given, else a spec or a suite or grid
    name, in float32 unless args.dtype says. A name the JSON lacks is the parser's error."""
    if args.json is not None:
        try:
            ((_, case, dtype, channels_last),) = json_cases(args.json, [args.case])
        except ValueError as error:
            parser.error(str(error))
        args.dtype = args.dtype or dtype
        args.channels_last = args.channels_last or channels_last
    else:
        case = case_from_spec(args.case) if "," in args.case else find_case(args.case)
    args.dtype = args.dtype or "float32"
    return case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", help="suite or grid case name, or N,C,K,H,W,k,s,p,pk,ps, or "
                        "with --json a case name in that file")
    parser.add_argument("variant", help="kernel variant name, or auto")
    parser.add_argument("--batch", type=int, default=0, help="override the batch size")
    parser.add_argument("--calls", type=int, default=2, help="how many calls")
    parser.add_argument("--channels-last", action="store_true", help="x in channels-last")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"),
                        help="x, weight and bias dtype (default float32, or the JSON case's)")
    parser.add_argument("--json", type=Path, help="a utils.profiling JSON (zoo, fuzz, suite)")
    args = parser.parse_args()
    case = resolve_case(parser, args)
    if args.batch:
        case = replace(case, batch=args.batch)
    run_calls(case, args.variant, args.calls, args.dtype, args.channels_last)
    print("ran", case.label(), args.variant, args.dtype)
    return 0


def run_calls(case, variant: str, calls: int, dtype: str = "float32",
              channels_last: bool = False) -> None:
    """`calls` calls of the op on `case` through `variant` ("auto": the automatic choice), on
    random operands (seed 0), then a device synchronization."""
    config = -1 if variant == "auto" else cuda_extension.conv2d_relu_maxpool_variants()[variant]
    torch.manual_seed(0)
    element = getattr(torch, dtype)
    x = torch.randn(case.input_shape(), device="cuda").to(element)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(case.weight_shape(), device="cuda") * 0.05).to(element)
    b = torch.randn(case.out_channels, device="cuda").to(element)
    for _ in range(calls):
        cuda_extension.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), config)
    torch.cuda.synchronize()


if __name__ == "__main__":
    sys.exit(main())
