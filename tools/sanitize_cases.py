"""Small runs of the fused op for compute-sanitizer (memcheck / racecheck).

    compute-sanitizer --tool memcheck python tools/sanitize_cases.py padded_odd
    compute-sanitizer --tool racecheck python tools/sanitize_cases.py alexnet_persistent auto
    compute-sanitizer --tool memcheck python tools/sanitize_cases.py padded_odd all float16
    compute-sanitizer --tool racecheck python tools/sanitize_cases.py wgmma_tails tiled_16bit_wgmma float16
    compute-sanitizer --tool memcheck python tools/sanitize_cases.py strip_tiles tiled_tf32_wgmma float32 prepacked
Each case runs the automatic choice and every variant that supports the shape once (or the
comma-separated variants of the second argument; "all" = every one), in float32 or the dtype
of the third argument, and checks the result against PyTorch so a clean report also means a
right answer. A fourth argument "prepacked" packs the weight first
(conv2d_relu_maxpool_pack_weight, itself under the tool) and passes it to every call.
Arguments of the form NAME=VALUE set that environment variable first, e.g. one of the general
kernel's hooks (kernels/hopper/general_hooks.h) to run a tile the choice would not take:

    compute-sanitizer --tool memcheck python tools/sanitize_cases.py general_paired \
        general_wgmma float16 CONV_POOL_GENERAL_TILE=wide_n64
"""
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cuda_extension  # noqa: E402
from utils.suite import FLAT_TILING_CASES, ConvPoolCase  # noqa: E402


def find_flat(name: str) -> ConvPoolCase:
    return next(case for case in FLAT_TILING_CASES if case.name == name)


CASES = {
    # No pool (1 x 1 / stride 1): the 3 x 3 wgmma kernel's store_conv epilogue on strips (56 x
    # 56: 7 squares a row) with a channel tail (NCHW, and channels-last: pair stores), an N = 64
    # layer at an odd width, and a layer of few tiles whose reduction splits over a cluster.
    "unpooled_strips": ConvPoolCase("unpooled_strips", 2, 16, 136, 56, 56, (3, 3),
                                    padding=(1, 1), pool_kernel=(1, 1)),
    "unpooled_narrow_odd": ConvPoolCase("unpooled_narrow_odd", 2, 16, 64, 37, 71, (3, 3),
                                        padding=(1, 1), pool_kernel=(1, 1)),
    "unpooled_split": ConvPoolCase("unpooled_split", 1, 512, 136, 14, 14, (3, 3),
                                   padding=(1, 1), pool_kernel=(1, 1)),
    "unpooled_strips_channels_last": ConvPoolCase("unpooled_strips_channels_last", 2, 16, 136,
                                                  56, 56, (3, 3), padding=(1, 1),
                                                  pool_kernel=(1, 1)),
    # The default problem's geometry at batch 2 (the full batch is slow under the tools).
    "default_small_batch": ConvPoolCase("default_small_batch", 2, 64, 128, 128, 128, (3, 3)),
    # Padding, odd sizes, overlapping padded pooling in ceil mode, channel tails.
    "padded_odd": ConvPoolCase("padded_odd", 3, 13, 37, 45, 51, (3, 3), padding=(1, 1),
                               pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1),
                               ceil_mode=True),
    # 64 output channels, 3 input channels, padded 3x3: the wgmma kernel's N = 64 instance
    # (two blocks per SM), its rows read as vectors.
    "rgb_like": ConvPoolCase("rgb_like", 2, 3, 64, 40, 44, (3, 3), padding=(1, 1)),
    # The same with a pooled width of 36: the epilogue's runs of 4 (p.vector_out), a last
    # tile past the width (4 of its 16 pooled columns inside).
    "rgb_runs": ConvPoolCase("rgb_runs", 2, 3, 64, 40, 72, (3, 3), padding=(1, 1)),
    # The same with an odd width: scalar halo loads, which 16-bit inputs run on the one-block-
    # per-SM twin of that instance (kScalarHalo).
    "rgb_like_odd": ConvPoolCase("rgb_like_odd", 2, 3, 64, 40, 43, (3, 3), padding=(1, 1)),
    # 48 output channels, 16 input channels, channels-last (CHANNELS_LAST below): the N = 64
    # two-blocks instance's pixel-vector twin, with an output-channel tail.
    "narrow_channels_last": ConvPoolCase("narrow_channels_last", 2, 16, 48, 30, 38, (3, 3),
                                         padding=(1, 1)),
    # 64 output channels over 140 whole 14 x 14 images: the 16 x 16 tile with N = 64 (two
    # blocks per SM in TF32: more than 128 tiles; one in 16 bits), its planes read as vectors;
    # the same with 13 x 13 images (scalar halo loads); 48 output channels, 8 input channels,
    # channels-last (pixel vectors).
    "narrow_squares": ConvPoolCase("narrow_squares", 140, 3, 64, 14, 14, (3, 3), padding=(1, 1)),
    "narrow_squares_odd": ConvPoolCase("narrow_squares_odd", 140, 3, 64, 13, 13, (3, 3),
                                       padding=(1, 1)),
    "narrow_squares_channels_last": ConvPoolCase("narrow_squares_channels_last", 140, 8, 48,
                                                 14, 14, (3, 3), padding=(1, 1)),
    # The wgmma kernel's fast path with tails: 21 input channels (a full and a partial 16-channel
    # chunk), 72 output channels (a partial second N = 64 block: few tiles; with packed weights
    # a partial N = 128 one), width 38 (not a multiple of 4: the strided halo fallback of
    # tiled_16bit_wgmma, and of the TF32 instance).
    "wgmma_tails": ConvPoolCase("wgmma_tails", 2, 21, 72, 30, 38, (3, 3), padding=(1, 1)),
    # VGG block 5's 14 x 14 images with channel tails and more tiles (300 images) than resident
    # wgmma blocks: whole-image tiles read as plane vectors, several per block.
    "small_images": ConvPoolCase("small_images", 300, 20, 72, 14, 14, (3, 3), padding=(1, 1)),
    # The same tails on a channels-last input (CHANNELS_LAST below): the wgmma kernels' pixel-
    # vector instances; 24 channels leave the 16-bit kernel's second chunk half past the last.
    "channels_last_tails": ConvPoolCase("channels_last_tails", 2, 24, 72, 30, 38, (3, 3),
                                        padding=(1, 1)),
    # Rows of 7 squares: the wgmma kernel's strips of four 8 x 8 squares over seven images (74
    # strips of 128 channels: fewer than 65 would run 64-channel tiles), which go on in the
    # next square row and the next image; the last strip has 3 squares; 136 output channels (a
    # partial second block); 24 input channels (a 16-bit half chunk).
    "strip_tiles": ConvPoolCase("strip_tiles", 7, 24, 136, 20, 56, (3, 3), padding=(1, 1)),
    # The same strips on a channels-last input (the pixel-vector instances), padding 2, nine
    # images (82 strips).
    "strip_tiles_channels_last": ConvPoolCase("strip_tiles_channels_last", 9, 24, 136, 17, 41,
                                              (3, 3), padding=(2, 2)),
    # A layer of few tiles (16 wide tiles of 128 channels): 64-channel blocks, for TF32 the
    # one-block-per-SM wide instance; 136 output channels (a last block of 8), 20 input
    # channels (a partial chunk). And the same on a channels-last input.
    "few_tiles": ConvPoolCase("few_tiles", 1, 20, 136, 34, 66, (3, 3)),
    "few_tiles_channels_last": ConvPoolCase("few_tiles_channels_last", 1, 24, 136, 34, 66,
                                            (3, 3)),
    # A layer of few tiles with a large weight: packed apart by a launch of its own, then the
    # split instance of the 64-channel wide tile reads it (on the H200 7 blocks a tile: 4 TF32
    # chunks each but 1 for the last; 4 blocks of 4, 4, 4, 1 16-bit ones); 200 input channels
    # (a 16-bit half chunk). And on a channels-last input.
    "few_tiles_packed_apart": ConvPoolCase("few_tiles_packed_apart", 1, 200, 136, 18, 34,
                                           (3, 3)),
    "few_tiles_packed_apart_channels_last": ConvPoolCase(
        "few_tiles_packed_apart_channels_last", 1, 200, 136, 18, 34, (3, 3)),
    # One 14 x 14 image, 512 channels in, 136 out: 3 square tiles of 64 channels, each split
    # over a cluster of 8 blocks (partial sums read from the other blocks' shared memory). And
    # on a channels-last input.
    "split_square": ConvPoolCase("split_square", 1, 512, 136, 14, 14, (3, 3), padding=(1, 1)),
    "split_square_channels_last": ConvPoolCase("split_square_channels_last", 1, 512, 136, 14,
                                               14, (3, 3), padding=(1, 1)),
    # 9 chunks of 8 channels and more tiles than SMs (no split reduction): tiled_3xtf32_wgmma's
    # runs of 8 chunks, their sums stored to and read back from the master slots in global
    # memory; on wide tiles and (14 images of 21 squares: 74 strips) on strips.
    "flush_runs": ConvPoolCase("flush_runs", 140, 72, 64, 8, 8, (3, 3), padding=(1, 1)),
    "flush_runs_strips": ConvPoolCase("flush_runs_strips", 14, 72, 64, 20, 56, (3, 3),
                                      padding=(1, 1)),
    # The stem kernel: RGB rows of whole 16-byte vectors in and out, 300 images of 5 tiles
    # each for at most 264 resident blocks (blocks loop, copying the next halo meanwhile).
    "stem_rows": ConvPoolCase("stem_rows", 300, 3, 64, 20, 224, (3, 3), padding=(1, 1)),
    # An odd width of 601: element-wise halo copies, three column tiles (128, 128, 44 pooled
    # columns) stored element by element, 48 channels; the same read channels-last.
    "stem_columns": ConvPoolCase("stem_columns", 20, 3, 48, 13, 601, (3, 3), padding=(1, 1)),
    "stem_columns_channels_last": ConvPoolCase("stem_columns_channels_last", 20, 3, 48, 13, 601,
                                               (3, 3), padding=(1, 1)),
    # 33 channels from channels-last: NCHW and the re-layout (the stem kernel writes
    # channels-last itself only for multiples of 4 channels).
    "stem_odd_channels_last": ConvPoolCase("stem_odd_channels_last", 6, 3, 33, 30, 61, (3, 3),
                                           padding=(1, 1)),
    # 36 channels from channels-last: the stem kernel's channels-last stores of 4 channels.
    "stem_vec4_channels_last": ConvPoolCase("stem_vec4_channels_last", 6, 3, 36, 30, 61,
                                            (3, 3), padding=(1, 1)),
    # 6 output channels, 1 input channel, 5x5: the small kernel (lenet-like).
    "tiny_layer": ConvPoolCase("tiny_layer", 4, 1, 6, 32, 32, (5, 5)),
    # LeNet at batch 1100: more tiles than resident small-kernel blocks, so blocks loop and copy
    # the next tile's input while computing the current one.
    "lenet_persistent": ConvPoolCase("lenet_persistent", 1100, 1, 6, 32, 32, (5, 5)),
    # LeNet with padding 8: 4 tiles per image, regions of 36 columns from -8 and 24; in 16 bits
    # copied raw as 16-byte vectors, some wholly outside the image (zeros).
    "small_16bit_vectors": ConvPoolCase("small_16bit_vectors", 300, 1, 6, 32, 32, (5, 5),
                                        padding=(8, 8)),
    # The small kernel on float32 rows moved as 16-byte copies (regions from column -4, some
    # vectors wholly outside the image), 7 output channels, a 2 x 5 x 5 reduction (a padded last
    # K step for small_tf32), 9 tiles per image over 300 images: blocks loop over tiles.
    "small_aligned_rows": ConvPoolCase("small_aligned_rows", 300, 2, 7, 70, 72, (5, 5),
                                       padding=(4, 4)),
    # Stride, dilation, pool padding and ceil mode for small_tf32 (rows copied element-wise).
    "small_strided_dilated": ConvPoolCase("small_strided_dilated", 40, 3, 7, 37, 41, (3, 11),
                                          stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                                          pool_kernel=(2, 2), pool_stride=(2, 2),
                                          pool_padding=(1, 1), ceil_mode=True),
    # Few channels, large strided kernel, overlapping pool: the flat-K path (alexnet_c1-like).
    "few_channels_large_kernel": ConvPoolCase("few_channels_large_kernel", 2, 3, 20, 67, 71,
                                              (11, 11), stride=(4, 4), padding=(2, 2),
                                              pool_kernel=(3, 3), pool_stride=(2, 2)),
    # Column folding (general_fold.cu) of 614,400 folded pixels: a fold launch of many blocks
    # across rows and images.
    "folded_many_pixels": ConvPoolCase("folded_many_pixels", 12, 3, 24, 160, 160, (3, 3),
                                       padding=(1, 1)),
    # alexnet_c1's geometry at batch 8: 144 tiles for 132 persistent flat-K blocks, so some
    # blocks compute a second tile while its input planes were copied during the first.
    "alexnet_persistent": ConvPoolCase("alexnet_persistent", 8, 3, 64, 224, 224, (11, 11),
                                       stride=(4, 4), padding=(2, 2), pool_kernel=(3, 3),
                                       pool_stride=(2, 2)),
    # The flat kernels' tilings (utils.suite.FLAT_TILING_CASES, at batches that still loop):
    # AlexNet's first layer with 96 channels (two channel blocks of 64, 144 tiles for 132
    # persistent blocks), 64 channels of 5 x 5 (two blocks of 8 warps per SM, 320 tiles for
    # 264), a 96-channel 7 x 7 / stride 2 layer (16 bits: two blocks of 8 warps per SM over two
    # channel blocks, 304 tiles for 264).
    "flat_channel_blocks": replace(find_flat("flat_alexnet_k96"), batch=4),
    "flat_two_per_sm": replace(find_flat("flat_k64_5x5"), batch=5),
    "flat_k96_7x7": replace(find_flat("flat_k96_7x7"), batch=2),
    # tiled_3xtf32's blocks of 128 channels (256 blocks: they fill the GPU) with a channel tail
    # of 8, on the fast 3x3 / 2x2 geometry and on a generic one (3 x 3 / stride 2 pooling).
    "wide_3xtf32": ConvPoolCase("wide_3xtf32", 8, 32, 136, 64, 64, (3, 3), padding=(1, 1)),
    "wide_3xtf32_generic": ConvPoolCase("wide_3xtf32_generic", 8, 24, 136, 66, 70, (3, 3),
                                        padding=(1, 2), pool_kernel=(3, 3),
                                        pool_stride=(2, 2)),
    # The general kernel (general_wgmma): a 5 x 5 kernel over 256 channels (steps of kernel-row
    # groups, the last short) under AlexNet's 3 x 3 / 2 pool; a strided 3 x 3 (gathered rows,
    # two column phases) with an overlapping padded ceil-mode pool; a dilated 3 x 3 with
    # channel tails; 1 x 1 steps of several chunks (weights read in place); a layer of few
    # tiles (split reduction through the cluster); each also channels-last (weights read in
    # place).
    "general_large_kernel": ConvPoolCase("general_large_kernel", 2, 256, 136, 27, 27, (5, 5),
                                         padding=(2, 2), pool_kernel=(3, 3),
                                         pool_stride=(2, 2)),
    "general_strided": ConvPoolCase("general_strided", 3, 40, 72, 45, 51, (3, 3), stride=(2, 2),
                                    padding=(1, 1), pool_kernel=(3, 3), pool_stride=(2, 2),
                                    pool_padding=(1, 1), ceil_mode=True),
    "general_dilated": ConvPoolCase("general_dilated", 2, 20, 200, 40, 36, (3, 3),
                                    padding=(2, 2), dilation=(2, 2)),
    # Window-major 1 x 1 layers ($CONV_POOL_GENERAL_WINDOWS=1): a strided padded conv under a
    # padded ceil-mode pool (the NCHW gather, the output copy), and whole rows of windows (the
    # kernel writes the channels-last output itself).
    "general_windows": ConvPoolCase("general_windows", 2, 24, 40, 21, 26, (1, 1), stride=(2, 3),
                                    padding=(1, 2), pool_kernel=(2, 2), pool_stride=(2, 2),
                                    pool_padding=(1, 1), ceil_mode=True),
    "general_windows_channels_last": ConvPoolCase("general_windows_channels_last", 2, 48, 72, 16,
                                                  32, (1, 1)),
    "general_pointwise": ConvPoolCase("general_pointwise", 4, 96, 130, 28, 28, (1, 1),
                                      pool_kernel=(3, 3), pool_stride=(2, 2),
                                      pool_padding=(1, 1)),
    "general_split": ConvPoolCase("general_split", 1, 384, 136, 13, 13, (3, 3), padding=(1, 1),
                                  pool_kernel=(3, 3), pool_stride=(2, 2)),
    # A 1 x 1 layer of 4 chunks (16-bit) whose stages hold 3: with
    # $CONV_POOL_GENERAL_EVEN_STEPS=1, two steps of 2 chunks instead of 3 and 1.
    "general_even_steps": ConvPoolCase("general_even_steps", 2, 64, 16, 27, 27, (1, 1),
                                       pool_kernel=(3, 3), pool_stride=(2, 2)),
    # A small 1 x 1 layer over NCHW x whose blocks each write their own part of x's copy
    # (Plan::self_copy; with $CONV_POOL_GENERAL_POISON_COPY=1 the copy's memory NaN before).
    "general_self_copy": ConvPoolCase("general_self_copy", 2, 40, 72, 13, 21, (1, 1),
                                      pool_kernel=(3, 3), pool_stride=(2, 2),
                                      pool_padding=(1, 1)),
    # More tiles than the SMs, the last round of whole tiles leaving SMs idle: each tile split
    # in two through L2, the shares over several rounds of resident blocks (kWaveSplitShare;
    # on 132 SMs 138 tiles of 168 steps in 16 bits).
    "general_wave_split": ConvPoolCase("general_wave_split", 23, 384, 384, 112, 5, (7, 7),
                                       stride=(2, 4), padding=(2, 1), pool_kernel=(3, 3),
                                       pool_stride=(3, 3), pool_padding=(1, 1)),
    "general_large_kernel_channels_last": ConvPoolCase(
        "general_large_kernel_channels_last", 2, 256, 136, 27, 27, (5, 5), padding=(2, 2),
        pool_kernel=(3, 3), pool_stride=(2, 2)),
    # The slice-planar copy of a channels-last x whose channels do not fill whole slices, at a
    # column stride (phases, one of them unread), and of an NCHW x at stride 4 (one phase of
    # four copied).
    "general_phased_copy_channels_last": ConvPoolCase(
        "general_phased_copy_channels_last", 2, 13, 72, 20, 29, (3, 2), stride=(1, 3),
        padding=(2, 1), dilation=(2, 2), pool_kernel=(2, 3), pool_stride=(1, 2), ceil_mode=True),
    "general_pointwise_phased": ConvPoolCase("general_pointwise_phased", 2, 37, 64, 9, 30,
                                             (1, 1), stride=(4, 4), pool_kernel=(1, 2)),
    # A strided layer run over the rows and columns its taps read (general_subsample.h: a
    # view of x starting one row and one column in, at strides 3 x 2), channels-last.
    "general_subsampled_channels_last": ConvPoolCase(
        "general_subsampled_channels_last", 3, 40, 24, 35, 33, (1, 1), stride=(3, 2),
        padding=(2, 1), dilation=(2, 2), pool_kernel=(4, 3), pool_stride=(4, 3),
        pool_padding=(2, 1), ceil_mode=True),
    "general_strided_channels_last": ConvPoolCase(
        "general_strided_channels_last", 3, 40, 72, 45, 51, (3, 3), stride=(2, 2),
        padding=(1, 1), pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1),
        ceil_mode=True),
    "general_split_channels_last": ConvPoolCase(
        "general_split_channels_last", 1, 384, 136, 13, 13, (3, 3), padding=(1, 1),
        pool_kernel=(3, 3), pool_stride=(2, 2)),
    # A channels-last 1 x 1 layer whose 512-byte pixels allow every swizzle width: with the
    # wide_n128 tile and steps of 4 chunks ($CONV_POOL_GENERAL_STEP_CHUNKS) 128-byte groups.
    "general_pointwise_wide_channels_last": ConvPoolCase(
        "general_pointwise_wide_channels_last", 2, 256, 136, 20, 36, (1, 1),
        pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    # A tall layer 5 conv columns wide, run as its transpose under
    # $CONV_POOL_GENERAL_TRANSPOSE=force (general_transpose.h): the NCHW one through the
    # preparation launch's copy of the transposed view, the channels-last one in place.
    "general_tall": ConvPoolCase("general_tall", 2, 64, 96, 67, 11, (5, 5), stride=(2, 3),
                                 padding=(1, 3), pool_kernel=(2, 4), pool_stride=(2, 4),
                                 pool_padding=(1, 0)),
    "general_tall_channels_last": ConvPoolCase(
        "general_tall_channels_last", 2, 64, 96, 67, 11, (5, 5), stride=(2, 3), padding=(1, 3),
        pool_kernel=(2, 4), pool_stride=(2, 4), pool_padding=(1, 0)),
    # Pool windows of more than 4 columns (past the epilogue's constant-width row loops, on its
    # runtime loops): a 5 x 6 stride-(1, 2) padded ceil-mode pool, clipped at the tiles' and
    # the output's edges.
    "general_wide_windows": ConvPoolCase("general_wide_windows", 2, 24, 72, 23, 29, (3, 3),
                                         padding=(1, 1), pool_kernel=(5, 6), pool_stride=(1, 2),
                                         pool_padding=(2, 3), ceil_mode=True),
    "general_wide_windows_channels_last": ConvPoolCase(
        "general_wide_windows_channels_last", 2, 24, 72, 23, 29, (3, 3), padding=(1, 1),
        pool_kernel=(5, 6), pool_stride=(1, 2), pool_padding=(2, 3), ceil_mode=True),
    # A 4 x 3 / 1 pool, padded at the top and bottom, for the one-block tiles (run with
    # CONV_POOL_GENERAL_TILE=square_n128 and the like): windows that overlap down the rows,
    # clipped at the tiles' top and bottom.
    "general_pool_rows": ConvPoolCase("general_pool_rows", 2, 64, 136, 37, 21, (3, 3),
                                      padding=(1, 1), pool_kernel=(4, 3), pool_stride=(1, 1),
                                      pool_padding=(2, 1)),
    "general_pool_rows_channels_last": ConvPoolCase(
        "general_pool_rows_channels_last", 2, 64, 136, 37, 21, (3, 3), padding=(1, 1),
        pool_kernel=(4, 3), pool_stride=(1, 1), pool_padding=(2, 1)),
    # A 2 x 2 / 2 pool taken in registers (Plan::paired_pool), odd sizes (floor mode drops the
    # last row and column), an output-channel tail; and channels-last.
    "general_paired": ConvPoolCase("general_paired", 3, 96, 130, 29, 31, (1, 1)),
    "general_paired_channels_last": ConvPoolCase("general_paired_channels_last", 3, 96, 130,
                                                 29, 31, (1, 1)),
}
# Cases whose input and weight are made channels-last (same values), as in a channels-last
# model (the general kernel then reads such weights in place).
CHANNELS_LAST = {"unpooled_strips_channels_last", "general_large_kernel_channels_last",
                 "general_phased_copy_channels_last", "general_subsampled_channels_last",
                 "general_paired_channels_last", "general_pointwise_wide_channels_last",
                 "general_strided_channels_last", "general_split_channels_last",
                 "channels_last_tails", "narrow_channels_last", "strip_tiles_channels_last",
                 "few_tiles_channels_last", "few_tiles_packed_apart_channels_last",
                 "narrow_squares_channels_last", "split_square_channels_last",
                 "stem_columns_channels_last", "stem_odd_channels_last",
                 "stem_vec4_channels_last", "general_windows_channels_last",
                 "general_tall_channels_last", "general_wide_windows_channels_last",
                 "general_pool_rows_channels_last"}


def main(name: str, variants: str = "all", dtype_name: str = "float32",
         weights: str = "") -> int:
    case = CASES[name]
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    x = torch.randn(case.input_shape(), device="cuda").to(dtype)
    if name in CHANNELS_LAST:
        x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(case.weight_shape(), device="cuda") * 0.1).to(dtype)
    if name in CHANNELS_LAST:
        w = w.contiguous(memory_format=torch.channels_last)
    b = torch.randn(case.out_channels, device="cuda").to(dtype)
    if weights not in ("", "prepacked"):
        raise SystemExit(f"the fourth argument is 'prepacked' or nothing, got {weights!r}")
    packed = cuda_extension.conv2d_relu_maxpool_pack_weight(w) if weights else None
    if packed is not None and packed.numel() == 0:
        raise SystemExit(f"{name}: nothing to pack on this GPU (a Hopper kernel needs 3x3)")
    expected = F.max_pool2d(F.relu(F.conv2d(x.float(), w.float(), b.float(), case.stride,
                                            case.padding, case.dilation)),
                            case.pool_kernel, case.effective_pool_stride, case.pool_padding, 1,
                            case.ceil_mode)
    # 16-bit outputs are rounded once; float32 ones carry TF32 products.
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-2
    # Each variant once, by its member's name for this dtype (dtype twins share an id), or the
    # names asked for.
    if variants == "all":
        choices = [("auto", -1)] + [(row["names"].get(dtype_name, row["name"]), row["id"])
                                    for row in cuda_extension.conv2d_relu_maxpool_variant_table()]
    else:
        ids = cuda_extension.conv2d_relu_maxpool_variants()
        choices = [(variant, -1 if variant == "auto" else ids[variant])
                   for variant in variants.split(",")]
    for variant, config in choices:
        if variant.startswith("direct") and case.flops() > 5e9:
            continue  # minutes under memcheck; the grid covers it
        try:
            out = cuda_extension.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), config,
                                                             packed)
        except RuntimeError as error:
            if "cannot run this shape" not in str(error):
                raise
            print(f"{name} {variant}: not for this shape")
            continue
        torch.cuda.synchronize()
        ok = torch.allclose(out.float(), expected, atol=tolerance, rtol=tolerance)
        print(f"{name} {variant} {dtype_name}{' ' + weights if weights else ''}: "
              f"{'ok' if ok else 'MISMATCH'}")
        if not ok:
            return 1
    return 0


def split_arguments(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """main's arguments (at most four) and the NAME=VALUE settings, wherever they stand."""
    settings = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    positional = [arg for arg in argv if "=" not in arg]
    if not 1 <= len(positional) <= 4:
        raise SystemExit(f"expected: case [variants [dtype [prepacked]]] [NAME=VALUE ...], "
                         f"got {' '.join(argv)!r}")
    return positional, settings


if __name__ == "__main__":
    if not sys.argv[1:] or sys.argv[1] in ("-h", "--help") or sys.argv[1] not in CASES:
        print("usage: python tools/sanitize_cases.py CASE [VARIANTS [DTYPE [prepacked]]] "
              "[NAME=VALUE ...]\n(under compute-sanitizer; VARIANTS: 'all' or names joined by "
              "commas; NAME=VALUE: an environment setting, e.g. a general-kernel hook)\ncases: "
              + ", ".join(sorted(CASES)), file=sys.stderr)
        sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    arguments, environment = split_arguments(sys.argv[1:])
    os.environ.update(environment)
    sys.exit(main(*arguments))
