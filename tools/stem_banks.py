"""Shared-memory bank conflicts of the stem kernel's pooled tile, by emulation (no GPU).

    python tools/stem_banks.py

The stem kernel (kernels/conv_relu_maxpool_stem.cu) stages its pooled tile [channel][pixel],
KCHANNEL_STRIDE floats a channel, each 8-channel group's planes a further 32 / n-tiles floats
in (kGroupPad). This counts the wavefronts of a warp's shared-memory accesses (the most
distinct 4-byte words one of the 32 banks serves) for:
  * the staging stores of the m-tile loop: lane (g, t) writes channel 8 n + 2 t + (g & 1) at
    pooled pixel base + g / 2, one store an n-tile;
  * the channels-last stores' loads: consecutive threads take the `vec`-channel groups of one
    pooled pixel, then the next pixels; the j-th load of each reads channel vec q + j;
and, for comparison, the XOR layout the kernel used before (pixel ^ q x swizzle).
"""
KCHANNEL_STRIDE = 260  # 4 x kTargetMTiles + 4


def next_pow2(value: int) -> int:
    power = 1
    while power < value:
        power *= 2
    return power


def padded(channel: int, pixel: int, n_tiles: int) -> int:
    pad = 0 if n_tiles == 1 else 32 // n_tiles
    return channel * KCHANNEL_STRIDE + (channel // 8) * pad + pixel


def xored(channel: int, pixel: int, n_tiles: int) -> int:
    swizzle = min(16, 32 // n_tiles)
    return channel * KCHANNEL_STRIDE + (pixel ^ ((channel // 8) * swizzle))


def wavefronts(addresses) -> int:
    banks = {}
    for address in addresses:
        banks.setdefault(address % 32, set()).add(address)
    return max(len(words) for words in banks.values())


def channels_last_loads(channels: int, vec: int, pooled_cols: int, cols: int, rows: int,
                        layout) -> tuple[float, int]:
    """Mean and worst wavefronts of the channels-last stores' loads over a tile."""
    n_tiles = next_pow2((channels + 7) // 8)
    groups = channels // vec
    items = rows * cols * groups
    counts = []
    for first in range(0, items, 32):
        lanes = range(first, min(items, first + 32))
        for j in range(vec):
            addresses = []
            for i in lanes:
                pixel, group = divmod(i, groups)
                r, c = divmod(pixel, cols)
                addresses.append(layout(vec * group + j, r * pooled_cols + c, n_tiles))
            counts.append(wavefronts(addresses))
    return sum(counts) / len(counts), max(counts)


def staging_stores(n_tiles: int, layout) -> int:
    """Worst wavefronts of the m-tile loop's staging stores."""
    worst = 0
    for base in range(0, 256, 4):
        for n in range(n_tiles):
            worst = max(worst, wavefronts(
                layout(8 * n + 2 * (lane % 4) + ((lane // 4) & 1), base + lane // 8, n_tiles)
                for lane in range(32)))
    return worst


def main() -> None:
    print("channels-last loads, wavefronts a load (mean / worst): padded groups, XOR")
    for channels, vec in [(64, 8), (56, 8), (48, 8), (32, 8), (24, 8), (16, 8), (8, 8),
                          (36, 4), (12, 4)]:
        for pooled_cols, cols, rows in [(112, 112, 2), (60, 61, 4)]:
            pad = channels_last_loads(channels, vec, pooled_cols, cols, rows, padded)
            xor = channels_last_loads(channels, vec, pooled_cols, cols, rows, xored)
            print(f"  {channels:2d} channels, {vec} a thread, tile {rows} x {cols}: "
                  f"{pad[0]:.2f} / {pad[1]}   {xor[0]:.2f} / {xor[1]}")
    for n_tiles in (1, 2, 4, 8):
        print(f"staging stores, {n_tiles} n-tiles: worst {staging_stores(n_tiles, padded)} "
              f"(XOR {staging_stores(n_tiles, xored)})")


if __name__ == "__main__":
    main()
