"""Where a layer's time goes: the op's kernels one by one (profiler device time per call) for
one or more forced variants, beside cuDNN (eager), on cases taken from a profiling JSON by
name or given by their numbers.

    python tools/kernel_breakdown.py --json docs/zoo_h200_float32.json resnext50_32x4d_c30_p2s2_b128 \
        [more names ...] [--configs auto,general_wgmma]
    python tools/kernel_breakdown.py --spec 1,24,58,28,28,1,1,0,2,2 --dtype float16 \
        --configs auto,stem_16bit,general_wgmma
    python tools/kernel_breakdown.py --json docs/zoo_h200_float32.json --all \
        --configs auto,auto@CONV_POOL_GENERAL_TMA_COPY=1 --summary
    python tools/kernel_breakdown.py --json docs/zoo_h200_float16.json --all --plan paired=1 \
        --plan split=1 --list
    python tools/kernel_breakdown.py --json docs/zoo_h200_float32_no_tf32.json --all --no-tf32 \
        --configs auto,general_3xtf32_wgmma --summary

A config may carry environment settings after `@` (`auto@NAME=VALUE@NAME=VALUE`): the
general kernel's hooks (kernels/hopper/general_hooks.h), set while that config is planned
and timed and restored after, so that two forms of one variant are timed in one process.
--plan KEY=VALUE keeps the cases that the automatic choice gives the general kernel and whose
plan there (kernel_choice.general_plan) has that value (besides the plan's keys, `rounds`: how
many rounds of the H200's resident blocks its tiles x split take; VALUE may list alternatives,
`tail_n=32,64`); --list prints the chosen cases and stops (no GPU needed). The filter plans with
the hooks as set in the environment, e.g. the cases whose last channel block runs narrower
wgmmas, each timed without and with them:

    python tools/kernel_breakdown.py --json docs/fuzz_h200.json --all --plan tail_n=32,64 \
        --configs auto@CONV_POOL_GENERAL_NARROW_TAIL=0,auto --summary
--random SEED:COUNT adds COUNT random geometries of the tests' generator (utils.suite.fuzz_case)
and --chosen VARIANT keeps the cases the automatic choice gives that variant, e.g. the random
layers a choice rule gives the general 3xTF32 form, against the kernel it displaced:

    python tools/kernel_breakdown.py --random 1:600 --random 2:600 --no-tf32 \
        --chosen general_3xtf32_wgmma --configs auto,tiled_3xtf32 --summary

--summary ends with one row per case: each config's kernel time and its ratio to the first,
then one row per kernel: its time summed over the cases under eager and each config.
A config named more than once is timed each time, its repeats shown as CONFIG#2, CONFIG#3
(e.g. `--configs auto,auto@HOOK=1,auto`: the run's own noise beside the change).

--spec is N,C,K,H,W,kernel,stride,padding,pool kernel,pool stride[,pool padding] (square sizes,
bias on).
Each forced variant is first checked against eager PyTorch (atol = rtol = 5e-2); a variant
that refuses the case says why. Needs a GPU.
"""
import argparse
import contextlib
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cuda_extension  # noqa: E402
from utils.profiling import L2_FLUSH_BYTES, time_calls  # noqa: E402
from utils.suite import ConvPoolCase, fuzz_case  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CALLS = 20


def case_from_spec(text: str) -> ConvPoolCase:
    values = [int(v) for v in text.split(",")]
    if len(values) not in (10, 11):
        raise ValueError(f"--spec {text!r}: expected N,C,K,H,W,k,s,p,pk,ps[,pool padding]")
    n, c, k, h, w, kernel, stride, pad, pool, pool_stride = values[:10]
    pool_pad = values[10] if len(values) == 11 else 0
    return ConvPoolCase(f"spec_{text}", n, c, k, h, w, (kernel, kernel), (stride, stride),
                        (pad, pad), pool_kernel=(pool, pool), pool_stride=(pool_stride,) * 2,
                        pool_padding=(pool_pad, pool_pad))


def json_cases(path: Path, names: Optional[list[str]] = None) -> list[tuple[str, ConvPoolCase,
                                                                           str, bool]]:
    """(name, case, dtype name, channels_last) of the named cases of a utils.profiling JSON (zoo,
    fuzz, suite), or of all of them; ValueError names a missing or ambiguous name."""
    record = json.loads(Path(path).read_text())
    entries = record["cases"]
    if names is not None:
        by_name = {}
        for entry in entries:
            by_name.setdefault(entry["name"], []).append(entry)
        entries = []
        for name in names:
            if name not in by_name:
                raise ValueError(f"{name} is not in {path}")
            if len(by_name[name]) > 1:
                raise ValueError(f"{name} names {len(by_name[name])} cases in {path}: "
                                 + ", ".join(e["case"]["label"] for e in by_name[name]))
            entries.append(by_name[name][0])
    return [(entry["name"], ConvPoolCase.from_dict(entry["case"]),
             entry.get("dtype") or record["settings"].get("dtype", "float32"),
             bool(entry.get("channels_last"))) for entry in entries]


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


def back_to_back_us(fn, calls: int, rounds: int = 5) -> float:
    """µs a call of `calls` calls issued back to back between two CUDA events (no flush, no
    synchronization between them), the median of `rounds`: the stream's rate, where one call's
    launches may overlap the previous one's tail (programmatic dependent launch) and the host
    runs ahead of the device on layers long enough."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


@contextlib.contextmanager
def environment(settings: dict):
    """os.environ with `settings` applied, restored on exit (the hooks are read at every plan)."""
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def parse_config(text: str) -> tuple[str, dict]:
    """'auto@NAME=VALUE@...' -> ('auto', {NAME: VALUE, ...}); a repeat's '#N' is dropped."""
    name, *settings = text.split("#")[0].split("@")
    env = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise ValueError(f"{text!r}: an environment setting is NAME=VALUE, not {setting!r}")
        env[key] = value
    return name, env


def config_keys(texts: list[str]) -> list[str]:
    """The configs' keys in order: a text named again becomes TEXT#2, TEXT#3, ..."""
    seen, keys = {}, []
    for text in texts:
        seen[text] = seen.get(text, 0) + 1
        keys.append(text if seen[text] == 1 else f"{text}#{seen[text]}")
    return keys


def short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def breakdown(case: ConvPoolCase, dtype: torch.dtype, channels_last: bool, configs, flush,
              stream: int = 0, streams: Optional[dict] = None,
              kernel_sums: Optional[dict] = None):
    """Prints each config's kernels; returns {config text: kernel µs a call} (None: refused).
    With stream > 0, also times `stream` calls back to back into `streams` (back_to_back_us).
    kernel_sums: {config text or "eager": {kernel: µs}}, this case's kernel times added in."""
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
    rows = [("eager (cuDNN)", "eager", eager, {})]
    totals = {}
    for text in configs:
        name, env = parse_config(text)
        config = -1 if name == "auto" else variants[name]
        with environment(env):
            try:
                chosen = cuda_extension.conv2d_relu_maxpool_choose(x, weight, bias, *args, config)
                out = cuda_extension.conv2d_relu_maxpool_forward(x, weight, bias, *args, config)
            except RuntimeError as error:
                print(f"  {text}: refused: {str(error).splitlines()[0]}")
                totals[text] = None
                continue
            general = cuda_extension.conv2d_relu_maxpool_plan(x, weight, bias, *args,
                                                              config)["general"]
        ok = torch.allclose(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
        label = f"{text} ({chosen})" if name == "auto" else text
        if general:  # the general kernel's plan: tile, tiles, split, ...
            label += f" [{general}]"
        rows.append((label + ("" if ok else " MISMATCH"), text,
                     lambda config=config: cuda_extension.conv2d_relu_maxpool_forward(
                         x, weight, bias, *args, config), env))
    for label, key, fn, env in rows:
        with environment(env):
            kernels = kernels_per_call(fn)
            total = sum(us for _, us in kernels)
            line = (f"  {label}: event median {event_median_us(fn, flush):.1f} us, kernels "
                    f"{total:.1f} us")
            if stream > 0:
                streams[key] = back_to_back_us(fn, stream)
                line += f", back to back {streams[key]:.1f} us a call"
            print(line)
        for kernel, us in kernels:
            print(f"      {us:9.1f} us  {short(kernel)}")
            if kernel_sums is not None:
                sums = kernel_sums.setdefault(key, {})
                sums[kernel_name(kernel)] = sums.get(kernel_name(kernel), 0.0) + us
        totals[key] = total
    return totals


def print_summary(results, configs, title: str = "") -> None:
    """One row per case: eager's and each config's kernel µs (or what `title` names), and each
    config's ratio to the first config's (> 1: slower than the first)."""
    if title:
        print(f"\n{title}")
    print("\n| case | eager µs | " + " | ".join(f"{c} µs" for c in configs)
          + "".join(f" | {c} / {configs[0]}" for c in configs[1:]) + " |")
    print("|---|---:|" + "---:|" * (2 * len(configs) - 1))
    for name, totals in results:
        cells = [f"{totals['eager']:.1f}"]
        cells += ["refused" if totals.get(c) is None else f"{totals[c]:.1f}" for c in configs]
        base = totals.get(configs[0])
        for c in configs[1:]:
            value = totals.get(c)
            cells.append("-" if value is None or not base else f"{value / base:.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def kernel_name(kernel: str) -> str:
    """A kernel's name without its namespaces, template arguments and parameters
    (`general_wgmma::(anonymous namespace)::prepare_kernel<float, 4>(...)` -> prepare_kernel),
    so that the kernel sums group a kernel's instances."""
    depth, name = 0, ""
    for ch in kernel:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            name += ch
    return name.split("::")[-1].split()[-1] if name.split() else kernel


def print_kernel_sums(kernel_sums: dict, keys: list[str]) -> None:
    """One row per kernel (kernel_name), its µs summed over the cases under each of `keys`
    (eager and the configs), largest first: where a config's time goes over a whole set."""
    names = sorted({name for sums in kernel_sums.values() for name in sums},
                   key=lambda name: -max(kernel_sums.get(k, {}).get(name, 0.0) for k in keys))
    print("\n| kernel, summed over the cases | " + " | ".join(f"{k} µs" for k in keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name in names:
        cells = [f"{kernel_sums[k][name]:.1f}" if name in kernel_sums.get(k, {}) else "-"
                 for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")


def chosen_name(lib, item, allow_tf32: bool) -> str:
    """The variant the automatic choice (the host's, for the H200) takes for a (case, dtype,
    channels_last) work item."""
    from utils import kernel_choice
    case, dtype, channels_last = item
    element = kernel_choice.ELEMENT_BY_NAME[str(dtype).removeprefix("torch.")]
    return kernel_choice.chosen_variant(lib, case, element, allow_tf32=allow_tf32,
                                        channels_last=channels_last)


def plan_matches(lib, item, wanted, allow_tf32: bool = True) -> bool:
    """Whether the automatic choice takes the general kernel (or its 3xTF32 form) for a (case,
    dtype, channels_last) work item and that kernel's host plan (kernel_choice.load's `lib`) has
    every (key, value) of `wanted` (values compared as text; a value may list alternatives,
    comma-separated)."""
    from utils import kernel_choice
    case, dtype, channels_last = item
    element = kernel_choice.ELEMENT_BY_NAME[str(dtype).removeprefix("torch.")]
    chosen = chosen_name(lib, item, allow_tf32)
    if chosen not in ("general_wgmma", "general_3xtf32_wgmma"):
        return False
    plan = kernel_choice.general_plan(lib, case, element, split=chosen != "general_wgmma",
                                      channels_last=channels_last)
    if plan is None:
        return False
    plan["rounds"] = kernel_choice.general_rounds(plan)
    return all(str(plan.get(key)) in value.split(",") for key, value in wanted)


def random_cases(text: str) -> list[ConvPoolCase]:
    """SEED:COUNT: COUNT random geometries of utils.suite.fuzz_case (the tests' generator),
    named r<SEED>_<i>; ValueError on another form."""
    seed, _, count = text.partition(":")
    if not seed.lstrip("-").isdigit() or not count.isdigit():
        raise ValueError(f"--random wants SEED:COUNT, got {text!r}")
    rng = random.Random(int(seed))
    return [fuzz_case(rng, f"r{seed}_{i}") for i in range(int(count))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/kernel_breakdown.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="case names in --json")
    parser.add_argument("--json", type=Path, help="a utils.profiling JSON (zoo, fuzz, suite)")
    parser.add_argument("--all", action="store_true", help="every case of --json")
    parser.add_argument("--spec", action="append", default=[],
                        metavar="N,C,K,H,W,k,s,p,pk,ps[,pp]",
                        help="a case by its numbers (repeatable)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
                        help="dtype of --spec cases (JSON cases keep their own)")
    parser.add_argument("--channels-last", action="store_true",
                        help="run every case on a channels-last input (JSON cases keep theirs "
                             "otherwise)")
    parser.add_argument("--configs", default="auto",
                        help="comma-separated: auto and/or variant names, each with optional "
                             "@NAME=VALUE environment settings (default auto)")
    parser.add_argument("--summary", action="store_true",
                        help="end with a table of every case's kernel time per config")
    parser.add_argument("--plan", action="append", default=[], metavar="KEY=VALUE",
                        help="keep only the cases that the automatic choice gives the general "
                             "kernel and whose plan there (the host's, for the H200, the hooks "
                             "as set) has KEY = VALUE, e.g. paired=1, rounds=1 or tail_n=32,64 "
                             "(one of the values; repeatable)")
    parser.add_argument("--random", action="append", default=[], metavar="SEED:COUNT",
                        help="COUNT random geometries of the tests' generator (utils.suite."
                             "fuzz_case) from SEED, in --dtype (and --channels-last); repeatable")
    parser.add_argument("--chosen", metavar="VARIANT[,VARIANT]",
                        help="keep only the cases that the automatic choice (the host's, for the "
                             "H200; --no-tf32 as given) gives one of these variants")
    parser.add_argument("--no-tf32", action="store_true",
                        help="torch.backends.cudnn.allow_tf32 (and cuda.matmul.allow_tf32) False "
                             "for every config and eager: the fp32-accurate paths (float32)")
    parser.add_argument("--list", action="store_true",
                        help="print the cases chosen (name, dtype, layout) and stop; no GPU")
    parser.add_argument("--stream", type=int, default=0, metavar="CALLS",
                        help="also time CALLS calls back to back (no flush between them: the "
                             "stream's rate, for launch overlap such as "
                             "$CONV_POOL_GENERAL_PDL); with --summary, a second table of them")
    args = parser.parse_args(argv)
    configs = config_keys(args.configs.split(","))
    try:
        for text in configs:
            parse_config(text)
    except ValueError as error:
        parser.error(str(error))
    work = []
    if args.all and args.json is None:
        parser.error("--all needs --json")
    if args.names and args.json is None:
        parser.error("case names need --json")
    if args.all or args.names:
        try:
            found = json_cases(args.json, None if args.all else args.names)
        except ValueError as error:
            parser.error(str(error))
        work += [(case, DTYPES[dtype], channels_last or args.channels_last)
                 for _, case, dtype, channels_last in found]
    for spec in args.spec:
        try:
            work.append((case_from_spec(spec), DTYPES[args.dtype], args.channels_last))
        except ValueError as error:
            parser.error(str(error))
    for text in args.random:
        try:
            work += [(case, DTYPES[args.dtype], args.channels_last) for case in random_cases(text)]
        except ValueError as error:
            parser.error(str(error))
    if not work:
        parser.error("name at least one case (names with --json, --spec or --random)")
    if args.chosen:
        from utils import kernel_choice
        lib = kernel_choice.load(cuda_extension)
        names = args.chosen.split(",")
        work = [item for item in work if chosen_name(lib, item, not args.no_tf32) in names]
        if not work:
            parser.error(f"no case is chosen for {args.chosen}")
    if args.plan:
        wanted = [text.split("=", 1) for text in args.plan]
        if any(len(pair) != 2 or not pair[0] for pair in wanted):
            parser.error(f"--plan wants KEY=VALUE, got {args.plan}")
        from utils import kernel_choice
        lib = kernel_choice.load(cuda_extension)
        work = [item for item in work if plan_matches(lib, item, wanted, not args.no_tf32)]
        if not work:
            parser.error(f"no case has a general-kernel plan with {' '.join(args.plan)}")
    if args.list:
        for case, dtype, channels_last in work:
            print(case.name, str(dtype).removeprefix("torch."),
                  "channels_last" if channels_last else "nchw")
        return 0
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.no_tf32:  # the op reads cuDNN's flag at every call, as eager does
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    results, stream_results, kernel_sums = [], [], {}
    with torch.no_grad():
        for case, dtype, channels_last in work:
            streams = {}
            results.append((case.name, breakdown(case, dtype, channels_last, configs, flush,
                                                 args.stream, streams, kernel_sums)))
            stream_results.append((case.name, streams))
    if args.summary:
        print_summary(results, configs)
        print_kernel_sums(kernel_sums, ["eager"] + configs)
        if args.stream > 0:
            print_summary(stream_results, configs,
                          f"back to back, {args.stream} calls: µs a call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
