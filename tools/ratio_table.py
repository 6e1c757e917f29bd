"""Speed ratios of the op against its peers from utils.profiling JSON records (the zoo, the
performance fuzz, the suite): one row per case and a summary of the distribution.

    python tools/ratio_table.py docs/zoo_h200_float32.json [more.json ...] [--by kernel|event]
        [--rows] [--min-gflop G] [--classes] [--against OLD.json [OLD.json ...]]

Ratios are peer time / op time (> 1: the op is faster), by the profiler's kernel time
(default) or by the event median. The summary gives, per peer, the geometric mean, the
median, the minimum, and how many cases fall under 0.8x and under 1.0x; then, for cases of at
least --min-gflop GFLOP (default 20), the op's TFLOP/s per dtype.

--classes: the ratio over torch.compile by class of geometry (CLASSES: the kernel and the
convolution's kind, the conv output's size, the dtype and layout). --against: the same cases
in older records (matched by geometry, dtype and layout), the op's time then and now and
each peer's drift, so that a change between two runs reads apart from the machine's.
--tile-use: for the cases on the general kernel, the share of its tiles' pooled outputs and
output channels that the layer fills (the host's plan on the H200's description, from the
built extension: no GPU), the cases split at half full.
--rounds: the same cases by whether the plan's blocks (tiles x split) all fit at once on the
H200 (one round: a block's serial chain is the layer's time) or take several, and by pool
(2 x 2 / 2 or other); per class the geometric mean, the op's time share, and the geometric
mean of every case if that class were at 1.0x (what closing it is worth).
--slower: every case slower than torch.compile, slowest first, with each target's share of
the floor, whether the floor is compute or memory, the general kernel's plan now, and the
first reason of REASONS that holds (another kernel, one round of blocks, tiles under half
full, a memory floor, else the mainloop's rate); then the cases by reason.
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

PEERS = ("eager", "compile")


def case_time(case: dict, target: str, by: str):
    entry = case["targets"].get(target)
    if entry is None:
        return None
    return entry["profiler_kernel_us"] if by == "kernel" else entry["median_us"]


def load(paths):
    cases = []
    for path in paths:
        record = json.loads(Path(path).read_text())
        dtype = record["settings"].get("dtype")
        for case in record["cases"]:
            case.setdefault("dtype", dtype)
            cases.append(case)
    return cases


def ratios(cases, peer, by):
    out = []
    for case in cases:
        new, other = case_time(case, "new", by), case_time(case, peer, by)
        if new and other:
            out.append((other / new, case))
    return out


def summary(cases, by: str, min_gflop: float) -> str:
    lines = [f"{len(cases)} cases, ratios by {'profiler kernel time' if by == 'kernel' else 'event median'}"]
    lines.append("| peer | geomean | median | min | < 0.8x | < 1.0x |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for peer in PEERS:
        values = [r for r, _ in ratios(cases, peer, by)]
        if not values:
            continue
        lines.append(f"| {peer} | {geomean(values):.2f}x | {statistics.median(values):.2f}x | "
                     f"{min(values):.2f}x | {sum(v < 0.8 for v in values)} | "
                     f"{sum(v < 1.0 for v in values)} |")
    big = [c for c in cases if c["case"]["flops"] >= min_gflop * 1e9]
    for dtype in sorted({c["dtype"] for c in big}):
        rates = sorted(c["case"]["flops"] / case_time(c, "new", by) / 1e6
                       for c in big if c["dtype"] == dtype)
        lines.append(f"\n{len(rates)} {dtype} cases of >= {min_gflop:g} GFLOP: op at "
                     f"{rates[0]:.0f}-{rates[-1]:.0f} TFLOP/s (median {statistics.median(rates):.0f})")
    variants = {}
    for case in cases:
        variants[case["variant"]] = variants.get(case["variant"], 0) + 1
    lines.append("\nvariants: " + ", ".join(f"{v} {n}" for v, n in sorted(
        variants.items(), key=lambda item: -item[1])))
    return "\n".join(lines)


def geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _kind(case: dict) -> str:
    geometry = case["case"]
    if case["variant"] != "general_wgmma":
        return "other kernels than general_wgmma"
    if list(geometry["kernel_size"]) == [1, 1]:
        return "general, 1 x 1"
    stride = max(geometry["stride"])
    return ("general, stride 1, larger kernels" if stride == 1 else
            "general, stride 2" if stride == 2 else "general, strides 3 and more")


# Each case falls in one class of each rule, in this order of rules.
CLASSES = (
    ("kind", _kind),
    ("output", lambda c: "conv output at most 16 x 16"
     if c["case"]["conv_out"][0] * c["case"]["conv_out"][1] <= 256 else "conv output larger"),
    ("dtype and layout", lambda c: f"{c['dtype']} "
     f"{'channels-last' if c.get('channels_last') else 'NCHW'}"),
)


def classes(cases, by: str, peer: str = "compile") -> str:
    lines = [f"{peer} / op by class ({'kernel time' if by == 'kernel' else 'event median'})",
             "| class | cases | geomean | median | min |", "|---|---:|---:|---:|---:|"]
    for _, rule in CLASSES:
        groups = {}
        for ratio, case in ratios(cases, peer, by):
            groups.setdefault(rule(case), []).append(ratio)
        for name in sorted(groups):
            values = groups[name]
            lines.append(f"| {name} | {len(values)} | {geomean(values):.2f}x | "
                         f"{statistics.median(values):.2f}x | {min(values):.2f}x |")
    return "\n".join(lines)


def _key(case: dict):
    """A case's identity across runs: its geometry (the label), dtype and layout; not its name,
    which tools may change."""
    return (case["case"]["label"], case["dtype"], bool(case.get("channels_last")))


def against(cases, old_cases, by: str, moved: float = 0.03) -> str:
    """The op's time now against then on the cases both hold, and the rows that moved by more
    than `moved` (either way) with each peer's ratio beside them."""
    old = {_key(c): c for c in old_cases}
    pairs = [(old[_key(c)], c) for c in cases if _key(c) in old]
    lines = [f"{len(pairs)} cases in both; then / now by "
             f"{'kernel time' if by == 'kernel' else 'event median'} (> 1: faster now)"]
    if not pairs:
        return lines[0]
    targets = ("new",) + PEERS
    lines.append("| target | geomean | min | max |")
    lines.append("|---|---:|---:|---:|")
    for target in targets:
        values = [case_time(a, target, by) / case_time(b, target, by) for a, b in pairs
                  if case_time(a, target, by) and case_time(b, target, by)]
        if values:
            lines.append(f"| {'op' if target == 'new' else target} | {geomean(values):.3f}x | "
                         f"{min(values):.2f}x | {max(values):.2f}x |")
    lines.append(f"\nrows whose op time moved by more than {moved:.0%} (µs then -> now; peers "
                 "then / now)")
    for a, b in sorted(pairs, key=lambda p: case_time(p[0], "new", by) / case_time(p[1], "new", by)):
        change = case_time(a, "new", by) / case_time(b, "new", by)
        if abs(change - 1) <= moved:
            continue
        peers = ", ".join(f"{p} {case_time(a, p, by) / case_time(b, p, by):.2f}x" for p in PEERS
                          if case_time(a, p, by) and case_time(b, p, by))
        lines.append(f"  {b['name']} ({b['dtype']}, {b['variant']}): {case_time(a, 'new', by):.1f}"
                     f" -> {case_time(b, 'new', by):.1f} ({change:.2f}x; {peers})")
    return "\n".join(lines)


def tile_use(case: dict, lib, plan=None) -> float:
    """The share of the general kernel's tiles (its plan for the case on the H200, or `plan`)
    that hold the layer's pooled outputs: images x pooled pixels over tiles x pooled pixels a
    tile, times output channels over the channel blocks' width."""
    from utils.suite import ConvPoolCase
    layer = ConvPoolCase.from_dict(case["case"])
    plan = plan or _general_plan(case, lib)
    width = int(plan["tile"].rsplit("_n", 1)[1])  # N of the tile ("wide_n128": 128)
    channel_blocks = -(-layer.out_channels // width)
    rows, cols = (int(v) for v in plan["pooled"].split("x"))
    pooled_h, pooled_w = layer.pooled_out()
    spatial = (layer.batch * pooled_h * pooled_w
               / (plan["tiles"] // channel_blocks * rows * cols * plan["images"]))
    return spatial * layer.out_channels / (channel_blocks * width)


def _general_plan(case: dict, lib):
    """The general kernel's host plan for a profiling record's case (on the H200)."""
    from utils import kernel_choice
    from utils.suite import ConvPoolCase
    element = kernel_choice.ELEMENT_BY_NAME[case["dtype"]]
    return kernel_choice.general_plan(lib, ConvPoolCase.from_dict(case["case"]), element,
                                      channels_last=bool(case.get("channels_last")))


def rounds(case: dict, lib, plan=None) -> int:
    """How many rounds of the H200's resident blocks the general kernel's plan for the case
    (or `plan`) takes (kernel_choice.general_rounds)."""
    from utils import kernel_choice
    return kernel_choice.general_rounds(plan or _general_plan(case, lib))


def rounds_table(cases, by: str, lib, peer: str = "compile") -> str:
    everything = ratios(cases, peer, by)
    classes = {}
    for ratio, case in everything:
        if case["variant"] != "general_wgmma":
            name = "other kernels"
        else:
            paired = [int(v) for v in case["case"]["pool_kernel"]] == [2, 2] and \
                     [int(v) for v in case["case"]["pool_stride"]] == [2, 2]
            name = (f"{'one round' if rounds(case, lib) == 1 else 'several rounds'}, "
                    f"{'2 x 2 / 2 pool' if paired else 'other pools'}")
        classes.setdefault(name, []).append((ratio, case))
    total = sum(case_time(c, "new", by) for _, c in everything)
    logs = sum(math.log(r) for r, _ in everything)
    lines = [f"{peer} / op by the general kernel's rounds of resident blocks and pool "
             f"({'kernel time' if by == 'kernel' else 'event median'}; all {len(everything)}: "
             f"{geomean([r for r, _ in everything]):.2f}x)",
             "| class | cases | geomean | op time share | all, with this class at 1.0x |",
             "|---|---:|---:|---:|---:|"]
    for name, part in sorted(classes.items()):
        share = sum(case_time(c, "new", by) for _, c in part) / total
        rest = math.exp((logs - sum(math.log(r) for r, _ in part)) / len(everything))
        lines.append(f"| {name} | {len(part)} | {geomean([r for r, _ in part]):.2f}x | "
                     f"{share:.0%} | {rest:.2f}x |")
    return "\n".join(lines)


def tile_use_table(cases, by: str, lib, peer: str = "compile") -> str:
    general = [(tile_use(c, lib), r, c) for r, c in ratios(cases, peer, by)
               if c["variant"] == "general_wgmma"]
    total = sum(case_time(c, "new", by) for _, _, c in general)
    lines = [f"{peer} / op on the general kernel by the share of its tiles the layer fills "
             f"({'kernel time' if by == 'kernel' else 'event median'})",
             "| tiles | cases | geomean | op time share |", "|---|---:|---:|---:|"]
    for name, keep in (("under half full", lambda u: u < 0.5),
                       ("at least half full", lambda u: u >= 0.5)):
        part = [(r, c) for u, r, c in general if keep(u)]
        if part:
            share = sum(case_time(c, "new", by) for _, c in part) / total
            lines.append(f"| {name} | {len(part)} | {geomean([r for r, _ in part]):.2f}x | "
                         f"{share:.0%} |")
    lines.append("")
    for use, ratio, case in sorted(general, key=lambda g: g[0]):
        lines.append(f"  {use:.2f} {ratio:.2f}x {case['name']} ({case['dtype']}, "
                     f"{case_time(case, 'new', by):.1f} µs)")
    return "\n".join(lines)


# Why a case is slower than its peer, from the host plan of the case on the H200 and its record:
# the first of these that holds (REASONS order).
REASONS = (
    ("another kernel", "not the general kernel (the choice's variant)"),
    ("one round", "the general kernel's blocks all fit one round of the resident blocks: the "
                  "layer's time is one block's chain (setup, first copies, steps, epilogue)"),
    ("tiles under half full", "the plan's tiles hold under half of their pooled outputs and "
                              "channels (small or odd images, few channels)"),
    ("memory floor", "the layer's floor is its bytes at HBM bandwidth, not its FLOPs"),
    ("mainloop rate", "several rounds of fuller tiles over a compute floor: the mainloop's "
                      "rate and the epilogue's share"),
)


def floor_kind(case: dict) -> str:
    """"memory" where the record's floor (utils.profiling.floor_us) is the case's minimum bytes
    at the HBM bandwidth it was computed with (the default), else "compute"."""
    from utils.profiling import DEFAULT_HALF_TFLOPS, DEFAULT_TF32_TFLOPS
    geometry = case["case"]
    rate = DEFAULT_TF32_TFLOPS if case["dtype"] == "float32" else DEFAULT_HALF_TFLOPS
    compute_us = geometry["flops"] / (rate * 1e12) * 1e6
    return "memory" if case["floor_us"] > 1.001 * compute_us else "compute"


def reason(case: dict, lib, plan=None) -> str:
    """The first of REASONS that holds for a case (host plans, or the general kernel's `plan`
    for it: the record's times are of the plans its run took, which later versions may have
    changed)."""
    if case["variant"] != "general_wgmma":
        return "another kernel"
    plan = plan or _general_plan(case, lib)
    if rounds(case, lib, plan) == 1:
        return "one round"
    if tile_use(case, lib, plan) < 0.5:
        return "tiles under half full"
    return "memory floor" if floor_kind(case) == "memory" else "mainloop rate"


def slower_table(cases, by: str, lib, peer: str = "compile") -> str:
    """Every case slower than `peer`, slowest first, with what tells why: each target's share of
    the floor, the general kernel's plan (tile, blocks, steps, rounds, tile use) and the first
    reason of REASONS that holds; then the cases by reason."""
    everything = ratios(cases, peer, by)
    slower = sorted(((r, c) for r, c in everything if r < 1.0), key=lambda rc: rc[0])
    total = sum(case_time(c, "new", by) for _, c in everything)
    lines = [f"cases slower than {peer} "
             f"({'kernel time' if by == 'kernel' else 'event median'}), by their plans now",
             f"| case | dtype, layout | × {peer} | op µs | {peer} µs | op / {peer} of the floor "
             "| floor | plan | reason |", "|---|---|---:|---:|---:|---|---|---|---|"]
    by_reason = {}
    for ratio, case in slower:
        p = _general_plan(case, lib) if case["variant"] == "general_wgmma" else None
        why = reason(case, lib, p)
        by_reason.setdefault(why, []).append((ratio, case))
        new, other = case_time(case, "new", by), case_time(case, peer, by)
        plan = "-"
        if p is not None:
            plan = (f"{p['tile']} {p['tiles']}x{p['split']}, {p['steps']} steps, "
                    f"{rounds(case, lib, p)} rounds, tiles {tile_use(case, lib, p):.0%} full")
        layout = "channels-last" if case.get("channels_last") else "NCHW"
        lines.append(f"| {case['name']} | {case['dtype']}, {layout} | {ratio:.2f}x | {new:.1f} | "
                     f"{other:.1f} | {case['floor_us'] / new:.0%} / "
                     f"{case['floor_us'] / other:.0%} | {floor_kind(case)} | {plan} | {why} |")
    lines += ["", "| reason | cases | geomean | op time share of all |", "|---|---:|---:|---:|"]
    for name, _ in REASONS:
        part = by_reason.get(name, [])
        if part:
            share = sum(case_time(c, "new", by) for _, c in part) / total
            lines.append(f"| {name} | {len(part)} | {geomean([r for r, _ in part]):.2f}x | "
                         f"{share:.0%} |")
    lines += [""] + [f"{name}: {text}" for name, text in REASONS]
    return "\n".join(lines)


def rows(cases, by: str) -> str:
    lines = ["| case | geometry | dtype | layout | GFLOP | variant | op µs | eager µs | compile µs "
             "| × eager | × compile |", "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for case in sorted(cases, key=lambda c: c["case"]["flops"]):
        times = [case_time(case, t, by) for t in ("new", "eager", "compile")]
        cells = [f"{t:.1f}" if t else "-" for t in times]
        x = [f"{times[i] / times[0]:.2f}" if times[0] and times[i] else "-" for i in (1, 2)]
        layout = "NHWC" if case.get("channels_last") else "NCHW"
        lines.append(f"| {case['name']} | `{case['case']['label']}` | {case['dtype']} | {layout} | "
                     f"{case['case']['flops'] / 1e9:.1f} | {case['variant']} | "
                     + " | ".join(cells) + " | " + " | ".join(x) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/ratio_table.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="utils.profiling JSON records")
    parser.add_argument("--by", choices=("kernel", "event"), default="kernel",
                        help="profiler kernel time (default) or event median")
    parser.add_argument("--rows", action="store_true", help="also print one row per case")
    parser.add_argument("--min-gflop", type=float, default=20.0,
                        help="the TFLOP/s line covers cases of at least this many GFLOP")
    parser.add_argument("--classes", action="store_true",
                        help="also print the ratio over torch.compile by class of geometry")
    parser.add_argument("--tile-use", action="store_true",
                        help="also print the general kernel's cases by the share of its tiles "
                             "they fill (needs the built extension, not a GPU)")
    parser.add_argument("--rounds", action="store_true",
                        help="also print the general kernel's cases by whether their blocks fit "
                             "one round of the resident blocks, and by pool (needs the built "
                             "extension, not a GPU)")
    parser.add_argument("--slower", action="store_true",
                        help="also print every case slower than torch.compile with its share of "
                             "the floor, its plan and why (needs the built extension, not a GPU)")
    parser.add_argument("--against", nargs="+", metavar="OLD",
                        help="older records of the same cases: the op's time then and now")
    args = parser.parse_args(argv)
    cases = load(args.paths)
    print(summary(cases, args.by, args.min_gflop))
    if args.classes:
        print()
        print(classes(cases, args.by))
    if args.tile_use or args.rounds or args.slower:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import cuda_extension
        from utils import kernel_choice
        lib = kernel_choice.load(cuda_extension)
        if args.tile_use:
            print()
            print(tile_use_table(cases, args.by, lib))
        if args.rounds:
            print()
            print(rounds_table(cases, args.by, lib))
        if args.slower:
            print()
            print(slower_table(cases, args.by, lib))
    if args.against:
        print()
        print(against(cases, load(args.against), args.by))
    if args.rows:
        print()
        print(rows(cases, args.by))
    return 0


if __name__ == "__main__":
    sys.exit(main())
