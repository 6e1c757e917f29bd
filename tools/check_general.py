"""Correctness sweep and quick timings of the general wgmma kernel (variant general_wgmma) on
the GPU, in one process: the development check behind docs/PERF.md's general-kernel entries.

    python tools/check_general.py                      # 60 random geometries x 3 dtypes x 3 layouts
    python tools/check_general.py --cases 20 --perf    # fewer, then the timing table
    python tools/check_general.py --perf --compile     # torch.compile in the timing table too

Correctness: fresh random inputs per case (the seed is printed), the op forced to general_wgmma
against float64 (F.conv2d on upcast inputs, cuDNN off) at atol = rtol = 1e-2 (TF32, float16) or
2e-2 (bfloat16); input layouts NCHW, channels-last and every other column of a wider tensor;
outputs NCHW and channels-last. Timing: triton.testing.do_bench medians (L2 flushed), the op's
automatic choice and general_wgmma in each of its forms (PATHS: the warp-specialized TMA kernel
as chosen, with one 16-byte slice a box row, persistent, and the cp.async loaders) against
eager PyTorch (and torch.compile), same process.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from utils.references import LAYOUTS, with_layout  # noqa: E402
from utils.references import case_operands as operands  # noqa: E402
from utils.references import reference_float64 as reference  # noqa: E402
from utils.suite import ConvPoolCase, fuzz_case  # noqa: E402

TOLERANCE = {torch.float32: 1e-2, torch.float16: 1e-2, torch.bfloat16: 2e-2}
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def correctness(ext, lib, cases: int, seed: int) -> int:
    from utils import kernel_choice
    config = ext.conv2d_relu_maxpool_variants()["general_wgmma"]
    device = kernel_choice.device_of(lib)
    rng = random.Random(seed)
    failures = checked = refused = 0
    started = time.time()
    for i in range(cases):
        case = fuzz_case(rng, f"r{i}")
        case_seed = rng.randrange(2**31)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            element = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[dtype]
            plan = kernel_choice.general_plan(lib, case, element, device)
            if plan is None:
                refused += 1
                continue
            x, w, b = operands(case, case_seed, dtype)
            expected = reference(case, x, w, b)
            for layout in LAYOUTS:
                out = ext.conv2d_relu_maxpool_forward(with_layout(x, layout), w, b,
                                                      *case.op_args(), config, None)
                checked += 1
                tol = TOLERANCE[dtype]
                ok = out.shape == expected.shape and torch.allclose(
                    out.double(), expected, atol=tol, rtol=tol)
                if not ok:
                    failures += 1
                    err = ((out.double() - expected).abs().max().item()
                           if out.shape == expected.shape else float("nan"))
                    print(f"FAIL seed={case_seed} {DTYPE_NAMES[dtype]} {layout} {case} "
                          f"max_err={err:.3g} plan={plan}", flush=True)
    torch.cuda.synchronize()
    print(f"correctness: {checked} checks, {failures} failures, {refused} refused "
          f"(seed {seed}, {time.time() - started:.0f} s)", flush=True)
    return failures


PERF_CASES = [
    # The examples, then classes of real layers.
    ConvPoolCase("alexnet_c2", 128, 64, 192, 27, 27, (5, 5), padding=(2, 2), pool_kernel=(3, 3),
                 pool_stride=(2, 2)),
    ConvPoolCase("k5_c128_56", 32, 128, 128, 56, 56, (5, 5), padding=(2, 2)),
    ConvPoolCase("googlenet_c3", 32, 64, 192, 56, 56, (3, 3), padding=(1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2), ceil_mode=True),
    ConvPoolCase("k1_c256_28_pool3", 64, 256, 256, 28, 28, (1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2), pool_padding=(1, 1)),
    ConvPoolCase("vgg_b4", 32, 512, 512, 28, 28, (3, 3), padding=(1, 1)),
    ConvPoolCase("vgg_b3", 32, 256, 256, 56, 56, (3, 3), padding=(1, 1)),
    ConvPoolCase("alexnet_c3", 128, 192, 384, 13, 13, (3, 3), padding=(1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2)),
    ConvPoolCase("resnet_s2_3x3", 32, 128, 128, 56, 56, (3, 3), stride=(2, 2), padding=(1, 1)),
    ConvPoolCase("resnet_1x1_s2", 32, 256, 512, 56, 56, (1, 1), stride=(2, 2)),
    ConvPoolCase("resnet50_1x1", 32, 64, 256, 56, 56, (1, 1)),
    ConvPoolCase("dilated_3x3_d2", 16, 256, 256, 64, 64, (3, 3), padding=(2, 2),
                 dilation=(2, 2)),
    ConvPoolCase("inception_7x1", 32, 128, 192, 17, 17, (7, 1), padding=(3, 0),
                 pool_kernel=(3, 3), pool_stride=(2, 2)),
    ConvPoolCase("k7_c64_s1", 16, 64, 64, 56, 56, (7, 7), padding=(3, 3)),
    ConvPoolCase("batch1_k3_c512_14", 1, 512, 512, 14, 14, (3, 3), padding=(1, 1)),
]


def bench(fn, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    import triton.testing
    return triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e3


TILES = ("wide_n128", "square_n128", "wide_n64", "square_n64", "tall_n64")


def time_tiles(ext, lib, case, x, w, b, config) -> str:
    """Each tile of the kernel's table forced ($CONV_POOL_GENERAL_TILE), as 'tile:us'."""
    import os
    from utils import kernel_choice
    parts = []
    for tile in TILES:
        os.environ["CONV_POOL_GENERAL_TILE"] = tile
        try:
            plan = kernel_choice.parse_general(
                ext.conv2d_relu_maxpool_plan(x, w, b, *case.op_args(), config)["general"])
            if plan is None or plan["tile"] != tile:
                continue
            t = bench(lambda: ext.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), config,
                                                              None))
            parts.append(f"{tile}/s{plan['split']}:{t:.1f}")
        finally:
            del os.environ["CONV_POOL_GENERAL_TILE"]
    return " ".join(parts)


# The general kernel's forms, by the host's hooks: the warp-specialized TMA kernel as chosen
# (one tile a block; merged columns where they apply), the same with one 16-byte slice a box row
# ($CONV_POOL_GENERAL_TMA_MERGED=0), persistent ($CONV_POOL_GENERAL_PERSISTENT=1), and the
# cp.async loaders ($CONV_POOL_GENERAL_TMA=0). The first is the reference of the table's ratios.
PATHS = {"tma": {}, "tma_slices": {"CONV_POOL_GENERAL_TMA_MERGED": "0"},
         "tma_persistent": {"CONV_POOL_GENERAL_PERSISTENT": "1"},
         "cpasync": {"CONV_POOL_GENERAL_TMA": "0"}}


def forced_path(path: str):
    """A context in which the general kernel takes form `path` (PATHS)."""
    import contextlib
    import os

    @contextlib.contextmanager
    def context():
        keys = {key for hooks in PATHS.values() for key in hooks}
        old = {key: os.environ.get(key) for key in keys}
        for key in keys:
            os.environ.pop(key, None)
        os.environ.update(PATHS[path])
        try:
            yield
        finally:
            for key, value in old.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return context()


def perf(ext, lib, with_compile: bool, tiles: bool, layouts) -> None:
    from utils import kernel_choice
    config = ext.conv2d_relu_maxpool_variants()["general_wgmma"]
    rows, records = [], []
    for layout in layouts:
        for dtype in (torch.float32, torch.float16):
            for case in PERF_CASES:
                x, w, b = operands(case, 0, dtype)
                x = with_layout(x, layout)
                args = case.op_args()
                auto_name = ext.conv2d_relu_maxpool_choose(x, w, b, *args, -1)

                def eager():
                    return F.max_pool2d(F.relu(F.conv2d(x, w, b, case.stride, case.padding,
                                                        case.dilation)),
                                        case.pool_kernel, case.effective_pool_stride,
                                        case.pool_padding, 1, case.ceil_mode)

                def general():
                    return ext.conv2d_relu_maxpool_forward(x, w, b, *args, config, None)

                expected = eager().float()
                times, errors, plans = {}, {}, {}
                for path in PATHS:
                    with forced_path(path):
                        out = general().float()
                        errors[path] = ((out - expected).norm() / expected.norm()).item()
                        times[path] = bench(general)
                        plans[path] = kernel_choice.parse_general(
                            ext.conv2d_relu_maxpool_plan(x, w, b, *args, config)["general"])
                t_auto = bench(lambda: ext.conv2d_relu_maxpool_forward(x, w, b, *args, -1,
                                                                       None))
                t_eager = bench(eager)
                t_compile = float("nan")
                if with_compile:
                    compiled = torch.compile(eager)
                    compiled()
                    t_compile = bench(compiled)
                t_general = times["tma"]
                tflops = case.flops() / (t_general * 1e-6) / 1e12
                rows.append((case.name, DTYPE_NAMES[dtype], layout, times, t_eager, t_compile,
                             tflops))
                records.append(dict(case=case.label(), name=case.name, dtype=DTYPE_NAMES[dtype],
                                    layout=layout, auto=auto_name, general_us=t_general,
                                    **{f"{path}_us": times[path] for path in PATHS},
                                    auto_us=t_auto, eager_us=t_eager, compile_us=t_compile,
                                    general_tflops=tflops, relative_l2_vs_eager=errors["tma"],
                                    cpasync_relative_l2_vs_eager=errors["cpasync"],
                                    plan=plans["tma"], cpasync_plan=plans["cpasync"]))
                forms = " ".join(f"{path} {times[path]:8.1f}" for path in PATHS)
                print(f"{case.name:20s} {DTYPE_NAMES[dtype]:8s} {layout:13s} "
                      f"auto={auto_name:22s} {forms} us ({tflops:4.0f} TFLOP/s) "
                      f"auto {t_auto:8.1f} eager {t_eager:8.1f} compile {t_compile:8.1f} "
                      f"rel_err {max(errors.values()):.1e}", flush=True)
                print(f"    plan {plans['tma']}", flush=True)
                if tiles:
                    print(f"    tiles {time_tiles(ext, lib, case, x, w, b, config)}",
                          flush=True)
    # Times in us, then each other form's, eager's and torch.compile's over the first form's.
    others = list(PATHS)[1:]
    print("\ncase                 dtype    layout        " +
          " ".join(f"{path + '_us':>16s}" for path in PATHS) + "  eager_us compile_us " +
          " ".join(f"{'x_' + path:>16s}" for path in others) + "  x_eager x_compile TFLOP/s")
    for name, dt, layout, times, te, tc, tf in rows:
        tg = times["tma"]
        print(f"{name:20s} {dt:8s} {layout:13s} " +
              " ".join(f"{times[path]:16.1f}" for path in PATHS) + f" {te:9.1f} {tc:10.1f} " +
              " ".join(f"{times[path] / tg:16.2f}" for path in others) +
              f" {te / tg:8.2f} {tc / tg:9.2f} {tf:7.0f}")
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=60, help="random geometries to check")
    parser.add_argument("--seed", type=int, default=None, help="sweep seed (default: random)")
    parser.add_argument("--perf", action="store_true", help="time the PERF_CASES table")
    parser.add_argument("--compile", action="store_true", help="torch.compile in the table")
    parser.add_argument("--json", type=Path, help="with --perf: write the table's rows there")
    parser.add_argument("--tiles", action="store_true",
                        help="with --perf: also time every tile of the kernel's table forced")
    parser.add_argument("--layouts", default="dense",
                        help="with --perf: comma-separated input layouts to time (dense, "
                             "channels_last)")
    args = parser.parse_args()
    import cuda_extension
    from utils import kernel_choice
    lib = kernel_choice.load(cuda_extension)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    failures = correctness(cuda_extension, lib, args.cases, seed) if args.cases else 0
    if args.perf:
        records = perf(cuda_extension, lib, args.compile, args.tiles, args.layouts.split(","))
        if args.json:
            import json
            environment = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                               cudnn=torch.backends.cudnn.version())
            args.json.write_text(json.dumps(dict(schema="conv_relu_maxpool.check_general/1",
                                                 environment=environment, rows=records),
                                            indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
