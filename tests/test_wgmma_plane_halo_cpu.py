"""A CPU model of the wgmma kernel's whole-image halo loads (kHaloPlaneVectors).

When one tile covers a whole image, kernels/conv_relu_maxpool_wgmma.cu reads the image plane as
4-pixel vectors of the flat plane; a vector may cross into the next image row, and its pixels
then continue at the next halo row (StepLoader::start_tile's PixelWrap). The halo's border is
only zeroed, once. Here that mapping is replayed for every geometry the kernel accepts it for
(plane_vectors_apply) and compared, slot by slot, with the halo the definition asks for: slot
(r, c) holds input pixel (in_row0 + r, staged_col0 + c), or zero outside the image. Every
image pixel must be written exactly once, and nothing else.

The constants mirror WgmmaTile / tile_origin / with_operand_tile; if they change there, change
them here.
"""
THREADS = 256


class Tile:
    def __init__(self, rows: int, cols: int, strip: bool = False):
        self.rows, self.cols, self.strip = rows, cols, strip
        self.halo_rows = rows + 2
        self.halo_cols = 48 if strip else (cols + 2 + 3 + 3) // 4 * 4
        self.pooled_rows, self.pooled_cols = rows // 2, cols // 2
        self.max_plane_vectors = THREADS // 2


WIDE, SQUARE, STRIP = Tile(8, 32), Tile(16, 16), Tile(8, 32, strip=True)


def pooled(size: int, pad: int) -> int:
    """2 x 2 / stride 2 pooling of a 3 x 3 / stride 1 convolution's output (floor mode)."""
    return (size + 2 * pad - 2) // 2


def tiles(tile: Tile, out_h: int, out_w: int):
    return -(-out_h // tile.pooled_rows), -(-out_w // tile.pooled_cols)


def chosen_tile(out_h: int, out_w: int, batch: int = 1, out_channels: int = 128) -> Tile:
    """with_operand_tile: of the wide, square and (more than 64 output channels, rows of at
    least 4 squares) strip tiles, the one that computes the fewest unused pooled outputs over
    the batch; the wide one on a tie."""
    def waste(tile):
        if tile.strip:  # 4 consecutive 8 x 8 conv squares (4 x 4 pooled) of the whole batch
            squares = batch * -(-out_h // 4) * -(-out_w // 4)
            return -(-squares // 4) * 4 * 16 / (batch * out_h * out_w)
        th, tw = tiles(tile, out_h, out_w)
        return th * tile.pooled_rows * tw * tile.pooled_cols / (out_h * out_w)
    best = SQUARE if waste(SQUARE) < waste(WIDE) else WIDE
    if out_channels > 64 and -(-out_w // 4) >= 4 and waste(STRIP) < waste(best):
        return STRIP
    return best


def origin(pad: int):
    """tile_origin for the tile at pooled (0, 0): in_row0, staged_col0."""
    in_col0 = -pad
    col_shift = in_col0 % 4
    return -pad, in_col0 - col_shift


def plane_vectors_apply(tile: Tile, height: int, width: int, pad: int) -> bool:
    out_h, out_w = pooled(height, pad), pooled(width, pad)
    plane = height * width
    if tile.strip or tiles(tile, out_h, out_w) != (1, 1) or width < 4 or plane % 4 or \
            plane // 4 > tile.max_plane_vectors:
        return False
    in_row0, staged_col0 = origin(pad)
    return height - in_row0 <= tile.halo_rows and width - staged_col0 <= tile.halo_cols


def plane_halo(tile: Tile, height: int, width: int, pad: int, pitch: int):
    """The halo of one channel as the plane units write it: pixel index per slot, -1 = zero.
    Rows are `pitch` slots apart (kHaloPitch: kHaloCols, or one more)."""
    in_row0, staged_col0 = origin(pad)
    halo = [-1] * (tile.halo_rows * pitch)
    for vector in range(height * width // 4):
        pixel = 4 * vector
        h, w0 = divmod(pixel, width)
        halo_offset = (h - in_row0) * pitch + (w0 - staged_col0)
        first_wrapped, skip = width - w0, pitch - width  # PixelWrap (store_halo_unit)
        for j in range(4):
            slot = halo_offset + (j + skip if j >= first_wrapped else j)
            assert 0 <= slot < len(halo) and halo[slot] == -1, (vector, j, slot)
            halo[slot] = pixel + j
    return halo


def defined_halo(tile: Tile, height: int, width: int, pad: int, pitch: int):
    """Slot (r, c) for c < kHaloCols holds pixel (in_row0 + r, staged_col0 + c); the slots
    past kHaloCols in a row (the pitch's padding) hold nothing."""
    in_row0, staged_col0 = origin(pad)
    halo = []
    for r in range(tile.halo_rows):
        for c in range(pitch):
            h, w = in_row0 + r, staged_col0 + c
            inside = c < tile.halo_cols and 0 <= h < height and 0 <= w < width
            halo.append(h * width + w if inside else -1)
    return halo


GEOMETRIES = [(h, w, pad) for pad in (0, 1) for h in range(1, 40) for w in range(1, 70)
              if pooled(h, pad) >= 1 and pooled(w, pad) >= 1]
PLANE = [g for g in GEOMETRIES if plane_vectors_apply(chosen_tile(pooled(g[0], g[2]),
                                                                  pooled(g[1], g[2])), *g)]


def test_plane_loads_apply_to_vgg_block5_and_small_images_of_both_tiles():
    assert (14, 14, 1) in PLANE  # VGG-16 block 5
    assert (7, 7, 1) not in PLANE  # 49 pixels: no whole 4-pixel vectors
    assert any(chosen_tile(pooled(h, p), pooled(w, p)) is WIDE for h, w, p in PLANE)
    assert any(chosen_tile(pooled(h, p), pooled(w, p)) is SQUARE for h, w, p in PLANE)
    assert any(w % 4 for h, w, p in PLANE)  # vectors that wrap into the next row
    assert len(PLANE) > 50


def test_plane_units_fill_the_halo_the_definition_asks_for():
    for height, width, pad in PLANE:
        tile = chosen_tile(pooled(height, pad), pooled(width, pad))
        # One unit per thread: 2 slices x height * width / 4 vectors.
        assert 2 * (height * width // 4) <= THREADS
        for pitch in (tile.halo_cols, tile.halo_cols + 1):
            assert plane_halo(tile, height, width, pad, pitch) == \
                defined_halo(tile, height, width, pad, pitch), (height, width, pad, pitch)


def test_strips_where_rows_of_squares_are_not_a_multiple_of_4():
    """VGG-16's blocks at batch 32: block 3 (7 squares per row: 12.5% of the 8 x 32 tiles and
    23% of the 16 x 16 ones unused) runs strips; block 2 (14 squares per row) the 16 x 16 tile,
    which covers it exactly; block 4 (4 squares per row) and the default problem (16) the
    wide tile, block 5 the square one; block 1 (64 channels) never strips, nor does an image
    narrower than 4 squares."""
    assert chosen_tile(28, 28, 32, 256) is STRIP   # vgg_b3: 56 x 56 input, padding 1
    assert chosen_tile(56, 56, 32, 128) is SQUARE  # vgg_b2
    assert chosen_tile(14, 14, 32, 512) is WIDE    # block 4
    assert chosen_tile(7, 7, 32, 512) is SQUARE    # vgg_b5
    assert chosen_tile(112, 112, 32, 64) is WIDE   # block 1 / rgb_stem
    assert chosen_tile(63, 63, 128, 128) is WIDE   # the default problem
    assert chosen_tile(30, 10, 5, 128) is not STRIP
    # The GPU tests' strip cases (tests/test_gpu_correctness.py).
    assert chosen_tile(10, 28, 3, 136) is STRIP
    assert chosen_tile(10, 21, 2, 130) is STRIP
