"""Shared-memory bank conflicts of the general kernel's pooling loads, by emulation (no GPU).

    python tools/pool_banks.py                 # plain against swizzled slots, every tile and pool
    python tools/pool_banks.py --pools 3x2 2x2

The conv tile is staged [channel][pixel] in fp32, TILE_PITCH floats a channel plane
(general_epilogue.cuh). pool_tile gives consecutive threads consecutive pooled positions, and
each thread loads its window's pixels one (row, column) at a time, one channel plane a load.
For every warp load of the first two channel groups this counts the wavefronts: the most
distinct 4-byte words any one of the 32 banks serves. Windows are whole (no clipping), and
the tile holds every pooled position whose window fits in it. The swizzled slot of pixel q
is q ^ ((q >> 6) & 7): a form the kernel tried and did not keep (docs/PERF.md, v74: fewer
wavefronts here, no net gain on the H200).
"""
import argparse
import math

TILES = {"wide (8 x 32)": (8, 32), "square (16 x 16)": (16, 16), "tall (16 x 32)": (16, 32)}
POOLS = ["3x2", "2x2", "3x1", "2x1", "3x3", "4x4", "4x2", "5x2", "4x1", "2x3", "3x4", "5x1",
         "7x2", "5x3"]


def tile_slot(pixel: int, slot_mask: int) -> int:
    return pixel ^ ((pixel >> 6) & slot_mask)


def wavefronts(rows: int, cols: int, window: int, stride: int, slot_mask: int,
               groups: int = 2) -> float:
    """Mean wavefronts a warp load over the window loops of `groups` channel groups."""
    pitch = rows * cols + 4  # Plan::tile_pitch
    pooled_rows = (rows - window) // stride + 1
    pooled_cols = (cols - window) // stride + 1
    positions = pooled_rows * pooled_cols
    items = [(group, position) for group in range(groups) for position in range(positions)]
    total = loads = 0
    for first in range(0, len(items), 32):
        warp = items[first:first + 32]
        for r in range(window):
            for c in range(window):
                banks = {}
                for group, position in warp:
                    pooled_row, pooled_col = divmod(position, pooled_cols)
                    pixel = (pooled_row * stride + r) * cols + pooled_col * stride + c
                    word = group * pitch + tile_slot(pixel, slot_mask)
                    banks.setdefault(word % 32, set()).add(word)
                total += max(len(words) for words in banks.values())
                loads += 1
    return total / loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", nargs="+", default=POOLS,
                        help="pools as WINDOWxSTRIDE (square windows), e.g. 3x2")
    args = parser.parse_args()
    ratios = []
    print("| tile | pool | plain | swizzled |")
    print("|---|---|---:|---:|")
    for name, (rows, cols) in TILES.items():
        for pool in args.pools:
            window, stride = (int(v) for v in pool.split("x"))
            if window > rows:
                continue
            plain = wavefronts(rows, cols, window, stride, 0)
            swizzled = wavefronts(rows, cols, window, stride, 7)
            ratios.append(swizzled / plain)
            print(f"| {name} | {window} x {window} / {stride} | {plain:.2f} | {swizzled:.2f} |")
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"\nswizzled / plain: geometric mean {mean:.3f}, worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
