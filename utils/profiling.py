"""Time ModelNew (the fused CUDA op) against its PyTorch peers on the GPU.

    python -m utils.profiling                       # default problem: op, eager, torch.compile
    python -m utils.profiling --suite               # the public suite (~5 min on an H200)
    python -m utils.profiling --max-autotune --channels-last   # add those two peers
    python -m utils.profiling --suite --json out.json --plot speedup.png
    python -m utils.profiling --suite --dtype bfloat16   # model.bfloat16() against its peers
    python -m utils.profiling --suite --no-tf32     # fp32-accurate: allow_tf32 = False for all
    python -m utils.profiling --zoo --zoo-limit 60  # layers of torchvision's models (utils/zoo.py)
    python -m utils.profiling --fuzz 150            # random geometries >= 0.5 GFLOP, every dtype
                                                    # and both layouts
    ncu --nvtx --nvtx-include "new/" python -m utils.profiling --single-run new

How a time is taken: after a warm-up, each call is bracketed by its own pair of CUDA events;
between calls (outside the events) the L2 cache is flushed by writing a 256 MB buffer, and the
input rotates among enough buffers that together they exceed twice the L2 size. Reported per
target: the median and the p10-p90 spread of `--iters` calls, the profiler's kernel-time sum
per call (torch.profiler, kernels only, no flush: the number an nsys/torch.profiler summary
shows), TFLOP/s, and the percent of the floor. The floor is
max(FLOPs / TF32 ceiling, min bytes / HBM bandwidth), with the ceilings from
the H200 measurements listed in docs/PERF.md ("The floors"; labelled "PEERS-H200.md" in the JSON,
the team's peer measurements of the H200) unless --measure-ceilings (or --tf32-tflops /
--hbm-tbps) says otherwise.
With --dtype float16 or bfloat16 every target runs in that dtype (Model and ModelNew
converted with .to(dtype), inputs created in it); the floor then takes the 16-bit tensor-core
ceiling (cuBLAS bf16 matmul, --half-tflops) and 2 bytes per element. With --no-tf32 every
target runs under torch.backends.cudnn.allow_tf32 = False (PyTorch's fp32-accurate setting:
ModelNew takes its 3xTF32 / FFMA kernels, cuDNN its fp32 algorithms); the floor stays the TF32
one, a bound no fp32-accurate path reaches.

Peers run in the same process on the same weights: eager Model, torch.compile(Model) (default
mode), and on request torch.compile(mode="max-autotune-no-cudagraphs") and channels-last
eager. The table at the end gives microseconds and the op's speedup over each peer.
Exit status: 0 done, 2 no GPU or no built extension.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import torch
import torch.nn as nn

from utils.suite import DEFAULT, SUITE, ConvPoolCase, find_case
from utils.setup_checks import SetupError, require_gpu_and_extension

# Ceilings measured on the lent H200 (docs/PERF.md, "The floors").
DEFAULT_TF32_TFLOPS = 356.0   # cuBLAS fp32 matmul 8192^3, TF32 on
DEFAULT_HBM_TBPS = 4.24       # device-to-device copy, read + write
DEFAULT_HALF_TFLOPS = 708.0   # cuBLAS bf16 matmul (the floor's ceiling for 16-bit runs)
L2_FLUSH_BYTES = 256 << 20
FALLBACK_L2_BYTES = 60 << 20  # H200; used when the device properties don't say
MAX_INPUT_BUFFERS = 64
INPUT_MEMORY_BUDGET = 8 << 30  # all rotated input buffers of one target together
DEFAULT_ITERS = 100
DEFAULT_WARMUP = 10
PROFILER_CALLS = 20
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# The op against Model in the same dtype, before timing (as in tests/test_gpu_correctness.py:
# fp32 at verification's 1e-2; 16-bit outputs carry one rounding to 16 bits each side).
MATCH_TOLERANCE = {torch.float32: 1e-2, torch.float16: 1e-2, torch.bfloat16: 2e-2}
JSON_SCHEMA = "conv_relu_maxpool.profiling/1"

NEW = "new"
EAGER = "eager"
COMPILE = "compile"
MAX_AUTOTUNE = "max-autotune"
CHANNELS_LAST = "channels-last"
PREPACKED = "new-prepacked"  # ModelNew.prepack(): ours too, not a peer
ALL_TARGETS = (NEW, EAGER, COMPILE, MAX_AUTOTUNE, CHANNELS_LAST, PREPACKED)
PEERS = (EAGER, COMPILE, MAX_AUTOTUNE, CHANNELS_LAST)

# Keys every JSON record has (tests/test_instruments_cpu.py pins them down).
REQUIRED_TOP_KEYS = ("schema", "created_utc", "environment", "settings", "ceilings", "cases")
REQUIRED_ENVIRONMENT_KEYS = ("gpu", "driver", "clocks", "torch", "cuda", "cudnn", "python",
                             "git_commit")
REQUIRED_CASE_KEYS = ("name", "case", "variant", "floor_us", "input_buffers", "targets",
                      "speedup_over")
REQUIRED_TARGET_KEYS = ("median_us", "p10_us", "p90_us", "mean_us", "min_us", "max_us",
                        "samples", "profiler_kernel_us", "tflops", "percent_of_floor")


# ---- statistics and the floor (pure arithmetic, tested on the CPU) ----------------------

def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class TimingStats:
    """Summary of per-call times, in microseconds."""
    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    min_us: float
    max_us: float
    samples: int


def summarize(times_us: Sequence[float]) -> TimingStats:
    return TimingStats(median_us=percentile(times_us, 50), p10_us=percentile(times_us, 10),
                       p90_us=percentile(times_us, 90), mean_us=sum(times_us) / len(times_us),
                       min_us=min(times_us), max_us=max(times_us), samples=len(times_us))


@dataclass
class Ceilings:
    tf32_tflops: float
    hbm_tbps: float
    source: str  # "PEERS-H200.md", "measured" or "command line"
    half_tflops: float = DEFAULT_HALF_TFLOPS


def floor_us(case: ConvPoolCase, ceilings: Ceilings, dtype: torch.dtype = torch.float32) -> float:
    """The time no kernel can beat: compute at the tensor-core ceiling of the dtype (TF32 for
    float32, the 16-bit rate otherwise) or bytes at HBM bandwidth."""
    tensor_tflops = ceilings.tf32_tflops if dtype == torch.float32 else ceilings.half_tflops
    compute_s = case.flops() / (tensor_tflops * 1e12)
    memory_s = case.min_bytes(dtype.itemsize) / (ceilings.hbm_tbps * 1e12)
    return max(compute_s, memory_s) * 1e6


def tflops(case: ConvPoolCase, time_us: float) -> float:
    return case.flops() / (time_us * 1e-6) / 1e12


def percent_of_floor(floor: float, time_us: float) -> float:
    """100 means the kernel runs at the floor; lower is further from it."""
    return 100.0 * floor / time_us


def input_buffer_count(input_bytes: int, l2_bytes: int,
                       budget_bytes: int = INPUT_MEMORY_BUDGET) -> int:
    """Buffers to rotate so that together they exceed 2x L2 (at least 2, within the budget)."""
    wanted = max(2, math.ceil(2 * l2_bytes / max(input_bytes, 1)) + 1)
    affordable = max(1, budget_bytes // max(input_bytes, 1))
    return max(1, min(wanted, affordable, MAX_INPUT_BUFFERS))


# ---- results and the JSON record ------------------------------------------------------

@dataclass
class TargetResult:
    target: str
    stats: TimingStats
    profiler_kernel_us: Optional[float]
    compile_s: Optional[float] = None


@dataclass
class CaseResult:
    case: ConvPoolCase
    variant: str
    floor_us: float
    input_buffers: int
    targets: dict[str, TargetResult] = field(default_factory=dict)
    matches_model: Optional[bool] = None
    dtype: str = "float32"
    channels_last: bool = False

    def speedup_over(self) -> dict[str, float]:
        """Median time of each peer divided by the op's median (> 1: the op is faster)."""
        if NEW not in self.targets:
            return {}
        new_us = self.targets[NEW].stats.median_us
        return {name: result.stats.median_us / new_us
                for name, result in self.targets.items() if name in PEERS}


def case_record(result: CaseResult) -> dict:
    targets = {}
    for name, target in result.targets.items():
        stats = target.stats
        targets[name] = dict(vars(stats), profiler_kernel_us=target.profiler_kernel_us,
                             tflops=tflops(result.case, stats.median_us),
                             percent_of_floor=percent_of_floor(result.floor_us, stats.median_us),
                             compile_s=target.compile_s)
    return dict(name=result.case.name, case=result.case.to_dict(), variant=result.variant,
                floor_us=result.floor_us, input_buffers=result.input_buffers, targets=targets,
                speedup_over=result.speedup_over(), matches_model=result.matches_model,
                dtype=result.dtype, channels_last=result.channels_last)


def build_record(environment: dict, settings: dict, ceilings: Ceilings,
                 results: Sequence[CaseResult]) -> dict:
    """Everything a run measured, as plain JSON (schema JSON_SCHEMA)."""
    return dict(schema=JSON_SCHEMA,
                created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                environment=environment, settings=settings, ceilings=vars(ceilings),
                cases=[case_record(r) for r in results])


def write_json(path: Path, environment: dict, settings: dict, ceilings: Ceilings,
               results: Sequence[CaseResult], complete: bool) -> None:
    """The record of the cases run so far; `complete` says whether the list was finished."""
    smi = nvidia_smi_info()  # clocks right after the timed calls, not at idle
    environment = dict(environment, clocks_after_run=dict(sm_mhz=smi["clocks.sm"],
                                                          memory_mhz=smi["clocks.mem"]))
    record = build_record(environment, dict(settings, complete=complete), ceilings, results)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(path)


def git_commit() -> dict:
    """HEAD of the repository this runs in, and whether the tree has local changes."""
    def git(*command: str) -> Optional[str]:
        try:
            return subprocess.run(["git", *command], capture_output=True, text=True,
                                  check=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return dict(commit=git("rev-parse", "HEAD"), dirty=None if status is None else bool(status))


def nvidia_smi_info() -> dict:
    """Driver version and clocks (MHz) from nvidia-smi, None where it can't say."""
    fields = ("driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "power.limit", "temperature.gpu")
    info = dict.fromkeys(fields)
    try:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        line = subprocess.run(
            ["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(fields)}",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=20).stdout.strip()
        info.update(zip(fields, (value.strip() for value in line.split(","))))
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def environment_info() -> dict:
    smi = nvidia_smi_info()
    commit = git_commit()
    has_gpu = torch.cuda.is_available()
    properties = torch.cuda.get_device_properties(0) if has_gpu else None
    return dict(
        gpu=torch.cuda.get_device_name() if has_gpu else None,
        sm_count=properties.multi_processor_count if properties else None,
        driver=smi["driver_version"],
        clocks=dict(sm_mhz=smi["clocks.sm"], memory_mhz=smi["clocks.mem"],
                    max_sm_mhz=smi["clocks.max.sm"], max_memory_mhz=smi["clocks.max.mem"]),
        power_limit_w=smi["power.limit"], temperature_c=smi["temperature.gpu"],
        torch=torch.__version__, cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(), python=platform.python_version(),
        git_commit=commit["commit"], git_dirty=commit["dirty"],
        # The commit the files came from, when the caller knows better than this tree's .git
        # (a copied working tree can carry an older .git: then git_dirty is True).
        source_commit=os.environ.get("SOURCE_COMMIT"),
        # The kernels' tuning hooks set for the run (kernels/hopper/general_hooks.h): a run
        # with one set times another form than the commit's default.
        hooks={key: value for key, value in sorted(os.environ.items())
               if key.startswith("CONV_POOL_")})


# ---- timing on the GPU ------------------------------------------------------------------

def l2_flush_buffer() -> torch.Tensor:
    """What the timing writes between calls to flush the L2."""
    return torch.empty(L2_FLUSH_BYTES // 4, device="cuda")


def l2_bytes() -> int:
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(properties, "L2_cache_size", 0) or FALLBACK_L2_BYTES)


def time_calls(fn: Callable[[torch.Tensor], object], inputs: Sequence[torch.Tensor],
               iters: int, warmup: int, flush: Optional[torch.Tensor]) -> list[float]:
    """Per-call times in microseconds: CUDA events around each call, L2 flushed between."""
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        if flush is not None:
            flush.zero_()
        starts[i].record()
        fn(inputs[i % len(inputs)])
        ends[i].record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e3 for start, end in zip(starts, ends)]


def profiler_kernel_us(fn: Callable[[torch.Tensor], object], inputs: Sequence[torch.Tensor],
                       calls: int = PROFILER_CALLS) -> Optional[float]:
    """Sum of GPU kernel (and memcpy/memset) durations per call, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(calls):
                fn(inputs[i % len(inputs)])
            torch.cuda.synchronize()
    except RuntimeError as error:  # e.g. CUPTI unavailable: report, don't abort the run
        print(f"  (profiler unavailable: {str(error).splitlines()[0]})", flush=True)
        return None
    total = sum(event.time_range.elapsed_us() for event in prof.events()
                if is_device_work(event))
    return total / calls


def is_device_work(event) -> bool:
    """Kernels, memcpys and memsets; not GPU-side annotations (they span kernels)."""
    if event.device_type != torch.autograd.DeviceType.CUDA:
        return False
    activity = getattr(event, "activity_type", None)
    if activity:
        return activity in ("kernel", "gpu_memcpy", "gpu_memset")
    return not getattr(event, "is_user_annotation", False)


@contextlib.contextmanager
def heartbeat(message: str, every_s: float = 5.0) -> Iterator[None]:
    """Prints `message`, then the elapsed time every `every_s` seconds until the block ends."""
    print(f"  {message} ...", flush=True)
    started = time.perf_counter()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(every_s):
            print(f"  ... {message}: {time.perf_counter() - started:.0f} s", flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        print(f"  {message}: done in {time.perf_counter() - started:.1f} s", flush=True)


@dataclass
class Target:
    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    channels_last: bool = False
    compile_s: Optional[float] = None


def build_targets(case: ConvPoolCase, names: Sequence[str], sample: torch.Tensor,
                  model: nn.Module) -> dict[str, Target]:
    """Callables for each requested target, sharing `model`'s weights; compiles eagerly
    (on `sample`) so that compile time stays out of the measurements."""
    from model_new import ModelNew
    targets = {}
    for name in names:
        if name in (NEW, PREPACKED):
            model_new = ModelNew(**case.model_kwargs()).to(sample.device, sample.dtype).eval()
            model_new.load_state_dict(model.state_dict())
            targets[name] = Target(name, model_new.prepack(name == PREPACKED))
        elif name == EAGER:
            targets[name] = Target(name, model)
        elif name == CHANNELS_LAST:
            model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
            targets[name] = Target(name, model_cl, channels_last=True)
        elif name in (COMPILE, MAX_AUTOTUNE):
            mode = "max-autotune-no-cudagraphs" if name == MAX_AUTOTUNE else None
            compiled = torch.compile(model, mode=mode)
            label = f"torch.compile({'mode=' + repr(mode) if mode else 'default mode'})"
            started = time.perf_counter()
            with heartbeat(f"compiling {label} for {case.name}"):
                compiled(sample)
                torch.cuda.synchronize()
            targets[name] = Target(name, compiled, compile_s=time.perf_counter() - started)
        else:
            raise ValueError(f"unknown target {name!r}; known: {', '.join(ALL_TARGETS)}")
    return targets


def make_inputs(case: ConvPoolCase, count: int, channels_last: bool,
                dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    return [torch.randn(case.input_shape(), device="cuda", dtype=dtype)
            .contiguous(memory_format=memory_format) for _ in range(count)]


def variant_name(case: ConvPoolCase, model_new: nn.Module, x: torch.Tensor) -> str:
    import cuda_extension
    try:
        return cuda_extension.conv2d_relu_maxpool_choose(
            x, model_new.conv.weight, model_new.conv.bias, *case.op_args(),
            getattr(model_new, "config", -1))
    except Exception:  # noqa: BLE001 - a label only
        return "?"


def profile_case(case: ConvPoolCase, names: Sequence[str], args: argparse.Namespace,
                 ceilings: Ceilings, flush: torch.Tensor, dtype_name: Optional[str] = None,
                 channels_last: bool = False) -> CaseResult:
    """Every target on `case`, in `dtype_name` (default: --dtype) and with channels-last input
    for all of them when `channels_last` (the fuzz's layouts)."""
    from model import Model
    dtype_name = dtype_name or args.dtype
    dtype = DTYPES[dtype_name]
    layout = ", channels-last input" if channels_last else ""
    print(f"{case.name}: {case.label()} -> {case.output_shape()}, "
          f"{case.flops() / 1e9:.1f} GFLOP, {dtype_name}{layout}", flush=True)
    torch.manual_seed(0)
    model = Model(**case.model_kwargs()).to("cuda", dtype).eval()
    count = input_buffer_count(case.input_elements() * dtype.itemsize, l2_bytes())
    inputs = make_inputs(case, count, channels_last=channels_last, dtype=dtype)
    result = CaseResult(case, variant="-", floor_us=floor_us(case, ceilings, dtype),
                        input_buffers=count, dtype=dtype_name, channels_last=channels_last)
    with torch.no_grad():
        targets = build_targets(case, names, inputs[0], model)
        ours = [name for name in (NEW, PREPACKED) if name in targets]
        if ours:
            result.variant = variant_name(case, targets[ours[0]].fn, inputs[0])
            expected = model(inputs[0])
            tolerance = MATCH_TOLERANCE[dtype]
            result.matches_model = all(
                bool(torch.allclose(targets[name].fn(inputs[0]), expected, atol=tolerance,
                                    rtol=tolerance)) for name in ours)
            del expected
            if not result.matches_model:
                print("  WARNING: the op's output differs from Model here; run "
                      "`python -m utils.verification`", flush=True)
        for name, target in targets.items():
            target_inputs = (make_inputs(case, count, channels_last=True, dtype=dtype)
                             if target.channels_last else inputs)
            times = time_calls(target.fn, target_inputs, args.iters, args.warmup, flush)
            stats = summarize(times)
            kernel_us = None if args.no_profiler else profiler_kernel_us(target.fn,
                                                                         target_inputs)
            result.targets[name] = TargetResult(name, stats, kernel_us, target.compile_s)
            profiler_text = "-" if kernel_us is None else f"{kernel_us:.1f}"
            print(f"  {name:14s} median {stats.median_us:9.1f} us  p10-p90 "
                  f"{stats.p10_us:.1f}-{stats.p90_us:.1f}  profiler {profiler_text} us  "
                  f"{tflops(case, stats.median_us):6.1f} TFLOP/s  "
                  f"{percent_of_floor(result.floor_us, stats.median_us):5.1f}% of floor",
                  flush=True)
    reset_compiled(names)
    torch.cuda.empty_cache()
    return result


def reset_compiled(names: Sequence[str]) -> None:
    """Drop torch.compile's caches between shapes, only when a compiled peer ran (importing
    inductor for nothing costs seconds, and is best left out of runs that never compile)."""
    if COMPILE in names or MAX_AUTOTUNE in names:
        torch._dynamo.reset()


def measure_ceilings() -> Ceilings:
    """HBM bandwidth from a 2 GiB device copy, TF32 and bf16 throughput from 8192^3 matmuls."""
    with heartbeat("measuring ceilings (2 GiB copy, 8192^3 TF32 and bf16 matmuls)"):
        buffers = [torch.empty(2**29, device="cuda") for _ in range(2)]  # 2 x 2 GiB, float32
        copy_us = percentile(time_calls(lambda source: buffers[1].copy_(source), buffers[:1],
                                        20, 3, None), 50)
        hbm_tbps = 2 * buffers[0].numel() * 4 / (copy_us * 1e-6) / 1e12
        buffers.clear()
        n = 8192
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            matmul_us = percentile(time_calls(lambda left: left @ b, [a], 20, 3, None), 50)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
        b = b.bfloat16()
        half_us = percentile(time_calls(lambda left: left @ b, [a.bfloat16()], 20, 3, None), 50)
    tf32_tflops = 2 * n**3 / (matmul_us * 1e-6) / 1e12
    half_tflops = 2 * n**3 / (half_us * 1e-6) / 1e12
    print(f"  ceilings: {tf32_tflops:.0f} TFLOP/s TF32, {half_tflops:.0f} TFLOP/s bf16, "
          f"{hbm_tbps:.2f} TB/s copy", flush=True)
    return Ceilings(tf32_tflops, hbm_tbps, "measured", half_tflops)


def single_run(cases: Sequence[ConvPoolCase], names: Sequence[str],
               dtype: torch.dtype = torch.float32) -> None:
    """Each target once per case, inside an NVTX range named after it (for ncu/nsys)."""
    from model import Model
    for case in cases:
        torch.manual_seed(0)
        model = Model(**case.model_kwargs()).to("cuda", dtype).eval()
        x = torch.randn(case.input_shape(), device="cuda", dtype=dtype)
        with torch.no_grad():
            targets = build_targets(case, names, x, model)  # compiles outside the ranges
            for name, target in targets.items():
                target_x = x.contiguous(memory_format=torch.channels_last) \
                    if target.channels_last else x
                torch.cuda.synchronize()
                with torch.cuda.nvtx.range(name):
                    target.fn(target_x)
                torch.cuda.synchronize()
                print(f"{case.name}: ran {name} once (NVTX range '{name}')", flush=True)
        reset_compiled(names)


# ---- output ---------------------------------------------------------------------------

def format_table(results: Sequence[CaseResult]) -> str:
    """One row per case: microseconds of each target, the op's speedup over each peer."""
    names = [n for n in ALL_TARGETS if any(n in r.targets for r in results)]
    header = ["case"] + [f"{n} us" for n in names]
    if NEW in names:
        header += [f"x {n}" for n in names if n in PEERS] + ["TFLOP/s", "% floor", "variant"]
    rows = [header]
    for result in results:
        row = [result.case.name]
        row += [f"{result.targets[n].stats.median_us:.1f}" if n in result.targets else "-"
                for n in names]
        if NEW in names:
            speedups = result.speedup_over()
            row += [f"{speedups[n]:.2f}" if n in speedups else "-" for n in names if n in PEERS]
            new_us = result.targets[NEW].stats.median_us
            row += [f"{tflops(result.case, new_us):.1f}",
                    f"{percent_of_floor(result.floor_us, new_us):.1f}", result.variant]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
    return "\n".join(lines)


def plot_speedups(results: Sequence[CaseResult], path: Path) -> None:
    """Bar chart: the op's speedup over each peer, per shape (1 = as fast)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    peers = [n for n in PEERS if any(n in r.speedup_over() for r in results)]
    width = 0.8 / max(len(peers), 1)
    figure, axes = plt.subplots(figsize=(max(7.0, 1.3 * len(results) + 2), 4.2))
    for i, peer in enumerate(peers):
        values = [r.speedup_over().get(peer, math.nan) for r in results]
        positions = [k + (i - (len(peers) - 1) / 2) * width for k in range(len(results))]
        bars = axes.bar(positions, values, width, label=f"over {peer}")
        axes.bar_label(bars, fmt="%.2f", fontsize=7)
    tallest = max([v for r in results for v in r.speedup_over().values()] + [1.0])
    axes.set_ylim(0, tallest * 1.25)  # room for the legend above the bars
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(range(len(results)), [r.case.name for r in results], rotation=20)
    axes.set_ylabel("speedup of the fused op (x)")
    axes.set_title("Fused Conv2d-ReLU-MaxPool2d: speedup per shape\n"
                   "(median of CUDA-event times, L2 flushed between calls)", fontsize=10)
    axes.legend(loc="upper left", ncol=max(len(peers), 1))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# ---- command line -----------------------------------------------------------------------



def parse_targets(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL_TARGETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown target(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(ALL_TARGETS)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m utils.profiling",
        description="Time the fused Conv2d-ReLU-MaxPool2d op against eager PyTorch and "
                    "torch.compile (CUDA events, L2 flushed, inputs rotated).")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--suite", action="store_true",
                       help="run the public suite (utils/suite.py SUITE) instead of the "
                            "default problem")
    which.add_argument("--case", action="append", metavar="NAME",
                       help="run this SUITE or GRID case, or a zoo case by the name the "
                            "zoo JSONs give it, e.g. densenet121_c5_p2s2_b128 (repeatable)")
    which.add_argument("--zoo", action="store_true",
                       help="run the layer zoo: convolutions of torchvision's models under "
                            "their pools or 2x2/2 and 3x3/2 ones (utils/zoo.py)")
    which.add_argument("--fuzz", type=int, metavar="COUNT",
                       help="run COUNT random geometries of at least 0.5 GFLOP (kernels 1-11, "
                            "strides 1-4, dilation 1-3, pools 1-4, up to 1024 channels), "
                            "cycling float32 / float16 / bfloat16 and NCHW / channels-last")
    parser.add_argument("--zoo-models", nargs="+", metavar="NAME",
                        help="with --zoo: these torchvision models (default: utils.zoo's list)")
    parser.add_argument("--zoo-batches", nargs="+", type=int, metavar="N",
                        help="with --zoo: these batch sizes (default: 1 32 128)")
    parser.add_argument("--zoo-limit", type=int, metavar="COUNT",
                        help="with --zoo: COUNT layers spread evenly over the zoo's FLOP range")
    parser.add_argument("--fuzz-seed", type=int, default=0,
                        help="with --fuzz: the seed of the geometries (default 0)")
    parser.add_argument("--start", type=int, default=0, metavar="INDEX",
                        help="with --zoo or --fuzz: begin at case INDEX of the list (0-based), "
                             "to split one long run over several processes")
    parser.add_argument("--iters", type=int, default=DEFAULT_ITERS,
                        help=f"timed calls per target (default {DEFAULT_ITERS})")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                        help=f"untimed calls before timing (default {DEFAULT_WARMUP})")
    parser.add_argument("--targets", type=parse_targets, default=[NEW, EAGER, COMPILE],
                        help="comma-separated targets to time, from "
                             f"{', '.join(ALL_TARGETS)} (default: new,eager,compile)")
    parser.add_argument("--max-autotune", action="store_true",
                        help='add torch.compile(mode="max-autotune-no-cudagraphs") '
                             "(compiling it takes minutes)")
    parser.add_argument("--channels-last", action="store_true",
                        help="add eager PyTorch on channels-last input and weights")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
                        help="dtype of the model, its weights and inputs for every target "
                             "(default float32)")
    parser.add_argument("--measure-ceilings", action="store_true",
                        help="measure the TF32 matmul and copy ceilings at start instead of "
                             "using the H200 values in docs/PERF.md (The floors)")
    parser.add_argument("--tf32-tflops", type=float, default=DEFAULT_TF32_TFLOPS,
                        help=f"TF32 ceiling for the floor (default {DEFAULT_TF32_TFLOPS})")
    parser.add_argument("--hbm-tbps", type=float, default=DEFAULT_HBM_TBPS,
                        help=f"HBM bandwidth for the floor, TB/s (default {DEFAULT_HBM_TBPS})")
    parser.add_argument("--half-tflops", type=float, default=DEFAULT_HALF_TFLOPS,
                        help="16-bit tensor-core ceiling for the floor of --dtype float16 / "
                             f"bfloat16 runs (default {DEFAULT_HALF_TFLOPS})")
    parser.add_argument("--no-tf32", action="store_true",
                        help="run every target with torch.backends.cudnn.allow_tf32 (and "
                             "cuda.matmul.allow_tf32) False: fp32-accurate paths (float32 only)")
    parser.add_argument("--no-profiler", action="store_true",
                        help="skip the torch.profiler kernel-time sum")
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="write every number, with GPU, driver, clocks, versions and the "
                             "git commit, to this JSON file")
    parser.add_argument("--plot", type=Path, metavar="PATH",
                        help="draw the op's speedup per shape over each peer to this PNG")
    parser.add_argument("--single-run", type=parse_targets, metavar="TARGETS",
                        help="run each of these comma-separated targets once per case inside "
                             "an NVTX range named after it, without timing (for ncu/nsys)")
    return parser


def requested_targets(args: argparse.Namespace) -> list[str]:
    names = list(args.targets)
    for flag, name in ((args.max_autotune, MAX_AUTOTUNE), (args.channels_last, CHANNELS_LAST)):
        if flag and name not in names:
            names.append(name)
    return names


FUZZ_MIN_FLOPS = 0.5e9
FUZZ_MAX_FLOPS = 200e9    # keeps one geometry's timing under a few seconds
FUZZ_MAX_BYTES = 4 << 30  # input + output of one geometry at float32
FUZZ_DTYPES = ("float32", "float16", "bfloat16")


def spread(cases: Sequence[ConvPoolCase], count: int) -> list[ConvPoolCase]:
    """`count` of `cases` at evenly spaced ranks of their FLOPs (all when there are fewer)."""
    if count >= len(cases):
        return list(cases)
    ordered = sorted(cases, key=lambda case: case.flops())
    return [ordered[round(i * (len(ordered) - 1) / max(count - 1, 1))] for i in range(count)]


def fuzz_cases(count: int, seed: int) -> list[tuple[ConvPoolCase, str, bool]]:
    """`count` random (case, dtype, channels_last) of at least FUZZ_MIN_FLOPS, dtypes and
    layouts taken in turn."""
    import random
    from utils.suite import fuzz_case
    rng = random.Random(seed)
    drawn = []
    while len(drawn) < count:
        case = fuzz_case(rng, f"fuzz_{len(drawn)}", max_size=160, max_channels=1024,
                         batch=rng.choice([1, 2, 4, 8, 16, 32, 64]))
        size = 4 * (case.input_elements() + case.output_elements())
        if not FUZZ_MIN_FLOPS <= case.flops() <= FUZZ_MAX_FLOPS or size > FUZZ_MAX_BYTES:
            continue
        index = len(drawn)
        drawn.append((case, FUZZ_DTYPES[index % 3], (index // 3) % 2 == 1))
    return drawn


def find_any_case(name: str) -> ConvPoolCase:
    """A SUITE or GRID case, or a zoo case (utils/zoo.py: the zoo JSONs' row names)."""
    try:
        return find_case(name)
    except KeyError as not_listed:
        if re.fullmatch(r".+_b\d+", name) is None:
            raise
        from utils import zoo
        try:
            return zoo.find_zoo_case(name)
        except KeyError as not_in_zoo:
            raise KeyError(f"{not_listed.args[0]}; {not_in_zoo.args[0]}") from None


def requested_cases(args: argparse.Namespace) -> list[tuple[ConvPoolCase, Optional[str], bool]]:
    """(case, dtype or None for --dtype, channels-last input) to run."""
    if args.suite:
        cases = list(SUITE)
    elif args.case:
        cases = [find_any_case(name) for name in args.case]
    elif args.zoo:
        from utils import zoo
        cases = zoo.zoo_cases(args.zoo_models or zoo.DEFAULT_MODELS,
                              args.zoo_batches or zoo.BATCHES)
        if args.zoo_limit:
            cases = spread(cases, args.zoo_limit)
    elif args.fuzz:
        return fuzz_cases(args.fuzz, args.fuzz_seed)
    else:
        cases = [DEFAULT]
    return [(case, None, False) for case in cases]


def progress(done: int, total: int, started: float) -> str:
    """'case k of n, ~m min left' from the time per case so far."""
    if done == 0:
        return f"case 1 of {total}"
    left = (time.perf_counter() - started) / done * (total - done)
    return f"case {done + 1} of {total}, ~{left / 60:.1f} min left"


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be >= 1 and --warmup >= 0")
    if args.no_tf32 and args.dtype != "float32":
        parser.error("--no-tf32 applies to --dtype float32 only (16-bit products are exact)")
    try:
        cases = requested_cases(args)
    except KeyError as error:
        parser.error(str(error.args[0]))
    if args.start:
        if not (args.zoo or args.fuzz):
            parser.error("--start applies to --zoo and --fuzz")
        if not 0 <= args.start < len(cases):
            parser.error(f"--start {args.start}: the list has {len(cases)} cases")
        cases = cases[args.start:]
    try:
        require_gpu_and_extension()
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    if args.no_tf32:  # before any target is built or compiled: all of them see it
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    if args.single_run:
        single_run([case for case, _, _ in cases], args.single_run, DTYPES[args.dtype])
        return 0

    environment = environment_info()
    print(f"{environment['gpu']}, driver {environment['driver']}, SM clock "
          f"{environment['clocks']['sm_mhz']} MHz, torch {environment['torch']}, "
          f"CUDA {environment['cuda']}, cuDNN {environment['cudnn']}, "
          f"commit {(environment['source_commit'] or environment['git_commit'] or '?')[:10]}",
          flush=True)
    if args.measure_ceilings:
        ceilings = measure_ceilings()
    elif (args.tf32_tflops, args.hbm_tbps, args.half_tflops) != (
            DEFAULT_TF32_TFLOPS, DEFAULT_HBM_TBPS, DEFAULT_HALF_TFLOPS):
        ceilings = Ceilings(args.tf32_tflops, args.hbm_tbps, "command line", args.half_tflops)
    else:
        ceilings = Ceilings(args.tf32_tflops, args.hbm_tbps, "PEERS-H200.md")
    names = requested_targets(args)
    flush = l2_flush_buffer()
    results, started = [], time.perf_counter()
    settings = dict(iters=args.iters, warmup=args.warmup, targets=names,
                    dtype="per case" if args.fuzz else args.dtype,
                    cases="zoo" if args.zoo else f"fuzz (seed {args.fuzz_seed})"
                    if args.fuzz else "suite" if args.suite else "listed",
                    start=args.start, l2_flush_bytes=L2_FLUSH_BYTES, l2_bytes=l2_bytes(),
                    profiler_calls=0 if args.no_profiler else PROFILER_CALLS,
                    cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
                    timing="CUDA events per call, L2 flushed between calls, inputs rotated")
    for done, (case, dtype_name, channels_last) in enumerate(cases):
        if len(cases) > 1:
            print(f"[{progress(done, len(cases), started)}]", flush=True)
        results.append(profile_case(case, names, args, ceilings, flush, dtype_name,
                                    channels_last))
        if args.json:  # after every case, so that a run cut short keeps what it measured
            write_json(args.json, environment, settings, ceilings, results,
                       complete=done + 1 == len(cases))
    if args.json:
        print(f"wrote {args.json}", flush=True)
    if args.plot:
        try:
            plot_speedups(results, args.plot)
            print(f"wrote {args.plot}", flush=True)
        except ImportError as error:
            print(f"error: --plot needs matplotlib ({error})", file=sys.stderr)
    tensor_tflops = ceilings.tf32_tflops if args.dtype == "float32" else ceilings.half_tflops
    precision = ", fp32-accurate (allow_tf32 = False)" if args.no_tf32 else ""
    print(f"\n{args.dtype}{precision}, median of {args.iters} calls, microseconds; "
          f"'x peer' = peer time / "
          f"op time; floor at {tensor_tflops:.0f} TFLOP/s, {ceilings.hbm_tbps:.2f} TB/s "
          f"({ceilings.source})")
    print(format_table(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
