"""A CPU model of how tiled_16bit_wgmma stages one chunk and how wgmma reads it back.

kernels/conv_relu_maxpool_wgmma.cu cannot run without a Hopper GPU, but its 16-bit index math
can be checked here, byte for byte: the weight packing (HalfOperands::put / weight_slice with its
__byte_perm selectors), the halo transposition (HalfOperands::make_row / load_row and
store_pixels), the halo unit mapping (StepLoader: unit -> slice, row, 4-column vector,
halo_offset), the tile origin (tile_origin: col_shift, staged_col0), and the matrix descriptors
of mma_chunk (start address per square and tap, LBO = one slice plane, SBO = one halo row for
the input; LBO = N slices, SBO = 8 rows for the weights), read back with the PTX ISA's
no-swizzle K-major addressing: element (row, k) of an operand sits at
    start + (row % 8) * 16 + (row // 8) * SBO + (k // 8) * LBO + 2 * (k % 8)
(core matrices of 8 rows x 16 bytes, K = 16 halves = two core matrices). The product of the two
read-back operands, summed over the 9 taps, must be the direct convolution at every pixel of
the tile. A wrong selector, pair order, stride or offset gives a mismatch here.

The constants mirror WgmmaTile / HalfOperands; if they change there, change them here.
"""
import numpy as np
import pytest

SLICE_BYTES = 16
SLICE_CHANNELS = 8  # 16-bit channels per 16-byte slice
CHUNK = 16          # channels per stage = K of one m64nNk16 wgmma


def byte_perm(x: int, y: int, selector: int) -> int:
    """CUDA's __byte_perm: result byte i = byte (selector nibble i) of the 8 bytes y:x."""
    source = (x & 0xFFFFFFFF) | ((y & 0xFFFFFFFF) << 32)
    out = 0
    for i in range(4):
        nibble = (selector >> (4 * i)) & 0x7
        out |= ((source >> (8 * nibble)) & 0xFF) << (8 * i)
    return out


def pair(low: int, high: int) -> int:
    return (low & 0xFFFF) | ((high & 0xFFFF) << 16)


def words_to_bytes(words) -> bytes:
    return b"".join(int(w).to_bytes(4, "little") for w in words)


class Tile:
    def __init__(self, rows: int, cols: int, n: int):
        self.rows, self.cols, self.n = rows, cols, n
        self.square_cols = cols // 8
        self.halo_rows = rows + 2
        self.halo_cols = (cols + 2 + 3 + 3) // 4 * 4
        self.halo_vectors = self.halo_cols // 4
        self.halo_units = 2 * self.halo_rows * self.halo_vectors
        self.slice_plane_bytes = self.halo_rows * self.halo_cols * SLICE_BYTES
        self.halo_bytes = 2 * self.slice_plane_bytes
        self.weight_tap_bytes = 2 * n * SLICE_BYTES
        self.stage_bytes = self.halo_bytes + 9 * self.weight_tap_bytes


def stage_chunk(tile: Tile, x_bits, w_bits, pad: int, out_row0: int, out_col0: int, chunk: int,
                n0: int) -> bytearray:
    """One stage as the kernel fills it: x_bits [C][H][W], w_bits [K][C][3][3] (uint16)."""
    channels, height, width = x_bits.shape
    out_channels = w_bits.shape[0]
    stage = bytearray(tile.stage_bytes)
    # tile_origin
    in_row0 = 2 * out_row0 - pad
    in_col0 = 2 * out_col0 - pad
    col_shift = in_col0 % 4
    staged_col0 = in_col0 - col_shift

    def x_at(c, h, w):
        inside = 0 <= c < channels and 0 <= h < height and 0 <= w < width
        return int(x_bits[c, h, w]) if inside else 0

    # StepLoader + load_halo (make_row / load_row: columns 0, 1 in x, 2, 3 in y) + store_pixels
    for unit in range(tile.halo_units):
        slice_ = unit // (tile.halo_rows * tile.halo_vectors)
        rest = unit - slice_ * tile.halo_rows * tile.halo_vectors
        row, vec = divmod(rest, tile.halo_vectors)
        halo_offset = (slice_ * tile.halo_rows + row) * tile.halo_cols + 4 * vec
        channel = chunk * CHUNK + SLICE_CHANNELS * slice_
        h, w0 = in_row0 + row, staged_col0 + 4 * vec
        rows = [(pair(x_at(channel + e, h, w0), x_at(channel + e, h, w0 + 1)),
                 pair(x_at(channel + e, h, w0 + 2), x_at(channel + e, h, w0 + 3)))
                for e in range(SLICE_CHANNELS)]
        for j in range(4):
            selector = 0x5410 if j % 2 == 0 else 0x7632
            half = 0 if j < 2 else 1
            words = [byte_perm(rows[2 * i][half], rows[2 * i + 1][half], selector)
                     for i in range(4)]
            offset = (halo_offset + j) * SLICE_BYTES
            stage[offset:offset + 16] = words_to_bytes(words)

    # pack_weights: the row's 72 values in memory order (channel i * 9 + tap), 2 per word.
    for slice_ in range(2):
        c = chunk * CHUNK + SLICE_CHANNELS * slice_
        for n in range(tile.n):
            k = n0 + n
            values = [int(w_bits[k, c + i, tap // 3, tap % 3])
                      if k < out_channels and c + i < channels else 0
                      for i in range(SLICE_CHANNELS) for tap in range(9)]
            row = [pair(values[2 * f], values[2 * f + 1]) for f in range(36)]
            for tap in range(9):
                words = []
                for j in range(4):
                    f = 18 * j + tap
                    words.append(byte_perm(row[f // 2], row[(f + 9) // 2],
                                           0x7610 if f % 2 == 0 else 0x5432))
                offset = tile.halo_bytes + ((tap * 2 + slice_) * tile.n + n) * SLICE_BYTES
                stage[offset:offset + 16] = words_to_bytes(words)
    return stage, col_shift


def read_operand(stage: bytearray, start: int, lbo: int, sbo: int, rows: int):
    """[rows][16] halves as wgmma reads a no-swizzle K-major operand (uint16 bits)."""
    out = np.zeros((rows, CHUNK), dtype=np.uint16)
    for r in range(rows):
        for k in range(CHUNK):
            address = start + (r % 8) * 16 + (r // 8) * sbo + (k // 8) * lbo + 2 * (k % 8)
            out[r, k] = int.from_bytes(stage[address:address + 2], "little")
    return out


def as_float(bits):
    return bits.view(np.float16).astype(np.float64)


@pytest.mark.parametrize("rows,cols,n", [(8, 32, 128), (16, 16, 64)], ids=["wide", "square"])
@pytest.mark.parametrize("pad,out_col0", [(0, 0), (1, 16), (1, 3)], ids=["pad0", "pad1", "shift"])
def test_staged_chunk_read_by_wgmma_descriptors_is_the_convolution(rows, cols, n, pad, out_col0):
    rng = np.random.default_rng(rows * 1000 + pad * 100 + out_col0)
    channels, out_channels, height, width = 29, n + 5, rows + 6, 2 * out_col0 + cols + 5
    x = rng.standard_normal((channels, height, width)).astype(np.float16)
    w = rng.standard_normal((out_channels, channels, 3, 3)).astype(np.float16)
    x_bits, w_bits = x.view(np.uint16), w.view(np.uint16)
    tile = Tile(rows, cols, n)
    assert tile.halo_units <= 256
    out_row0 = 1
    for chunk in range(2):  # 29 channels: one full chunk, one with 13 (a partial second slice)
        stage, col_shift = stage_chunk(tile, x_bits, w_bits, pad, out_row0, out_col0, chunk, 0)
        first = chunk * CHUNK
        for square in range(4):
            square_row, square_col = divmod(square, tile.square_cols)
            square_base = (square_row * 8 * tile.halo_cols + square_col * 8 + col_shift) * SLICE_BYTES
            acc = np.zeros((64, n))
            for tap in range(9):
                r, q = divmod(tap, 3)
                a = read_operand(stage, square_base + (r * tile.halo_cols + q) * SLICE_BYTES,
                                 lbo=tile.slice_plane_bytes, sbo=tile.halo_cols * SLICE_BYTES,
                                 rows=64)
                b = read_operand(stage, tile.halo_bytes + tap * tile.weight_tap_bytes,
                                 lbo=n * SLICE_BYTES, sbo=8 * SLICE_BYTES, rows=n)
                acc += as_float(a) @ as_float(b).T
            # Row m of the square: pixel (m // 8, m % 8) of the 8 x 8 square.
            expected = np.zeros((64, n))
            xf, wf = x.astype(np.float64), w.astype(np.float64)
            for m in range(64):
                conv_row = 2 * out_row0 + square_row * 8 + m // 8
                conv_col = 2 * out_col0 + square_col * 8 + m % 8
                for tap in range(9):
                    r, q = divmod(tap, 3)
                    h, col = conv_row - pad + r, conv_col - pad + q
                    if 0 <= h < height and 0 <= col < width:
                        cs = slice(first, min(first + CHUNK, channels))
                        expected[m] += wf[:n, cs, r, q] @ xf[cs, h, col]
            np.testing.assert_allclose(acc, expected, rtol=1e-12, atol=1e-12)


def test_byte_perm_selectors_pick_the_documented_halves():
    x, y = 0xAAAA_BBBB, 0xCCCC_DDDD
    assert byte_perm(x, y, 0x5410) == 0xDDDD_BBBB  # low halves: x's low, y's low above it
    assert byte_perm(x, y, 0x7632) == 0xCCCC_AAAA  # high halves
    assert byte_perm(x, y, 0x7610) == 0xCCCC_BBBB  # x's low, y's high
    assert byte_perm(x, y, 0x5432) == 0xDDDD_AAAA  # x's high, y's low
