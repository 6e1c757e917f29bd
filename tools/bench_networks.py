"""Whole torchvision networks on the GPU: eager, torch.compile, and the fused op three ways.

    python tools/bench_networks.py --json docs/networks_h200.json          # the whole matrix
    python tools/bench_networks.py --models vgg16,alexnet --batches 32 --dtypes float32
    python tools/bench_networks.py --start 8 --limit 8 --json part2.json   # a slice of it
    python tools/bench_networks.py --table --json docs/networks_h200.json  # its table, no GPU

The matrix is issue 32's: every model of --models (torchvision, eval mode, random weights:
nothing is downloaded) at every batch of --batches, in every dtype of --dtypes (model and input
converted) and layout of --layouts (channels_last: model and input both, as a user would),
in that order (model outermost). Targets, all on the same weights and input:
  eager          the torchvision model as is (cuDNN; TF32 per torch.backends.cudnn.allow_tf32)
  compile        torch.compile of it, default mode (the peer)
  compile-frozen torch.compile of it with torch._inductor.config.freezing = True and no pass:
                 the peer of compile-pass, whose freezing alone (constant folding, BatchNorm
                 folded, layouts chosen at compile time) speeds some models up
  fused          model_new.fuse_conv_relu_maxpool on a deep copy (report=True: how many of the
                 model's Conv2d it fused), eager
  fused-compile  torch.compile of the fused copy
  compile-pass   torch.compile of an unchanged copy with model_new.enable_inductor_fusion() and
                 torch._inductor.config.freezing = True (Inductor folds eval-mode BatchNorm, then
                 the pass puts the fused op into its graph); both restored afterwards
--conv-relu passes conv_relu=True to fuse_conv_relu_maxpool and the pass (Conv2d -> [BN] ->
ReLU runs with no pool, on the 3 x 3 kernel); its rows are apart from the others (the row's
"conv_relu", its key and its label).
Each target's output is compared with a float64 copy of the eager model (its own rounded
weights) on the input in float64 (relative L2 error reported) and with eager's output: it
matches where its relative L2 distance to eager's is at most --tolerance (default 2e-2 for
float32 with TF32, 3e-2 for 16-bit dtypes: deep random-weight networks, every layer rounding). Then it is timed: after its first
call (which compiles) and --warmup more, --iters calls each bracketed by CUDA events, the L2
flushed (a 256 MB write) between calls, outside the events; the median is reported. eager and
fused are timed in turn, in --rounds rounds of about iters / rounds calls each (default 5), so
that a drift of the machine's host (batch-1 and other host-bound rows) falls on both alike.

Printed last: one row per configuration and the bars of issue 32 for the rows run (fused eager
never slower than eager; the best of fused, fused-compile and compile-pass faster than
compile; on vgg16, vgg16_bn and alexnet at batch 32 that best at least 1.15x compile).
--json is rewritten after every configuration ("complete": false until the last), so a run
cut short keeps what it measured; --resume runs only what it lacks (and the rows --redo names
again, e.g. those that miss a bar), and --time-limit stops
cleanly before a configuration that would overrun (so a long matrix spans several calls). Exit status: 0 every target matched eager, 1 one did not,
2 no GPU, no torchvision or no built extension.
"""
import argparse
import copy
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MODELS = ("vgg11", "vgg16", "vgg19", "vgg11_bn", "vgg16_bn", "vgg19_bn", "alexnet", "resnet18",
          "resnet50", "googlenet", "densenet121", "squeezenet1_1", "inception_v3")
TARGETS = ("eager", "compile", "compile-frozen", "fused", "fused-compile", "compile-pass")
FUSED_TARGETS = ("fused", "fused-compile", "compile-pass")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
LAYOUTS = ("nchw", "channels_last")
TOLERANCE = {"float32": 2e-2, "float16": 3e-2, "bfloat16": 3e-2}
# Issue 32: on these models at batch 32 the best fused target should be >= 1.15x compile.
STRONG_BAR_MODELS = ("vgg16", "vgg16_bn", "alexnet")
STRONG_BAR = 1.15
MIN_ITERS = 20
INTERLEAVED = ("eager", "fused")  # the eager-mode targets, timed in alternating rounds


def comma_list(choices):
    def parse(text: str) -> List[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if not names or unknown:
            raise argparse.ArgumentTypeError(
                f"unknown or no value(s) {unknown}; known: {', '.join(choices)}")
        return names
    return parse


def positive_ints(text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def positive_int(text: str) -> int:
    values = positive_ints(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"expected one positive integer, got {text!r}")
    return values[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench_networks.py",
                                     description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=comma_list(MODELS), default=list(MODELS),
                        help="comma-separated torchvision models (default: issue 32's 13)")
    parser.add_argument("--batches", type=positive_ints, default=[32, 1],
                        help="comma-separated batch sizes (default: 32,1)")
    parser.add_argument("--dtypes", type=comma_list(tuple(DTYPES)),
                        default=["float32", "float16"],
                        help="comma-separated dtypes (default: float32,float16)")
    parser.add_argument("--layouts", type=comma_list(LAYOUTS), default=list(LAYOUTS),
                        help="comma-separated input layouts (default: nchw,channels_last)")
    parser.add_argument("--targets", type=comma_list(TARGETS), default=list(TARGETS),
                        help="comma-separated targets (default: all; eager always runs)")
    parser.add_argument("--start", type=int, default=0,
                        help="skip the first START configurations of the matrix")
    parser.add_argument("--limit", type=int, default=0,
                        help="run at most LIMIT configurations (default 0: all the rest)")
    parser.add_argument("--iters", type=int, default=30,
                        help=f"timed calls per target; the median is reported (default 30, "
                             f"at least {MIN_ITERS})")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="rounds in which eager and fused take turns, each with about "
                             "iters / rounds of their timed calls (default 5; 1: one after the "
                             "other)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed calls per target after its first (compiling) call")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="relative L2 distance to eager's output that counts as a match "
                             "(default per dtype: 2e-2 float32, 3e-2 16-bit)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs")
    parser.add_argument("--conv-relu", action="store_true",
                        help="fuse Conv2d -> [BN] -> ReLU runs with no pool too (conv_relu=True "
                             "in fused, fused-compile and compile-pass)")
    parser.add_argument("--json", type=Path, default=None,
                        help="write the results here (rewritten after every configuration)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in --json and run only the configurations "
                             "it lacks (each row records the commit and time it was measured)")
    parser.add_argument("--redo", type=redo_specs, default=[],
                        help="with --resume: rows of --json to measure again instead of keeping "
                             "them, comma-separated: 'misses' (every row that misses a bar) or "
                             "model[:batch[:dtype[:layout]]], '*' matching anything (e.g. "
                             "'misses,resnet18:32')")
    parser.add_argument("--time-limit", type=float, default=0,
                        help="seconds: start no configuration that the longest one so far "
                             "would take past this (default 0: no limit); the table and the "
                             "bars are printed for what ran")
    parser.add_argument("--table", action="store_true",
                        help="print the table and the bars of the rows in --json, as stored, "
                             "and exit (no GPU; docs/RESULTS.md's table)")
    return parser


def configurations(args) -> List[dict]:
    """The slice [start, start + limit) of the matrix, model outermost."""
    extra = dict(conv_relu=True) if args.conv_relu else {}
    matrix = [dict(model=m, batch=b, dtype=d, layout=layout, **extra) for m in args.models
              for b in args.batches for d in args.dtypes for layout in args.layouts]
    end = len(matrix) if args.limit <= 0 else args.start + args.limit
    return matrix[args.start:end]


def input_size(model: str) -> int:
    return 299 if model == "inception_v3" else 224


def best_fused(row: dict) -> Optional[tuple]:
    """(target, median ms) of the fastest fused target of a row that matched eager, or None."""
    timed = [(name, row["targets"][name]["median_ms"]) for name in FUSED_TARGETS
             if name in row["targets"] and row["targets"][name]["matches_eager"]]
    return min(timed, key=lambda item: item[1]) if timed else None


# Issue 32's speed bars, row by row (a row without the targets a bar compares is not judged).
def slower_than_eager(row: dict) -> bool:
    """Fused eager slower than eager."""
    return ("fused" in row["targets"]
            and row["targets"]["fused"]["median_ms"] > row["targets"]["eager"]["median_ms"])


def loses_to_compile(row: dict) -> bool:
    """The best fused target no faster than torch.compile."""
    return ("compile" in row["targets"] and best_fused(row) is not None
            and best_fused(row)[1] >= row["targets"]["compile"]["median_ms"])


def below_strong_bar(row: dict) -> bool:
    """vgg16, vgg16_bn or alexnet at batch 32 under STRONG_BAR times torch.compile."""
    return ("compile" in row["targets"] and best_fused(row) is not None
            and row["model"] in STRONG_BAR_MODELS and row["batch"] == 32
            and speedup(row) < STRONG_BAR)


def misses_a_bar(row: dict) -> bool:
    return slower_than_eager(row) or loses_to_compile(row) or below_strong_bar(row)


def bars(rows: List[dict]) -> List[str]:
    """Issue 32's speed bars over the rows run, one line each: PASS / MISS, the count, and every
    row that misses with its numbers."""
    lines = []
    slower = [r for r in rows if slower_than_eager(r)]
    with_fused = [r for r in rows if "fused" in r["targets"]]
    if with_fused:
        lines.append(f"{'PASS' if not slower else 'MISS'} fused eager never slower than eager: "
                     f"{len(with_fused) - len(slower)} of {len(with_fused)} rows"
                     + "".join(f"; {label(r)} {r['targets']['fused']['median_ms']:.3f} ms "
                               f"against {r['targets']['eager']['median_ms']:.3f}"
                               for r in slower))
    compared = [r for r in rows if "compile" in r["targets"] and best_fused(r)]
    losing = [r for r in compared if loses_to_compile(r)]
    if compared:
        lines.append(f"{'PASS' if not losing else 'MISS'} best fused target faster than "
                     f"torch.compile: {len(compared) - len(losing)} of {len(compared)} rows"
                     + "".join(f"; {label(r)} {speedup(r):.2f}x" for r in losing))
    frozen = [r for r in rows if "compile-frozen" in r["targets"] and best_fused(r)]
    if frozen:
        behind = [r for r in frozen
                  if best_fused(r)[1] >= r["targets"]["compile-frozen"]["median_ms"]]
        lines.append(f"(not a bar) best fused target faster than torch.compile with freezing: "
                     f"{len(frozen) - len(behind)} of {len(frozen)} rows"
                     + "".join(f"; {label(r)} {speedup(r, 'compile-frozen'):.2f}x"
                               for r in behind))
    strong = [r for r in compared if r["model"] in STRONG_BAR_MODELS and r["batch"] == 32]
    weak = [r for r in strong if below_strong_bar(r)]
    if strong:
        lines.append(f"{'PASS' if not weak else 'MISS'} vgg16 / vgg16_bn / alexnet at batch 32 "
                     f">= {STRONG_BAR}x torch.compile: {len(strong) - len(weak)} of "
                     f"{len(strong)} rows" + "".join(f"; {label(r)} {speedup(r):.2f}x"
                                                    for r in weak))
    return lines


def speedup(row: dict, peer: str = "compile") -> float:
    """The peer's median (torch.compile's by default) over the best fused target's."""
    return row["targets"][peer]["median_ms"] / best_fused(row)[1]


def label(row: dict) -> str:
    return (f"{row['model']} b{row['batch']} {row['dtype']} {row['layout']}"
            + (" conv_relu" if row.get("conv_relu") else ""))


def table(rows: List[dict]) -> str:
    header = "| model, batch, dtype, layout | fused convs | " + " | ".join(
        f"{name} ms" for name in TARGETS) + " | best fused / compile |"
    lines = [header, "|---|---:|" + "---:|" * len(TARGETS) + "---:|"]
    for row in rows:
        cells = []
        for name in TARGETS:
            target = row["targets"].get(name)
            cells.append("" if target is None else
                         f"{target['median_ms']:.3f}" + ("" if target["matches_eager"]
                                                         else " (MISMATCH)"))
        ratio = (f"{speedup(row):.2f}x ({best_fused(row)[0]})"
                 if "compile" in row["targets"] and best_fused(row) else "")
        fusion = row.get("fusion", {})
        lines.append(f"| {label(row)} | {fusion.get('fused', '')}/{fusion.get('convs', '')} | "
                     + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def relative_l2(out: torch.Tensor, reference: torch.Tensor) -> float:
    difference = (out.double() - reference.double()).norm().item()
    scale = reference.double().norm().item()
    return difference / scale if scale > 0 else (0.0 if difference == 0 else math.inf)


def build_model(name: str) -> torch.nn.Module:
    """torchvision's `name` with random weights, in eval mode, on the CPU."""
    import torchvision
    kwargs = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=False)  # eval outputs only the logits
    return torchvision.models.get_model(name, **kwargs).eval()


def make_model(name: str, dtype: torch.dtype, channels_last: bool):
    """The eager model on the GPU in `dtype` (and layout)."""
    model = build_model(name).cuda().to(dtype)
    return model.to(memory_format=torch.channels_last) if channels_last else model


def build_target(name: str, eager, record: dict):
    """The module (or callable) for target `name`; fusion counts into `record`."""
    import model_new
    if name == "eager":
        return eager
    if name == "compile":
        return torch.compile(copy.deepcopy(eager))
    if name in ("fused", "fused-compile"):
        fused, report = model_new.fuse_conv_relu_maxpool(
            copy.deepcopy(eager), report=True, conv_relu=bool(record.get("conv_relu")))
        record["fusion"] = dict(convs=len(report), fused=sum(1 for e in report if e.fused))
        return fused if name == "fused" else torch.compile(fused)
    raise ValueError(name)


def run_compile_pass(eager, x, flush, args, fusion: bool = True, conv_relu: bool = False
                     ) -> dict:
    """compile-pass (fusion) or compile-frozen (not): freezing on, and with fusion the Inductor
    pass (its conv_relu option), while it compiles and runs."""
    import torch._inductor.config as inductor_config
    import model_new
    freezing = inductor_config.freezing
    fusion_pass = model_new.enable_inductor_fusion(conv_relu=conv_relu) if fusion else None
    inductor_config.freezing = True
    try:
        module = torch.compile(copy.deepcopy(eager))
        result = time_target(module, x, flush, args)
        if fusion:
            result["rewritten"] = int(getattr(fusion_pass, "rewritten", 0))
        return result
    finally:
        if fusion:
            model_new.enable_inductor_fusion(False)
        inductor_config.freezing = freezing


def first_call(module, x) -> dict:
    """The output of the module's first call (which compiles) and its seconds."""
    started = time.perf_counter()
    out = module(x)
    torch.cuda.synchronize()
    return dict(out=out, first_call_s=time.perf_counter() - started)


def timing(times_us: List[float]) -> dict:
    from utils.profiling import percentile
    return dict(median_ms=statistics.median(times_us) / 1e3,
                p10_ms=percentile(times_us, 10) / 1e3, p90_ms=percentile(times_us, 90) / 1e3,
                samples=len(times_us))


def time_target(module, x, flush, args) -> dict:
    from utils.profiling import time_calls
    result = first_call(module, x)
    result.update(timing(time_calls(lambda inp: module(inp), [x], args.iters, args.warmup,
                                    flush)))
    return result


def time_interleaved(modules: Dict[str, object], x, flush, args) -> Dict[str, dict]:
    """time_target for several modules, their timed calls in args.rounds rounds in which each
    module takes its turn (the first round after args.warmup untimed calls, the others after
    one)."""
    from utils.profiling import time_calls
    results = {name: first_call(module, x) for name, module in modules.items()}
    samples: Dict[str, List[float]] = {name: [] for name in modules}
    rounds = max(1, min(args.rounds, args.iters))
    for r in range(rounds):
        calls = args.iters // rounds + (1 if r < args.iters % rounds else 0)
        for name, module in modules.items():
            samples[name] += time_calls(lambda inp: module(inp), [x], calls,
                                        args.warmup if r == 0 else 1, flush)
    for name, times_us in samples.items():
        results[name].update(timing(times_us), rounds=rounds)
    return results


def run_configuration(config: dict, args, flush) -> dict:
    dtype = DTYPES[config["dtype"]]
    channels_last = config["layout"] == "channels_last"
    torch.manual_seed(args.seed)
    eager = make_model(config["model"], dtype, channels_last)
    size = input_size(config["model"])
    x = torch.randn(config["batch"], 3, size, size, device="cuda").to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    tolerance = args.tolerance if args.tolerance is not None else TOLERANCE[config["dtype"]]
    row = dict(config, tolerance=tolerance, targets={})
    with torch.no_grad():
        # The same computation in float64: the model's own (rounded) weights and input.
        reference = copy.deepcopy(eager).double()(x.double())
        eager_out = None
        names = ["eager"] + [t for t in args.targets if t != "eager"]
        interleaved = time_interleaved(
            {name: build_target(name, eager, row) for name in names if name in INTERLEAVED},
            x, flush, args)
        for name in names:
            if name in interleaved:
                result = interleaved.pop(name)
            elif name in ("compile-pass", "compile-frozen"):
                result = run_compile_pass(eager, x, flush, args, fusion=name == "compile-pass",
                                          conv_relu=bool(config.get("conv_relu")))
            else:
                result = time_target(build_target(name, eager, row), x, flush, args)
            out = result.pop("out")
            if eager_out is None:
                eager_out = out.clone()
            result["rel_l2_vs_float64"] = relative_l2(out, reference)
            result["rel_l2_vs_eager"] = relative_l2(out, eager_out)
            result["matches_eager"] = bool(out.shape == eager_out.shape
                                           and result["rel_l2_vs_eager"] <= tolerance)
            row["targets"][name] = result
            print(f"  {label(row)} {name:13s} {result['median_ms']:9.3f} ms, first call "
                  f"{result['first_call_s']:6.1f} s, rel L2 vs float64 "
                  f"{result['rel_l2_vs_float64']:.1e}, vs eager {result['rel_l2_vs_eager']:.1e}"
                  f"{'' if result['matches_eager'] else ' MISMATCH'}", flush=True)
            torch._dynamo.reset()  # each compiled target starts from empty dynamo caches
    return row


def config_key(row: dict) -> tuple:
    return ((row["model"], row["batch"], row["dtype"], row["layout"])
            + (("conv_relu",) if row.get("conv_relu") else ()))


def redo_specs(text: str) -> List[tuple]:
    """--redo's specs: 'misses', or (model, batch, dtype, layout) with None for '*' or left out."""
    specs = []
    for item in filter(None, text.split(",")):
        if item == "misses":
            specs.append(("misses",))
            continue
        fields = item.split(":")
        if len(fields) > 4 or fields[0] not in MODELS + ("*",):
            raise argparse.ArgumentTypeError(
                f"--redo: expected 'misses' or model[:batch[:dtype[:layout]]] with a model of "
                f"{', '.join(MODELS)} or '*', got {item!r}")
        fields += ["*"] * (4 - len(fields))
        model, batch, dtype, layout = (None if f == "*" else f for f in fields)
        if batch is not None and not batch.isdigit():
            raise argparse.ArgumentTypeError(f"--redo: batch {batch!r} of {item!r} is not a number")
        if dtype is not None and dtype not in DTYPES:
            raise argparse.ArgumentTypeError(
                f"--redo: dtype {dtype!r} of {item!r} is not one of {', '.join(DTYPES)}")
        if layout is not None and layout not in LAYOUTS:
            raise argparse.ArgumentTypeError(
                f"--redo: layout {layout!r} of {item!r} is not one of {', '.join(LAYOUTS)}")
        specs.append((model, None if batch is None else int(batch), dtype, layout))
    return specs


def to_redo(row: dict, specs: List[tuple]) -> bool:
    """Whether --redo names the row."""
    for spec in specs:
        if spec == ("misses",):
            if misses_a_bar(row):
                return True
        elif all(want is None or want == have for want, have in
                 zip(spec, (row["model"], row["batch"], row["dtype"], row["layout"]))):
            return True
    return False


def resumed_rows(args) -> List[dict]:
    """The rows of --json that --resume keeps as done: those of this run's matrix slice that
    --redo does not name."""
    if not (args.resume and args.json and args.json.exists()):
        return []
    wanted = {config_key(c) for c in configurations(args)}
    return [r for r in json.loads(args.json.read_text())["rows"]
            if config_key(r) in wanted and not to_redo(r, args.redo)]


def other_rows(args) -> List[dict]:
    """The rows of --json outside this run's slice (other models, batches, --conv-relu rows),
    and those --redo names until they are measured again: --resume writes them back unchanged,
    after the slice's, so that a run of one slice into the committed file, or a run stopped by
    --time-limit, loses none of them."""
    if not (args.resume and args.json and args.json.exists()):
        return []
    wanted = {config_key(c) for c in configurations(args)}
    return [r for r in json.loads(args.json.read_text())["rows"]
            if config_key(r) not in wanted or to_redo(r, args.redo)]


def with_others(rows: List[dict], others: List[dict]) -> List[dict]:
    """rows, then the others that no row of rows measured again."""
    measured = {config_key(r) for r in rows}
    return rows + [r for r in others if config_key(r) not in measured]


def in_matrix_order(rows: List[dict], args) -> List[dict]:
    order = {config_key(c): i for i, c in enumerate(configurations(args))}
    return sorted(rows, key=lambda r: order.get(config_key(r), len(order)))


def run_matrix(work: List[dict], rows: List[dict], args, measure, write,
               clock=time.perf_counter) -> List[dict]:
    """Measures the configurations of `work` that `rows` lacks, in order, each through
    measure(config) -> row, calling write(rows) after each; with args.time_limit, starts none
    that the longest so far would take past it. Returns the rows in matrix order."""
    done = {config_key(r) for r in rows}
    todo = [c for c in work if config_key(c) not in done]
    if rows:
        print(f"--resume: {len(rows)} configurations already in {args.json}, "
              f"{len(todo)} to run", flush=True)
    started, longest = clock(), 0.0
    for config in todo:
        elapsed = clock() - started
        if args.time_limit > 0 and elapsed + longest > args.time_limit:
            print(f"--time-limit: stopping after {elapsed:.0f} s, before {label(config)} "
                  f"(the longest configuration took {longest:.0f} s)", flush=True)
            break
        row = measure(config)
        longest = max(longest, clock() - started - elapsed)
        rows = in_matrix_order(rows + [row], args)
        write(rows)
    return rows


def write_json(path: Path, environment: dict, args, rows: List[dict], complete: bool) -> None:
    settings = dict(models=args.models, batches=args.batches, dtypes=args.dtypes,
                    layouts=args.layouts, targets=args.targets, start=args.start,
                    limit=args.limit, iters=args.iters, rounds=args.rounds, warmup=args.warmup,
                    seed=args.seed,
                    conv_relu=args.conv_relu,
                    cudnn_allow_tf32=torch.backends.cudnn.allow_tf32, complete=complete)
    record = dict(benchmark="networks", environment=environment, settings=settings, rows=rows)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(path)


def print_table(path: Optional[Path]) -> int:
    """--table: the table and the bars of a results file's rows."""
    if path is None or not path.is_file():
        print(f"error: --table needs --json with an existing results file, got {path}",
              file=sys.stderr)
        return 2
    rows = json.loads(path.read_text())["rows"]
    print(table(rows) + "\n")
    for line in bars(rows):
        print(line)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.table:
        return print_table(args.json)
    if args.redo and not args.resume:
        print("error: --redo names rows of --json to measure again; it needs --resume",
              file=sys.stderr)
        return 2
    if args.iters < MIN_ITERS:
        print(f"error: --iters must be at least {MIN_ITERS}", file=sys.stderr)
        return 2
    work = configurations(args)
    if not work:
        print("error: --start leaves no configuration to run", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU is visible", file=sys.stderr)
        return 2
    try:
        import torchvision
        import model_new  # noqa: F401 - fails early without the extension
    except ImportError as error:
        print(f"error: {error} (build the extension with `bash utils/compile.sh`; "
              f"torchvision is in requirements.txt)", file=sys.stderr)
        return 2
    from utils.profiling import environment_info, l2_flush_buffer
    environment = dict(environment_info(), torchvision=torchvision.__version__)
    flush = l2_flush_buffer()
    print(f"{len(work)} configurations; {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, torchvision {torchvision.__version__}, "
          f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}", flush=True)
    def measure(config: dict) -> dict:
        row = run_configuration(config, args, flush)
        row["measured"] = dict(source_commit=environment.get("source_commit")
                               or environment.get("git_commit"),
                               time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if environment.get("hooks"):  # a form other than the commit's default
            row["measured"]["hooks"] = environment["hooks"]
        return row

    others = other_rows(args)

    def write(rows: List[dict]) -> None:
        if args.json:
            write_json(args.json, environment, args, with_others(rows, others),
                       complete=len(rows) == len(work))

    rows = run_matrix(work, resumed_rows(args), args, measure, write)
    print("\n" + table(rows) + "\n")
    for line in bars(rows):
        print(line)
    if args.json:
        print(f"wrote {args.json}")
    mismatched = [f"{label(r)} {name}" for r in rows for name, t in r["targets"].items()
                  if not t["matches_eager"]]
    if mismatched:
        print("FAIL: outputs that do not match eager: " + ", ".join(mismatched),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
