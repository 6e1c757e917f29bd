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
    PROBE_SOURCE=old_kernel.cu python3 tools/wgmma_probe/gen.py OUTPUT.cu   # another version
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
src = Path(os.environ.get("PROBE_SOURCE",
                          ROOT / "kernels" / "conv_relu_maxpool_wgmma.cu")).read_text()


def replace(old: str, new: str) -> None:
    global src
    assert src.count(old) == 1, f"the kernel changed; update gen.py for: {old!r}"
    src = src.replace(old, new)


for header in ["conv_pool_16bit.cuh", "conv_pool_device.cuh", "conv_pool_operands.h",
               "conv_relu_maxpool_wgmma.h"]:
    replace(f'#include "{header}"', f'#include "{ROOT / "kernels" / header}"')
replace("namespace {\n", "#ifndef PROBE\n#define PROBE 0\n#endif\nnamespace {\n")
replace("if (unit < 0) return;\n    const bool row_valid",
        "if (unit < 0 || (PROBE & 1)) return;\n    const bool row_valid")
replace("if (unit < 0) return;\n    typename Operands::Pixel* dst",
        "if (unit < 0 || (PROBE & 2)) return;\n    typename Operands::Pixel* dst")
replace("mbarrier_arrive_expect_tx(landed, Tile::kWeightChunkBytes);",
        "mbarrier_arrive_expect_tx(landed, (PROBE & 4) ? 0 : Tile::kWeightChunkBytes);"
        " if (!(PROBE & 4))")
replace("wgmma_wait<1>();\n      __syncthreads();",
        "wgmma_wait<1>();\n      if (!(PROBE & 8)) __syncthreads();")
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
