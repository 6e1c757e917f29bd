"""Writes a copy of kernels/conv_relu_maxpool_wgmma.cu (TF32 instances only) in which the
PROBE bit mask, a compile-time macro, knocks out parts of the kernel: a timing tool, the
outputs of any PROBE other than 0 are wrong by design.

    1   no halo global loads (the stores then write stale registers)
    2   no halo shared-memory stores
    4   no weight bulk copies (the mbarrier phases still complete)
    8   no barrier after the wgmma wait (races: timing only)
    32  no weight packing (nor the grid barrier after it)
    64  no epilogue (pooling, bias, stores)
    128 no wgmmas (the loads alone)

    python3 tools/wgmma_probe/gen.py OUTPUT.cu
    PROBE_SOURCE=saved/kernels python3 tools/wgmma_probe/gen.py OUTPUT.cu  # another version

The kernel's code is spread over conv_relu_maxpool_wgmma.cu and hopper/tiled_*.cuh: the output
is one file with those headers inlined and the TF32 launches' instances after them.
"""
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels"


def amalgamated(path: Path, base: Path, seen: set, text: str = "") -> str:
    """`path` (or `text` in its place) with its hopper/tiled_*.cuh headers inlined (once each,
    in include order, so the knock-outs below find the kernel's code in one text) and every
    other header of ours included by absolute path; `path`'s own includes resolve against
    `base`, a header's against its folder."""
    def include(match: "re.Match") -> str:
        header = (base / match.group(1)).resolve()
        if header.parent.name == "hopper" and header.name.startswith("tiled_"):
            if header in seen:
                return ""
            seen.add(header)
            return amalgamated(header, header.parent, seen).replace("#pragma once\n", "")
        return f'#include "{header}"'
    return re.sub(r'#include "([^"]+)"', include, text or path.read_text())


# PROBE_SOURCE: a saved kernels/ folder (every header its own), or a saved copy of
# conv_relu_maxpool_wgmma.cu alone (today's headers in kernels/).
source = Path(os.environ.get("PROBE_SOURCE", KERNELS)).resolve()
base = source if source.is_dir() else KERNELS
interface = source / "conv_relu_maxpool_wgmma.cu" if source.is_dir() else source
seen: set = set()
src = amalgamated(interface, base, seen)
# Where the launches live in hopper/tiled_launch.cuh (compiled one operand type a file under
# hopper/instances/), the TF32 ones follow the interface.
if '"hopper/tiled_host.cuh"' in interface.read_text():
    src += amalgamated(interface, base, seen, text=(
        '#include "hopper/tiled_launch.cuh"\n'
        "TILED_WGMMA_LAUNCH_INSTANCE(tiled_wgmma::Tf32Operands)\n"
        "TILED_WGMMA_PACK_INSTANCE(tiled_wgmma::Tf32Operands)\n"
        "TILED_WGMMA_LAUNCH_INSTANCE(tiled_wgmma::Tf32SplitOperands)\n"))


def replace(old: str, new: str) -> None:
    global src
    assert src.count(old) == 1, f"the kernel changed; update gen.py for: {old!r}"
    src = src.replace(old, new)


src = "#ifndef PROBE\n#define PROBE 0\n#endif\n" + src
replace("if (unit < 0) return;\n    const bool row_valid",
        "if (unit < 0 || (PROBE & 1)) return;\n    const bool row_valid")
replace("if (unit < 0) return;\n    typename Operands::Pixel* dst",
        "if (unit < 0 || (PROBE & 2)) return;\n    typename Operands::Pixel* dst")
replace("mbarrier_arrive_expect_tx(landed, Tile::kWeightChunkBytes);",
        "mbarrier_arrive_expect_tx(landed, (PROBE & 4) ? 0 : Tile::kWeightChunkBytes);"
        " if (!(PROBE & 4))")
replace("      __syncthreads();\n      if (refill) loader.copy_weights",
        "      if (!(PROBE & 8)) __syncthreads();\n      if (refill) loader.copy_weights")
replace("    pack_weights<Tile>(ops, s, p);\n    // Every",
        "    if (!(PROBE & 32)) pack_weights<Tile>(ops, s, p);\n    // Every")
replace("    cooperative_groups::this_grid().sync();\n",
        "    if (!(PROBE & 32)) cooperative_groups::this_grid().sync();\n")
replace("    pool_accumulators<Tile>(acc, pooled);\n",
        "    if (PROBE & 64) {  // keep the accumulators alive\n"
        "      if (tile_bias == 1234.5f) ops.out[threadIdx.x] = acc[0][0] + acc[1][5];\n"
        "      continue;\n    }\n    pool_accumulators<Tile>(acc, pooled);\n")
replace("      mma_taps<Tile, 0, kSplitTap>(acc",
        "      if (!(PROBE & 128)) mma_taps<Tile, 0, kSplitTap>(acc")
replace("      mma_taps<Tile, kSplitTap, kTaps>(acc",
        "      if (!(PROBE & 128)) mma_taps<Tile, kSplitTap, kTaps>(acc")
replace("  if (s.element == kElementFloat16) return f(HalfOperands<Float16>());\n"
        "  if (s.element == kElementBFloat16) return f(HalfOperands<BFloat16>());\n",
        "")
Path(sys.argv[1]).write_text(src)
