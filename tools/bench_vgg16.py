"""VGG-16 `.features` on the GPU: eager vs torch.compile vs fuse_conv_relu_maxpool.

    python tools/bench_vgg16.py                         # batch 32, 224x224, ~1-2 min on an H200
    python tools/bench_vgg16.py --json vgg16.json       # also write the numbers as JSON
    python tools/bench_vgg16.py --targets eager,fused   # skip the compiles (seconds)

torchvision's VGG-16 feature extractor with random weights (`vgg16(weights=None)`: nothing
is downloaded), float32 on CUDA, eval mode under torch.no_grad(). Targets, all on the same
weights:
  eager          the torchvision module as is (cuDNN; TF32 per torch.backends.cudnn.allow_tf32)
  compile        torch.compile of it, default mode
  fused          fuse_conv_relu_maxpool on a deep copy: the five conv -> ReLU -> max-pool
                 blocks become one fused kernel each, the other eight convs stay cuDNN
  fused-compile  torch.compile of the fused copy (the fused op is a custom op, so Inductor
                 keeps it and compiles the layers around it)
  fused-prepacked  fused with prepack=True: each fused block keeps its weight packed for the
                 Hopper kernels between calls (ModelNew.prepack), eager
Each target's output is checked against eager first: max |out - eager| <= 1e-2 * max |eager|.
Then each is timed: after --warmup calls, --iters calls each bracketed by CUDA events, the L2
cache flushed (a 256 MB write) between calls, outside the events; reported: the median and
the p10-p90 spread, and the speedup over eager. Exit status: 0 all matched, 1 a target did
not match eager, 2 no GPU, no torchvision or no built extension.
"""
import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ALL_TARGETS = ("eager", "compile", "fused", "fused-compile", "fused-prepacked")
RELATIVE_TOLERANCE = 1e-2  # of max |eager output|
L2_FLUSH_BYTES = 256 << 20
MIN_ITERS = 50


def percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def time_calls(fn: Callable[[], torch.Tensor], warmup: int, iters: int) -> List[float]:
    """Milliseconds of each of `iters` calls, L2 flushed before each (outside the events)."""
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


def markdown_table(results: Dict[str, dict]) -> str:
    """The results as a Markdown table (docs/RESULTS.md's VGG-16 table)."""
    lines = ["| target | median ms | p10-p90 ms | speedup vs eager | matches eager |",
             "|---|---:|---:|---:|---|"]
    for name, row in results.items():
        lines.append(f"| {name} | {row['median_ms']:.3f} | {row['p10_ms']:.3f}-"
                     f"{row['p90_ms']:.3f} | {row['speedup_over_eager']:.2f}x | "
                     f"{'yes' if row['matches_eager'] else 'NO'} |")
    return "\n".join(lines)


def build_targets(features: nn.Module, names: List[str]) -> Dict[str, nn.Module]:
    from model_new import fuse_conv_relu_maxpool
    targets = {}
    for name in names:
        if name == "eager":
            targets[name] = features
        elif name == "compile":
            targets[name] = torch.compile(copy.deepcopy(features))
        elif name == "fused":
            targets[name] = fuse_conv_relu_maxpool(copy.deepcopy(features))
        elif name == "fused-compile":
            targets[name] = torch.compile(fuse_conv_relu_maxpool(copy.deepcopy(features)))
        elif name == "fused-prepacked":  # ModelNew.prepack(): weights kept packed, eager
            targets[name] = fuse_conv_relu_maxpool(copy.deepcopy(features), prepack=True)
    return targets


def parse_targets(text: str) -> List[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL_TARGETS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown target(s) {unknown}; known: {ALL_TARGETS}")
    return ["eager"] + [name for name in names if name != "eager"]  # eager is the reference


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tools/bench_vgg16.py", description=__doc__.splitlines()[0],
        epilog="Targets: " + ", ".join(ALL_TARGETS))
    parser.add_argument("--batch", type=int, default=32, help="batch size (default: 32)")
    parser.add_argument("--size", type=int, default=224, help="input height = width (224)")
    parser.add_argument("--iters", type=int, default=MIN_ITERS,
                        help=f"timed calls per target; the median is reported (default and "
                             f"recommended minimum: {MIN_ITERS})")
    parser.add_argument("--warmup", type=int, default=5,
                        help="untimed calls per target after its first (compiling) call")
    parser.add_argument("--targets", type=parse_targets, default=list(ALL_TARGETS),
                        help="comma-separated targets (default: all; eager always runs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and input")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA GPU is visible", file=sys.stderr)
        return 2
    try:
        import torchvision
        import model_new  # noqa: F401 - builds nothing, but fails early without the extension
    except ImportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.iters < MIN_ITERS:
        print(f"warning: --iters {args.iters} < {MIN_ITERS}: the median is noisier",
              file=sys.stderr)

    torch.manual_seed(args.seed)
    features = torchvision.models.vgg16(weights=None).features.cuda().eval()
    x = torch.randn(args.batch, 3, args.size, args.size, device="cuda")
    print(f"VGG-16 features, batch {args.batch}, {args.size}x{args.size}, float32; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, torchvision "
          f"{torchvision.__version__}, cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}",
          flush=True)

    results, failed = {}, False
    with torch.no_grad():
        targets = build_targets(features, args.targets)
        expected = features(x).clone()
        scale = expected.abs().max().item()
        for name, module in targets.items():
            started = time.perf_counter()
            out = module(x)  # the first call compiles, where there is something to compile
            torch.cuda.synchronize()
            first_call_s = time.perf_counter() - started
            error = (out - expected).abs().max().item()
            matches = out.shape == expected.shape and error <= RELATIVE_TOLERANCE * scale
            failed |= not matches
            times = time_calls(lambda: module(x), args.warmup, args.iters)
            results[name] = dict(median_ms=statistics.median(times),
                                 p10_ms=percentile(times, 10), p90_ms=percentile(times, 90),
                                 samples=len(times), first_call_s=first_call_s,
                                 max_abs_error=error, relative_error=error / (scale or 1.0),
                                 matches_eager=matches)
            print(f"  {name:14s} median {results[name]['median_ms']:8.3f} ms, first call "
                  f"{first_call_s:6.1f} s, max error {error / (scale or 1.0):.1e} of "
                  f"max |eager| {'ok' if matches else 'MISMATCH'}", flush=True)

    eager_ms = results["eager"]["median_ms"]
    for row in results.values():
        row["speedup_over_eager"] = eager_ms / row["median_ms"]
    print("\n" + markdown_table(results))

    if args.json:
        record = dict(
            benchmark="vgg16_features", batch=args.batch, size=args.size, dtype="float32",
            iters=args.iters, warmup=args.warmup, seed=args.seed,
            relative_tolerance=RELATIVE_TOLERANCE, output_scale=scale,
            environment=dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                             cuda=torch.version.cuda, torchvision=torchvision.__version__,
                             cudnn_allow_tf32=torch.backends.cudnn.allow_tf32),
            targets=results)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")
    if failed:
        print("FAIL: a target's output does not match eager", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
