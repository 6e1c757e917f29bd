"""The README's results table, written from a committed profiling JSON (docs/suite_h200.json).

    python tools/readme_table.py            # print the table
    python tools/readme_table.py --write    # replace the table in README.md
    python tools/readme_table.py --check    # exit 1 if README.md's table is not this one

The table sits in README.md between the markers below; tests/test_readme_cpu.py runs --check's
comparison, so the README cannot drift from the JSON it cites. Columns: the event-timed median
of each target and, in parentheses, the profiler's kernel time per call; the op's speedup over
torch.compile both ways; the variant the automatic choice ran.
"""
import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEFAULT_JSON = ROOT / "docs" / "suite_h200.json"
BEGIN = "<!-- results table: written by tools/readme_table.py from {source} -->"
END = "<!-- end of results table -->"
PEERS = (("eager", "eager µs"), ("compile", "torch.compile µs"), ("new", "ModelNew µs"))


def microseconds(value: float) -> str:
    """Three significant figures, no more decimals than that: 3911, 115, 98.6, 15.9."""
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}" if value >= 10 else f"{value:.2f}"


def table(data: dict, source: str) -> str:
    environment = data["environment"]
    settings = data["settings"]
    lines = [BEGIN.format(source=source),
             f"{environment['gpu']}, torch {environment['torch']}, dtype {settings['dtype']}, "
             f"cudnn.allow_tf32 {settings['cudnn_allow_tf32']}, {settings['iters']} calls per "
             f"target; kernels of commit {environment['source_commit'][:7]}.",
             "",
             "| shape (N, C, K, H, W, kernel, stride, pad, pool k, pool s) | "
             + " | ".join(title for _, title in PEERS)
             + " | vs compile (kernels) | variant |",
             "|---|" + "---:|" * (len(PEERS) + 1) + "---|"]
    event_ratios, kernel_ratios = [], []
    for case in data["cases"]:
        targets = case["targets"]
        cells = [f"{case['name']} {case['case']['label']}"]
        for name, _ in PEERS:
            target = targets[name]
            cells.append(f"{microseconds(target['median_us'])} "
                         f"({microseconds(target['profiler_kernel_us'])})")
        event = targets["compile"]["median_us"] / targets["new"]["median_us"]
        kernel = targets["compile"]["profiler_kernel_us"] / targets["new"]["profiler_kernel_us"]
        event_ratios.append(event)
        kernel_ratios.append(kernel)
        cells += [f"{event:.2f}x ({kernel:.2f}x)", case["variant"]]
        lines.append("| " + " | ".join(cells) + " |")

    def mean(values):
        return math.exp(sum(math.log(v) for v in values) / len(values))

    lines += ["",
              f"Geometric mean over torch.compile: {mean(event_ratios):.2f}x event-timed, "
              f"{mean(kernel_ratios):.2f}x by kernel time.",
              END]
    return "\n".join(lines)


def replaced(readme: str, new_table: str) -> str:
    begin = readme.find("<!-- results table:")
    end = readme.find(END)
    if begin < 0 or end < 0:
        raise SystemExit(f"readme_table.py: {README} has no results-table markers")
    return readme[:begin] + new_table + readme[end + len(END):]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", type=Path, default=DEFAULT_JSON,
                        help="profiling JSON (default docs/suite_h200.json)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="replace the table in README.md")
    action.add_argument("--check", action="store_true",
                        help="exit 1 if README.md's table differs")
    args = parser.parse_args(argv)
    source = args.json.resolve().relative_to(ROOT).as_posix()
    new_table = table(json.loads(args.json.read_text()), source)
    if not (args.write or args.check):
        print(new_table)
        return 0
    readme = README.read_text()
    updated = replaced(readme, new_table)
    if args.check:
        if updated != readme:
            print("readme_table.py: README.md's results table differs from "
                  f"{source}; run python tools/readme_table.py --write", file=sys.stderr)
            return 1
        return 0
    README.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
