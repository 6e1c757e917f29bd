"""The automatic kernel choice (config = -1) and the shape limits of each variant, on the CPU.

conv_relu_maxpool_choose / _unsupported are plain host functions exported by the built module
(kernels/conv_relu_maxpool.h), so they are called here through ctypes with a ConvPoolShape
built like the binding builds it: no GPU needed. This pins which variant each public-suite shape
runs, the precision switch (torch.backends.cudnn.allow_tf32), the fallbacks, and the dtype
dispatch (float32 variants refuse 16-bit shapes and the other way round), and the wgmma
kernels' pixel tile and channel-block width (the plan record, conv_relu_maxpool_variant_plan).
"""
import ctypes
import importlib.util
import itertools
import random
from dataclasses import replace
from pathlib import Path

import pytest

from utils import kernel_choice
from utils.kernel_choice import (A100_LIKE, BFLOAT16, FLOAT16, FLOAT32, H200, ConvPoolDevice,
                                 ConvPoolShape, clusters, flat_tiling, general_plan, load,
                                 packs_weight_apart, shape_of, takes_packed_weight,
                                 tiled_out_block, wgmma_split, wgmma_tile, wgmma_tile_origins)
from utils.suite import FLAT_TILING_CASES, GRID, SUITE, ConvPoolCase, find_case, fuzz_case

AUTO = -1
# The 16-bit members of the variants that have one, with the float32 member (the id's name):
# one id, one row of the registry, the element type picks the member.
TWIN_OF = {"direct_16bit": "direct", "tiled_16bit_mma": "tiled_tf32",
           "tiled_16bit_wgmma": "tiled_tf32_wgmma", "small_16bit": "small_fp32",
           "tiled_16bit_flat": "tiled_tf32_flat", "stem_16bit": "stem_tf32",
           "tiled_16bit_flat_wgmma": "tiled_tf32_flat_wgmma"}
SIXTEEN_BIT_VARIANTS = tuple(TWIN_OF)
# The 16-bit twins of float32 kernels: the same kernel code and limits, other element types
# (whose smaller halos may fit shared memory where the float32 ones do not).
TWINS = {"small_16bit": "small_fp32", "tiled_16bit_flat": "tiled_tf32_flat",
         "stem_16bit": "stem_tf32", "tiled_16bit_flat_wgmma": "tiled_tf32_flat_wgmma"}
# The flat kernels' wgmma mainloop per element type (Hopper only).
FLAT_WGMMA = {FLOAT32: "tiled_tf32_flat_wgmma", FLOAT16: "tiled_16bit_flat_wgmma",
              BFLOAT16: "tiled_16bit_flat_wgmma"}


@pytest.fixture(scope="module")
def library(extension):
    return load(extension)


@pytest.fixture(scope="module")
def variant_names(extension, library) -> dict:
    """{config id: its name}, the float32 member's (the 16-bit names map to the same ids)."""
    ids = sorted(set(extension.conv2d_relu_maxpool_variants().values()))
    return {config: kernel_choice.variant_name(library, config) for config in ids}


def choose(library, variant_names, case, allow_tf32=True, config=AUTO, device=H200,
           element=FLOAT32, channels_last=False) -> str:
    shape = shape_of(case, element, channels_last)
    chosen = library.conv_relu_maxpool_choose(ctypes.byref(shape), config, allow_tf32,
                                              ctypes.byref(device))
    assert chosen in variant_names, chosen
    return kernel_choice.variant_name(library, chosen, element)  # the element type's member


def unsupported(library, case, config, device=H200, element=FLOAT32):
    return library.conv_relu_maxpool_unsupported(ctypes.byref(shape_of(case, element)), config,
                                                 ctypes.byref(device))


EXPECTED_AUTO = {
    "default": "tiled_tf32_wgmma",
    "vgg_b2": "tiled_tf32_wgmma",
    "vgg_b3": "tiled_tf32_wgmma",
    "vgg_b5": "tiled_tf32_wgmma",
    "rgb_stem": "stem_tf32",          # 3 x 3 x 3 into 64 channels: the stem kernel
    "alexnet_c1": "tiled_tf32_flat_wgmma",  # 3 input channels, 11x11 / stride 4: flat, wgmma
    "lenet_c1": "small_fp32",         # 6 output channels, 1 x 5 x 5 reduction
    "batch1": "tiled_tf32_wgmma",
}


@pytest.mark.parametrize("case", SUITE, ids=lambda c: c.name)
def test_automatic_choice_for_the_public_suite(library, variant_names, case):
    assert choose(library, variant_names, case) == EXPECTED_AUTO[case.name]


def test_wgmma_only_on_hopper(library, variant_names):
    case = find_case("default")
    assert choose(library, variant_names, case, device=A100_LIKE) == "tiled_tf32"
    # 64 output channels elsewhere: the 16-warp mma.sync kernel.
    assert choose(library, variant_names, find_case("rgb_stem"),
                  device=A100_LIKE) == "tiled_tf32_16w"
    wgmma = variant_names_to_ids(variant_names)["tiled_tf32_wgmma"]
    why = unsupported(library, case, wgmma, device=A100_LIKE)
    assert why is not None and b"9.0" in why
    # AlexNet's first layer: the flat kernel's wgmma mainloop on Hopper, its mma.sync one else.
    alexnet = find_case("alexnet_c1")
    assert choose(library, variant_names, alexnet, device=A100_LIKE) == "tiled_tf32_flat"
    flat_wgmma = variant_names_to_ids(variant_names)["tiled_tf32_flat_wgmma"]
    why = unsupported(library, alexnet, flat_wgmma, device=A100_LIKE)
    assert why is not None and b"9.0" in why
    assert unsupported(library, alexnet, flat_wgmma) is None
    # Its 16-bit twin, likewise.
    flat_wgmma = variant_names_to_ids(variant_names)["tiled_16bit_flat_wgmma"]
    for element in (FLOAT16, BFLOAT16):
        why = unsupported(library, alexnet, flat_wgmma, device=A100_LIKE, element=element)
        assert why is not None and b"9.0" in why
        assert unsupported(library, alexnet, flat_wgmma, element=element) is None


def test_wgmma_only_for_the_fast_path_geometry(library, variant_names):
    wgmma = variant_names_to_ids(variant_names)["tiled_tf32_wgmma"]
    why = unsupported(library, find_case("alexnet_c1"), wgmma)
    assert why is not None and b"3x3" in why
    # The 3 x 3 / 1 convolution with no pool (a 1 x 1 / stride 1 one) is its geometry too;
    # other pools of it are not.
    unpooled = replace(find_case("vgg_b3"), name="unpooled", pool_kernel=(1, 1),
                       pool_stride=None)
    assert unsupported(library, unpooled, wgmma) is None
    for pool in (dict(pool_kernel=(1, 1), pool_stride=(2, 2)), dict(pool_kernel=(3, 3)),
                 dict(pool_kernel=(1, 1), pool_padding=(0, 0), stride=(2, 2))):
        why = unsupported(library, replace(unpooled, **pool), wgmma)
        assert why is not None and b"3x3" in why, pool


def test_which_variants_write_a_channels_last_output_themselves(library, monkeypatch):
    """The general kernel and the 3 x 3 wgmma kernel, pooled (store_pooled_channels_last) or
    not (store_conv_channels_last), write a channels-last output themselves, in the element
    types they run; so does the stem kernel unless $CONV_POOL_STEM_STRIDED_OUT=0; the others never:
    the op re-lays out their NCHW output (conv_pool_to_channels_last)."""
    pooled = find_case("vgg_b3")
    unpooled = replace(pooled, name="unpooled", pool_kernel=(1, 1), pool_stride=None)
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        for case in (pooled, unpooled):
            assert kernel_choice.writes_strided_output(library, case, "general_wgmma", element)
            assert not kernel_choice.writes_strided_output(library, case, "direct", element)
            assert not kernel_choice.writes_strided_output(library, case, "tiled_tf32_flat_wgmma",
                                                           element)
            # tiled_tf32_wgmma / tiled_16bit_wgmma: one variant, every element type.
            assert kernel_choice.writes_strided_output(library, case, "tiled_tf32_wgmma", element)
            assert kernel_choice.writes_strided_output(library, case, "tiled_3xtf32_wgmma",
                                                       element) == (element == FLOAT32)
    assert kernel_choice.writes_strided_output(library, pooled, "general_3xtf32_wgmma")
    stem = ConvPoolCase("stem", 2, 3, 64, 32, 32, (3, 3), padding=(1, 1))
    monkeypatch.setenv("CONV_POOL_STEM_STRIDED_OUT", "0")
    assert not kernel_choice.writes_strided_output(library, stem, "stem_tf32")
    monkeypatch.delenv("CONV_POOL_STEM_STRIDED_OUT", raising=False)
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        assert kernel_choice.writes_strided_output(library, stem, "stem_tf32", element)


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_odd_conv_outputs_on_the_3x3_path_take_the_general_kernel_from_batch_8(
        library, variant_names, element):
    """3 x 3 / 1 under a 2 x 2 / 2 pool on the H200: a conv output of odd height or width at
    a batch of 8 or more takes the general kernel (kFastPathOddGeneralMinBatch); even outputs,
    smaller batches, allow_tf32 = False and an A100-like device keep what they took."""
    wgmma = "tiled_tf32_wgmma" if element == FLOAT32 else "tiled_16bit_wgmma"
    for batch, height, width, padding in ((32, 13, 13, 1), (8, 7, 7, 1), (128, 27, 28, 1),
                                          (32, 28, 15, 0), (32, 14, 14, 1), (7, 13, 13, 1),
                                          (1, 13, 13, 1), (32, 30, 58, 0)):
        case = ConvPoolCase("odd", batch, 192, 384, height, width, (3, 3),
                            padding=(padding, padding))
        conv_h, conv_w = height + 2 * padding - 2, width + 2 * padding - 2
        odd = batch >= 8 and (conv_h % 2 == 1 or conv_w % 2 == 1)
        assert choose(library, variant_names, case, element=element) == (
            "general_wgmma" if odd else wgmma), case
        assert choose(library, variant_names, case, element=element,
                      device=A100_LIKE) != "general_wgmma", case
        if element == FLOAT32:
            assert choose(library, variant_names, case, allow_tf32=False) == \
                "tiled_3xtf32_wgmma", case


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_conv_relu_with_no_pool_takes_the_3x3_wgmma_kernels_on_hopper(library, variant_names,
                                                                      element):
    """VGG's inner layers (3 x 3 / 1, no pool) on the H200: the 3 x 3 wgmma variant of the
    dtype and math mode, with the tile the pooled layer of the same conv output size would
    have; the general kernel for the same layer at stride 2; the flat kernel's choice for
    fewer than 8 input channels in float32 (unchanged by the pool); on an A100-like device
    what ran there before (not a wgmma variant)."""
    wgmma = "tiled_tf32_wgmma" if element == FLOAT32 else "tiled_16bit_wgmma"
    for size, channels in ((224, 64), (112, 128), (56, 256), (28, 512), (14, 512)):
        case = ConvPoolCase(f"vgg_{size}", 32, channels, max(channels, 128), size, size,
                            (3, 3), padding=(1, 1), pool_kernel=(1, 1))
        assert choose(library, variant_names, case, element=element) == wgmma, case.name
        if element == FLOAT32:
            assert choose(library, variant_names, case, allow_tf32=False) == \
                "tiled_3xtf32_wgmma", case.name
        assert choose(library, variant_names, case, element=element,
                      device=A100_LIKE) not in ("tiled_tf32_wgmma", "tiled_16bit_wgmma")
        strided = replace(case, stride=(2, 2))
        assert choose(library, variant_names, strided, element=element) == "general_wgmma"
    # The tile covers conv outputs: VGG block 3's 56 x 56 (7 squares a row) runs strips, its
    # 14 x 14 the square tile, its 224 x 224 the wide one.
    assert wgmma_tile(library, ConvPoolCase("s", 32, 256, 256, 56, 56, (3, 3), padding=(1, 1),
                                            pool_kernel=(1, 1)), element) == "strip_n128"
    assert wgmma_tile(library, ConvPoolCase("q", 32, 512, 512, 14, 14, (3, 3), padding=(1, 1),
                                            pool_kernel=(1, 1)), element) == "square_n128"
    assert wgmma_tile(library, ConvPoolCase("w", 32, 64, 128, 224, 224, (3, 3),
                                            padding=(1, 1), pool_kernel=(1, 1)),
                      element) == "wide_n128"
    few = ConvPoolCase("few", 4, 5, 64, 20, 20, (3, 3), padding=(1, 1), pool_kernel=(1, 1))
    if element == FLOAT32:
        assert choose(library, variant_names, few) in ("tiled_tf32_flat",
                                                       "tiled_tf32_flat_wgmma")


# allow_tf32 = False: an fp32-accurate kernel (3xTF32 or FFMA) for every shape of the suite.
EXPECTED_FP32_ACCURATE = {
    "default": "tiled_3xtf32_wgmma",
    "vgg_b2": "tiled_3xtf32_wgmma",
    "vgg_b3": "tiled_3xtf32_wgmma",
    "vgg_b5": "tiled_3xtf32_wgmma",
    "rgb_stem": "tiled_3xtf32_wgmma",   # 64 output channels, as TF32's choice
    "alexnet_c1": "tiled_3xtf32_flat",  # no 8-channel stage fits its 11 x 11 halo
    "lenet_c1": "small_fp32",
    "batch1": "tiled_3xtf32_wgmma",
}


@pytest.mark.parametrize("case", SUITE, ids=lambda c: c.name)
def test_tf32_off_takes_an_fp32_accurate_path(library, variant_names, case):
    assert choose(library, variant_names, case, allow_tf32=False) == (
        EXPECTED_FP32_ACCURATE[case.name])


def test_tf32_off_takes_the_flat_3xtf32_kernel_for_few_channels(library, variant_names):
    """AlexNet's first layer used to take `direct` with allow_tf32 = False (12 ms at batch 32
    with 96 channels): the 8-channel 3xTF32 stages do not fit its 11 x 11 halo. The flat
    3xTF32 kernel runs it, and every flat layer, with the tilings whose three fragment sets fit
    128 registers (never 8 warps of 32 x 64). Where neither tile fits (16 channels of 11 x 11:
    a 496 KB flat weight): on Hopper the general kernel's 3xTF32 form, elsewhere `direct`."""
    ids = variant_names_to_ids(variant_names)
    for case in FLAT_TILING_CASES:
        assert choose(library, variant_names, case, allow_tf32=False) == "tiled_3xtf32_flat"
        assert flat_tiling(library, case, name="tiled_3xtf32_flat") == (
            "n32_warp32x32" if case.out_channels <= 32 else "n64_warp32x32"), case.name
    for name in ("alexnet_c1", "flat_alexnet_k96"):
        case = next(c for c in SUITE + FLAT_TILING_CASES if c.name == name)
        assert unsupported(library, case, ids["tiled_3xtf32"]) is not None, name
    wide = replace(find_case("alexnet_c1"), in_channels=16)
    assert unsupported(library, wide, ids["tiled_3xtf32_flat"]) is not None
    assert choose(library, variant_names, wide, allow_tf32=False) == "general_3xtf32_wgmma"
    assert choose(library, variant_names, wide, allow_tf32=False, device=A100_LIKE) == "direct"
    # The flat kernels refuse 16-bit operands only where it is float32-only.
    assert unsupported(library, find_case("alexnet_c1"), ids["tiled_3xtf32_flat"],
                       element=FLOAT16) == b"needs float32 input"


def test_3xtf32_wgmma_kernel_where_it_applies(library, variant_names):
    """allow_tf32 = False on Hopper and the wgmma geometry (3x3 / stride 1, 2x2 / stride 2
    pool): tiled_3xtf32_wgmma, with the N = 64 wide, square or strip
    tile (whichever computes fewer unused outputs: VGG block 5's 14 x 14 images take the square,
    block 3's rows of 7 squares the strips);
    never weights packed ahead of time; split reductions over clusters (from weights packed
    apart) where its tiles are few, as the TF32 kernel's N = 64 tiles. Elsewhere the mma.sync
    3xTF32 kernel: off Hopper, other geometries; 16-bit shapes are refused."""
    ids = variant_names_to_ids(variant_names)
    split = ids["tiled_3xtf32_wgmma"]
    tiles = {"default": "wide_n64", "vgg_b2": "square_n64", "vgg_b3": "strip_n64",
             "vgg_b5": "square_n64", "rgb_stem": "wide_n64", "batch1": "wide_n64"}
    for name, tile in tiles.items():
        case = find_case(name)
        assert wgmma_tile(library, case, name="tiled_3xtf32_wgmma") == tile, name
        plan = kernel_choice.variant_plan(library, case, split)
        assert not plan["takes_packed_weight"], name
        assert not plan["packs_weight_apart"], name
        assert plan["wgmma_split"] == 1, name
    # VGG block 3 at batch 1: 52 strips or 56 wide tiles, few either way: the wide tile, whose
    # reductions split.
    b3_batch1 = replace(find_case("vgg_b3"), batch=1)
    assert wgmma_tile(library, b3_batch1, name="tiled_3xtf32_wgmma") == "wide_n64"
    assert kernel_choice.variant_plan(library, b3_batch1, split)["wgmma_split"] > 1
    # VGG block 5 at batch 1: 8 tiles of 64 chunks.
    b5_batch1 = replace(find_case("vgg_b5"), batch=1)
    plan = kernel_choice.variant_plan(library, b5_batch1, split)
    assert plan["wgmma_split"] == 8 and plan["packs_weight_apart"]
    assert choose(library, variant_names, b5_batch1, allow_tf32=False) == "tiled_3xtf32_wgmma"
    default = find_case("default")
    assert choose(library, variant_names, default, allow_tf32=False,
                  device=A100_LIKE) == "tiled_3xtf32"
    why = unsupported(library, default, split, device=A100_LIKE)
    assert why is not None and b"9.0" in why
    # 32 output channels or fewer: still the wgmma kernel, half of its N = 64 zeros (the
    # mma.sync kernels' 32-channel blocks were slower: docs/PERF.md v33); TF32 likewise.
    narrow = replace(default, out_channels=32)
    assert choose(library, variant_names, narrow, allow_tf32=False) == "tiled_3xtf32_wgmma"
    assert choose(library, variant_names, narrow) == "tiled_tf32_wgmma"
    assert choose(library, variant_names, replace(narrow, out_channels=24),
                  allow_tf32=False) == "tiled_3xtf32_wgmma"
    why = unsupported(library, find_case("alexnet_c1"), split)
    assert why is not None and b"3x3" in why
    assert unsupported(library, default, split, element=FLOAT16) == b"needs float32 input"


def test_3xtf32_takes_blocks_of_128_channels_where_they_fill_the_gpu(library, variant_names):
    """tiled_3xtf32 runs blocks of 128 output channels above 64 when they give each of the
    H200's 132 SMs a block and fit its shared memory, else blocks of 64: batch-1 VGG layers
    (64 blocks of 128) and a GPU with 99 KB of shared memory per block, where the 128-channel
    stages do not fit but the 64-channel ones do (it takes tiled_3xtf32, not `direct`)."""
    for name in ("default", "vgg_b2", "vgg_b3", "vgg_b5"):
        assert tiled_out_block(library, find_case(name), "tiled_3xtf32") == 128, name
    assert tiled_out_block(library, find_case("batch1"), "tiled_3xtf32") == 64
    assert tiled_out_block(library, find_case("rgb_stem"), "tiled_3xtf32") == 64
    assert tiled_out_block(library, find_case("default"), "tiled_tf32") == 128
    # 5 x 5: three stages of 128 channels' weights (313 KB) do not fit; blocks of 64 do.
    five = ConvPoolCase("wide_5x5", 8, 24, 136, 66, 70, (5, 5), padding=(1, 2))
    assert tiled_out_block(library, five, "tiled_3xtf32") == 64
    assert tiled_out_block(library, find_case("default"), "tiled_tf32_wgmma") == 0
    small = ConvPoolDevice(101376, 84, 86)
    assert tiled_out_block(library, find_case("default"), "tiled_3xtf32", small) == 64
    assert choose(library, variant_names, find_case("default"), allow_tf32=False,
                  device=small) == "tiled_3xtf32"


@pytest.mark.parametrize("case, patch_loop", [
    (find_case("lenet_c1"), True),                  # 5x5, stride 1: the CUDA-core patch loop
    (find_case("c1"), True),
    (find_case("patch3_pool_pad_ceil"), True),      # 3x3, pool padding and ceil mode too
    (find_case("small_tf32_strided_dilated"), False),
    (find_case("small_tf32_tiny_image"), True),
    (ConvPoolCase("c3_k4_5x5_s2", 128, 3, 4, 96, 96, (5, 5), stride=(2, 2), padding=(2, 2)),
     False),
    (ConvPoolCase("c2_k6_7x7", 8, 2, 6, 40, 40, (7, 7)), False),  # 7x7: no patch loop
], ids=lambda v: v.name if isinstance(v, ConvPoolCase) else str(v))
def test_small_tf32_where_the_patch_loop_does_not_apply(library, variant_names, case, patch_loop):
    # At most 8 output channels and 2x2 / stride 2 windows: small_tf32 (TF32 tensor cores) when
    # TF32 is allowed, except where small_fp32's patch loop runs (stride 1, 3x3 or 5x5), which
    # measured as fast; small_fp32 whenever TF32 is not allowed.
    assert choose(library, variant_names, case) == ("small_fp32" if patch_loop else "small_tf32")
    assert choose(library, variant_names, case, allow_tf32=False) == "small_fp32"
    ids = variant_names_to_ids(variant_names)
    assert unsupported(library, case, ids["small_tf32"]) is None
    # More than 8 output channels, another pooling window, or 16-bit operands: not small_tf32.
    for other, message in ((replace(case, out_channels=9), b"more than 8 output channels"),
                           (replace(case, pool_kernel=(3, 3)), b"2x2 / stride 2"),
                           (replace(case, pool_stride=(1, 1)), b"2x2 / stride 2")):
        if other.is_valid():
            why = unsupported(library, other, ids["small_tf32"])
            assert why is not None and message in why, (other, why)
            assert choose(library, variant_names, other) == "small_fp32"
    assert unsupported(library, case, ids["small_tf32"], element=FLOAT16) == b"needs float32 input"


def test_pool_window_taller_than_the_tile_takes_a_generic_path(library, variant_names):
    case = find_case("pool_9x3_stride_9x3")
    for config, name in variant_names.items():
        # The general kernels' 16 x 16 tiles hold the 9-row window; the 8 x 32 tiles of the
        # others do not.
        why = unsupported(library, case, config)
        assert (why is None) == (name in ("direct", "small_fp32", "general_wgmma",
                                          "general_3xtf32_wgmma")), name
        why_16 = unsupported(library, case, config, element=FLOAT16)  # their 16-bit members
        assert (why_16 is None) == (name in ("direct", "small_fp32", "general_wgmma")), name
        if name.startswith("general"):
            assert unsupported(library, case, config, device=A100_LIKE) is not None
    # 8 output channels: the CUDA-core kernel, which takes any pooling window.
    assert choose(library, variant_names, case) == "small_fp32"
    # With 17 output channels: on Hopper the general kernel; elsewhere only the direct kernel
    # is left.
    wide = replace(case, out_channels=17)
    assert choose(library, variant_names, wide) == "general_wgmma"
    assert choose(library, variant_names, wide, device=A100_LIKE) == "direct"


def test_explicit_config_is_returned_as_is(library, variant_names):
    for config, name in variant_names.items():
        assert choose(library, variant_names, find_case("default"), config=config) == name


def test_every_variant_supports_the_default_problem_except_flat_and_small(library,
                                                                          variant_names):
    for config, name in variant_names.items():
        why = unsupported(library, find_case("default"), config)
        if name in ("tiled_tf32_flat", "tiled_3xtf32_flat", "tiled_tf32_flat_wgmma"):
            # 64 x 9 taps of halo do not fit
            assert why is not None and b"shared memory" in why
        elif name in ("small_fp32", "small_tf32"):  # 128 output channels
            assert why is not None and b"16 output channels" in why
        elif name == "stem_tf32":  # 64 x 9 taps
            assert why == b"in_channels * kernel taps is larger than 32"
        else:
            assert why is None, (name, why)


# ---- float16 / bfloat16 -------------------------------------------------------------------

EXPECTED_AUTO_16_BIT = {
    "default": "tiled_16bit_wgmma",
    "vgg_b2": "tiled_16bit_wgmma",
    "vgg_b3": "tiled_16bit_wgmma",
    "vgg_b5": "tiled_16bit_wgmma",
    "rgb_stem": "stem_16bit",           # 3 x 3 x 3 into 64 channels: the stem kernel
    "alexnet_c1": "tiled_16bit_flat_wgmma",  # 3 input channels, 11x11 / stride 4: flat, wgmma
    "lenet_c1": "small_16bit",          # 6 output channels, 1 x 5 x 5 reduction
    "batch1": "tiled_16bit_wgmma",
}


@pytest.mark.parametrize("element", [FLOAT16, BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", SUITE, ids=lambda c: c.name)
def test_16_bit_suite_shapes(library, variant_names, case, element):
    # On Hopper the wgmma kernel for the 3x3 / 2x2 fast path; off it, as for float32, the
    # CUDA-core kernel for few output channels and the flat reduction for few input channels.
    for allow_tf32 in (True, False):  # irrelevant for 16-bit inputs
        assert choose(library, variant_names, case, allow_tf32=allow_tf32,
                      element=element) == EXPECTED_AUTO_16_BIT[case.name]
    # Without wgmma (Ampere) the fast-path shapes take the mma.sync kernel; the stem kernel's
    # choice is Hopper's only (where it was measured).
    expected = EXPECTED_AUTO_16_BIT[case.name].replace("tiled_16bit_wgmma", "tiled_16bit_mma")
    expected = expected.replace("stem_16bit", "tiled_16bit_mma")
    expected = expected.replace("tiled_16bit_flat_wgmma", "tiled_16bit_flat")
    assert choose(library, variant_names, case, device=A100_LIKE, element=element) == expected


def runs(library, variant_names, case, name, element=FLOAT32, device=H200) -> bool:
    config = variant_names_to_ids(variant_names)[name]
    return unsupported(library, case, config, device=device, element=element) is None


@pytest.mark.parametrize("case", GRID, ids=lambda c: c.name)
def test_16_bit_automatic_choice_is_always_a_16_bit_variant(library, variant_names, case):
    # On Hopper the stem kernel for 17-64 output channels from at most 4 input channels where
    # it runs; the wgmma kernel on the fast
    # path (any channel counts); else small_16bit where it runs;
    # else on Hopper the general kernel for kernel_choice.few_channel_general's layers;
    # else tiled_16bit_flat for fewer than 8 input channels (on Hopper its wgmma mainloop where
    # blocks of 64 channels run one per SM); else the mma.sync kernel unless the pooling window
    # outgrows its 8 x 32 conv tile (on Hopper first the general kernel); else the direct one.
    fits = case.pool_kernel[0] <= 8 and case.pool_kernel[1] <= 32
    for device, element in ((H200, BFLOAT16), (A100_LIKE, FLOAT16)):
        small = runs(library, variant_names, case, "small_16bit", element, device)
        flat = runs(library, variant_names, case, "tiled_16bit_flat", element, device)
        stem = (device is H200 and case.out_channels > 16 and case.in_channels <= 4
                and runs(library, variant_names, case, "stem_16bit", element, device))
        flat_wgmma = (flat and device is H200 and case.out_channels > 32
                      and flat_tiling(library, case, element, device) == "n64_warp32x32"
                      and runs(library, variant_names, case, "tiled_16bit_flat_wgmma", element,
                               device))
        # Everything else on Hopper: the general kernel where it runs.
        general = device is H200 and runs(library, variant_names, case, "general_wgmma", element,
                                          device)
        expected = ("stem_16bit" if stem else
                    "tiled_16bit_wgmma"
                    if kernel_choice.wgmma_geometry(case) and device is H200 else
                    "small_16bit" if small else
                    "general_wgmma" if general and kernel_choice.few_channel_general(
                        case, device, element) else
                    ("tiled_16bit_flat_wgmma" if flat_wgmma else "tiled_16bit_flat")
                    if flat and case.in_channels < 8 and not kernel_choice.fast_path(case)
                    else "general_wgmma" if general
                    else "tiled_16bit_mma" if fits else "direct_16bit")
        assert choose(library, variant_names, case, device=device, element=element) == expected


@pytest.mark.parametrize("case", GRID + SUITE, ids=lambda c: c.name)
def test_16_bit_twins_have_the_limits_of_their_float32_kernels(library, variant_names, case):
    # Same limits, except that tiled_16bit_flat keeps its weights in 16 bits in shared memory,
    # so it also runs some shapes whose float32 weights do not fit.
    ids = variant_names_to_ids(variant_names)
    for twin, float32_kernel in TWINS.items():
        float32_why = unsupported(library, case, ids[float32_kernel])
        for element in (FLOAT16, BFLOAT16):
            why = unsupported(library, case, ids[twin], element=element)
            if twin != "small_16bit" and why is None and float32_why is not None:
                assert b"shared memory" in float32_why, case.name
            else:
                assert why == float32_why, (twin, case.name)


def test_16_bit_wgmma_only_on_hopper_and_for_the_fast_path_geometry(library, variant_names):
    wgmma = variant_names_to_ids(variant_names)["tiled_16bit_wgmma"]
    why = unsupported(library, find_case("default"), wgmma, device=A100_LIKE, element=FLOAT16)
    assert why is not None and b"9.0" in why
    why = unsupported(library, find_case("kernel5"), wgmma, element=BFLOAT16)
    assert why is not None and b"3x3" in why
    assert unsupported(library, find_case("default"), wgmma, element=BFLOAT16) is None


def test_the_wgmma_variant_runs_both_element_types_and_its_3xtf32_form_float32_only(
        library, variant_names):
    ids = variant_names_to_ids(variant_names)
    case = find_case("default")
    assert ids["tiled_16bit_wgmma"] == ids["tiled_tf32_wgmma"]
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        assert unsupported(library, case, ids["tiled_tf32_wgmma"], element=element) is None
    assert unsupported(library, case, ids["tiled_3xtf32_wgmma"], element=FLOAT16) == (
        b"needs float32 input")


def test_16_bit_pool_window_taller_than_the_tile_falls_back_to_direct_16bit(library,
                                                                            variant_names):
    case = find_case("pool_9x3_stride_9x3")
    # 8 output channels: the CUDA-core kernel takes any pooling window; 17: only direct_16bit.
    assert choose(library, variant_names, case, element=FLOAT16) == "small_16bit"
    case = replace(case, out_channels=17)
    assert choose(library, variant_names, case, element=FLOAT16,
                  device=A100_LIKE) == "direct_16bit"
    # On Hopper the general kernel, whose 16-row tiles hold the window.
    assert choose(library, variant_names, case, element=FLOAT16) == "general_wgmma"
    why = unsupported(library, case, variant_names_to_ids(variant_names)["tiled_16bit_mma"],
                      element=FLOAT16)
    assert why is not None and b"8 x 32" in why


def test_16_bit_tensor_core_kernel_needs_ampere(library, variant_names):
    volta = ConvPoolDevice(98304, 80, 70)
    case = find_case("default")
    assert choose(library, variant_names, case, device=volta, element=FLOAT16) == "direct_16bit"
    why = unsupported(library, case, variant_names_to_ids(variant_names)["tiled_16bit_mma"],
                      device=volta, element=FLOAT16)
    assert why is not None and b"8.0" in why


def test_16_bit_tensor_core_kernel_falls_back_when_shared_memory_is_small(library,
                                                                          variant_names):
    # 128-channel blocks need 133 KB (the fp32 epilogue tile); a 99 KB device cannot run them.
    small = ConvPoolDevice(101376, 84, 86)
    assert choose(library, variant_names, find_case("default"), device=small,
                  element=FLOAT16) == "direct_16bit"
    # 64 output channels: 64-channel blocks, 67 KB.
    assert choose(library, variant_names, find_case("rgb_stem"), device=small,
                  element=FLOAT16) == "tiled_16bit_mma"


@pytest.mark.parametrize("element", [FLOAT16, BFLOAT16], ids=["float16", "bfloat16"])
def test_16_bit_shapes_run_the_16_bit_members_and_float32_only_variants_refuse_them(
        library, variant_names, element):
    case = find_case("default")
    for config, name in variant_names.items():
        member = kernel_choice.variant_name(library, config, element)
        why = unsupported(library, case, config, element=element)
        if member in ("tiled_16bit_flat", "tiled_16bit_flat_wgmma"):
            # Their 16-bit weights take half the shared memory of the float32 members': blocks
            # of 64 channels fit the default problem, which the float32 ones' do not.
            assert why is None and unsupported(library, case, config) is not None, member
        elif member in ("small_16bit", "stem_16bit"):  # too many channels, as in float32
            assert why == unsupported(library, case, config), member
        elif member in SIXTEEN_BIT_VARIANTS or member == "general_wgmma":  # both element types
            assert why is None, (member, why)
        else:  # float32 only: the id's name for every element type
            assert member == name and why == b"needs float32 input", (name, member, why)


def test_a_16_bit_name_is_its_float32_twins_id(library, variant_names):
    ids = variant_names_to_ids(variant_names)
    for sixteen, float32 in TWIN_OF.items():
        config = ids[sixteen]
        assert config == ids[float32], sixteen
        assert kernel_choice.variant_name(library, config, FLOAT32) == float32
        for element in (FLOAT16, BFLOAT16):
            assert kernel_choice.variant_name(library, config, element) == sixteen
    # Out of range: no name.
    assert kernel_choice.variant_name(library, len(variant_names), FLOAT32) is None
    assert kernel_choice.variant_name(library, -1, FLOAT16) is None


def test_variants_keep_their_ids(variant_names):
    # config ids are public (conv2d_relu_maxpool_variants, the op's `config`): new variants are
    # appended. The dtype twins were folded into one id each (the float32 member's); the 16-bit
    # names still name them (test_a_16_bit_name_is_its_float32_twins_id).
    assert [variant_names[i] for i in range(len(variant_names))] == [
        "direct", "tiled_fp32", "tiled_tf32", "tiled_3xtf32", "tiled_tf32_16w",
        "tiled_tf32_flat", "tiled_tf32_wgmma", "small_fp32", "small_tf32", "tiled_3xtf32_flat",
        "tiled_3xtf32_wgmma", "stem_tf32", "tiled_tf32_flat_wgmma", "general_wgmma",
        "general_3xtf32_wgmma"]


def test_workspace_of_the_16_bit_tensor_core_kernel(library, variant_names):
    ids = variant_names_to_ids(variant_names)
    case = find_case("c13_k19_unaligned")  # 13 channels -> 16, 19 output channels, 3x3
    shape = shape_of(case, FLOAT16)
    weight_bytes = (19 * 9 * 16 * 2 + 255) // 256 * 256
    input_bytes = case.batch * case.height * case.width * 16 * 2
    h200 = ctypes.byref(H200)
    assert library.conv_relu_maxpool_workspace_bytes(
        ctypes.byref(shape), ids["tiled_16bit_mma"], h200, None) == weight_bytes + input_bytes
    assert library.conv_relu_maxpool_workspace_bytes(ctypes.byref(shape),
                                                     ids["direct_16bit"], h200, None) == 0
    # A float32 shape never asks the 16-bit kernel for scratch.
    assert library.conv_relu_maxpool_workspace_bytes(
        ctypes.byref(shape_of(case)), ids["tiled_16bit_mma"], h200, None) == 0


@pytest.mark.parametrize("element", [FLOAT16, BFLOAT16], ids=["float16", "bfloat16"])
def test_workspace_of_the_wgmma_kernels_covers_their_staged_weights(library, variant_names,
                                                                    element):
    library.conv_relu_maxpool_workspace_bytes.restype = ctypes.c_int64
    library.conv_relu_maxpool_workspace_bytes.argtypes = [
        ctypes.POINTER(ConvPoolShape), ctypes.c_int, ctypes.POINTER(ConvPoolDevice),
        ctypes.c_void_p]
    ids = variant_names_to_ids(variant_names)

    def workspace(case, variant, element):
        return library.conv_relu_maxpool_workspace_bytes(ctypes.byref(shape_of(case, element)),
                                                         ids[variant], ctypes.byref(H200), None)

    # [channel block][chunk][tap 9][slice 2][N][16 bytes]: chunks of 8 fp32 or 16 16-bit
    # channels, the same 16-byte slices, so 16-bit needs half the chunks. N of the tile run
    # without packed weights: k136_channel_tail's 2 images are few tiles (three blocks of 64).
    for name, blocks, n in (("default", 1, 128), ("vgg_b3", 2, 128), ("k136_channel_tail", 3, 64),
                            ("c13_k19_unaligned", 1, 64), ("c132_long_reduction", 1, 64)):
        case = find_case(name)
        chunks_16, chunks_32 = -(-case.in_channels // 16), -(-case.in_channels // 8)
        assert workspace(case, "tiled_16bit_wgmma", element) == blocks * chunks_16 * 9 * 2 * n * 16
        assert workspace(case, "tiled_tf32_wgmma", FLOAT32) == blocks * chunks_32 * 9 * 2 * n * 16
    # Packed ahead of time, the weights keep N = 128 (the tile a launch given them runs).
    library.conv_relu_maxpool_packed_weight_bytes.restype = ctypes.c_int64
    library.conv_relu_maxpool_packed_weight_bytes.argtypes = [ctypes.POINTER(ConvPoolShape),
                                                              ctypes.POINTER(ConvPoolDevice)]
    case = find_case("k136_channel_tail")
    assert library.conv_relu_maxpool_packed_weight_bytes(
        ctypes.byref(shape_of(case, element)), ctypes.byref(H200)) == 2 * 1 * 9 * 2 * 128 * 16
    # The 3xTF32 wgmma variant, float32 only, asks no scratch for 16-bit shapes.
    assert workspace(find_case("default"), "tiled_3xtf32_wgmma", element) == 0


def test_workspace_of_the_3xtf32_wgmma_kernel_holds_its_runs_of_8_chunks(library, variant_names):
    """tiled_3xtf32_wgmma: the packed weights with two rows per output channel (the small and
    big parts), blocks of 64 channels; where a tile has more than 8 chunks of 8 channels (576
    taps), one tensor-core run per 8 chunks, their sums in each block's master slots after the
    weights: 16 of 16 bytes per thread of 256, for at most 256 blocks (the launch's grid)."""
    library.conv_relu_maxpool_workspace_bytes.restype = ctypes.c_int64
    library.conv_relu_maxpool_workspace_bytes.argtypes = [
        ctypes.POINTER(ConvPoolShape), ctypes.c_int, ctypes.POINTER(ConvPoolDevice),
        ctypes.c_void_p]
    variant = variant_names_to_ids(variant_names)["tiled_3xtf32_wgmma"]
    origin = (ctypes.c_int64 * 4)()
    for name, runs in (("default", 1), ("vgg_b3", 4), ("c132_long_reduction", 3),
                       ("k136_channel_tail", 1)):
        case = find_case(name)
        shape = shape_of(case)
        chunks, blocks = -(-case.in_channels // 8), -(-case.out_channels // 64)
        tiles = library.conv_relu_maxpool_wgmma_tile_origin(ctypes.byref(shape), variant, -1,
                                                            origin)
        assert tiles > 0 and -(-chunks // 8) == runs
        weights = blocks * chunks * 9 * 2 * 128 * 16
        master = min(tiles, 256) * 16 * 256 * 16 if runs > 1 else 0
        assert library.conv_relu_maxpool_workspace_bytes(
            ctypes.byref(shape), variant, ctypes.byref(H200), None) == weights + master


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16], ids=["float32", "float16"])
def test_workspace_of_the_general_kernel(library, variant_names, element, monkeypatch):
    """general_wgmma: the weights packed [channel block][chunk run][tap][chunk][slice][n][16
    bytes] (256-byte aligned), then for inputs taken as NCHW (no operands given) a copy of x:
    the warp-specialized form's slice-planar one, channels padded to the 16-byte slice; the
    cp.async loaders' NHWC one ($CONV_POOL_GENERAL_TMA=0), channels padded to the chunk, always
    in 16 bits, in float32 where out_channels x taps reaches 2048 (kNhwcCopyMinWork; here 200 x
    25); a narrow last channel block (Plan::tail_n) packed at its own width."""
    library.conv_relu_maxpool_workspace_bytes.restype = ctypes.c_int64
    library.conv_relu_maxpool_workspace_bytes.argtypes = [
        ctypes.POINTER(ConvPoolShape), ctypes.c_int, ctypes.POINTER(ConvPoolDevice),
        ctypes.c_void_p]
    variant = variant_names_to_ids(variant_names)["general_wgmma"]
    case = ConvPoolCase("k5", 64, 70, 200, 27, 27, (5, 5), padding=(2, 2), pool_kernel=(3, 3),
                        pool_stride=(2, 2))
    chunk = 8 if element == FLOAT32 else 16
    chunks = -(-case.in_channels // chunk)
    element_bytes = 4 if element == FLOAT32 else 2
    for path in ("tma", "cpasync"):
        if path == "cpasync":
            monkeypatch.setenv("CONV_POOL_GENERAL_TMA", "0")
        plan = general_plan(library, case, element)
        assert plan["split"] == 1 and plan["input"] == ("tma" if path == "tma" else "pixel")
        n = 128 if plan["tile"].endswith("n128") else 64
        runs = -(-chunks // plan["step_chunks"])
        padded_channels = -(-case.out_channels // n) * n
        packed = -(-(padded_channels * runs * plan["step_chunks"] * 25 * 2 * 16) // 256) * 256
        assert plan["nhwc_copy"] == 1
        staged_channels = (-(-case.in_channels // (16 // element_bytes)) * (16 // element_bytes)
                           if path == "tma" else chunks * chunk)
        staged = -(-(64 * 27 * 27 * staged_channels * element_bytes) // 256) * 256
        assert library.conv_relu_maxpool_workspace_bytes(
            ctypes.byref(shape_of(case, element)), variant, ctypes.byref(H200), None) == (
                packed + staged), path
    # A narrow last channel block (136 channels, 8 past the last full block) packs half the
    # tile's rows a slice.
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA")
    narrow = replace(case, out_channels=136)
    plan = general_plan(library, narrow, element)
    n = 128 if plan["tile"].endswith("n128") else 64
    assert plan["tail_n"] == n // 2 and plan["weights"] == "packed", plan
    runs = -(-chunks // plan["step_chunks"])
    rows = (-(-narrow.out_channels // n) - 1) * n + n // 2
    packed = -(-(rows * runs * plan["step_chunks"] * 25 * 2 * 16) // 256) * 256
    staged = -(-(64 * 27 * 27 * -(-case.in_channels // (16 // element_bytes)) *
                 (16 // element_bytes) * element_bytes) // 256) * 256
    assert library.conv_relu_maxpool_workspace_bytes(
        ctypes.byref(shape_of(narrow, element)), variant, ctypes.byref(H200), None) == (
            packed + staged), plan


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_general_kernel_puts_small_images_side_by_side(library, element, seed, monkeypatch):
    """Where an image's whole pooled output fits a share of the tile, the general kernel's
    tiles can hold several images (2 or 4): tiles = ceil(batch / images) x channel blocks, and
    the halo gives each image its own columns (a multiple of the column stride). The cost model
    takes it where it saves rounds of blocks (large batches), never at batch 1. Random
    small-image geometries with the count forced ($CONV_POOL_GENERAL_IMAGES) keep those
    invariants."""
    # The layer in its own orientation (transposition has its own test,
    # test_layers_run_transposed_where_the_hook_and_the_cost_say).
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", "0")
    resnet = ConvPoolCase("resnet50_l4", 128, 512, 512, 14, 14, (3, 3), stride=(2, 2),
                          padding=(1, 1), pool_kernel=(3, 3), pool_stride=(2, 2))
    inception = ConvPoolCase("inception_1x1", 128, 2048, 384, 8, 8, (1, 1))
    for case in (resnet, inception):
        plan = general_plan(library, case, element)
        assert plan["images"] == 4 and plan["tile"] == "wide_n128", plan
        assert plan["tiles"] == case.batch // 4 * -(-case.out_channels // 128), plan
    # Four images of 8 conv columns: 17 input columns each at stride 2, rounded up to 18; both
    # forms stage the dense span of 15 rows that the 3 x 3 taps read under the 7 conv rows the
    # 3 x 3 / 2 pool reads (the warp-specialized form's three stages of it fit beside the
    # weights).
    plan = general_plan(library, resnet, element)
    assert (plan["halo"], plan["gathered"], plan["input"]) == ("15x72", 0, "tma"), plan
    monkeypatch.setenv("CONV_POOL_GENERAL_TMA", "0")
    assert general_plan(library, resnet, element)["halo"] == "15x72"
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA")
    assert general_plan(library, replace(resnet, batch=1), element)["images"] == 1
    rng = random.Random(seed)
    side_by_side = 0
    for _ in range(400):
        case = fuzz_case(rng, "fuzz", max_size=16, batch=rng.randint(2, 9))
        images = rng.choice([2, 4])
        monkeypatch.setenv("CONV_POOL_GENERAL_IMAGES", str(images))
        plan = general_plan(library, case, element)
        if plan is None or plan["images"] != images:  # that many do not fit: the hook yields
            continue
        side_by_side += 1
        out_h, out_w = case.pooled_out()
        assert plan["pooled"] == f"{out_h}x{out_w}", (case, plan)
        blocks = -(-case.out_channels // (128 if plan["tile"].endswith("n128") else 64))
        assert plan["tiles"] == -(-case.batch // images) * blocks, (case, plan)
    print(f"{side_by_side} of 400 random small-image geometries ran images side by side")
    assert side_by_side > 100


TILE_PIXELS = {"wide": (8, 32), "square": (16, 16), "tall": (16, 32)}


def read_extent(case: ConvPoolCase, plan: dict) -> tuple[int, int]:
    """The rows and columns of a tile's conv pixels that some pooled output's window reads, the
    greatest over the tiles (general_epilogue.cuh's pooled_window, in plain integers): images
    side by side take the columns from image x tile columns / images."""
    tile_rows, tile_cols = TILE_PIXELS[plan["tile"].split("_")[0]]
    pooled_rows, pooled_cols = (int(v) for v in plan["pooled"].split("x"))
    (conv_h, conv_w), (out_h, out_w) = case.conv_out(), case.pooled_out()
    (pool_h, pool_w), (stride_h, stride_w) = case.pool_kernel, case.effective_pool_stride
    pad_h, pad_w = case.pool_padding
    images = plan["images"]
    rows = cols = 0
    for out_row0 in range(0, out_h, pooled_rows):
        conv_row0 = out_row0 * stride_h - pad_h
        for r in range(min(pooled_rows, out_h - out_row0)):
            rows = max(rows, min(r * stride_h + pool_h, conv_h - conv_row0))
    for out_col0 in range(0, out_w, pooled_cols):
        conv_col0 = out_col0 * stride_w - pad_w
        for c in range(min(pooled_cols, out_w - out_col0)):
            cols = max(cols, min(c * stride_w + pool_w, conv_w - conv_col0))
    assert rows <= tile_rows and cols <= tile_cols // images
    return rows, (images - 1) * (tile_cols // images) + cols


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16], ids=["float32", "float16"])
def test_general_kernel_sums_split_tiles_only_where_the_pooling_reads(library, element, seed,
                                                                       monkeypatch):
    """The cluster split sums the partial conv tiles only over Plan::read_rows x read_cols:
    every pixel a pooled window reads lies inside (random geometries, images side by side
    forced half the time), and on a small image it is the image's pooled span (DenseNet's
    batch-1 7 x 7 layer under a 2 x 2 / 2 pool: 6 x 6 of the tile's 8 x 32)."""
    # The layer in its own orientation (transposition has its own test,
    # test_layers_run_transposed_where_the_hook_and_the_cost_say).
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", "0")
    densenet = ConvPoolCase("densenet_7x7", 1, 896, 128, 7, 7, (1, 1))
    plan = general_plan(library, densenet, element)
    assert plan["cluster"] == 1 and plan["read"] == "6x6", plan
    rng = random.Random(seed)
    for trial in range(300):
        case = fuzz_case(rng, "fuzz", max_size=48, batch=rng.randint(1, 6))
        if trial % 2:
            monkeypatch.setenv("CONV_POOL_GENERAL_IMAGES", str(rng.choice([2, 4])))
        else:
            monkeypatch.delenv("CONV_POOL_GENERAL_IMAGES", raising=False)
        plan = general_plan(library, case, element)
        if plan is None:
            continue
        tile_rows, tile_cols = TILE_PIXELS[plan["tile"].split("_")[0]]
        read_rows, read_cols = (int(v) for v in plan["read"].split("x"))
        rows, cols = read_extent(case, plan)
        assert rows <= read_rows <= tile_rows and cols <= read_cols <= tile_cols, (case, plan)


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_general_kernel_narrows_a_last_channel_block_at_most_half_full(library, element, seed,
                                                                       monkeypatch):
    """Plan::tail_n: the warp-specialized kernel's last channel block runs wgmmas of half the
    tile's N where its channels fit them (130 channels on an N = 128 tile: 128 + 2, the second
    block at N = 64; on an N = 64 tile: 64 + 64 + 2 at N = 32), nowhere else (256 and 200
    channels on N = 128), never in the 3xTF32 form or the cp.async loaders; with
    $CONV_POOL_GENERAL_NARROW_TAIL=0 no plan narrows, and nothing else in the plan changes
    (random geometries, every tile forced in turn)."""
    rng = random.Random(seed)
    cases = [fuzz_case(rng, f"tail_{i}", max_size=64, max_channels=300) for i in range(40)]
    cases += [replace(ConvPoolCase("tail", 4, 64, 130, 30, 30, (3, 3), padding=(1, 1)),
                      out_channels=c) for c in (130, 256, 200, 96, 32)]
    narrowed = set()
    for tile in ("wide_n128", "square_n128", "wide_n64", "tall_n64"):
        monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
        n = int(tile.rsplit("_n", 1)[1])
        for case in cases:
            monkeypatch.setenv("CONV_POOL_GENERAL_NARROW_TAIL", "0")
            plan = general_plan(library, case, element)
            if plan is None or plan["tile"] != tile:
                continue
            assert plan["tail_n"] == 0, (case, plan)
            monkeypatch.delenv("CONV_POOL_GENERAL_NARROW_TAIL")
            narrow = general_plan(library, case, element)
            tail = case.out_channels - (-(-case.out_channels // n) - 1) * n
            expected = n // 2 if plan["input"] == "tma" and tail <= n // 2 else 0
            assert narrow["tail_n"] == expected, (case, narrow)
            assert {k: v for k, v in narrow.items() if k != "tail_n"} == \
                {k: v for k, v in plan.items() if k != "tail_n"}, case
            others = [general_plan(library, case, element, split=True)] \
                if element == FLOAT32 else []
            monkeypatch.setenv("CONV_POOL_GENERAL_TMA", "0")
            others.append(general_plan(library, case, element))
            monkeypatch.delenv("CONV_POOL_GENERAL_TMA")
            assert all(other is None or other["tail_n"] == 0 for other in others), case
            if expected:
                narrowed.add((n, case.out_channels))
    assert {(128, 130), (64, 130), (64, 32)} <= narrowed, narrowed
    assert not any(c in (256, 200) and n == 128 for n, c in narrowed), narrowed


def test_general_kernel_copies_float32_nchw_inputs_where_they_feed_enough_work(library,
                                                                              monkeypatch):
    """NCHW inputs: the warp-specialized form reads a slice-planar copy, except float32 ones
    of more than 2^20 elements (kTmaCopyMaxSmallInput) whose out_channels x taps is below 128
    (kTmaCopyMinWork), which the cp.async loaders read element by element; with those loaders
    forced ($CONV_POOL_GENERAL_TMA=0) an NHWC copy of float32 ones where out_channels x taps
    >= 2048 (kNhwcCopyMinWork), else element-by-element loads, and 16-bit ones always
    copied."""
    for out_channels, kernel in ((128, 1), (15, 3)):
        # 64 x 64 x 20 x 20 = 1,638,400 elements of x: above the small inputs' bound.
        case = ConvPoolCase("few", 64, 64, out_channels - 1, 20, 20, (kernel, kernel),
                            padding=(kernel // 2, kernel // 2))
        plan = general_plan(library, case, FLOAT32)
        assert plan["input"] == "planar" and plan["nhwc_copy"] == 0, (case, plan)
        assert general_plan(library, case, FLOAT16)["input"] == "tma", case
        # 40 images: 1,024,000 elements, a small input: the copy whatever the work.
        assert general_plan(library, replace(case, batch=40), FLOAT32)["input"] == "tma", case
        assert general_plan(library, replace(case, batch=41), FLOAT32)["input"] == "planar"
        case = replace(case, out_channels=out_channels)
        assert general_plan(library, case, FLOAT32)["input"] == "tma", case
    for out_channels, kernel, copied in ((228, 3, True), (227, 3, False), (2048, 1, True),
                                         (2047, 1, False)):
        case = ConvPoolCase("copy", 4, 64, out_channels, 20, 20, (kernel, kernel),
                            padding=(kernel // 2, kernel // 2), pool_kernel=(3, 3),
                            pool_stride=(2, 2))
        for element in (FLOAT32, FLOAT16):
            plan = general_plan(library, case, element)
            assert plan["input"] == "tma" and plan["nhwc_copy"] == 1, (case, plan)
        monkeypatch.setenv("CONV_POOL_GENERAL_TMA", "0")
        assert general_plan(library, case, FLOAT32)["nhwc_copy"] == int(copied), case
        assert general_plan(library, case, FLOAT16)["nhwc_copy"] == 1, case
        monkeypatch.delenv("CONV_POOL_GENERAL_TMA")


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_general_plan_follows_the_layout_of_x(library, element):
    """The plan is made for x's strides, as the launch makes it: a channels-last x whose
    channels fill whole 16-byte slices is read in place (nhwc_copy=0, no copy in the workspace),
    where the NCHW x of the same layer is copied first (nhwc_copy=1); channels that do not fill
    their last slice are copied in either layout."""
    per_slice = 4 if element == FLOAT32 else 8
    for case in (ConvPoolCase("1x1", 8, 16 * per_slice, 128, 28, 28, (1, 1)),
                 ConvPoolCase("5x5/2", 4, 12 * per_slice, 96, 33, 41, (5, 5), stride=(2, 2),
                              padding=(2, 2), pool_kernel=(3, 3), pool_stride=(2, 2))):
        nchw = kernel_choice.variant_plan(library, case, "general_wgmma", element)
        last = kernel_choice.variant_plan(library, case, "general_wgmma", element,
                                          channels_last=True)
        nchw_general = general_plan(library, case, element)
        last_general = general_plan(library, case, element, channels_last=True)
        assert nchw_general["input"] == last_general["input"] == "tma", case
        assert (nchw_general["nhwc_copy"], last_general["nhwc_copy"]) == (1, 0), case
        copy_bytes = case.batch * case.in_channels * case.height * case.width * (
            4 if element == FLOAT32 else 2)
        assert last["workspace_bytes"] + copy_bytes <= nchw["workspace_bytes"], (case, nchw,
                                                                                  last)
        ragged = replace(case, in_channels=case.in_channels + per_slice // 2)
        for channels_last in (False, True):
            plan = general_plan(library, ragged, element, channels_last=channels_last)
            assert plan["nhwc_copy"] == 1, (ragged, channels_last, plan)


def expected_swizzle(case, element, step_chunks):
    """Plan::x_swizzle's rule: the widest of 128, 64 and 32 bytes that divides a pixel's
    channels and a step's run of chunks (32 bytes a chunk), else 0."""
    channel_bytes = case.in_channels * (4 if element == FLOAT32 else 2)
    return next((w for w in (128, 64, 32)
                 if channel_bytes % w == 0 and 32 * step_chunks % w == 0), 0)


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_general_kernel_swizzles_channels_last_stages_read_in_place(library, element, seed,
                                                                    monkeypatch):
    """A channels-last x read in place lands in swizzled stages of W-byte channel groups
    (Plan::x_swizzle, the rule in expected_swizzle), over random shapes; never where x is
    copied first (NCHW), and never with $CONV_POOL_GENERAL_SWIZZLE=0; among the step sizes
    whose stages fit, the widest swizzle, then the most chunks. A stage's bytes are a multiple
    of its swizzle's 8 x W-byte pattern."""
    # Few-channel layers unfolded: the rules below are the unfolded shape's (folding has its
    # own test, test_column_folding_plans_the_folded_layer).
    monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
    rng = random.Random(seed)
    per_slice = 4 if element == FLOAT32 else 8
    widths = set()
    cases = [replace(fuzz_case(rng, f"fuzz_{i}"),
                     in_channels=per_slice * rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 32]))
             for i in range(40)]
    # Steps of 2 and 4 chunks: 64- and 128-byte groups (most steps hold 1 chunk: 32 bytes).
    cases += [ConvPoolCase("2x2", 8, 256, 128, 28, 28, (2, 2), padding=(1, 1)),
              ConvPoolCase("1x1", 32, 256, 128, 28, 28, (1, 1))]
    for case in cases:
        plan = general_plan(library, case, element, channels_last=True)
        if plan is None or plan["input"] != "tma":
            continue
        assert plan["nhwc_copy"] == 0, (case, plan)
        assert plan["swizzle"] == expected_swizzle(case, element, plan["step_chunks"]), (case,
                                                                                         plan)
        assert plan["stage_bytes"] % max(128, 8 * plan["swizzle"]) == 0, (case, plan)
        widths.add(plan["swizzle"])
        assert general_plan(library, case, element)["swizzle"] == 0, case
        monkeypatch.setenv("CONV_POOL_GENERAL_SWIZZLE", "0")
        assert general_plan(library, case, element, channels_last=True)["swizzle"] == 0, case
        monkeypatch.delenv("CONV_POOL_GENERAL_SWIZZLE")
    assert {0, 32, 64, 128} <= widths, widths
    # The 1 x 1 layer's stages fit 6 chunks a step (64-byte groups) but take 4 (128-byte
    # groups): the widest swizzle first. Steps of up to 3 chunks forced
    # ($CONV_POOL_GENERAL_STEP_CHUNKS, a key of the plan cache) take 2 (64 bytes), not 3 (32).
    pointwise = cases[-1]
    plan = general_plan(library, pointwise, element, channels_last=True)
    assert (plan["step_chunks"], plan["swizzle"]) == (4, 128), plan
    monkeypatch.setenv("CONV_POOL_GENERAL_STEP_CHUNKS", "3")
    plan = general_plan(library, pointwise, element, channels_last=True)
    assert (plan["step_chunks"], plan["swizzle"]) == (2, 64), plan
    monkeypatch.delenv("CONV_POOL_GENERAL_STEP_CHUNKS")
    assert general_plan(library, pointwise, element, channels_last=True)["step_chunks"] == 4
    # $CONV_POOL_GENERAL_GROUP_ROWS (a key of the plan cache too): steps of at most that many
    # kernel rows.
    square = ConvPoolCase("3x3", 8, 256, 128, 28, 28, (3, 3), padding=(1, 1))
    assert general_plan(library, square, element, channels_last=True)["group_rows"] == 3
    monkeypatch.setenv("CONV_POOL_GENERAL_GROUP_ROWS", "1")
    assert general_plan(library, square, element, channels_last=True)["group_rows"] == 1
    monkeypatch.delenv("CONV_POOL_GENERAL_GROUP_ROWS")
    assert general_plan(library, square, element, channels_last=True)["group_rows"] == 3


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_even_steps_fill_the_same_chunk_steps_evenly(library, element, seed, monkeypatch):
    """$CONV_POOL_GENERAL_EVEN_STEPS=1 (a key of the plan cache): where a plan's last chunk step
    would be short (its missing chunks staged and multiplied as zeros), the reduction's chunks
    are spread evenly over the same number of chunk steps, ceil(chunks / steps) a step, unless
    that narrows a channels-last stage's swizzle; never more chunk steps, never fewer stages.
    Compared where both plans take the same tile and kernel-row grouping, over random shapes."""
    def chunk_steps(plan):
        return -(-plan["chunks"] // plan["step_chunks"])

    # SqueezeNet 1.1's 64 -> 16 1 x 1 at 55^2 under 3 x 3 / 2 (16-bit: 4 chunks; the stages
    # fit 3 a step, so 3 + 1 by default); DenseNet-121's 160 -> 128 at 56^2 (float32: 20
    # chunks, 6 a step by default, so 6 + 6 + 6 + 2).
    squeeze = ConvPoolCase("squeeze", 128, 64, 16, 55, 55, (1, 1), pool_kernel=(3, 3),
                           pool_stride=(2, 2))
    dense = ConvPoolCase("dense", 32, 160, 128, 56, 56, (1, 1), pool_kernel=(3, 3),
                         pool_stride=(2, 2), bias=False)
    rng = random.Random(seed)
    # Random shapes, half of them 1 x 1 over 2-17 chunks of channels (where a step's stages
    # hold fewer chunks than the reduction has, and the last step is most often short).
    per_chunk = 8 if element == FLOAT32 else 16
    cases = [squeeze, dense]
    for i in range(160):
        case = fuzz_case(rng, f"fuzz_{i}")
        if i % 2:
            case = replace(case, kernel_size=(1, 1), dilation=(1, 1), padding=(0, 0),
                           in_channels=per_chunk * rng.randint(2, 17))
        cases.append(case)
    compared, evened = 0, 0
    for index, case in enumerate(cases):
        channels_last = index >= 2 and rng.random() < 0.5
        monkeypatch.delenv("CONV_POOL_GENERAL_EVEN_STEPS", raising=False)
        plan = general_plan(library, case, element, channels_last=channels_last)
        monkeypatch.setenv("CONV_POOL_GENERAL_EVEN_STEPS", "1")
        even = general_plan(library, case, element, channels_last=channels_last)
        if plan is None:
            assert even is None, (case, even)
            continue
        same = ("tile", "group_rows", "gathered", "input", "images", "chunks")
        if any(plan[key] != even[key] for key in same):
            assert case is not squeeze and case is not dense, (plan, even)
            continue
        compared += 1
        steps = chunk_steps(plan)
        assert chunk_steps(even) == steps, (case, plan, even)
        assert even["step_chunks"] <= plan["step_chunks"], (case, plan, even)
        assert even["swizzle"] >= plan["swizzle"], (case, plan, even)
        assert even["stages"] >= plan["stages"], (case, plan, even)
        balanced = -(-plan["chunks"] // steps)
        assert even["step_chunks"] in (balanced, plan["step_chunks"]), (case, plan, even)
        if case.kernel_size == (1, 1) and plan["swizzle"] == 0:
            # (every step size of a 1 x 1 layer is a K-step count the kernel unrolls)
            assert even["step_chunks"] == balanced, (case, plan, even)
        evened += even["step_chunks"] < plan["step_chunks"]
        if case is squeeze and element != FLOAT32:
            assert (plan["step_chunks"], even["step_chunks"], steps) == (3, 2, 2), (plan, even)
        if case is dense and element == FLOAT32:
            assert (plan["step_chunks"], even["step_chunks"], steps) == (6, 5, 4), (plan, even)
    print(f"{compared} plans compared, {evened} evened")
    assert compared >= 80 and evened >= 1, (compared, evened)


def general_workspace(library, variant, case, element, weight_stride, weight_address=1 << 20):
    """conv_relu_maxpool_workspace_bytes of the general kernel for a channels-last x read in
    place (16-byte aligned, whole slices: no copy of x) and a weight of these strides at this
    address (addresses are never read)."""
    ops = kernel_choice.dense_operands(case, channels_last=True)
    ops.x = 1 << 24
    ops.weight = weight_address
    ops.weight_stride[:] = list(weight_stride)
    return library.conv_relu_maxpool_workspace_bytes(
        ctypes.byref(shape_of(case, element)), variant, ctypes.byref(H200), ctypes.byref(ops))


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_general_kernel_reads_whole_slice_weights_in_place(library, variant_names, element, seed,
                                                           monkeypatch):
    """The warp-specialized form reads the weight itself, one box a step, where its blocks fit
    in one round on the GPU (kInPlaceWeightsMaxRounds), the weight has at least 65536 elements
    (kInPlaceWeightsMinElements) or the packing would be the preparation launch's only work
    (x read in place, no split counters: $CONV_POOL_GENERAL_LAUNCH_FREE), and its channels are
    contiguous in whole 16-byte slices with strides and address multiples of 16 bytes: 1 x 1
    weights and channels-last ones of any kernel (also a channel slice of a wider weight). Then
    nothing is packed: with x read in place too, no workspace at all. Layers of more rounds,
    smaller weights beside a copy of x or split counters, NCHW weights of larger kernels,
    channel counts that are not whole slices, misaligned weights, the cp.async loaders
    ($CONV_POOL_GENERAL_TMA=0), the 3xTF32 form and $CONV_POOL_GENERAL_PACK=1 keep the
    packing."""
    # Few-channel layers unfolded and every layer as given: the rules below are the unfolded
    # shape's in its own orientation (folding and transposition have their own tests,
    # test_column_folding_plans_the_folded_layer, test_layers_run_transposed_where_...).
    monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", "0")
    variant = variant_names_to_ids(variant_names)["general_wgmma"]
    per_slice = 4 if element == FLOAT32 else 8
    element_bytes = 4 if element == FLOAT32 else 2
    pointwise = ConvPoolCase("1x1", 4, 256, 256, 14, 14, (1, 1))
    assert general_plan(library, pointwise, element)["weights"] == "in_place"
    small = replace(pointwise, out_channels=255)  # 65280 weights
    assert general_plan(library, small, element)["weights"] == "packed"  # beside x's copy
    plan = general_plan(library, small, element, channels_last=True)  # x read in place
    launch_free = plan["split"] == 1 or plan["cluster"] == 1  # (no counters to zero)
    assert plan["weights"] == ("in_place" if launch_free else "packed"), plan
    monkeypatch.setenv("CONV_POOL_GENERAL_LAUNCH_FREE", "0")
    assert general_plan(library, small, element, channels_last=True)["weights"] == "packed"
    monkeypatch.delenv("CONV_POOL_GENERAL_LAUNCH_FREE")
    odd = replace(pointwise, in_channels=256 + per_slice // 2)
    assert general_plan(library, odd, element)["weights"] == "packed"
    k3 = ConvPoolCase("3x3", 4, 64, 96, 14, 14, (3, 3), padding=(1, 1))
    assert general_plan(library, k3, element)["weights"] == "packed"  # NCHW weight, 9 taps
    rounds = replace(pointwise, batch=4 * 132)  # 4 x 132 x 2 tiles of one 14 x 14 image
    plan = general_plan(library, rounds, element)
    assert plan["tiles"] * plan["split"] > 132 * plan["blocks_per_sm"], plan
    assert plan["weights"] == "packed", plan
    rng = random.Random(seed)
    checked = rounds = launch_free_small = 0
    for i in range(200):
        case = fuzz_case(rng, f"fuzz_{i}")
        case = replace(case, in_channels=max(per_slice, case.in_channels // per_slice * per_slice),
                       batch=case.batch * (64 if i % 4 == 0 else 1),
                       out_channels=case.out_channels * (8 if i % 2 else 1))
        # The plan for general_workspace's x: channels-last, read in place.
        plan = general_plan(library, case, element, channels_last=True)
        if plan is None or plan["input"] != "tma":
            continue
        c, taps = case.in_channels, case.kernel_size[0] * case.kernel_size[1]
        kw = case.kernel_size[1]
        n = 128 if plan["tile"].endswith("n128") else 64
        chunk = 2 * per_slice
        runs = -(-(-(-c // chunk)) // plan["step_chunks"])
        # (A narrow last channel block, Plan::tail_n, packs tail_n rows a slice.)
        rows = (-(-case.out_channels // n) - 1) * n + (plan["tail_n"] or n)
        packed = -(-(rows * runs * plan["step_chunks"] * taps * 32) // 256) * 256
        channels_last = (c * taps, 1, kw * c, c)
        wider = ((c + 2 * per_slice) * taps, 1, kw * (c + 2 * per_slice), c + 2 * per_slice)
        nchw = (c * taps, taps, kw, 1)
        # One round, and large enough or the preparation launch's only work (x is in place).
        launch_free = not plan["nhwc_copy"] and (plan["split"] == 1 or plan["cluster"] == 1)
        large = case.out_channels * c * taps >= 65536
        one_round = (plan["tiles"] * plan["split"] <= 132 * plan["blocks_per_sm"] and
                     (large or launch_free))
        launch_free_small += one_round and not large
        in_place = general_workspace(library, variant, case, element, channels_last)
        assert general_workspace(library, variant, case, element, wider) == in_place, case
        # What packing adds: the packed weights' region (the rest, split partial sums, alike).
        misaligned = general_workspace(library, variant, case, element, channels_last,
                                       (1 << 20) + element_bytes)
        assert misaligned - in_place == (packed if one_round else 0), (case, plan)
        if taps > 1:
            assert general_workspace(library, variant, case, element, nchw) == misaligned
        expected = "in_place" if taps == 1 and one_round else "packed"
        assert plan["weights"] == expected, (case, plan)
        rounds += not one_round  # (more rounds or fewer weights)
        monkeypatch.setenv("CONV_POOL_GENERAL_PACK", "1")
        assert general_workspace(library, variant, case, element, channels_last) == misaligned
        assert general_plan(library, case, element)["weights"] == "packed"
        monkeypatch.delenv("CONV_POOL_GENERAL_PACK")
        checked += 1
    print(f"{checked} random geometries, {rounds} of them of more rounds or fewer weights "
          f"beside counters, {launch_free_small} in place under 65536 weights")
    assert checked >= 50 and rounds >= 5 and launch_free_small >= 5, (
        checked, rounds, launch_free_small)
    monkeypatch.setenv("CONV_POOL_GENERAL_TMA", "0")
    assert general_plan(library, pointwise, element)["weights"] == "packed"
    if element == FLOAT32:
        monkeypatch.delenv("CONV_POOL_GENERAL_TMA")
        assert general_plan(library, pointwise, element, split=True)["weights"] == "packed"


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_blocks_copy_their_own_part_of_a_small_nchw_x(library, element, seed, monkeypatch):
    """Plan::self_copy: where the preparation launch would only copy x (weights read in place,
    no split counters), 1 x 1 layers at stride 1 (strided ones subsampled) over a copied x whose
    blocks fit one round, one tile a block, each block's part of the copy at most
    kSelfCopyMaxBytes (384 x 64), have each block write its own part and no launch before
    the kernel. Channels-last x (read in place), larger kernels, several rounds, split
    counters, $CONV_POOL_GENERAL_SELF_COPY=0 and (above the cap, unless the hook is "force")
    large parts keep the launch's copy; weights that cannot be read in place keep it too."""
    monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", "0")
    small = ConvPoolCase("small", 1, 32, 64, 10, 10, (1, 1))  # 12.8 KB of float32 x
    plan = general_plan(library, small, element)
    assert (plan["nhwc_copy"], plan["self_copy"], plan["weights"]) == (1, 1, "in_place"), plan
    assert general_plan(library, small, element, channels_last=True)["self_copy"] == 0
    assert general_plan(library, replace(small, stride=(2, 2)), element)["self_copy"] == 1
    k3 = replace(small, kernel_size=(3, 3), padding=(1, 1))
    assert general_plan(library, k3, element)["self_copy"] == 0
    assert general_plan(library, replace(small, batch=4 * 132), element)["self_copy"] == 0
    odd = replace(small, in_channels=34)  # not whole slices: the weights are packed
    assert general_plan(library, odd, element)["self_copy"] == 0
    monkeypatch.setenv("CONV_POOL_GENERAL_SELF_COPY", "0")
    off = general_plan(library, small, element)
    assert (off["self_copy"], off["weights"]) == (0, "packed"), off
    rng = random.Random(seed)
    taken, capped = 0, 0
    for i in range(300):
        case = fuzz_case(rng, f"fuzz_{i}")
        case = replace(case, kernel_size=(1, 1), dilation=(1, 1), padding=(0, 0),
                       stride=(1 + i % 2, 1 + i % 2), batch=1 + i % 3,
                       in_channels=8 * (1 + case.in_channels % 96))
        if min(case.pooled_out()) < 1:
            continue
        monkeypatch.delenv("CONV_POOL_GENERAL_SELF_COPY")
        plan = general_plan(library, case, element)
        monkeypatch.setenv("CONV_POOL_GENERAL_SELF_COPY", "force")
        forced = general_plan(library, case, element)
        if plan is None or plan["input"] != "tma":
            continue
        one_round = plan["tiles"] * plan["split"] <= 132 * plan["blocks_per_sm"]
        eligible = (plan["nhwc_copy"] == 1 and one_round and not plan["persistent"] and
                    (plan["split"] == 1 or plan["cluster"] == 1))
        rows, cols = (int(v) for v in plan["halo"].split("x"))
        if plan["self_copy"]:
            assert eligible and plan["weights"] == "in_place", (case, plan)
            assert forced == plan, (case, plan, forced)
        elif eligible and forced["self_copy"]:
            # The cap: the block's slices over its boxes' rows and columns.
            share = -(-plan["steps"] // plan["split"])
            slices = min(2 * share * plan["step_chunks"], case.in_channels // (
                4 if element == FLOAT32 else 8))
            assert plan["images"] * slices * 16 * rows * cols > 384 * 64, (case, plan)
            capped += 1
        else:
            assert not eligible or forced["weights"] == "packed", (case, plan, forced)
        taken += plan["self_copy"]
    print(f"{taken} plans copy their own part of x, {capped} others only above the cap")
    assert taken >= 10 and capped >= 3, (taken, capped)


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_general_kernel_pairs_2x2_pools_whose_windows_never_clip(library, element, seed,
                                                                 monkeypatch):
    """Every tile of the warp-specialized form takes the maxima of 2 x 2 / 2 pools in registers
    (Plan::paired_pool) exactly where no window clips: no pool padding, and every window inside
    the conv output (floor mode; ceil mode where it adds no partial window), with one epilogue
    pass. Other pools, the cluster split (which sums partial tiles before it pools), the
    cp.async loaders ($CONV_POOL_GENERAL_TMA=0), the 3xTF32 form and
    $CONV_POOL_GENERAL_PAIRED=0 stage the whole conv tile."""
    base = ConvPoolCase("pairs", 16, 256, 256, 30, 30, (3, 3), padding=(1, 1))
    odd = replace(base, height=31, width=29)  # floor mode drops the last row and column
    monkeypatch.setenv("CONV_POOL_GENERAL_TILE", "wide_n128")
    assert general_plan(library, base, element)["paired"] == 1
    assert general_plan(library, odd, element)["paired"] == 1
    assert general_plan(library, replace(base, ceil_mode=True), element)["paired"] == 1
    assert general_plan(library, replace(odd, ceil_mode=True), element)["paired"] == 0
    assert general_plan(library, replace(base, pool_padding=(1, 1)), element)["paired"] == 0
    assert general_plan(library, replace(base, pool_kernel=(3, 3), pool_stride=(2, 2)),
                        element)["paired"] == 0
    assert general_plan(library, replace(base, pool_kernel=(2, 2), pool_stride=(1, 1)),
                        element)["paired"] == 0
    monkeypatch.setenv("CONV_POOL_GENERAL_TMA", "0")
    assert general_plan(library, base, element)["paired"] == 0
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA")
    monkeypatch.setenv("CONV_POOL_GENERAL_PAIRED", "0")  # (the measurement hook)
    assert general_plan(library, base, element)["paired"] == 0
    monkeypatch.delenv("CONV_POOL_GENERAL_PAIRED")
    if element == FLOAT32:
        assert general_plan(library, base, element, split=True)["paired"] == 0
    for tile in ("wide_n64", "square_n64", "tall_n64", "square_n128"):
        monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
        assert general_plan(library, base, element)["paired"] == 1, tile
    monkeypatch.delenv("CONV_POOL_GENERAL_TILE")
    rng = random.Random(seed)
    paired = 0
    for i in range(300):
        case = fuzz_case(rng, f"fuzz_{i}")
        if i % 2:  # half of them under a 2 x 2 / 2 pool (the fuzz rarely draws one)
            case = replace(case, pool_kernel=(2, 2), pool_stride=(2, 2),
                           pool_padding=(0, 0), ceil_mode=bool(i % 4 == 1))
        if not case.is_valid():
            continue
        forced = ("wide_n128", "square_n128", "wide_n64", "square_n64", "tall_n64",
                  None)[i // 2 % 6]  # (or the choice)
        if forced is None:
            monkeypatch.delenv("CONV_POOL_GENERAL_TILE", raising=False)
        else:
            monkeypatch.setenv("CONV_POOL_GENERAL_TILE", forced)
        plan = general_plan(library, case, element)
        if plan is None:
            continue
        conv_h, conv_w = case.conv_out()
        out_h, out_w = case.pooled_out()
        inside = (case.pool_kernel == (2, 2) and case.effective_pool_stride == (2, 2) and
                  case.pool_padding == (0, 0) and 2 * out_h <= conv_h and 2 * out_w <= conv_w)
        expected = (inside and plan["input"] == "tma" and plan["passes"] == 1 and
                    not plan["cluster"])
        assert plan["paired"] == int(expected), (case, plan)
        paired += plan["paired"]
    print(f"{paired} of 300 random geometries paired")
    assert paired >= 20, paired


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_general_kernel_is_persistent_on_paired_plans_of_several_rounds(library, element, seed,
                                                                      monkeypatch):
    """Persistent blocks (Plan::persistent) where the plan pools 2 x 2 / 2 windows in registers
    (its staged windows fit beside three stages) and the layer's tiles take more than one
    round of the resident blocks (kPersistentMinRounds); layers of one round (the cluster
    split's) and plans that stage the whole conv tile keep one tile a block, unless
    $CONV_POOL_GENERAL_PERSISTENT says otherwise (1: wherever it fits, steps sized for the
    paired windows; 0: never)."""
    pointwise = ConvPoolCase("pointwise", 32, 64, 256, 56, 56, (1, 1))  # ResNet-50's
    plan = general_plan(library, pointwise, element)
    assert (plan["persistent"], plan["paired"], plan["passes"]) == (1, 1, 1), plan
    assert plan["tiles"] > H200.sm_count * plan["blocks_per_sm"], plan
    one_round = general_plan(library, replace(pointwise, batch=1), element)
    assert one_round["persistent"] == 0 and one_round["tiles"] <= H200.sm_count, one_round
    overlapping = replace(pointwise, pool_kernel=(3, 3), pool_stride=(2, 2))
    assert general_plan(library, overlapping, element)["persistent"] == 0
    monkeypatch.setenv("CONV_POOL_GENERAL_PERSISTENT", "0")
    assert general_plan(library, pointwise, element)["persistent"] == 0
    monkeypatch.setenv("CONV_POOL_GENERAL_PERSISTENT", "1")
    assert general_plan(library, overlapping, element)["persistent"] == 1
    assert general_plan(library, replace(pointwise, batch=1), element)["persistent"] == 1
    # On request, the steps leave room for the paired windows where the rule's plans have none.
    wide = ConvPoolCase("wide", 128, 1024, 1024, 14, 14, (1, 1))  # ResNeXt-50's
    plan = general_plan(library, wide, element)
    assert (plan["persistent"], plan["paired"], plan["passes"]) == (1, 1, 1), plan
    monkeypatch.delenv("CONV_POOL_GENERAL_PERSISTENT")
    rng = random.Random(seed)
    persistent = 0
    for i in range(100):  # layers of many tiles, half of them under a 2 x 2 / 2 pool
        kernel = rng.choice((1, 3, 5))
        case = ConvPoolCase(f"layer_{i}", rng.choice((8, 32, 128)), rng.randint(8, 512),
                            rng.randint(8, 512), rng.randint(14, 112), rng.randint(14, 112),
                            (kernel, kernel), padding=(kernel // 2,) * 2,
                            pool_kernel=(2, 2) if i % 2 else (3, 3), pool_stride=(2, 2))
        plan = general_plan(library, case, element)
        if plan is None or not plan["persistent"]:
            continue
        persistent += 1
        assert plan["paired"] == 1 and plan["passes"] == 1 and not plan["cluster"], (case, plan)
        assert plan["tiles"] > H200.sm_count * plan["blocks_per_sm"], (case, plan)
    assert persistent >= 10, persistent


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16], ids=["float32", "float16"])
def test_direct_pairs_take_paired_plans_without_a_split_and_no_window_bytes(library, element,
                                                                            seed, monkeypatch):
    """Plan::direct_pairs (the plan's `direct`, the default): paired plans without a split
    store their windows from the registers and no other plan does; none with
    $CONV_POOL_GENERAL_DIRECT_PAIRS=0. Their persistent plans reserve no bytes for the windows,
    so that at least as many stages fit (and plans whose windows did not fit beside three
    stages may become persistent); every other plan is the one under the hook."""
    rng = random.Random(seed)
    direct = persistent = 0
    for i in range(120):  # half of them under a 2 x 2 / 2 pool, some at batch 1 (split)
        kernel = rng.choice((1, 3, 5))
        case = ConvPoolCase(f"layer_{i}", rng.choice((1, 8, 32, 128)), rng.randint(8, 512),
                            rng.randint(8, 512), rng.randint(7, 112), rng.randint(7, 112),
                            (kernel, kernel), padding=(kernel // 2,) * 2,
                            pool_kernel=(2, 2) if i % 2 else (3, 3), pool_stride=(2, 2))
        monkeypatch.setenv("CONV_POOL_GENERAL_DIRECT_PAIRS", "0")
        staged = general_plan(library, case, element)
        monkeypatch.delenv("CONV_POOL_GENERAL_DIRECT_PAIRS")
        plan = general_plan(library, case, element)
        if plan is None:
            assert staged is None, case
            continue
        assert staged["direct"] == 0, (case, staged)
        assert plan["direct"] == int(plan["paired"] == 1 and plan["split"] == 1), (case, plan)
        direct += plan["direct"]
        differs = {k: (staged[k], plan[k]) for k in plan if plan[k] != staged[k]}
        if plan["direct"] and plan["persistent"]:  # (also where the windows kept it from it)
            persistent += 1
            assert plan["stages"] >= staged["stages"], (case, staged, plan)
            assert set(differs) <= {"direct", "persistent", "stages", "smem"}, (case, differs)
        else:
            assert set(differs) <= {"direct"}, (case, differs)
    assert direct >= 10 and persistent >= 5, (direct, persistent)


def test_forced_persistent_split_plans_keep_room_for_their_paired_windows(library,
                                                                          monkeypatch):
    """With $CONV_POOL_GENERAL_PERSISTENT=1 a layer of one round may split; its persistent
    paired plan then stages its windows (not direct), and its shared memory holds them past the
    stages, beside the bias: every tile, forced splits of 1 to 8, float32 and float16 (the
    staged windows once landed on the bias and K-step table)."""
    monkeypatch.setenv("CONV_POOL_GENERAL_PERSISTENT", "1")
    monkeypatch.delenv("CONV_POOL_GENERAL_DIRECT_PAIRS", raising=False)
    tiles = {"wide_n128": (8, 32, 128), "square_n128": (16, 16, 128), "wide_n64": (8, 32, 64),
             "square_n64": (16, 16, 64), "tall_n64": (16, 32, 64)}
    staged = direct = 0
    for case in (ConvPoolCase("paired_split", 1, 320, 72, 15, 23, (3, 3), padding=(1, 1)),
                 ConvPoolCase("split_pointwise", 2, 680, 136, 7, 9, (1, 1))):
        for tile, (rows, cols, n) in tiles.items():
            monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
            for split in ("", "2", "4", "8"):
                monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT", split or "0")
                for element in (FLOAT32, FLOAT16):
                    plan = general_plan(library, case, element)
                    if not (plan["persistent"] and plan["paired"]):
                        continue
                    assert plan["direct"] == int(plan["split"] == 1), plan
                    if plan["direct"]:
                        direct += 1
                        continue
                    staged += 1
                    windows = -(-n * ((rows // 2) * (cols // 2) + 4) * 4 // 128) * 128
                    assert plan["smem"] >= plan["stages"] * plan["stage_bytes"] + windows + 4 * n, (
                        case, tile, split, plan)
    assert staged >= 10 and direct >= 1, (staged, direct)


def test_gpu_split_and_image_tests_get_their_plans_in_every_form(library, monkeypatch):
    """tests/test_general_wgmma_gpu.py's split test forces splits of 2, 4 and 8 on two tiles
    and requires the plan to take them in every form of the kernel (its PATH_HOOKS), and its
    side-by-side images test wants each tile of IMAGE_TILES and plans with and without a
    split, and its test of splits over several rounds a layer that the wave rule splits: the
    host plans here, so that a change of the plans that leaves a form without them
    fails in CI, not first on the GPU (the persistent forms once took 9 steps for the
    pointwise layer, which do not split 4 or 8 ways; the split's fill rule once split every
    image layer there)."""
    spec = importlib.util.spec_from_file_location(
        "general_wgmma_gpu_cases", Path(__file__).with_name("test_general_wgmma_gpu.py"))
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    checked = 0
    for path, hooks in gpu.PATH_HOOKS.items():
        for key in {key for every in gpu.PATH_HOOKS.values() for key in every}:
            monkeypatch.delenv(key, raising=False)
        for key, value in hooks.items():
            monkeypatch.setenv(key, value)
        for tile in ("wide_n64", "square_n128"):
            monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
            for split in (2, 4, 8):
                monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT", str(split))
                for case in gpu.split_cases(path):
                    for element in (FLOAT32, FLOAT16, BFLOAT16):
                        plan = general_plan(library, case, element)
                        assert plan["tile"] == tile and plan["split"] == split, (
                            path, case.name, element, plan)
                        checked += 1
        monkeypatch.delenv("CONV_POOL_GENERAL_SPLIT")
        for images, element in itertools.product((2, 4), (FLOAT32, FLOAT16, BFLOAT16)):
            monkeypatch.setenv("CONV_POOL_GENERAL_IMAGES", str(images))
            tiles, splits = set(), set()
            for tile in gpu.TILES:
                monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
                for case in gpu.IMAGE_CASES:
                    plan = general_plan(library, case, element)
                    if plan["tile"] == tile and plan["images"] == images:
                        tiles.add(tile)
                        splits.add(plan["split"] > 1)
            assert tiles == gpu.IMAGE_TILES[images] and splits == {False, True}, (
                path, images, element, tiles, splits)
        monkeypatch.delenv("CONV_POOL_GENERAL_IMAGES")
        # The test of splits over several rounds: its layer split in two at the first batch
        # past the SMs in tiles, in every form it runs (not the persistent or cp.async ones).
        monkeypatch.delenv("CONV_POOL_GENERAL_TILE")
        if hooks.get("CONV_POOL_GENERAL_PERSISTENT") != "1" and path != "cpasync":
            for element, channels_last in itertools.product((FLOAT32, FLOAT16, BFLOAT16),
                                                            (False, True)):
                for batch in range(1, 65):
                    plan = general_plan(library, replace(gpu.WAVE_CASE, batch=batch), element,
                                        channels_last=channels_last)
                    if plan["tiles"] > H200.sm_count:
                        break
                assert plan["split"] == 2 and plan["blocks_per_sm"] == 1, (path, element, plan)
    assert checked == len(gpu.PATH_HOOKS) * 2 * 3 * 2 * 3, checked


def test_general_kernel_copy_writes_every_row_a_tap_reads_and_no_other(library, seed,
                                                                        monkeypatch):
    """The slice-planar copy writes only the input rows whose residue mod the row stride some
    kernel row reads (copy_rows=phases:mask in the plan): every row a tap of any conv row of
    the layer reads, counted here one by one over the conv rows (and the rows past them that a
    tile's last row of squares computes), has its residue in the mask, and each residue in it
    is some tap's. Stride 1, or every residue read: 1:1 (all rows)."""
    # The layer in its own orientation (transposition has its own test,
    # test_layers_run_transposed_where_the_hook_and_the_cost_say).
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", "0")
    rng = random.Random(seed)
    masked = 0
    for i in range(400):
        case = fuzz_case(rng, f"fuzz_{i}")
        plan = general_plan(library, case, FLOAT16)
        if plan is None:
            continue
        phases, mask = (int(v, 16) for v in plan["copy_rows"].split(":"))
        sh, ph = case.stride[0], case.padding[0]
        kh, dh = case.kernel_size[0], case.dilation[0]
        taps = {(r * dh - ph) % sh for r in range(kh)}
        if sh == 1 or len(taps) == sh:
            assert (phases, mask) == (1, 1), (case, plan["copy_rows"])
            continue
        masked += 1
        assert phases == sh and mask == sum(1 << t for t in taps), (case, plan["copy_rows"])
        conv_rows = (case.height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        for oh in range(conv_rows + 16):
            for r in range(kh):
                row = oh * sh - ph + r * dh
                if 0 <= row < case.height:
                    assert (mask >> (row % sh)) & 1, (case, oh, r, row, plan["copy_rows"])
    print(f"{masked} of 400 random geometries copy some rows only")
    assert masked >= 40, masked
    pointwise = ConvPoolCase("1x1/2", 8, 64, 128, 28, 28, (1, 1), stride=(2, 2), padding=(1, 1))
    assert general_plan(library, pointwise, FLOAT16)["copy_rows"] == "2:2"  # odd rows only
    dense = ConvPoolCase("3x3/2", 8, 64, 128, 28, 28, (3, 3), stride=(2, 2), padding=(1, 1))
    assert general_plan(library, dense, FLOAT16)["copy_rows"] == "1:1"


def test_general_kernel_merges_box_columns_where_a_halo_row_is_one_run(library, seed,
                                                                        monkeypatch):
    """From the slice-planar copy (NCHW inputs, the plan asked for an NCHW x), whose rows
    hold each column phase's columns as one run, a box row is one run of a phase's 16-byte
    slices, up to 256 8-byte words (128 columns, in every dtype), at any column stride; wider
    halos keep one slice a box row, and $CONV_POOL_GENERAL_TMA_MERGED=0 keeps it everywhere."""
    # Few-channel layers unfolded: the rules below are the unfolded shape's (folding has its
    # own test, test_column_folding_plans_the_folded_layer).
    monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
    rng = random.Random(seed)
    checked = strided = 0
    for i in range(400):
        case = fuzz_case(rng, f"fuzz_{i}")
        for element in (FLOAT32, FLOAT16):
            plan = general_plan(library, case, element)
            if plan is None or plan["input"] != "tma":
                continue
            image_cols = int(plan["halo"].split("x")[1]) // plan["images"]
            box_cols = -(-image_cols // case.stride[1])  # a box's columns: one phase's
            expected = box_cols * 2 <= 256
            assert plan["merged"] == int(expected), (case, element, plan)
            checked += expected
            strided += expected and case.stride[1] > 1
    print(f"{checked} merged plans, {strided} of them column-strided")
    assert checked >= 20 and strided >= 10, (checked, strided)
    resnet = ConvPoolCase("1x1", 32, 64, 256, 56, 56, (1, 1))
    assert general_plan(library, resnet, FLOAT16)["merged"] == 1
    vgg = ConvPoolCase("3x3", 32, 256, 256, 56, 56, (3, 3), padding=(1, 1))
    assert general_plan(library, vgg, FLOAT16)["halo"] == "10x34"
    assert general_plan(library, vgg, FLOAT16)["merged"] == 1  # 34 columns of two words
    assert general_plan(library, vgg, FLOAT32)["merged"] == 1
    # A 16-bit wide tile at column stride 4 under an 11 x 11 kernel at dilation 3: 155 halo
    # columns, 39 a phase.
    wide = ConvPoolCase("11x11/4", 8, 64, 64, 300, 300, (11, 11), stride=(4, 4),
                        dilation=(3, 3))
    assert general_plan(library, wide, FLOAT16)["merged"] == 1, general_plan(library, wide,
                                                                             FLOAT16)
    downsample = ConvPoolCase("1x1/2", 32, 256, 512, 56, 56, (1, 1), stride=(2, 2))
    assert general_plan(library, downsample, FLOAT16)["merged"] == 1
    monkeypatch.setenv("CONV_POOL_GENERAL_TMA_MERGED", "0")
    assert general_plan(library, resnet, FLOAT16)["merged"] == 0


def test_general_kernel_copy_term_prefers_wide_channel_tiles_on_wide_halos(library,
                                                                         monkeypatch):
    """The tile choice's cost counts the bytes a step's boxes bring, at the copy engine's
    measured rate, where the plan that picks runs at least 8 steps a block
    (kCopyCostMinSteps): a strided, dilated float32 layer whose steps bring wide halos (the
    fuzz's `fuzz_84`: square_n128 0.57x the time of square_n64 on the H200, docs/PERF.md v60)
    takes the N = 128 tile, which brings each halo once for twice the output channels; without
    the term ($CONV_POOL_GENERAL_COPY_COST=0) the cost is the wgmmas' alone. A layer whose
    N = 128 plan would run 1 step a block (`fuzz_149`, bfloat16 channels-last: 1.46x slower
    with it) keeps the plan without the term; both agree with the hook off."""
    case = ConvPoolCase("fuzz_84", 32, 1024, 768, 56, 37, (3, 3), stride=(4, 4),
                        padding=(2, 3), dilation=(3, 2), pool_kernel=(2, 3),
                        pool_stride=(2, 1), pool_padding=(1, 1))
    monkeypatch.delenv("CONV_POOL_GENERAL_COPY_COST", raising=False)
    plan = general_plan(library, case, FLOAT32)
    assert plan["tile"] == "square_n128" and plan["steps"] // plan["split"] >= 8, plan
    short = ConvPoolCase("fuzz_149", 32, 96, 768, 65, 151, (1, 1), stride=(2, 3),
                         pool_kernel=(3, 1), pool_stride=(1, 1), pool_padding=(1, 0))
    assert general_plan(library, short, BFLOAT16, channels_last=True)["tile"] == "wide_n64"
    monkeypatch.setenv("CONV_POOL_GENERAL_COPY_COST", "0")
    assert general_plan(library, case, FLOAT32)["tile"] == "square_n64"
    assert general_plan(library, short, BFLOAT16, channels_last=True)["tile"] == "wide_n64"


def test_general_kernel_plan_cache_gives_the_searched_plan(library, seed, monkeypatch):
    """The host keeps a thread's recent plans (general_plan_cache.h): every plan it answers
    from there is the plan a fresh search gives ($CONV_POOL_GENERAL_PLAN_CACHE=0), over random
    shapes, all three dtypes and both layouts, asked twice in a row and again after more
    shapes than the cache holds (16), and a hook set or cleared between two calls changes the
    answer at once. (The plans differ by layout: a cache blind to it would fail here.)"""
    rng = random.Random(seed)
    asks = []
    for i in range(30):  # each shape in both layouts, one after the other
        case = fuzz_case(rng, f"fuzz_{i}")
        asks += [(case, (FLOAT32, FLOAT16, BFLOAT16)[i % 3], layout) for layout in (False, True)]
    def plans():
        return [general_plan(library, case, element, channels_last=layout)
                for case, element, layout in asks]
    monkeypatch.setenv("CONV_POOL_GENERAL_PLAN_CACHE", "0")
    searched = plans()
    assert sum(plan is not None for plan in searched) >= 40
    assert sum(searched[i] != searched[i + 1] for i in range(0, len(asks), 2)) >= 10
    monkeypatch.delenv("CONV_POOL_GENERAL_PLAN_CACHE")
    assert plans() == searched
    assert plans() == searched  # the last 16 from the cache, the rest searched again
    for (case, element, layout), plan in zip(asks[-4:], searched[-4:]):
        assert general_plan(library, case, element, channels_last=layout) == plan
    # A hook between two calls: the forced tile, then the cost model's tile again.
    case = ConvPoolCase("fuzz_84", 32, 1024, 768, 56, 37, (3, 3), stride=(4, 4),
                        padding=(2, 3), dilation=(3, 2), pool_kernel=(2, 3),
                        pool_stride=(2, 1), pool_padding=(1, 1))
    chosen = general_plan(library, case, FLOAT32)["tile"]
    other = "wide_n64" if chosen != "wide_n64" else "square_n64"
    monkeypatch.setenv("CONV_POOL_GENERAL_TILE", other)
    assert general_plan(library, case, FLOAT32)["tile"] == other
    monkeypatch.delenv("CONV_POOL_GENERAL_TILE")
    assert general_plan(library, case, FLOAT32)["tile"] == chosen


def test_fp32_accurate_layers_never_fall_to_direct_on_hopper(library, variant_names, seed):
    """allow_tf32 = False: where no 3xTF32 kernel of the 3 x 3 / 2 x 2 path, the chunked or the
    flat one runs a float32 layer (large kernels, wide strides over 8 or more channels), the
    general kernel's 3xTF32 form takes it on Hopper, so `direct` is left for nothing there;
    elsewhere (sm_80) `direct` remains."""
    rng = random.Random(seed)
    general3x = 0
    for i in range(1500):
        case = fuzz_case(rng, f"fuzz_{i}")
        chosen = choose(library, variant_names, case, allow_tf32=False)
        assert chosen != "direct", case
        general3x += chosen == "general_3xtf32_wgmma"
        if chosen == "general_3xtf32_wgmma":
            assert choose(library, variant_names, case, allow_tf32=False,
                          device=A100_LIKE) in ("direct", "tiled_3xtf32", "tiled_3xtf32_flat")
        # The TF32 choice never takes it.
        assert choose(library, variant_names, case) != "general_3xtf32_wgmma", case
    print(f"{general3x} of 1500 random geometries take general_3xtf32_wgmma")
    assert general3x > 100
    big = ConvPoolCase("alexnet_c2", 128, 64, 192, 27, 27, (5, 5), padding=(2, 2),
                       pool_kernel=(3, 3), pool_stride=(2, 2))
    assert choose(library, variant_names, big, allow_tf32=False) in (
        "tiled_3xtf32", "general_3xtf32_wgmma")


def test_fp32_accurate_choice_prefers_the_general_3xtf32_kernel_on_hopper(library, variant_names,
                                                                         seed):
    """allow_tf32 = False on Hopper, off the 3 x 3 / 2 x 2 path, 8 or more input channels: the
    general kernel's 3xTF32 form wherever it runs, whatever the output channels, the reduction's
    length or the tiles (with x split in registers it measured faster than tiled_3xtf32 on
    every zoo and fuzz layer of those classes: docs/PERF.md). sm_80 keeps tiled_3xtf32."""
    def conv1x1(name, batch, cin, cout, size, stride=1, pool=2):
        return ConvPoolCase(name, batch, cin, cout, size, size, (1, 1), stride=(stride, stride),
                            pool_kernel=(pool, pool), pool_stride=(2, 2))
    cases = [conv1x1("densenet121_c112", 1, 896, 128, 7),
             conv1x1("inception_v3_c80", 128, 1280, 448, 8),
             ConvPoolCase("vgg16_c8_p3s2", 128, 512, 512, 28, 28, (3, 3), padding=(1, 1),
                          pool_kernel=(3, 3), pool_stride=(2, 2)),
             conv1x1("inception_v3_c11", 1, 192, 32, 35),                  # 10 tiles
             ConvPoolCase("fuzz_60", 1, 1024, 24, 22, 130, (5, 4), stride=(2, 1),
                          padding=(5, 3), dilation=(2, 1), pool_kernel=(1, 2),
                          pool_stride=(1, 2)),
             conv1x1("squeezenet1_1_c1", 32, 64, 16, 55),                  # 16 outputs, 64 terms
             conv1x1("regnet_y_400mf_c6", 128, 48, 104, 56, stride=2, pool=3),  # 48 terms
             conv1x1("squeezenet1_0_c2", 1, 16, 64, 54, pool=3),                # 16 terms
             # 3 outputs of a 7,680-term reduction over 80 tiles.
             ConvPoolCase("fuzz_102", 8, 768, 3, 151, 60, (2, 5), stride=(2, 2),
                          padding=(1, 2), dilation=(1, 3), pool_kernel=(4, 1),
                          pool_stride=(4, 1), pool_padding=(2, 0))]
    for case in cases:
        assert choose(library, variant_names, case, allow_tf32=False) == \
            "general_3xtf32_wgmma", case.name
        assert choose(library, variant_names, case, allow_tf32=False,
                      device=A100_LIKE) == "tiled_3xtf32", case.name
    # Random geometries: every layer the general form runs (8 or more input channels, off the
    # 3 x 3 wgmma kernel's path and the few-channel CUDA-core kernel's) takes it.
    rng = random.Random(seed)
    ids = variant_names_to_ids(variant_names)
    checked = 0
    for i in range(600):
        case = fuzz_case(rng, f"fuzz_{i}")
        if (case.in_channels < 8 or
                unsupported(library, case, ids["general_3xtf32_wgmma"]) is not None or
                unsupported(library, case, ids["tiled_3xtf32_wgmma"]) is None):
            continue
        chosen = choose(library, variant_names, case, allow_tf32=False)
        assert chosen in ("general_3xtf32_wgmma", "small_fp32"), (case, chosen)
        checked += chosen == "general_3xtf32_wgmma"
    print(f"{checked} random geometries take general_3xtf32_wgmma")
    assert checked > 200


@pytest.mark.parametrize("case", [
    ConvPoolCase("k5", 64, 70, 200, 27, 27, (5, 5), padding=(2, 2), pool_kernel=(3, 3),
                 pool_stride=(2, 2)),
    ConvPoolCase("k11_s4", 2, 96, 64, 90, 90, (11, 11), stride=(4, 4), padding=(5, 5)),
    ConvPoolCase("pool9", 2, 16, 17, 38, 26, (3, 3), pool_kernel=(9, 3), pool_stride=(9, 3)),
], ids=lambda c: c.name)
def test_plan_and_workspace_of_the_3xtf32_general_kernel(library, variant_names, case,
                                                         monkeypatch):
    """general_3xtf32_wgmma's staged form ($CONV_POOL_GENERAL_SPLIT_REGISTERS=0): N = 64 tiles
    of two squares a warpgroup, one block per SM, three staged chunks per chunk of 8 input
    channels (big x, small x, big x against big w, big w, small w), x always from its split
    NHWC copy; workspace: the packed weights of those chunks, then that copy (256-byte
    aligned), then any split reduction's partial sums. float32 only."""
    monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", "0")
    library.conv_relu_maxpool_workspace_bytes.restype = ctypes.c_int64
    library.conv_relu_maxpool_workspace_bytes.argtypes = [
        ctypes.POINTER(ConvPoolShape), ctypes.c_int, ctypes.POINTER(ConvPoolDevice),
        ctypes.c_void_p]
    variant = variant_names_to_ids(variant_names)["general_3xtf32_wgmma"]
    plan = general_plan(library, case, FLOAT32, split=True)
    assert plan["tile"] in ("wide_n64", "square_n64") and plan["blocks_per_sm"] == 1, plan
    chunks = 3 * -(-case.in_channels // 8)
    assert plan["chunks"] == chunks and plan["nhwc_copy"] == 1, plan
    runs = -(-chunks // plan["step_chunks"])
    taps = case.kernel_size[0] * case.kernel_size[1]
    packed = -(-case.out_channels // 64) * 64 * runs * plan["step_chunks"] * taps * 2 * 16
    staged = -(-(case.batch * case.height * case.width * chunks * 8 * 4) // 256) * 256
    workspace = library.conv_relu_maxpool_workspace_bytes(
        ctypes.byref(shape_of(case, FLOAT32)), variant, ctypes.byref(H200), None)
    if plan["split"] == 1:
        assert workspace == -(-packed // 256) * 256 + staged, plan
    else:
        assert workspace > -(-packed // 256) * 256 + staged, plan
    assert general_plan(library, case, FLOAT16, split=True) is None
    assert unsupported(library, case, variant, element=FLOAT16) is not None
    assert unsupported(library, case, variant, device=A100_LIKE) is not None


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("case", [
    ConvPoolCase("k5", 64, 72, 200, 27, 27, (5, 5), padding=(2, 2), pool_kernel=(3, 3),
                 pool_stride=(2, 2)),
    ConvPoolCase("k5_odd_channels", 64, 70, 200, 27, 27, (5, 5), padding=(2, 2)),
    ConvPoolCase("k3_long", 8, 1024, 16, 14, 14, (3, 3), padding=(1, 1)),
    ConvPoolCase("k11_s4", 2, 96, 64, 90, 90, (11, 11), stride=(4, 4), padding=(5, 5)),
], ids=lambda c: c.name)
def test_plan_and_workspace_of_the_3xtf32_registers_form(library, variant_names, case,
                                                         channels_last, monkeypatch):
    """By default general_3xtf32_wgmma splits x in the registers (Plan::split_registers):
    x's own chunks, read as the TF32 form's cp.async loaders read it (channels-last in place
    where its channels fill whole 16-byte slices; else element by element or from the plain
    NHWC copy, by kNhwcCopyMinWork), no split copy; the weights two parts a chunk; the same
    tiles, one block an SM. $CONV_POOL_GENERAL_SPLIT_REGISTERS=0: the staged form (the plan
    says registers=0). An 11 x 11 kernel at stride 4 over 96 channels falls back to the staged
    form: one kernel row of two weight parts and its 8 gathered halo rows of 135 columns do not
    fit three stages, one staged chunk's do."""
    library.conv_relu_maxpool_workspace_bytes.restype = ctypes.c_int64
    library.conv_relu_maxpool_workspace_bytes.argtypes = [
        ctypes.POINTER(ConvPoolShape), ctypes.c_int, ctypes.POINTER(ConvPoolDevice),
        ctypes.c_void_p]
    variant = variant_names_to_ids(variant_names)["general_3xtf32_wgmma"]
    monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", "0")
    staged = general_plan(library, case, FLOAT32, split=True, channels_last=channels_last)
    assert staged["registers"] == 0 and staged["nhwc_copy"] == 1, staged
    monkeypatch.delenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", raising=False)
    plan = general_plan(library, case, FLOAT32, split=True, channels_last=channels_last)
    if case.name == "k11_s4":
        assert plan == staged, (plan, staged)
        return
    assert plan["registers"] == 1, plan
    assert plan["tile"] in ("wide_n64", "square_n64") and plan["blocks_per_sm"] == 1, plan
    chunks = -(-case.in_channels // 8)
    assert plan["chunks"] == chunks and staged["chunks"] == 3 * chunks, (plan, staged)
    if channels_last and case.in_channels % 4 == 0:
        assert plan["input"] == "pixel" and plan["nhwc_copy"] == 0, plan
    else:
        assert plan["input"] == ("pixel" if plan["nhwc_copy"] else "planar"), plan
    if not channels_last:  # (the workspace query's operands are NCHW)
        runs = -(-chunks // plan["step_chunks"])
        taps = case.kernel_size[0] * case.kernel_size[1]
        packed = -(-case.out_channels // 64) * 64 * runs * plan["step_chunks"] * taps * 2 * 16 * 2
        copy = plan["nhwc_copy"] * case.batch * case.height * case.width * chunks * 8 * 4
        expected = -(-packed // 256) * 256 + -(-copy // 256) * 256
        workspace = library.conv_relu_maxpool_workspace_bytes(
            ctypes.byref(shape_of(case, FLOAT32)), variant, ctypes.byref(H200), None)
        assert workspace == expected if plan["split"] == 1 else workspace > expected, plan
    print(f"{case.name}: registers form {plan}")


def test_3xtf32_registers_form_splits_shares_of_four_wgmma_sets(library, seed, monkeypatch):
    """A split share of the 3xTF32 form holds at least four wgmma sets a chunk (kMinSplitSteps):
    four steps of the staged form, whose steps are staged chunks, or two of the registers form,
    whose every step issues three sets. Inception v3's `c11` at batch 1 (192 -> 32, 1 x 1, 10
    tiles): its registers plan of 4 steps splits over 2 blocks a tile, its staged plan of 11
    over 3. On random geometries every split plan keeps that floor, and some registers plans
    split into shares of fewer than four steps."""
    case = ConvPoolCase("inception_v3_c11", 1, 192, 32, 35, 35, (1, 1), pool_kernel=(2, 2),
                        pool_stride=(2, 2))
    monkeypatch.delenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", raising=False)
    plan = general_plan(library, case, FLOAT32, split=True)
    assert (plan["registers"], plan["steps"], plan["split"]) == (1, 4, 2), plan
    monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", "0")
    plan = general_plan(library, case, FLOAT32, split=True)
    assert (plan["registers"], plan["steps"], plan["split"]) == (0, 11, 3), plan
    monkeypatch.delenv("CONV_POOL_GENERAL_SPLIT_REGISTERS")
    rng = random.Random(seed)
    short = 0
    for i in range(300):
        plan = general_plan(library, fuzz_case(rng, f"fuzz_{i}"), FLOAT32, split=True)
        if plan is None or plan["split"] == 1:
            continue
        share = -(-plan["steps"] // plan["split"])
        assert share * (3 if plan["registers"] else 1) >= 4, plan
        short += share < 4
    print(f"{short} split registers plans of shares under four steps")
    assert short > 0


def test_3xtf32_registers_form_runs_every_layer_the_staged_form_runs(library, variant_names,
                                                                     seed, monkeypatch):
    """On random geometries, by default: general_3xtf32_wgmma
    refuses exactly where it has no plan, and exactly where the staged form refuses (the search
    falls back to the staged form on a tile where one step of the registers form does not fit);
    most plans are of the registers form."""
    variant = variant_names_to_ids(variant_names)["general_3xtf32_wgmma"]
    rng = random.Random(seed)
    cases = [fuzz_case(rng, f"fuzz_{i}") for i in range(300)]
    monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", "0")
    staged = [general_plan(library, case, FLOAT32, split=True) for case in cases]
    monkeypatch.delenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", raising=False)
    registers = 0
    for case, staged_plan in zip(cases, staged):
        refused = unsupported(library, case, variant)
        plan = general_plan(library, case, FLOAT32, split=True)
        assert (plan is None) == (refused is not None) == (staged_plan is None), (case, refused)
        registers += plan is not None and plan["registers"] == 1
    runs = sum(plan is not None for plan in staged)
    print(f"{registers} of the {runs} layers with a plan take the registers form")
    assert runs > 200 and registers > 0.9 * runs


@pytest.mark.parametrize("case", [
    ConvPoolCase("pointwise_s2", 128, 64, 96, 28, 27, (1, 1), stride=(2, 2)),
    ConvPoolCase("pointwise_s3x2", 128, 40, 24, 35, 33, (1, 1), stride=(3, 2), padding=(2, 1),
                 dilation=(2, 2), pool_kernel=(4, 3), pool_stride=(4, 3), pool_padding=(2, 1),
                 ceil_mode=True),
    ConvPoolCase("dilated_k3_s2", 128, 24, 72, 31, 30, (3, 3), stride=(2, 2), padding=(3, 2),
                 dilation=(4, 2), pool_kernel=(3, 3), pool_stride=(2, 2)),
    ConvPoolCase("rows_only_s4", 64, 48, 64, 45, 22, (1, 3), stride=(4, 1), padding=(5, 1)),
    ConvPoolCase("k3_s2_undilated", 128, 24, 72, 31, 30, (3, 3), stride=(2, 2), padding=(1, 1)),
], ids=lambda c: c.name)
def test_3xtf32_copies_only_the_rows_and_columns_a_strided_layer_reads(library, variant_names,
                                                                      case, monkeypatch):
    """general_3xtf32_wgmma over a dimension whose stride divides the taps' spacing (one tap,
    or a dilation that is a multiple of it) runs the layer over x's rows r0, r0 + stride, ...
    (r0 = (-pad) mod stride; general_subsample.h), so its split NHWC copy holds
    ceil((in - r0) / stride) of them; $CONV_POOL_GENERAL_SUBSAMPLE=0 copies all of x. A 3 x 3
    kernel at stride 2 without dilation reads every row: its copy is x's either way. (The
    staged form, $CONV_POOL_GENERAL_SPLIT_REGISTERS=0, whose copy is the split one.)"""
    monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", "0")
    library.conv_relu_maxpool_workspace_bytes.restype = ctypes.c_int64
    library.conv_relu_maxpool_workspace_bytes.argtypes = [
        ctypes.POINTER(ConvPoolShape), ctypes.c_int, ctypes.POINTER(ConvPoolDevice),
        ctypes.c_void_p]
    variant = variant_names_to_ids(variant_names)["general_3xtf32_wgmma"]

    def kept(length, kernel, stride, pad, dilation):
        if stride < 2 or (kernel > 1 and dilation % stride):
            return length
        first = -pad % stride
        return -(-(length - first) // stride)

    rows = kept(case.height, case.kernel_size[0], case.stride[0], case.padding[0],
                case.dilation[0])
    cols = kept(case.width, case.kernel_size[1], case.stride[1], case.padding[1],
                case.dilation[1])
    chunks = 3 * -(-case.in_channels // 8)
    copies = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("CONV_POOL_GENERAL_SUBSAMPLE", setting)
        plan = general_plan(library, case, FLOAT32, split=True)
        assert plan is not None and plan["nhwc_copy"] == 1 and plan["split"] == 1, plan
        runs = -(-chunks // plan["step_chunks"])
        taps = case.kernel_size[0] * case.kernel_size[1]
        packed = -(-case.out_channels // 64) * 64 * runs * plan["step_chunks"] * taps * 2 * 16
        workspace = library.conv_relu_maxpool_workspace_bytes(
            ctypes.byref(shape_of(case, FLOAT32)), variant, ctypes.byref(H200), None)
        copies[setting] = workspace - -(-packed // 256) * 256
    pixels = case.batch * rows * cols
    assert copies["1"] == -(-(pixels * chunks * 8 * 4) // 256) * 256, (copies, rows, cols)
    assert copies["0"] == -(-(case.batch * case.height * case.width * chunks * 32) // 256) * 256
    if (rows, cols) != (case.height, case.width):
        assert copies["1"] < copies["0"]
    print(f"{case.name}: copy of {rows} x {cols} of {case.height} x {case.width} pixels")


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_strided_layers_are_subsampled_in_every_form_by_default(library, element,
                                                                channels_last, monkeypatch):
    """By default the TF32 and 16-bit forms run a 1 x 1 / 2 layer (RegNet-Y 400MF's 104 -> 208 at
    28^2) over x's even rows and columns: no gathered halo rows, and a halo of half the
    columns; $CONV_POOL_GENERAL_SUBSAMPLE=split (the 3xTF32 form alone) gathers every second
    row of x and stages whole column runs, as "0" does."""
    layer = ConvPoolCase("regnet_s2", 32, 104, 208, 28, 28, (1, 1), stride=(2, 2))
    plans = {}
    for setting in ("default", "split", "0"):
        if setting == "default":
            monkeypatch.delenv("CONV_POOL_GENERAL_SUBSAMPLE", raising=False)
        else:
            monkeypatch.setenv("CONV_POOL_GENERAL_SUBSAMPLE", setting)
        plans[setting] = general_plan(library, layer, element, channels_last=channels_last)
    default, split, off = plans["default"], plans["split"], plans["0"]
    assert split == off, (split, off)
    assert default["gathered"] == 0 and split["gathered"] == 1, (default, split)
    columns = {k: int(plan["halo"].split("x")[1]) for k, plan in plans.items()}
    assert 2 * columns["default"] <= columns["split"] + 1, columns
    assert (default["tile"], default["tiles"], default["steps"]) == \
        (split["tile"], split["tiles"], split["steps"]), (default, split)


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_halos_hold_only_the_input_the_pooling_reads(library, element, seed, monkeypatch):
    """A tile's halo holds the input under the conv pixels its pooling reads (read_rows and,
    one image a tile, read_cols), not the whole tile's, with the same steps; its stage no larger
    ($CONV_POOL_GENERAL_CLIP=0: the whole tile). DenseNet-121's 896 -> 128 at 7^2 under a
    2 x 2 / 2 pool reads 6 x 6 pixels of an 8 x 32 tile; on random geometries the clipped
    halo still covers every tap under those pixels."""
    def plans(case, **forced):
        for name, value in forced.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("CONV_POOL_GENERAL_CLIP", raising=False)
        clipped = general_plan(library, case, element)
        monkeypatch.setenv("CONV_POOL_GENERAL_CLIP", "0")
        whole = general_plan(library, case, element)
        monkeypatch.delenv("CONV_POOL_GENERAL_CLIP")
        for name in forced:
            monkeypatch.delenv(name)
        return clipped, whole

    # The layer in its own orientation (transposition has its own test,
    # test_layers_run_transposed_where_the_hook_and_the_cost_say).
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", "0")
    densenet = ConvPoolCase("densenet_c112", 1, 896, 128, 7, 7, (1, 1))
    tile = general_plan(library, densenet, element)["tile"]
    clipped, whole = plans(densenet, CONV_POOL_GENERAL_TILE=tile)
    rows, cols = (int(v) for v in clipped["read"].split("x"))
    assert clipped["halo"] == f"{rows}x{cols}" and rows * cols < 64, (clipped, whole)
    assert whole["halo"] == ("8x32" if tile.startswith("wide") else "16x16"), whole
    staging = ("steps", "step_chunks", "group_rows", "gathered", "swizzle")
    rng = random.Random(seed)
    smaller = 0
    for i in range(300):
        case = fuzz_case(rng, f"fuzz_{i}")
        plan = general_plan(library, case, element)
        if plan is None:
            continue
        clipped, whole = plans(case, CONV_POOL_GENERAL_TILE=plan["tile"],
                               CONV_POOL_GENERAL_IMAGES=str(plan["images"]))
        assert [clipped[k] for k in staging] == [whole[k] for k in staging], (case, clipped, whole)
        assert clipped["stage_bytes"] <= whole["stage_bytes"], (case, clipped, whole)
        halo_rows, halo_cols = (int(v) for v in clipped["halo"].split("x"))
        read_rows, read_cols = (int(v) for v in clipped["read"].split("x"))
        # (over x' where the layer is subsampled: general_subsample.h)
        (kh, sh, dh), (kw, sw, dw) = (
            (k, 1, d // s if k > 1 else 1) if s > 1 and (k == 1 or d % s == 0) else (k, s, d)
            for k, s, d in zip(case.kernel_size, case.stride, case.dilation))
        if clipped["gathered"]:
            assert halo_rows >= read_rows, (case, clipped)
        elif clipped["halo"] != whole["halo"]:
            group = clipped["group_rows"]
            assert halo_rows >= (read_rows - 1) * sh + (group - 1) * dh + 1, (case, clipped)
        folded = case.in_channels < 16 and kw > 1  # (maybe columns as channels: general_fold)
        if clipped["images"] == 1 and clipped["halo"] != whole["halo"] and not folded:
            assert halo_cols >= (read_cols - 1) * sw + (kw - 1) * dw + 1, (case, clipped)
        smaller += clipped["halo"] != whole["halo"]
    print(f"{smaller} of the random plans clipped")
    assert smaller >= 20, smaller


def transposed_case(case: ConvPoolCase) -> ConvPoolCase:
    """The layer with rows and columns exchanged (general_transpose.h)."""
    def swap(pair):
        return None if pair is None else (pair[1], pair[0])
    return replace(case, height=case.width, width=case.height,
                   kernel_size=swap(case.kernel_size), stride=swap(case.stride),
                   padding=swap(case.padding), dilation=swap(case.dilation),
                   pool_kernel=swap(case.pool_kernel), pool_stride=swap(case.pool_stride),
                   pool_padding=swap(case.pool_padding))


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
def test_layers_run_transposed_where_the_hook_and_the_cost_say(library, element, seed,
                                                              monkeypatch):
    """A layer runs as its transpose (general_transpose.h) where the copy engine reads x, in
    place or from the preparation launch's copy of the transposed view (NCHW x), and the cost
    model finds that plan cheaper ($CONV_POOL_GENERAL_TRANSPOSE unset or "1"): the plan is
    then the transposed layer's own, and that layer is not transposed back. A tall
    layer of 5 conv columns (`fuzz_137`: 64 -> 192, 67 x 11, 5 x 5 at 2 x 3, a 2 x 4 pool)
    runs transposed, on 16 x 16 tiles 13% full before, in either layout. "force" transposes
    every channels-last layer whose transpose has a plan, and every NCHW one the copy engine
    reads from the preparation launch's copy; NCHW x on the cp.async loaders
    ($CONV_POOL_GENERAL_TMA=0) never; "0", nothing is."""
    def plan(case, channels_last=True, setting=None, **hooks):
        if setting is None:
            monkeypatch.delenv("CONV_POOL_GENERAL_TRANSPOSE", raising=False)
        else:
            monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", setting)
        for name, value in hooks.items():
            monkeypatch.setenv(name, value)
        found = general_plan(library, case, element, channels_last=channels_last)
        for name in hooks:
            monkeypatch.delenv(name)
        return found

    def without_flag(p):
        return {k: v for k, v in p.items() if k != "transposed"}

    tall = ConvPoolCase("fuzz_137", 32, 64, 192, 67, 11, (5, 5), stride=(2, 3),
                        padding=(1, 3), pool_kernel=(2, 4), pool_stride=(2, 4),
                        pool_padding=(1, 0))
    chosen = plan(tall)
    assert chosen["transposed"] == 1, chosen
    assert plan(tall, setting="1") == chosen
    assert without_flag(chosen) == without_flag(plan(transposed_case(tall), setting="0")), chosen
    assert plan(tall, setting="0")["transposed"] == 0
    nchw = plan(tall, channels_last=False)
    assert nchw["transposed"] == 1 and nchw["nhwc_copy"] == 1, nchw
    rng = random.Random(seed)
    counts = {(layout, setting): 0 for layout in ("nchw", "channels_last")
              for setting in ("1", "force")}
    for i in range(200):
        case = fuzz_case(rng, f"fuzz_{i}")
        case = replace(case, in_channels=-(-case.in_channels // 8) * 8)
        if plan(case) is None:
            continue
        flipped = transposed_case(case)
        for layout, setting in counts:
            channels_last = layout == "channels_last"
            assert plan(case, channels_last, "0")["transposed"] == 0, case
            chosen = plan(case, channels_last, setting)
            if setting == "1":
                assert plan(case, channels_last) == chosen, case
            if not channels_last:
                assert plan(case, False, setting, CONV_POOL_GENERAL_TMA="0")["transposed"] == 0
            if chosen["transposed"]:
                counts[layout, setting] += 1
                assert chosen["input"] == "tma" or channels_last, (case, chosen)
                assert without_flag(chosen) == without_flag(plan(flipped, channels_last, "0")), (
                    case, layout, chosen)
                if setting == "1":
                    assert plan(flipped, channels_last, "1")["transposed"] == 0, case
    print(f"of 200 random layers, transposed: {counts}")
    for layout in ("nchw", "channels_last"):
        assert counts[layout, "force"] >= 100, counts
        assert counts[layout, "force"] > counts[layout, "1"] >= 5, counts


@pytest.mark.parametrize("setting", ["default", "split", "0"])
def test_subsampling_keeps_every_geometry_on_the_general_kernel(library, variant_names, seed,
                                                                setting, monkeypatch):
    """Whatever $CONV_POOL_GENERAL_SUBSAMPLE says, the general kernel's refusal and its plan
    agree (a plan exactly where it does not refuse) in every form and dtype on random
    geometries, and the automatic choice takes a variant that runs the layer."""
    if setting == "default":
        monkeypatch.delenv("CONV_POOL_GENERAL_SUBSAMPLE", raising=False)
    else:
        monkeypatch.setenv("CONV_POOL_GENERAL_SUBSAMPLE", setting)
    ids = variant_names_to_ids(variant_names)
    rng = random.Random(seed)
    subsampled = 0
    for i in range(300):
        case = fuzz_case(rng, f"fuzz_{i}")
        element = (FLOAT32, FLOAT16, BFLOAT16)[i % 3]
        subsampled += any(s > 1 and (k == 1 or d % s == 0) for k, s, d in
                          zip(case.kernel_size, case.stride, case.dilation))
        for name, split in (("general_wgmma", False), ("general_3xtf32_wgmma", True)):
            if split and element != FLOAT32:
                continue
            refused = unsupported(library, case, ids[name], element=element)
            plan = general_plan(library, case, element, split=split)
            assert (plan is None) == (refused is not None), (case, name, refused, plan)
        for allow_tf32 in (True, False):
            chosen = choose(library, variant_names, case, allow_tf32=allow_tf32,
                            element=element)
            assert unsupported(library, case, ids[chosen], element=element) is None, \
                (case, chosen)
    print(f"{subsampled} of 300 random geometries of the subsampled class")
    assert subsampled > 30


def variant_names_to_ids(variant_names: dict) -> dict:
    """{name: config id} for every member's name: the float32 ones and their 16-bit twins'."""
    ids = {name: config for config, name in variant_names.items()}
    return {**ids, **{sixteen: ids[float32] for sixteen, float32 in TWIN_OF.items()}}


# ---- the wgmma kernels' tiles -------------------------------------------------------------

# The fewest unused pooled outputs of the wide (8 x 32), square (16 x 16) and strip tiles, the
# wide one on a tie; 64 output channels per block for layers of no more (rgb_stem), and for
# layers of at most 64 tiles of 128 channels (kFewTiles, batch1: 16 x 4 tiles), which pack
# their own weights whatever they are given.
EXPECTED_TILES = {
    "default": "wide_n128",
    "vgg_b2": "square_n128",  # 112 x 112: 7 x 7 squares of 16
    "vgg_b3": "strip_n128",   # 56 x 56: rows of 7 squares of 8
    "vgg_b5": "square_n128",  # 14 x 14: one square per image, 128 tiles
    "rgb_stem": "wide_n64",
    "batch1": "wide_n64",
}


@pytest.mark.parametrize("element", [FLOAT32, FLOAT16, BFLOAT16],
                         ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", SUITE, ids=lambda c: c.name)
def test_wgmma_tiles_of_the_public_suite(library, case, element):
    expected = EXPECTED_TILES.get(case.name)  # None: not a wgmma shape
    assert wgmma_tile(library, case, element) == expected, case.name
    if expected is not None:
        # Packed weights are read but by batch1 (few tiles) and by rgb_stem, whose
        # two-blocks-per-SM tile always packs its own.
        takes = case.name not in ("batch1", "rgb_stem")
        assert takes_packed_weight(library, case, element) == takes, case.name


def expected_tile_origin(case: ConvPoolCase, tile_name: str, tile: int):
    """(tile count, origin of `tile`) by plain integer division: the kernel's tile order is
    channel block fastest, then (block tiles) tile column, tile row, image, or (strips) the
    sequence of 8 x 8 squares (image, square row, square column), four per strip. A square is
    4 x 4 pooled outputs, or 8 x 8 outputs without a pool (a 1 x 1 / stride 1 one)."""
    out_h, out_w = case.pooled_out()
    side = 8 if case.pool_kernel == (1, 1) else 4  # outputs per square side
    n = 64 if tile_name.endswith("n64") else 128
    blocks = -(-case.out_channels // n)
    block, rest = tile % blocks, tile // blocks
    if tile_name.startswith("strip"):
        rows, cols = -(-out_h // side), -(-out_w // side)
        count = -(-(case.batch * rows * cols) // 4) * blocks
        image, square = divmod(4 * rest, rows * cols)
        return count, (image, block * n, side * (square // cols), side * (square % cols))
    pooled_rows, pooled_cols = (side, 4 * side) if tile_name.startswith("wide") else \
        (2 * side, 2 * side)
    rows, cols = -(-out_h // pooled_rows), -(-out_w // pooled_cols)
    count = case.batch * rows * cols * blocks
    rest, col = divmod(rest, cols)
    image, row = divmod(rest, rows)
    return count, (image, block * n, row * pooled_rows, col * pooled_cols)


TILE_ORDER_CASES = [c for c in SUITE if c.name in EXPECTED_TILES] + [
    ConvPoolCase("tails", 7, 16, 200, 30, 90, (3, 3), padding=(1, 1)),      # 2 blocks of 128
    ConvPoolCase("strip_tails", 5, 16, 330, 22, 45, (3, 3)),                 # 3 blocks, strips
    ConvPoolCase("square_tails", 40, 16, 136, 16, 16, (3, 3), padding=(1, 1)),
    ConvPoolCase("narrow_odd", 3, 3, 40, 35, 77, (3, 3), padding=(2, 2)),
    # 2^24 images of the default problem's geometry: 2^30 tiles, dividends near 2^30.
    replace(find_case("default"), name="huge_batch", batch=2**24),
    # No pool: the same tiles over conv outputs (8 x 32, 16 x 16, strips of 8 x 8 squares).
    ConvPoolCase("unpooled_tails", 7, 16, 200, 30, 90, (3, 3), padding=(1, 1),
                 pool_kernel=(1, 1)),
    ConvPoolCase("unpooled_strips", 5, 16, 330, 56, 56, (3, 3), padding=(1, 1),
                 pool_kernel=(1, 1)),
    ConvPoolCase("unpooled_square", 40, 16, 136, 14, 14, (3, 3), padding=(1, 1),
                 pool_kernel=(1, 1)),
    ConvPoolCase("unpooled_narrow_odd", 3, 8, 40, 35, 77, (3, 3), padding=(2, 2),
                 pool_kernel=(1, 1)),
]


@pytest.mark.parametrize("case", TILE_ORDER_CASES, ids=lambda c: c.name)
def test_wgmma_tile_origins_are_the_integer_divisions(library, case):
    """The kernel splits a tile index into (image, channel block, tile row and column) with
    multiply-high divisions by the plan's counts (FastDivisor, docs/PERF.md v29); through the
    exported host copy of that code, every tile of the smaller layers, and the first, last and
    random ones of the larger, sit where plain division puts them."""
    name = wgmma_tile(library, case)
    assert name is not None, case.name
    count = expected_tile_origin(case, name, 0)[0]
    rng = random.Random(case.batch * 7919 + case.width)
    tiles = (range(count) if count <= 30000 else
             [*range(3000), *range(count - 3000, count),
              *(rng.randrange(count) for _ in range(3000))])
    got_count, origins = wgmma_tile_origins(library, case, tiles)
    assert got_count == count, (case.name, got_count, count)
    assert len(origins) == len(set(tiles))
    for tile, origin in origins.items():
        assert origin == expected_tile_origin(case, name, tile)[1], (case.name, name, tile)
    if count <= 30000:  # every (image, channel block, tile) once
        assert len(set(origins.values())) == count


def test_a_layer_of_few_tiles_runs_64_channel_blocks(library):
    # 8 conv rows x 2048 columns, 128 output channels: 64 wide tiles of 128 channels, then 65.
    at_limit = ConvPoolCase("one_tile_row", 1, 16, 128, 10, 32 * 64 + 2, (3, 3))
    past = replace(at_limit, width=32 * 65 + 2)
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        assert wgmma_tile(library, at_limit, element) == "wide_n64"
        assert not takes_packed_weight(library, at_limit, element)
        assert wgmma_tile(library, past, element) == "wide_n128"
        assert takes_packed_weight(library, past, element)
    # Channel blocks count: 136 channels are two blocks of 128, so 32 tiles a block is 64.
    assert wgmma_tile(library, replace(at_limit, out_channels=136, width=32 * 32 + 2)) == \
        "wide_n64"
    assert wgmma_tile(library, replace(at_limit, out_channels=136, width=32 * 33 + 2)) == \
        "wide_n128"
    # A strip shape of few tiles (VGG block 3 at batch 1: 13 strips x 2 blocks) takes the
    # wide or square tile that wastes least, the strip having no N = 64 form.
    assert wgmma_tile(library, replace(find_case("vgg_b3"), batch=1)) == "wide_n64"
    assert wgmma_tile(library, replace(find_case("vgg_b3"), batch=11)) == "strip_n128"
    # 14 x 14 images, one square tile each: 4 blocks of 128 channels x 16 images = 64 tiles.
    b5 = find_case("vgg_b5")
    assert wgmma_tile(library, replace(b5, batch=16)) == "square_n64"
    assert wgmma_tile(library, replace(b5, batch=17)) == "square_n128"


def test_narrow_square_layers_run_two_blocks_per_sm_in_tf32(library):
    # 64 output channels over whole 14 x 14 images: the 16 x 16 tile with N = 64. In TF32 one
    # block per SM up to 128 tiles (one per image here), two from 129 on, neither reading
    # weights packed ahead of time (like the 8 x 32 tile of narrow layers); in 16 bits one
    # block per SM, which reads them.
    narrow = ConvPoolCase("narrow_squares", 1, 16, 64, 14, 14, (3, 3), padding=(1, 1))
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        for batch in (1, 128, 129, 1000):
            case = replace(narrow, batch=batch)
            assert wgmma_tile(library, case, element) == "square_n64", (batch, element)
            assert takes_packed_weight(library, case, element) == (element != FLOAT32), \
                (batch, element)


def test_the_plan_record_agrees_with_the_choice_functions(library, variant_names, seed):
    """conv_relu_maxpool_variant_plan for every variant on suite, grid and random cases: its
    verdict is conv_relu_maxpool_unsupported's, its workspace the launcher's where it runs
    (for the same NCHW operands, as the binding passes them: the orientation depends on
    them), and each variant family fills only its own fields."""
    rng = random.Random(seed)
    cases = list(SUITE) + rng.sample(list(GRID), 12) + [fuzz_case(rng) for _ in range(12)]
    families = {row["id"]: row["family"] for row in kernel_choice.variant_table(library)}
    for case in cases:
        for element in (FLOAT32, FLOAT16):
            for config, name in variant_names.items():
                plan = kernel_choice.variant_plan(library, case, config, element)
                why = kernel_choice.why_not(library, case, config, element)
                assert plan["variant"] == config and plan["unsupported"] == why, (case, name)
                if why is None:
                    operands = kernel_choice.dense_operands(case)
                    assert plan["workspace_bytes"] == library.conv_relu_maxpool_workspace_bytes(
                        ctypes.byref(shape_of(case, element)), config, ctypes.byref(H200),
                        ctypes.byref(operands)), (case, name)
                family = families[config]
                if family != "wgmma":
                    assert plan["wgmma_tile"] is None and plan["wgmma_tiles"] == 0, name
                    assert plan["wgmma_split"] == 1 and not plan["packs_weight_apart"], name
                if family not in ("flat", "flat_wgmma"):
                    assert plan["flat_tiling"] is None, name
                if family != "general":
                    assert plan["general"] is None, name
                elif why is None:
                    assert plan["general"].startswith("tile="), name


def test_only_the_wgmma_variants_have_tiles(library, variant_names):
    case = find_case("default")
    for config, name in variant_names.items():
        tile = kernel_choice.variant_plan(library, case, config)["wgmma_tile"]
        assert (tile is not None) == (name in ("tiled_tf32_wgmma", "tiled_3xtf32_wgmma")), name


def test_a_large_weight_over_few_blocks_is_packed_apart(library):
    # Packed weight elements per block >= 32768, or a split reduction (which reads weights
    # packed apart; test_layers_of_few_tiles_split_...): VGG-16's blocks 4 and 5 at batch 1
    # (32 and 8 tiles of 64 channels for 2.4M weights), block 5 at batch 8 (64 tiles), block 3
    # at batch 1 (52 tiles, 0.6M weights: split in 2); not the default problem at batch 1 (128
    # tiles of 37k weights), nor any shape of the suite (VGG block 5 at batch 32: 128 tiles of
    # 128 channels, 18k each). 30 images of 1712 channels into 200 over 14 x 14: 120 tiles of
    # 64 channels, which no split would run in fewer rounds, of 33k weights each: apart, no
    # split.
    apart_unsplit = ConvPoolCase("apart_unsplit", 30, 1712, 200, 14, 14, (3, 3), padding=(1, 1))
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        for name, batch, apart in (("vgg_b5", 1, True), ("vgg_b5", 8, True),
                                   ("vgg_b3", 1, True), ("batch1", 1, False)):
            case = replace(find_case(name), batch=batch)
            assert packs_weight_apart(library, case, element) == apart, (name, batch, element)
        b4 = ConvPoolCase("vgg_b4_batch1", 1, 512, 512, 28, 28, (3, 3), padding=(1, 1))
        assert packs_weight_apart(library, b4, element)
        assert packs_weight_apart(library, apart_unsplit, element)
        assert wgmma_split(library, apart_unsplit, element) == 1
        for case in SUITE:
            assert not packs_weight_apart(library, case, element), case.name
    # Per block: with fewer SMs there are fewer blocks, so larger shares.
    few_sms = ConvPoolDevice(H200.max_shared_bytes, 16, 90)
    assert packs_weight_apart(library, find_case("vgg_b5"), FLOAT32, device=few_sms)
    # Off Hopper no wgmma kernel runs, so nothing packs.
    case = replace(find_case("vgg_b5"), batch=1)
    assert not packs_weight_apart(library, case, FLOAT32, device=A100_LIKE)


def test_split_over_several_rounds_only_under_its_hook(library, monkeypatch):
    """$CONV_POOL_GENERAL_SPLIT_ROUNDS=k lets a split through L2 take up to k rounds of
    resident blocks (1..4): a layer of more than half the SMs' tiles, one block an SM, whose
    two shares a tile would not all be resident, may then split (forced here). The fuzz's
    `fuzz_3` (float32 channels-last: 96 wide_n128 tiles of 24 steps) stays whole without the
    hook whatever $CONV_POOL_GENERAL_SPLIT asks; with k = 2 it takes 2 shares, not 3 (288
    blocks, a third round); with k = 4, 4 shares. A layer of cluster splits keeps them within
    one round."""
    fuzz_3 = ConvPoolCase("fuzz_3", 8, 96, 512, 69, 35, (7, 2), stride=(4, 2), padding=(0, 1),
                          pool_kernel=(2, 2), pool_stride=(4, 3), pool_padding=(1, 1),
                          ceil_mode=True)

    def plan(case, rounds=None, split=None):
        for name, value in (("CONV_POOL_GENERAL_SPLIT_ROUNDS", rounds),
                            ("CONV_POOL_GENERAL_SPLIT", split)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        return general_plan(library, case, FLOAT32, channels_last=True)

    whole = plan(fuzz_3)
    slots = H200.sm_count * whole["blocks_per_sm"]
    assert whole["split"] == 1 and slots < 2 * whole["tiles"] <= 2 * slots, whole
    for rounds, split, expected in ((None, "2", 1), ("1", "2", 1), ("2", "2", 2),
                                    ("2", "3", 1), ("4", "3", 3), ("4", "4", 4),
                                    ("4", "6", 1), ("9", "6", 1)):
        forced = plan(fuzz_3, rounds=rounds, split=split)
        assert forced["split"] == expected, (rounds, split, forced)
        assert forced["tiles"] * forced["split"] <= 4 * slots
    # VGG block 5 at batch 1: 8 tiles of 8 blocks through the cluster, the hook or not.
    b5 = replace(find_case("vgg_b5"), batch=1)
    for rounds in (None, "4"):
        p = plan(b5, rounds=rounds)
        assert p["cluster"] == 1 and p["split"] * p["tiles"] <= H200.sm_count, (rounds, p)


def test_layers_whose_last_round_leaves_sms_idle_split_in_two(library, monkeypatch):
    """kWaveSplitShare's rule: a layer of more tiles than SMs, one block an SM, splits each tile
    in two through L2 where the busiest SM's rounds of half tiles take at most 0.8 of its
    rounds of whole ones and a tile holds at least kWaveSplitMinSteps (60) steps, on the tile
    it runs whole; $CONV_POOL_GENERAL_WAVE_SPLIT=0 keeps it whole. On 132 SMs the fuzz's
    192-tile layers of 60-192 steps split (three rounds of halves against two of wholes);
    `fuzz_31` (36 steps) stays whole; on 100 SMs `fuzz_49`'s 192 tiles stay whole (two rounds
    either way), and on 200 SMs (one round) they take the one-round rules' plan."""
    fuzz_49 = ConvPoolCase("fuzz_49", 32, 384, 384, 112, 5, (7, 7), stride=(2, 4),
                           padding=(2, 1), pool_kernel=(3, 3), pool_stride=(3, 3),
                           pool_padding=(1, 1))
    fuzz_84 = ConvPoolCase("fuzz_84", 32, 1024, 768, 56, 37, (3, 3), stride=(4, 4),
                           padding=(2, 3), dilation=(3, 2), pool_kernel=(2, 3),
                           pool_stride=(2, 1), pool_padding=(1, 1))
    fuzz_107 = ConvPoolCase("fuzz_107", 32, 192, 768, 94, 6, (11, 5), stride=(3, 1),
                            padding=(4, 3), dilation=(1, 2), pool_kernel=(4, 1),
                            pool_stride=(4, 1), pool_padding=(1, 0), bias=False)
    fuzz_31 = ConvPoolCase("fuzz_31", 16, 192, 130, 104, 125, (3, 5), stride=(3, 4),
                           padding=(3, 1), dilation=(2, 3), pool_kernel=(3, 2),
                           pool_stride=(3, 2))

    def plan(case, element, channels_last=False, wave=None, device=H200):
        if wave is None:
            monkeypatch.delenv("CONV_POOL_GENERAL_WAVE_SPLIT", raising=False)
        else:
            monkeypatch.setenv("CONV_POOL_GENERAL_WAVE_SPLIT", wave)
        return general_plan(library, case, element, device, channels_last=channels_last)

    for case, element, channels_last in ((fuzz_49, FLOAT16, False), (fuzz_84, FLOAT32, False),
                                         (fuzz_107, BFLOAT16, True)):
        whole = plan(case, element, channels_last, wave="0")
        split = plan(case, element, channels_last)
        assert whole["split"] == 1 and whole["blocks_per_sm"] == 1, whole
        assert H200.sm_count < whole["tiles"] <= 1.5 * H200.sm_count, whole
        assert whole["steps"] >= 60 and not whole["persistent"], whole
        assert split["split"] == 2, split
        for key in ("tile", "tiles", "steps", "images", "stages", "transposed", "input"):
            assert split[key] == whole[key], (key, whole, split)
    short = plan(fuzz_31, FLOAT16)
    assert short["split"] == 1 and short["steps"] < 60 < short["tiles"], short
    for sm_count in (100, 200):
        other = ConvPoolDevice(H200.max_shared_bytes, sm_count, 90, H200.max_clusters)
        on_other = plan(fuzz_49, FLOAT16, device=other)
        assert on_other == plan(fuzz_49, FLOAT16, wave="0", device=other), sm_count


def test_layers_of_few_tiles_split_their_reduction_over_clusters(library):
    # The N = 64 tiles that run one block per SM split a tile's chunks over a cluster of 2 to 8
    # blocks where that takes fewer rounds x (chunks per block + 7) than no split (the cost
    # model of split_for, fitted on the H200), every block getting at least 4 chunks (8
    # channels each in TF32, 16 in 16 bits). Clusters at once on the H200: 66 of 2, 39 of 3,
    # 30 of 4, 22 of 5, 17 of 6, 15 of 7 or 8. VGG-16 at batch 1: block 5 has 8 tiles (1 image
    # x 8 blocks of 64 channels), 8 blocks each; block 4 32 tiles, 3 each (4 would take two
    # rounds); block 3 52 tiles, 2 each; block 5 at batch 8 64 tiles, 2 each. Not block 5 at
    # batch 16 (128 tiles), nor the default problem at batch 1 (128 tiles), nor the suite.
    b4 = ConvPoolCase("vgg_b4_batch1", 1, 512, 512, 28, 28, (3, 3), padding=(1, 1))
    b5 = find_case("vgg_b5")
    expected = [(replace(b5, batch=1), 8), (b4, 3), (replace(find_case("vgg_b3"), batch=1), 2),
                (replace(b5, batch=8), 2), (replace(b5, batch=16), 1),
                (replace(find_case("default"), batch=1), 1)]
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        for case, split in expected:
            assert wgmma_split(library, case, element) == split, (case, element)
            if split > 1:
                assert packs_weight_apart(library, case, element), case
        for case in SUITE:
            assert wgmma_split(library, case, element) == 1, case.name
    # Shares that do not divide: 200 input channels over 4 tiles are 25 TF32 chunks, 7 blocks
    # of 4, 4, 4, 4, 4, 4, 1 (8 would leave the last none); 13 16-bit chunks, 4 of 4, 4, 4, 1.
    uneven = ConvPoolCase("split_uneven", 2, 200, 128, 14, 14, (3, 3), padding=(1, 1))
    assert [wgmma_split(library, uneven, e) for e in (FLOAT32, FLOAT16, BFLOAT16)] == [7, 4, 4]
    # Fewer than 4 chunks a block: 24 input channels are 3 chunks, no split; 64 channels are 8
    # TF32 chunks (2 blocks) but 4 16-bit ones (none).
    few_chunks = ConvPoolCase("few_chunks", 1, 24, 200, 14, 14, (3, 3), padding=(1, 1))
    assert wgmma_split(library, few_chunks, FLOAT32) == 1
    replaced = replace(few_chunks, in_channels=64)
    assert [wgmma_split(library, replaced, e) for e in (FLOAT32, FLOAT16)] == [2, 1]
    # A layer of at most 64 output channels over few whole images: its one-block square tile
    # splits too (TF32's twin, the 16-bit tile itself): 32 TF32 chunks over 8 blocks, 16
    # 16-bit ones over 4.
    narrow = ConvPoolCase("narrow_deep", 2, 256, 64, 14, 14, (3, 3), padding=(1, 1))
    for element, split in ((FLOAT32, 8), (FLOAT16, 4), (BFLOAT16, 4)):
        assert wgmma_tile(library, narrow, element) == "square_n64"
        assert wgmma_split(library, narrow, element) == split, element
    # 16 SMs, 8 clusters of 2, 4 of 4, 2 of 8: VGG block 5 at batch 1 (8 tiles) splits in 2
    # (4 or 8 would take two or four rounds). Unknown cluster counts (0): no split; off Hopper,
    # never.
    few_sms = ConvPoolDevice(H200.max_shared_bytes, 16, 90, clusters({2: 8, 4: 4, 8: 2}))
    assert wgmma_split(library, replace(b5, batch=1), FLOAT32, device=few_sms) == 2
    unknown = ConvPoolDevice(H200.max_shared_bytes, 132, 90)
    assert wgmma_split(library, replace(b5, batch=1), FLOAT32, device=unknown) == 1
    assert wgmma_split(library, replace(b5, batch=1), FLOAT32, device=A100_LIKE) == 1


# The flat kernels' warp tiling on the H200 (float32, 16 bits): above 32 channels blocks of 64,
# 8 warps of 32 pixels x 64 channels where two blocks share an SM, else 16 warps of 32 x 32
# (those layers take the wgmma mainloop, tiled_tf32_flat_wgmma / tiled_16bit_flat_wgmma, whose
# tiling is n64_wgmma_m64).
FLAT_TILINGS = {
    "flat_alexnet": ("n64_warp32x32", "n64_warp32x32"),
    "flat_alexnet_k96": ("n64_warp32x32", "n64_warp32x32"),
    "flat_k300": ("n64_warp32x32", "n64_warp32x32"),
    "flat_resnet_stem": ("n64_warp32x32", "n64_warp32x64"),
    "flat_k96_7x7": ("n64_warp32x32", "n64_warp32x64"),
    "flat_k32_5x5": ("n32_warp32x32", "n32_warp32x32"),
    "flat_k64_5x5": ("n64_warp32x64", "n64_warp32x64"),
}


@pytest.mark.parametrize("case", FLAT_TILING_CASES, ids=lambda c: c.name)
def test_flat_layers_run_the_flat_kernels_with_their_tiling(library, variant_names, case):
    """Every layer of FLAT_TILING_CASES takes the flat kernel of its element type (AlexNet's
    first layer with 96 channels used to take `direct` in float32: no 128-channel block fit),
    with the warp tiling listed above, except the 5 x 5 and 7 x 7 ones that fill the H200's
    SMs, which take the general kernel there (kernel_choice.few_channel_general)."""
    for element, name, tiling in ((FLOAT32, "tiled_tf32_flat", FLAT_TILINGS[case.name][0]),
                                  (FLOAT16, "tiled_16bit_flat", FLAT_TILINGS[case.name][1]),
                                  (BFLOAT16, "tiled_16bit_flat", FLAT_TILINGS[case.name][1])):
        assert flat_tiling(library, case, element) == tiling
        if kernel_choice.few_channel_general(case, element=element):
            assert choose(library, variant_names, case, element=element) == "general_wgmma"
            assert choose(library, variant_names, case, element=element,
                          device=A100_LIKE) == name
        elif tiling == "n64_warp32x32":
            assert choose(library, variant_names, case, element=element) == FLAT_WGMMA[element]
            assert flat_tiling(library, case, element, name=FLAT_WGMMA[element]) == \
                "n64_wgmma_m64"
            assert choose(library, variant_names, case, element=element,
                          device=A100_LIKE) == name
        else:
            assert choose(library, variant_names, case, element=element) == name
    assert set(FLAT_TILINGS) == {c.name for c in FLAT_TILING_CASES}


def test_few_channel_first_layers_of_5x5_to_7x7_take_the_general_kernel(library,
                                                                       variant_names):
    """ResNet's 7 x 7 / 2 stem at batch 32 and 5 x 5 layers of 3 channels take the general kernel
    on Hopper (kFewChannelGeneralMinTaps); the same stem at batch 1 (49 tiles), AlexNet's
    11 x 11 / 4 layer, 3 x 3 into 32 channels, stride 4, allow_tf32 = False and sm_80 keep the
    flat kernels."""
    stem = ConvPoolCase("resnet_stem", 32, 3, 64, 224, 224, (7, 7), stride=(2, 2),
                        padding=(3, 3), pool_kernel=(3, 3), pool_stride=(2, 2),
                        pool_padding=(1, 1))
    five = ConvPoolCase("five", 8, 3, 96, 128, 128, (5, 5), stride=(2, 2), padding=(2, 2),
                        pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1))
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        flat = "tiled_tf32_flat" if element == FLOAT32 else "tiled_16bit_flat"
        for case in (stem, five, replace(stem, in_channels=7)):
            assert kernel_choice.few_channel_general(case)
            assert choose(library, variant_names, case, element=element) == "general_wgmma"
            assert choose(library, variant_names, case, element=element,
                          device=A100_LIKE) == flat
        for case in (replace(stem, batch=1), find_case("alexnet_c1"),
                     replace(stem, kernel_size=(3, 3), out_channels=32, padding=(1, 1)),
                     replace(stem, kernel_size=(9, 9), padding=(4, 4)),
                     replace(stem, stride=(4, 4))):
            assert not kernel_choice.few_channel_general(case), case
            assert choose(library, variant_names, case, element=element) != "general_wgmma", \
                (case, element)
    assert not kernel_choice.few_channel_general(replace(stem, in_channels=8))
    assert choose(library, variant_names, stem, allow_tf32=False) == "tiled_3xtf32_flat"


def test_few_channel_3x3_layers_take_the_general_kernel_except_in_float32_nchw(
        library, variant_names):
    """SqueezeNet 1.1's 3 x 3 / 2 RGB layer at batch 32, a 3 x 3 / 3 one into 256 channels and
    the fuzz's 3 x 3 at 1 x 3 with dilation 1 x 3 take the general kernel in float16 and
    bfloat16 of either layout and in float32 channels-last (kFewChannelGeneralMinTaps); float32
    NCHW (kFewChannelGeneralMinTapsFloat32Nchw), batch 1 (too few tiles), 16 output channels and
    sm_80 keep the flat kernels or the small one. Into 32 channels (pool padded, ceil_mode) only
    16 bits with a channels-last output takes it (kFewChannelGeneralMinOut16ChannelsLast)."""
    squeeze = ConvPoolCase("squeezenet1_1_c0", 32, 3, 64, 224, 224, (3, 3), stride=(2, 2),
                           pool_kernel=(3, 3), pool_stride=(2, 2))
    stride3 = ConvPoolCase("s3_k256", 32, 3, 256, 224, 224, (3, 3), stride=(3, 3),
                           padding=(1, 1), pool_kernel=(2, 2), pool_stride=(2, 2))
    dilated = ConvPoolCase("fuzz_2", 16, 4, 96, 135, 130, (3, 3), stride=(1, 3), padding=(2, 2),
                           dilation=(1, 3), pool_kernel=(4, 1), pool_stride=(4, 1),
                           pool_padding=(2, 0))
    narrow = ConvPoolCase("narrow", 32, 3, 32, 224, 224, (3, 3), stride=(2, 2), padding=(1, 1),
                          pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1),
                          ceil_mode=True)
    for case in (squeeze, stride3, dilated, narrow):
        for element in (FLOAT32, FLOAT16, BFLOAT16):
            flat = "tiled_tf32_flat" if element == FLOAT32 else "tiled_16bit_flat"
            for channels_last in (False, True):
                form = (case.name, element, channels_last)
                general = (element != FLOAT32 and channels_last if case is narrow
                           else element != FLOAT32 or channels_last)
                assert kernel_choice.few_channel_general(case, element=element,
                                                         channels_last=channels_last) == general
                variant = choose(library, variant_names, case, element=element,
                                 channels_last=channels_last)
                assert (variant == "general_wgmma") == general, (form, variant)
                assert choose(library, variant_names, case, element=element,
                              channels_last=channels_last, device=A100_LIKE) == flat, form
                for other in (replace(case, batch=1), replace(case, out_channels=16)):
                    assert not kernel_choice.few_channel_general(
                        other, element=element, channels_last=channels_last), (other, form)
                    assert choose(library, variant_names, other, element=element,
                                  channels_last=channels_last) != "general_wgmma", (other, form)


def test_few_channel_rule_takes_the_layers_its_mirror_says_on_random_layers(
        library, variant_names, seed):
    """On 300 random layers of 1-7 input channels large enough to fill the SMs or not (batch
    1-64, 40-230 pixels a side, kernels up to 7 x 7, strides 1-4, dilation 1-3, 16-1,024
    output channels, any pool) in every dtype and layout, the automatic choice takes the
    general kernel where kernel_choice.few_channel_general says (unless the stem kernel or the
    small one comes first), and where it says not and a flat kernel runs, a flat kernel: the
    mirror the GPU tests use to name the expected variant is the rule's class, not only its
    listed layers."""
    rng = random.Random(seed)
    checked = taken = 0
    while checked < 300:
        kernel = (rng.randint(1, 7), rng.randint(1, 7))
        dilation = (rng.randint(1, 3), rng.randint(1, 3))
        pool = (rng.randint(1, 4), rng.randint(1, 4))
        case = ConvPoolCase(
            f"few_{checked}", rng.choice([1, 4, 16, 32, 64]), rng.choice([1, 2, 3, 4, 7]),
            rng.choice([16, 24, 32, 48, 64, 96, 256, 1024]), rng.randint(40, 230),
            rng.randint(40, 230), kernel, stride=(rng.randint(1, 4), rng.randint(1, 4)),
            padding=(rng.randint(0, kernel[0] // 2), rng.randint(0, kernel[1] // 2)),
            dilation=dilation, pool_kernel=pool,
            pool_stride=(rng.randint(1, 4), rng.randint(1, 4)),
            pool_padding=(rng.randint(0, pool[0] // 2), rng.randint(0, pool[1] // 2)))
        conv_h, conv_w = case.conv_out()
        if min(conv_h, conv_w) < 1 or min(case.pooled_out()) < 1:
            continue
        checked += 1
        for element in (FLOAT32, FLOAT16, BFLOAT16):
            flat = "tiled_tf32_flat" if element == FLOAT32 else "tiled_16bit_flat"
            for channels_last in (False, True):
                form = (case, element, channels_last)
                variant = choose(library, variant_names, case, element=element,
                                 channels_last=channels_last)
                if variant.startswith(("stem_", "small_")):
                    continue
                if kernel_choice.few_channel_general(case, element=element,
                                                     channels_last=channels_last):
                    taken += 1
                    assert variant == "general_wgmma", form
                elif runs(library, variant_names, case, flat, element):
                    assert variant.startswith(flat), (form, variant)
    assert taken > 0  # the draw reaches the rule's class


def test_few_channel_layers_of_strides_3_and_4_take_the_general_kernel_where_it_won(
        library, variant_names):
    """Strides past 2 (kFewChannelGeneralMaxStride, kFewChannelGeneralMaxStride16ChannelsLast):
    a 5 x 5 / 3 RGB layer and a 7 x 7 one at stride 1 x 3 take the general kernel in every
    dtype and layout; 7 x 7 / 4 and the fuzz's 1 x 11 / 4 layer of 4 channels only in 16 bits
    with a channels-last output; stride 5 nowhere, and sm_80 keeps the flat kernels."""
    five = ConvPoolCase("five_s3", 32, 3, 96, 224, 224, (5, 5), stride=(3, 3), padding=(2, 2),
                        pool_kernel=(2, 2), pool_stride=(2, 2))
    seven = ConvPoolCase("seven_1x3", 32, 4, 256, 74, 58, (7, 7), stride=(1, 3), padding=(1, 2),
                         pool_kernel=(2, 1), pool_stride=(2, 1))
    seven_s4 = ConvPoolCase("seven_s4", 32, 3, 64, 224, 224, (7, 7), stride=(4, 4),
                            padding=(3, 3), pool_kernel=(3, 3), pool_stride=(2, 2))
    wide = ConvPoolCase("one_by_eleven_s4", 64, 4, 384, 72, 82, (1, 11), stride=(4, 4),
                        padding=(1, 0), pool_kernel=(3, 3), pool_stride=(3, 3),
                        pool_padding=(1, 1), ceil_mode=True)
    for element in (FLOAT32, FLOAT16, BFLOAT16):
        flat = "tiled_tf32_flat" if element == FLOAT32 else "tiled_16bit_flat"
        for channels_last in (False, True):
            layout_16bit = channels_last and element != FLOAT32
            for case, general in ((five, True), (seven, True), (seven_s4, layout_16bit),
                                  (wide, layout_16bit), (replace(five, stride=(5, 5)), False),
                                  (replace(seven_s4, stride=(2, 5)), False)):
                form = (case.name, element, channels_last)
                assert kernel_choice.few_channel_general(case, element=element,
                                                         channels_last=channels_last) == general
                variant = choose(library, variant_names, case, element=element,
                                 channels_last=channels_last)
                assert (variant == "general_wgmma") == general, (form, variant)
                if general:
                    assert choose(library, variant_names, case, element=element,
                                  channels_last=channels_last, device=A100_LIKE) == flat, form


def test_column_folding_plans_the_folded_layer(library, variant_names, monkeypatch):
    """Column folding (kernels/hopper/general_fold.cu; $CONV_POOL_GENERAL_FOLD=0 turns it off):
    a layer of fewer channels than a chunk is planned as kernel_w x C channels, padded to whole
    16-byte slices, with a one-column kernel over a dense channels-last copy that the kernel
    reads in place (no slice-planar copy); the workspace adds that copy and the folded weight.
    The 3xTF32 form, layers of a chunk's channels or more and layers whose x' would exceed 8
    times x (kMaxFoldedGrowth: a 1-channel 1 x 64 kernel at stride 1) are not folded."""
    ids = variant_names_to_ids(variant_names)
    stem = ConvPoolCase("resnet_stem", 32, 3, 64, 224, 224, (7, 7), stride=(2, 2),
                        padding=(3, 3), pool_kernel=(3, 3), pool_stride=(2, 2),
                        pool_padding=(1, 1))
    wide = replace(stem, in_channels=16)
    # A 1-channel 1 x 64 kernel at stride 1: x' would be 64 times x (64 channels a pixel); 1 x 16
    # at column stride 4: 4 times x (16 channels, a quarter of the columns).
    grown = ConvPoolCase("c1_1x64", 2, 1, 32, 16, 600, (1, 64), padding=(0, 32))
    kept = replace(grown, kernel_size=(1, 16), stride=(1, 4), padding=(0, 8))

    def workspace(case, element, name="general_wgmma"):
        shape = shape_of(case, element)
        return library.conv_relu_maxpool_workspace_bytes(ctypes.byref(shape), ids[name],
                                                         ctypes.byref(H200), None)
    for element, per_slice in ((FLOAT32, 4), (FLOAT16, 8), (BFLOAT16, 8)):
        monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
        plain = general_plan(library, stem, element)
        plain_bytes = workspace(stem, element)
        wide_plan = general_plan(library, wide, element)
        monkeypatch.delenv("CONV_POOL_GENERAL_FOLD")
        folded = general_plan(library, stem, element)
        channels = -(-7 * 3 // per_slice) * per_slice
        assert plain["chunks"] == 1 and folded["chunks"] == -(-channels // (2 * per_slice)), \
            (plain, folded)
        assert folded["nhwc_copy"] == 0 and folded["input"] == "tma", folded
        conv_w = stem.conv_out()[1]
        size = 4 if element == FLOAT32 else 2
        assert workspace(stem, element) >= (32 * 224 * conv_w * channels
                                            + 64 * channels * 7) * size, (element, plain_bytes)
        assert general_plan(library, wide, element) == wide_plan
        monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
        unfolded = [general_plan(library, case, element) for case in (grown, kept)]
        monkeypatch.delenv("CONV_POOL_GENERAL_FOLD")
        assert general_plan(library, grown, element) == unfolded[0], element
        assert general_plan(library, kept, element) != unfolded[1], element
        if element == FLOAT32:
            three = kernel_choice.variant_plan(library, stem, "general_3xtf32_wgmma",
                                               element)["general"]
            monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
            assert kernel_choice.variant_plan(library, stem, "general_3xtf32_wgmma",
                                              element)["general"] == three


def test_window_major_plans_pointwise_layers_as_windows(library, variant_names, monkeypatch):
    """Window-major 1 x 1 layers (kernels/hopper/general_windows.cu): a 1 x 1 layer under a pool
    whose windows do not overlap can be planned as one image of its windows side by side, 32
    windows a row (ResNeXt's 1024 -> 1024 at 14 x 14 under 2 x 2 / 2: 6,272 windows, from 1,024
    tiles of 16 x 16 pixels to 784 of 8 x 32). From NCHW x the preparation launch's slice-planar
    copy makes x' (windows=2: the workspace holds that copy and no other); from channels-last x,
    in the 3xTF32 form and with the copy in a launch of its own, a gather does (windows=1), and
    the kernel reads x' in place. By default (the hook unset) only the first form, and only
    where it cuts the layer's waves of blocks to at most kWindowsMaxWaveShare of two or more
    (here 8 -> 6; at batch 32, 2 -> 2: not). $CONV_POOL_GENERAL_WINDOWS=1 windows every layer it
    can, =0 none. Never windowed: other kernels, overlapping windows, channels short of a
    slice."""
    ids = variant_names_to_ids(variant_names)
    layer = ConvPoolCase("resnext_c30", 128, 1024, 1024, 14, 14, (1, 1))
    refused = [replace(layer, kernel_size=(3, 3), padding=(1, 1)),
               replace(layer, pool_kernel=(3, 3), pool_stride=(2, 2)),
               replace(layer, in_channels=1018)]

    def workspace(case, element):
        shape = shape_of(case, element)
        return library.conv_relu_maxpool_workspace_bytes(
            ctypes.byref(shape), ids["general_wgmma"], ctypes.byref(H200), None)
    x_bytes = 6272 * 4 * 1024  # x' (elements)
    monkeypatch.delenv("CONV_POOL_GENERAL_SEPARATE_PREP", raising=False)
    for element, size in ((FLOAT32, 4), (FLOAT16, 2), (BFLOAT16, 2)):
        monkeypatch.setenv("CONV_POOL_GENERAL_WINDOWS", "0")
        plain = general_plan(library, layer, element)
        assert plain["windows"] == 0 and plain["tiles"] == 1024, plain
        monkeypatch.delenv("CONV_POOL_GENERAL_WINDOWS")
        chosen = general_plan(library, layer, element)
        assert chosen["windows"] == 2 and chosen["tiles"] == 784, chosen
        assert chosen["nhwc_copy"] == 1 and chosen["input"] == "tma", chosen
        copied_bytes = workspace(layer, element)
        assert x_bytes * size <= copied_bytes < 2 * x_bytes * size, copied_bytes
        for kept in (general_plan(library, layer, element, channels_last=True),
                     general_plan(library, replace(layer, batch=32), element)):
            assert kept["windows"] == 0, kept
        monkeypatch.setenv("CONV_POOL_GENERAL_WINDOWS", "1")
        assert general_plan(library, layer, element) == chosen
        gathered = general_plan(library, layer, element, channels_last=True)
        assert gathered["windows"] == 1 and gathered["nhwc_copy"] == 0, gathered
        assert general_plan(library, replace(layer, batch=32), element)["windows"] == 2
        monkeypatch.setenv("CONV_POOL_GENERAL_SEPARATE_PREP", "1")
        separate = general_plan(library, layer, element)
        assert separate["windows"] == 1 and separate["nhwc_copy"] == 0, separate
        assert workspace(layer, element) >= x_bytes * size, copied_bytes
        monkeypatch.delenv("CONV_POOL_GENERAL_SEPARATE_PREP")
        for case in refused:
            assert general_plan(library, case, element)["windows"] == 0, case
    split = kernel_choice.general_plan(library, layer, FLOAT32, split=True)
    assert split["windows"] == 1, split
    monkeypatch.delenv("CONV_POOL_GENERAL_WINDOWS")
    split = kernel_choice.general_plan(library, layer, FLOAT32, split=True)
    assert split["windows"] == 0, split


def test_stem_kernel_limits(library, variant_names):
    # stem_tf32 / stem_16bit: a reduction (in_channels x taps) of at most 32, at most 64 output
    # channels, a 2x2 / stride 2 pool whose windows all lie inside the conv output.
    ids = variant_names_to_ids(variant_names)
    rgb = find_case("rgb_stem")
    refused = {
        b"in_channels * kernel taps is larger than 32": replace(rgb, in_channels=4),
        b"more than 64 output channels": replace(rgb, out_channels=65),
        b"the pooling in registers covers only a 2x2 / stride 2 pool without padding":
            replace(rgb, pool_kernel=(3, 3), pool_stride=(2, 2)),
        b"a pooling window reaches past the conv output (ceil mode)":
            replace(rgb, height=223, width=223, ceil_mode=True),
        # A halo of a million columns: refused without overflowing the size arithmetic.
        b"the input halo and pooled tile of a block do not fit in shared memory":
            replace(rgb, batch=1, width=1_000_010, dilation=(1, 500_000)),
    }
    for element, name in ((FLOAT32, "stem_tf32"), (FLOAT16, "stem_16bit"),
                          (BFLOAT16, "stem_16bit")):
        assert unsupported(library, rgb, ids[name], element=element) is None
        assert unsupported(library, replace(rgb, in_channels=2, kernel_size=(4, 4)), ids[name],
                           element=element) is None  # 2 x 16 = 32
        for why, case in refused.items():
            assert unsupported(library, case, ids[name], element=element) == why, case


def test_hopper_never_takes_the_direct_kernel_for_a_layer_above_10_mflop(library, variant_names,
                                                                        seed):
    """Over the fuzz space (utils.suite.fuzz_case: kernels 1-11, strides 1-4, dilation 1-3,
    pools 1-4, up to 1024 channels) the automatic choice on the H200 runs every layer above 10
    MFLOP on a tensor-core kernel (the general one where no special kernel applies), in float32
    with TF32 and in both 16-bit types: the one-thread-per-output kernels remain for tiny
    layers and explicit requests."""
    rng = random.Random(seed)
    checked = 0
    for i in range(600):
        case = fuzz_case(rng, f"fuzz_{i}", max_size=80, max_channels=1024)
        if case.flops() <= 1e7:
            continue
        checked += 1
        for element in (FLOAT32, FLOAT16, BFLOAT16):
            chosen = choose(library, variant_names, case, element=element)
            assert chosen not in ("direct", "direct_16bit"), (case, element, chosen)
    assert checked > 100


def test_older_gpus_keep_their_variants_and_never_take_the_general_kernel(library,
                                                                          variant_names, seed):
    """sm_80 (A100-like): general_wgmma refuses (it is sm_90a code), and the choice for the
    layers it took over on Hopper stays what it was: the mma.sync kernels where their tiles fit
    (GoogLeNet's 3 x 3 under a 3 x 3 / 2 pool, a 1 x 1 under a padded one), the direct kernel
    for a 5 x 5 over 64 channels (AlexNet's second layer: its weights do not fit one stage)."""
    general = variant_names_to_ids(variant_names)["general_wgmma"]
    googlenet = ConvPoolCase("googlenet_c3", 32, 64, 192, 56, 56, (3, 3), padding=(1, 1),
                             pool_kernel=(3, 3), pool_stride=(2, 2), ceil_mode=True)
    pointwise = ConvPoolCase("k1_pool3", 64, 256, 256, 28, 28, (1, 1), pool_kernel=(3, 3),
                             pool_stride=(2, 2), pool_padding=(1, 1))
    alexnet_c2 = ConvPoolCase("alexnet_c2", 128, 64, 192, 27, 27, (5, 5), padding=(2, 2),
                              pool_kernel=(3, 3), pool_stride=(2, 2))
    expected = {googlenet: ("tiled_tf32", "tiled_16bit_mma"),
                pointwise: ("tiled_tf32", "tiled_16bit_mma"),
                alexnet_c2: ("direct", "tiled_16bit_mma")}
    for case, (float32, sixteen) in expected.items():
        assert choose(library, variant_names, case, device=A100_LIKE) == float32, case.name
        assert choose(library, variant_names, case, device=A100_LIKE,
                      element=FLOAT16) == sixteen, case.name
        assert unsupported(library, case, general, device=A100_LIKE) is not None
        # On the H200 the general kernel takes all three.
        assert choose(library, variant_names, case) == "general_wgmma", case.name
    rng = random.Random(seed)
    for i in range(200):
        case = fuzz_case(rng, f"fuzz_{i}")
        for element in (FLOAT32, FLOAT16):
            assert choose(library, variant_names, case, device=A100_LIKE,
                          element=element) != "general_wgmma"


# ---- the variant registry (kernels/conv_relu_maxpool_registry.cu) --------------------------

ELEMENT_MESSAGES = {FLOAT16: "needs float32 input", BFLOAT16: "needs float32 input"}


@pytest.fixture(scope="module")
def registry(library):
    from utils.kernel_choice import variant_table
    return variant_table(library)


def test_the_registry_has_one_row_per_variant_id(registry, extension, variant_names):
    assert [row["id"] for row in registry] == sorted(variant_names)
    assert [row["name"] for row in registry] == [variant_names[i] for i in sorted(variant_names)]
    # The binding reads the same table.
    assert [(row["id"], row["name"], row["family"], row["arch"])
            for row in extension.conv2d_relu_maxpool_variant_table()] == \
        [(row["id"], row["name"], row["family"], row["arch"]) for row in registry]
    root = Path(__file__).resolve().parent.parent
    for binding_row, row in zip(extension.conv2d_relu_maxpool_variant_table(), registry):
        names = {"float32": row["name"]}
        if row["name_16bit"] is not None:
            names.update(float16=row["name_16bit"], bfloat16=row["name_16bit"])
        assert binding_row["names"] == names and list(names) == binding_row["dtypes"], row
        for source in binding_row["source"].values():
            assert (root / source).is_file(), row


def test_the_registry_says_which_element_types_each_variant_takes(registry):
    float32_only = {row["name"] for row in registry if row["elements"] == [FLOAT32]}
    assert float32_only == {"tiled_fp32", "tiled_3xtf32", "tiled_tf32_16w", "small_tf32",
                            "tiled_3xtf32_flat", "tiled_3xtf32_wgmma", "general_3xtf32_wgmma"}
    every = {row["name"] for row in registry if row["elements"] == [FLOAT32, FLOAT16, BFLOAT16]}
    assert every == set(TWIN_OF.values()) | {"general_wgmma"}
    assert len(every) + len(float32_only) == len(registry)
    # Each dtype twin is one row: the 16-bit member's name, its math (16bit on tensor cores,
    # fp32 on CUDA cores; the flat kernel multiplies 16-bit operands exactly in TF32).
    by_name = {row["name"]: row for row in registry}
    math_16bit = {"direct_16bit": "fp32", "small_16bit": "fp32", "tiled_16bit_flat": "tf32"}
    for sixteen, float32 in TWIN_OF.items():
        assert by_name[float32]["name_16bit"] == sixteen
        assert by_name[float32]["math_16bit"] == math_16bit.get(sixteen, "16bit"), sixteen
    assert by_name["general_wgmma"]["name_16bit"] == "general_wgmma"
    assert all(row["name_16bit"] is None for row in registry if row["name"] in float32_only)


def test_every_variant_refuses_the_element_types_its_row_excludes(registry, library, seed):
    """The registry's element check comes first: every variant takes float32, and one without
    a 16-bit member refuses float16 and bfloat16 with one message; a variant never refuses a
    shape for its element type when its row takes it."""
    from utils.kernel_choice import why_not
    rng = random.Random(seed)
    cases = [fuzz_case(rng, f"registry_{i}", max_size=64, max_channels=64) for i in range(40)]
    for case in cases:
        for element in (FLOAT32, FLOAT16, BFLOAT16):
            for row in registry:
                why = why_not(library, case, row["id"], element)
                if element in row["elements"]:
                    assert why != "needs float32 input", (row["name"], case.label())
                else:
                    assert why == ELEMENT_MESSAGES[element], (row["name"], case.label(), why)


def test_hopper_only_rows_refuse_every_shape_on_an_older_gpu(registry, library, seed):
    from utils.kernel_choice import why_not
    rng = random.Random(seed)
    cases = list(SUITE) + [fuzz_case(rng, f"arch_{i}", max_size=64, max_channels=256)
                           for i in range(30)]
    hopper = [row for row in registry if row["arch"] == 90]
    assert {row["family"] for row in hopper} == {"wgmma", "flat_wgmma", "general"}
    for case in cases:
        for row in hopper:
            for element in row["elements"]:
                assert why_not(library, case, row["id"], element, A100_LIKE) is not None, \
                    (row["name"], case.label())


def test_the_choice_takes_only_variants_the_registry_lets_run(registry, library, variant_names,
                                                              seed):
    from utils.kernel_choice import why_not
    rng = random.Random(seed)
    by_name = {name: row for row in registry for name in (row["name"], row["name_16bit"]) if name}
    for i in range(200):
        case = fuzz_case(rng, f"pick_{i}", max_size=96, max_channels=512,
                         batch=rng.choice([1, 4, 32]))
        for element in (FLOAT32, FLOAT16, BFLOAT16):
            for device in (H200, A100_LIKE):
                for allow_tf32 in ((True, False) if element == FLOAT32 else (True,)):
                    name = choose(library, variant_names, case, allow_tf32, device=device,
                                  element=element)
                    row = by_name[name]
                    assert element in row["elements"], (name, case.label())
                    assert why_not(library, case, row["id"], element, device) is None, \
                        (name, case.label())
                    if not allow_tf32:
                        assert row["math"] in ("fp32", "3xtf32"), (name, case.label())
