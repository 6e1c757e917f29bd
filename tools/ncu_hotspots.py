"""Where a kernel's time goes, from Nsight Compute's source page: the sampled warp stalls and
the executed instructions per SASS line, summed over runs of consecutive lines and listed for
the hottest lines. The method behind docs/PERF.md's v50 profile.

    ncu --clock-control none -k regex:general_ws --launch-skip 1 --launch-count 1 --set full \\
        --import-source no -o prof python tools/run_case.py 32,64,256,56,56,1,1,0,2,2 \\
        general_wgmma --dtype float16
    ncu -i prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python tools/ncu_hotspots.py prof.csv [--bucket 100] [--top 12]

Read it as: a run of lines with a large share of the samples is where warps wait (the line
after a barrier or a wait loop's branch carries that wait); a large share of the instructions
is where they work.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read_source_page(path: Path) -> list[dict]:
    """The SASS lines of the first kernel in an `ncu --page source --csv` export: address,
    source, samples and executed instructions (0 where the export has none)."""
    rows = list(csv.reader(path.read_text().splitlines()))
    header_at = next(i for i, row in enumerate(rows) if SAMPLES in row and "Source" in row)
    header = rows[header_at]
    source, samples, executed = (header.index(k) for k in ("Source", SAMPLES, EXECUTED))
    lines = []
    for row in rows[header_at + 1:]:
        if len(row) <= max(source, samples, executed):
            break  # the next kernel's header, or the end
        number = lambda text: int(text) if text.strip().isdigit() else 0  # noqa: E731
        lines.append(dict(index=len(lines), source=row[source].strip(),
                          samples=number(row[samples]), executed=number(row[executed])))
    return lines


def summarize(lines: list[dict], bucket: int, top: int, share: float = 0.02) -> str:
    total_samples = sum(line["samples"] for line in lines) or 1
    total_executed = sum(line["executed"] for line in lines) or 1
    out = [f"{len(lines)} SASS lines, {total_samples} stall samples, "
           f"{total_executed} warp instructions executed",
           f"\nlines (runs of {bucket}) holding at least {share:.0%} of the samples:",
           "  first  last  samples  share  instructions  share"]
    for first in range(0, len(lines), bucket):
        run = lines[first:first + bucket]
        s = sum(line["samples"] for line in run)
        e = sum(line["executed"] for line in run)
        if s >= share * total_samples:
            out.append(f"  {first:5d} {first + len(run) - 1:5d} {s:8d} {s / total_samples:6.1%} "
                       f"{e:13d} {e / total_executed:6.1%}")
    out.append(f"\nthe {top} lines with the most samples:")
    for line in sorted(lines, key=lambda l: -l["samples"])[:top]:
        out.append(f"  {line['index']:5d} {line['samples']:7d} {line['executed']:11d}  "
                   f"{line['source'][:70]}")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="ncu --page source --csv --print-source sass")
    parser.add_argument("--bucket", type=int, default=100, help="lines per run (default 100)")
    parser.add_argument("--top", type=int, default=12, help="hottest lines to list (default 12)")
    args = parser.parse_args(argv)
    print(summarize(read_source_page(args.csv), args.bucket, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
