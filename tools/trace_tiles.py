"""Where the warp-specialized general kernel's time goes, tile by tile: its phase timestamps
($CONV_POOL_GENERAL_TRACE, kernels/hopper/general_trace.cuh) for one launch, summed up.

    python tools/trace_tiles.py 32,128,128,56,56,1,1,0,2,2 --dtype float16 [--channels-last]
    python tools/trace_tiles.py fuzz_149 --json docs/fuzz_h100.json

The case is N,C,K,H,W,kernel,stride,padding,pool kernel,pool stride (tools/run_case.py's
spec), or with --json a case name of a utils.profiling JSON (its dtype and layout unless
given). It runs the op --calls times with the hook on and reads the last launch's record: per
block, the cycles from entry to the consumers' readiness, to the first step's copies, through
the steps, the pooling and stores (split over a cluster: its staging, the wait for the other
blocks, the sum and the pooling of the block's share), and the producer's issue times; per SM,
how many blocks were resident at once and the gaps between one block's exit and the next one's
entry.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

MARKS = ("sm", "timer_start", "start", "ready", "first_full", "mainloop_done", "tile_done", "end",
         "timer_end", "first_issue", "last_issue", "items", "cluster_staged", "cluster_joined",
         "cluster_summed", "epilogue_staged")
HEADER = ("tag", "grid", "traced", "tiles", "split", "steps", "stages", "tile", "blocks_per_sm",
          "persistent", "images", "words")
PHASES = (  # (name, from mark, to mark): consecutive phases of a block's first work item
    ("setup (barriers, K-step table)", "start", "ready"),
    ("wait for the first copies", "ready", "first_full"),
    ("steps (wgmmas and later copies)", "first_full", "mainloop_done"),
    ("bias, pooling and stores", "mainloop_done", "tile_done"),
    ("rest of the block's items", "tile_done", "end"),
    # The cluster split's epilogue, inside "bias, pooling and stores" (cluster plans only):
    ("cluster: stage the partial tile", "mainloop_done", "cluster_staged"),
    ("cluster: wait for every block's tile", "cluster_staged", "cluster_joined"),
    ("cluster: sum this block's channels", "cluster_joined", "cluster_summed"),
    ("cluster: pool and store them", "cluster_summed", "tile_done"),
    # The other plans' epilogue, inside "bias, pooling and stores":
    ("epilogue: bias, staging of the conv tile", "mainloop_done", "epilogue_staged"),
    ("epilogue: pooling and stores (every pass)", "epilogue_staged", "tile_done"),
)


def read_records(path: Path) -> list[tuple[dict, np.ndarray]]:
    """Every launch in a trace file: its header and its [blocks, words] array."""
    data = np.fromfile(path, dtype=np.int64)
    records, at = [], 0
    while at < data.size:
        header = dict(zip(HEADER, data[at:at + 16].tolist()))
        if header["tag"] != 0x54524143:
            raise ValueError(f"{path}: no record header at word {at}")
        words = header["words"]
        blocks = data[at + 16:at + 16 + header["traced"] * words].reshape(-1, words)
        records.append((header, blocks.view(np.uint64).astype(np.float64)))
        at += 16 + header["traced"] * words
    return records


def summarize(header: dict, blocks: np.ndarray) -> dict:
    m = {name: blocks[:, i] for i, name in enumerate(MARKS)}
    ran = (m["end"] > 0) & (m["timer_end"] > m["timer_start"])
    m = {k: v[ran] for k, v in m.items()}
    lifetime_cycles = m["end"] - m["start"]
    lifetime_ns = m["timer_end"] - m["timer_start"]
    # The SM clock from the blocks' cycle and timer spans (those over 2 µs where there are any:
    # the global timer ticks coarser than the cycle counter).
    long = lifetime_ns > 2000 if np.any(lifetime_ns > 2000) else lifetime_ns > 0
    ghz = float(np.median(lifetime_cycles[long] / lifetime_ns[long]))
    us = lambda cycles: float(cycles) / ghz / 1000.0  # noqa: E731
    out = {"header": header, "blocks": int(ran.sum()), "sm_clock_ghz": round(ghz, 3)}
    span_ns = float(m["timer_end"].max() - m["timer_start"].min())
    out["kernel_span_us"] = round(span_ns / 1000.0, 2)
    out["block_lifetime_us"] = {"median": round(us(np.median(lifetime_cycles)), 2),
                                "mean": round(us(lifetime_cycles.mean()), 2)}
    phases = {}
    for name, a, b in PHASES:
        d = m[b] - m[a]
        ok = (m[a] > 0) & (m[b] > 0)
        if ok.any():
            phases[name] = {"median_us": round(us(np.median(d[ok])), 2),
                            "mean_us": round(us(d[ok].mean()), 2)}
    ok = m["first_issue"] > 0
    if ok.any():
        phases["producer: entry to first issue"] = {
            "median_us": round(us(np.median((m["first_issue"] - m["start"])[ok])), 2)}
        phases["producer: first to last issue"] = {
            "median_us": round(us(np.median((m["last_issue"] - m["first_issue"])[ok])), 2)}
    out["phases"] = phases
    # Per SM: residency and the gaps between a block's exit and the next entry.
    resident, gaps, sms = [], [], np.unique(m["sm"])
    for sm in sms:
        on = m["sm"] == sm
        starts, ends = m["start"][on], m["end"][on]
        events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends])
        level, last, weighted = 0, events[0][0], {}
        for t, delta in events:
            weighted[level] = weighted.get(level, 0.0) + (t - last)
            level, last = level + delta, t
        total = sum(weighted.values()) or 1.0
        resident.append(sum(k * v for k, v in weighted.items()) / total)
        order = np.argsort(starts)
        for i in order[1:]:
            earlier_ends = ends[starts < starts[i]]
            finished = earlier_ends[earlier_ends <= starts[i]]
            if finished.size:
                gaps.append(starts[i] - finished.max())
    out["sms"] = int(sms.size)
    out["mean_resident_blocks"] = round(float(np.mean(resident)), 2)
    if gaps:
        out["entry_after_exit_us"] = {"median": round(us(np.median(gaps)), 2),
                                      "p90": round(us(np.percentile(gaps, 90)), 2)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", help="N,C,K,H,W,k,s,p,pk,ps, or with --json a case name")
    parser.add_argument("--calls", type=int, default=3, help="calls (the last one is read)")
    parser.add_argument("--channels-last", action="store_true", help="x in channels-last")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"),
                        help="x, weight and bias dtype (default float32, or the JSON case's)")
    parser.add_argument("--json", type=Path, help="a utils.profiling JSON (zoo, fuzz, suite)")
    parser.add_argument("--file", help="read this trace file instead of running")
    args = parser.parse_args()
    if args.file:
        path = Path(args.file)
    else:
        path = Path(tempfile.mkdtemp()) / "trace.bin"
        os.environ["CONV_POOL_GENERAL_TRACE"] = str(path)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tools.run_case import resolve_case, run_calls

        run_calls(resolve_case(parser, args), "general_wgmma", args.calls, args.dtype,
                  args.channels_last)
    records = read_records(path)
    if not records:
        print("no traced launch (not the warp-specialized kernel?)")
        return 1
    summary = summarize(*records[-1])
    summary["case"] = args.case
    summary["dtype"] = args.dtype
    summary["channels_last"] = args.channels_last
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
