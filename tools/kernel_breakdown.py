"""Where a layer's time goes: the op's kernels one by one (profiler device time per call) for
one or more forced variants, beside cuDNN (eager), on cases taken from a profiling JSON by
name or given by their numbers.

    python tools/kernel_breakdown.py --json docs/zoo_h200_float32.json resnext50_32x4d_c30_p2s2_b128 \
        [more names ...] [--configs auto,general_wgmma]
    python tools/kernel_breakdown.py --spec 1,24,58,28,28,1,1,0,2,2 --dtype float16 \
        --configs auto,stem_16bit,general_wgmma

--spec is N,C,K,H,W,kernel,stride,padding,pool kernel,pool stride (square sizes, bias on).
Each forced variant is first checked against eager PyTorch (atol = rtol = 5e-2); a variant
that refuses the case says why. Needs a GPU.
"""
import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cuda_extension  # noqa: E402
from utils.profiling import L2_FLUSH_BYTES, time_calls  # noqa: E402
from utils.suite import ConvPoolCase  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CALLS = 20


def case_from_dict(entry: dict) -> ConvPoolCase:
    names = {f.name for f in dataclasses.fields(ConvPoolCase)}
    return ConvPoolCase(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in entry.items() if k in names})


def case_from_spec(text: str) -> ConvPoolCase:
    n, c, k, h, w, kernel, stride, pad, pool, pool_stride = (int(v) for v in text.split(","))
    return ConvPoolCase(f"spec_{text}", n, c, k, h, w, (kernel, kernel), (stride, stride),
                        (pad, pad), pool_kernel=(pool, pool), pool_stride=(pool_stride,) * 2)


def kernels_per_call(fn) -> list[tuple[str, float]]:
    """(kernel name, device µs per call) of fn's launches, by the profiler, largest first."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    totals = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time_total > 0:
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time_total
    return sorted(((name, us / CALLS) for name, us in totals.items()), key=lambda t: -t[1])


def event_median_us(fn, flush: torch.Tensor, iters: int = 30) -> float:
    """utils.profiling's timing (CUDA events, L2 flushed between calls): the median, µs."""
    return statistics.median(time_calls(lambda _: fn(), [None], iters, 3, flush))


def short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def breakdown(case: ConvPoolCase, dtype: torch.dtype, channels_last: bool, configs, flush):
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(case.input_shape(), generator=generator).to("cuda", dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    fan_in = case.in_channels * case.kernel_size[0] * case.kernel_size[1]
    weight = (torch.randn(case.weight_shape(), generator=generator) / fan_in ** 0.5).to(
        "cuda", dtype)
    bias = (torch.randn(case.out_channels, generator=generator).to("cuda", dtype)
            if case.bias else None)
    args = case.op_args()
    print(f"\n{case.name}: {case.label()}, {str(dtype)[6:]}"
          f"{', channels-last' if channels_last else ''}, {case.flops() / 1e9:.2f} GFLOP")

    def eager():
        return F.max_pool2d(F.relu(F.conv2d(x, weight, bias, case.stride, case.padding,
                                            case.dilation)), case.pool_kernel,
                            case.effective_pool_stride, case.pool_padding, 1, case.ceil_mode)
    expected = eager()
    variants = cuda_extension.conv2d_relu_maxpool_variants()
    rows = [("eager (cuDNN)", eager)]
    for name in configs:
        config = -1 if name == "auto" else variants[name]
        try:
            chosen = cuda_extension.conv2d_relu_maxpool_choose(x, weight, bias, *args, config)
            out = cuda_extension.conv2d_relu_maxpool_forward(x, weight, bias, *args, config)
        except RuntimeError as error:
            print(f"  {name}: refused: {str(error).splitlines()[0]}")
            continue
        ok = torch.allclose(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
        label = f"{name} ({chosen})" if name == "auto" else name
        general = cuda_extension.conv2d_relu_maxpool_plan(x, weight, bias, *args, config)["general"]
        if general:  # the general kernel's plan: tile, tiles, split, ...
            label += f" [{general}]"
        rows.append((label + ("" if ok else " MISMATCH"),
                     lambda config=config: cuda_extension.conv2d_relu_maxpool_forward(
                         x, weight, bias, *args, config)))
    for label, fn in rows:
        kernels = kernels_per_call(fn)
        total = sum(us for _, us in kernels)
        print(f"  {label}: event median {event_median_us(fn, flush):.1f} us, kernels "
              f"{total:.1f} us")
        for kernel, us in kernels:
            print(f"      {us:9.1f} us  {short(kernel)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/kernel_breakdown.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="case names in --json")
    parser.add_argument("--json", type=Path, help="a utils.profiling JSON (zoo, fuzz, suite)")
    parser.add_argument("--spec", action="append", default=[], metavar="N,C,K,H,W,k,s,p,pk,ps",
                        help="a case by its numbers (repeatable)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
                        help="dtype of --spec cases (JSON cases keep their own)")
    parser.add_argument("--channels-last", action="store_true",
                        help="run every case on a channels-last input (JSON cases keep theirs "
                             "otherwise)")
    parser.add_argument("--configs", default="auto",
                        help="comma-separated: auto and/or variant names (default auto)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    configs = args.configs.split(",")
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    work = []
    if args.names:
        if args.json is None:
            parser.error("case names need --json")
        record = json.loads(args.json.read_text())
        by_name = {}
        for entry in record["cases"]:
            by_name.setdefault(entry["name"], []).append(entry)
        for name in args.names:
            if name not in by_name:
                parser.error(f"{name} is not in {args.json}")
            if len(by_name[name]) > 1:
                parser.error(f"{name} names {len(by_name[name])} cases in {args.json}: "
                             + ", ".join(e["case"]["label"] for e in by_name[name]))
            entry = by_name[name][0]
            dtype = entry.get("dtype") or record["settings"].get("dtype", "float32")
            work.append((case_from_dict(entry["case"]), DTYPES[dtype],
                         bool(entry.get("channels_last")) or args.channels_last))
    for spec in args.spec:
        work.append((case_from_spec(spec), DTYPES[args.dtype], args.channels_last))
    if not work:
        parser.error("name at least one case (names with --json, or --spec)")
    with torch.no_grad():
        for case, dtype, channels_last in work:
            breakdown(case, dtype, channels_last, configs, flush)
    return 0


if __name__ == "__main__":
    sys.exit(main())
