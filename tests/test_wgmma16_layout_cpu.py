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
the tile. A wrong selector, pair order, stride or offset gives a mismatch here. The same for
strip tiles (four consecutive squares in two pieces side by side in a 48-column halo).

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
    """WgmmaTile's staged geometry. pad_rows: halo rows one 16-byte slot longer than their
    kHaloCols columns (kHaloPitch; every 16-bit instance has the room for it)."""

    def __init__(self, rows: int, cols: int, n: int, strip: bool = False, pad_rows: bool = True):
        self.rows, self.cols, self.n = rows, cols, n
        self.square_cols = cols // 8
        self.halo_rows = rows + 2
        self.halo_cols = 48 if strip else (cols + 2 + 3 + 3) // 4 * 4
        self.halo_pitch = self.halo_cols + (1 if pad_rows else 0)
        self.halo_vectors = self.halo_cols // 4
        self.halo_units = 2 * self.halo_rows * self.halo_vectors
        self.slice_plane_bytes = self.halo_rows * self.halo_pitch * SLICE_BYTES
        self.halo_bytes = 2 * self.slice_plane_bytes
        self.weight_tap_bytes = 2 * n * SLICE_BYTES
        self.stage_bytes = self.halo_bytes + 9 * self.weight_tap_bytes


def block_origin(pad: int, out_row0: int, out_col0: int):
    """tile_origin of a block tile: col_shift and where halo (row, vector) loads from."""
    in_row0 = 2 * out_row0 - pad
    in_col0 = 2 * out_col0 - pad
    col_shift = in_col0 % 4
    staged_col0 = in_col0 - col_shift
    return col_shift, lambda row, vec: (0, in_row0 + row, staged_col0 + 4 * vec)


def stage_chunk(tile: Tile, x_bits, w_bits, pad: int, out_row0: int, out_col0: int, chunk: int,
                n0: int, origin=None) -> bytearray:
    """One stage as the kernel fills it: x_bits [C][H][W] (or [N][C][H][W] with `origin`),
    w_bits [K][C][3][3] (uint16). origin = (col_shift, source): source(halo row, vector) ->
    (image, input row, first input column) of that halo unit; block_origin by default."""
    if origin is None:
        x_bits = x_bits[None]
        origin = block_origin(pad, out_row0, out_col0)
    col_shift, source = origin
    _, channels, height, width = x_bits.shape
    out_channels = w_bits.shape[0]
    stage = bytearray(tile.stage_bytes)

    def x_at(n, c, h, w):
        inside = 0 <= c < channels and 0 <= h < height and 0 <= w < width
        return int(x_bits[n, c, h, w]) if inside else 0

    # StepLoader + load_halo (make_row / load_row: columns 0, 1 in x, 2, 3 in y) + store_pixels
    for unit in range(tile.halo_units):
        slice_ = unit // (tile.halo_rows * tile.halo_vectors)
        rest = unit - slice_ * tile.halo_rows * tile.halo_vectors
        row, vec = divmod(rest, tile.halo_vectors)
        halo_offset = (slice_ * tile.halo_rows + row) * tile.halo_pitch + 4 * vec
        channel = chunk * CHUNK + SLICE_CHANNELS * slice_
        n, h, w0 = source(row, vec)
        rows = [(pair(x_at(n, channel + e, h, w0), x_at(n, channel + e, h, w0 + 1)),
                 pair(x_at(n, channel + e, h, w0 + 2), x_at(n, channel + e, h, w0 + 3)))
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


def square_product(tile: Tile, stage: bytearray, square_base: int):
    """What one square's 9 wgmmas accumulate from `stage` (the tap (0, 0) operand at byte
    square_base): [64 pixels][n channels]."""
    acc = np.zeros((64, tile.n))
    for tap in range(9):
        r, q = divmod(tap, 3)
        a = read_operand(stage, square_base + (r * tile.halo_pitch + q) * SLICE_BYTES,
                         lbo=tile.slice_plane_bytes, sbo=tile.halo_pitch * SLICE_BYTES, rows=64)
        b = read_operand(stage, tile.halo_bytes + tap * tile.weight_tap_bytes,
                         lbo=tile.n * SLICE_BYTES, sbo=8 * SLICE_BYTES, rows=tile.n)
        acc += as_float(a) @ as_float(b).T
    return acc


def direct_square(x, w, pad: int, conv_row0: int, conv_col0: int):
    """The 3 x 3 convolution of x [C][H][W] by w [n][C][3][3] (both float64, zero padding) at
    the 8 x 8 square from (conv_row0, conv_col0): row m is pixel (m // 8, m % 8)."""
    _, height, width = x.shape
    expected = np.zeros((64, w.shape[0]))
    for m in range(64):
        conv_row, conv_col = conv_row0 + m // 8, conv_col0 + m % 8
        for tap in range(9):
            r, q = divmod(tap, 3)
            h, col = conv_row - pad + r, conv_col - pad + q
            if 0 <= h < height and 0 <= col < width:
                expected[m] += w[:, :, r, q] @ x[:, h, col]
    return expected


@pytest.mark.parametrize("rows,cols,n", [(8, 32, 128), (16, 16, 64)], ids=["wide", "square"])
@pytest.mark.parametrize("pad,out_col0", [(0, 0), (1, 16), (1, 3)], ids=["pad0", "pad1", "shift"])
@pytest.mark.parametrize("pad_rows", [True, False], ids=["pitch_plus_1", "pitch_cols"])
def test_staged_chunk_read_by_wgmma_descriptors_is_the_convolution(rows, cols, n, pad, out_col0,
                                                                   pad_rows):
    rng = np.random.default_rng(rows * 1000 + pad * 100 + out_col0)
    channels, out_channels, height, width = 29, n + 5, rows + 6, 2 * out_col0 + cols + 5
    x = rng.standard_normal((channels, height, width)).astype(np.float16)
    w = rng.standard_normal((out_channels, channels, 3, 3)).astype(np.float16)
    x_bits, w_bits = x.view(np.uint16), w.view(np.uint16)
    tile = Tile(rows, cols, n, pad_rows=pad_rows)
    assert tile.halo_units <= 256
    out_row0 = 1
    xf, wf = x.astype(np.float64), w[:n].astype(np.float64)
    for chunk in range(2):  # 29 channels: one full chunk, one with 13 (a partial second slice)
        stage, col_shift = stage_chunk(tile, x_bits, w_bits, pad, out_row0, out_col0, chunk, 0)
        channels_of_chunk = slice(chunk * CHUNK, min((chunk + 1) * CHUNK, channels))
        for square in range(4):
            square_row, square_col = divmod(square, tile.square_cols)
            square_base = ((square_row * 8 * tile.halo_pitch + square_col * 8 + col_shift)
                           * SLICE_BYTES)
            expected = direct_square(xf[channels_of_chunk], wf[:, channels_of_chunk], pad,
                                     2 * out_row0 + square_row * 8, 2 * out_col0 + square_col * 8)
            np.testing.assert_allclose(square_product(tile, stage, square_base), expected,
                                       rtol=1e-12, atol=1e-12)


def strip_origin(tile_index: int, pad: int, square_rows: int, square_cols: int, total: int):
    """tile_origin of a strip tile (squares 4 t .. 4 t + 3 of the sequence (image, square row,
    square col), two pieces) and StepLoader's unit mapping for it: col_shift, the halo unit
    source, and per existing square (its halo column, image, first conv row and column)."""
    first = 4 * tile_index
    image, rest = divmod(first, square_rows * square_cols)
    square_row, square_col = divmod(rest, square_cols)
    out_row0, out_col0 = 4 * square_row, 4 * square_col
    in_row0, in_col0 = 2 * out_row0 - pad, 2 * out_col0 - pad
    col_shift = in_col0 % 4
    staged_col0 = in_col0 - col_shift
    squares = min(4, total - first)
    first_squares = min(squares, square_cols - square_col)

    def vectors(k):
        return (8 * k + 2 + col_shift + 3) // 4 if k > 0 else 0

    first_vectors, next_vectors = vectors(first_squares), vectors(squares - first_squares)
    assert first_vectors + next_vectors <= 12
    same_image = square_row + 1 < square_rows
    next_image = image if same_image else image + 1
    next_out_row0 = out_row0 + 4 if same_image else 0
    next_in_row0, next_staged_col0 = 2 * next_out_row0 - pad, -pad - col_shift

    def source(row, vec):
        if vec < first_vectors:
            return image, in_row0 + row, staged_col0 + 4 * vec
        next_vector = vec - first_vectors
        h = next_in_row0 + row if next_vector < next_vectors else -1
        return next_image, h, next_staged_col0 + 4 * next_vector

    placed = [(8 * q, image, 2 * out_row0, 2 * out_col0 + 8 * q) if q < first_squares else
              (4 * first_vectors + 8 * (q - first_squares), next_image, 2 * next_out_row0,
               8 * (q - first_squares))
              for q in range(squares)]
    return col_shift, source, placed


@pytest.mark.parametrize("pad", [0, 1, 2, 3])
def test_strip_tiles_read_by_wgmma_descriptors_are_the_convolution(pad):
    """Strips over 3 images of 2 x 5 squares (a partial last square row and column): pieces
    that go on in the next square row and in the next image, a last strip of 2 squares; every
    square of the batch computed exactly once, each the direct convolution."""
    rng = np.random.default_rng(50 + pad)
    images, channels, n = 3, 13, 16
    height, width = 14 - 2 * pad, 38 - 2 * pad  # 6 x 18 pooled outputs: 2 x 5 squares
    square_rows, square_cols = 2, 5
    total = images * square_rows * square_cols
    x = rng.standard_normal((images, channels, height, width)).astype(np.float16)
    w = rng.standard_normal((n, channels, 3, 3)).astype(np.float16)
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    tile = Tile(8, 32, n, strip=True)
    assert tile.halo_units <= 256
    seen = []
    for t in range(-(-total // 4)):
        origin = strip_origin(t, pad, square_rows, square_cols, total)
        stage, col_shift = stage_chunk(tile, x.view(np.uint16), w.view(np.uint16), pad, 0, 0, 0,
                                       0, origin=origin[:2])
        for halo_col, image, conv_row0, conv_col0 in origin[2]:
            seen.append((image, conv_row0, conv_col0))
            expected = direct_square(xf[image], wf, pad, conv_row0, conv_col0)
            acc = square_product(tile, stage, (halo_col + col_shift) * SLICE_BYTES)
            np.testing.assert_allclose(acc, expected, rtol=1e-12, atol=1e-12,
                                       err_msg=f"tile {t}, square at {image, conv_row0, conv_col0}")
    assert sorted(seen) == [(i, 8 * r, 8 * c) for i in range(images)
                            for r in range(square_rows) for c in range(square_cols)]


def test_byte_perm_selectors_pick_the_documented_halves():
    x, y = 0xAAAA_BBBB, 0xCCCC_DDDD
    assert byte_perm(x, y, 0x5410) == 0xDDDD_BBBB  # low halves: x's low, y's low above it
    assert byte_perm(x, y, 0x7632) == 0xCCCC_AAAA  # high halves
    assert byte_perm(x, y, 0x7610) == 0xCCCC_BBBB  # x's low, y's high
    assert byte_perm(x, y, 0x5432) == 0xDDDD_AAAA  # x's high, y's low
