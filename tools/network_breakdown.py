"""Where a whole network's time goes: the kernels of one forward pass, target by target
(tools/bench_networks.py's targets), by the profiler's device time per call.

    python tools/network_breakdown.py alexnet --batch 32 --dtype float32 \
        [--layout channels_last] [--targets compile,fused,fused-compile] [--top 12]

For each target: the device time of all its kernels per call, the number of launches per
call, the host's wall time per call (calls back to back, one synchronize at the end), and its
largest kernels (one line each, the name cut to 90 characters); --cpu adds the operators with
the most host time of their own; --conv-relu fuses Conv2d -> [BN] -> ReLU runs with no pool
too (bench_networks' --conv-relu). Needs a GPU.
"""
import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import bench_networks  # noqa: E402
from tools.kernel_breakdown import kernels_per_call  # noqa: E402


def launches_per_call(fn, calls: int = 5) -> float:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA) / calls


def wall_us_per_call(fn, calls: int = 50) -> float:
    fn()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / calls * 1e6


def host_operators(fn, top: int, calls: int = 10) -> list:
    """(name, host µs of its own per call, calls per call) of the operators with the most."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    return [(e.key, e.self_cpu_time_total / calls, e.count / calls) for e in rows]


def target_callable(name: str, eager, x, conv_relu: bool = False):
    """A no-argument call of target `name` (compile-pass turns the pass and freezing on for
    its first call, which compiles; compile-frozen freezing only); conv_relu: the fusion's and
    the pass's option (bench_networks --conv-relu)."""
    if name not in ("compile-pass", "compile-frozen"):
        module = bench_networks.build_target(name, eager, dict(conv_relu=conv_relu))
        return lambda: module(x)
    import torch._inductor.config as inductor_config
    import model_new
    freezing = inductor_config.freezing
    if name == "compile-pass":
        model_new.enable_inductor_fusion(conv_relu=conv_relu)
    inductor_config.freezing = True
    try:
        module = torch.compile(copy.deepcopy(eager))
        module(x)
    finally:
        if name == "compile-pass":
            model_new.enable_inductor_fusion(False)
        inductor_config.freezing = freezing
    return lambda: module(x)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtype", choices=sorted(bench_networks.DTYPES), default="float32")
    parser.add_argument("--layout", choices=("nchw", "channels_last"), default="nchw")
    parser.add_argument("--targets", default="compile,fused,fused-compile,compile-pass")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--cpu", action="store_true", help="also the host's busiest operators")
    parser.add_argument("--conv-relu", action="store_true",
                        help="fuse Conv2d -> [BN] -> ReLU runs with no pool too")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    eager = bench_networks.make_model(args.model, bench_networks.DTYPES[args.dtype],
                                      args.layout == "channels_last")
    size = bench_networks.input_size(args.model)
    x = torch.randn(args.batch, 3, size, size, device="cuda").to(bench_networks.DTYPES[args.dtype])
    if args.layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        for name in ["eager"] + [t for t in args.targets.split(",") if t and t != "eager"]:
            fn = target_callable(name, eager, x, args.conv_relu)
            kernels = kernels_per_call(fn)
            total = sum(us for _, us in kernels)
            print(f"== {args.model} b{args.batch} {args.dtype} {args.layout}"
                  f"{' conv_relu' if args.conv_relu else ''} {name}: "
                  f"{total:.1f} us of kernels per call, {launches_per_call(fn):.0f} launches, "
                  f"{wall_us_per_call(fn):.1f} us wall per call")
            for kernel, us in kernels[:args.top]:
                print(f"  {us:9.1f} us  {kernel[:90]}")
            if args.cpu:
                for operator, us, count in host_operators(fn, args.top):
                    print(f"  host {us:9.1f} us  x{count:<5.1f} {operator[:80]}")
            torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
