"""GPU correctness of the general Hopper kernel (general_wgmma, kernels/hopper/) against float64.

The kernel is forced (config = general_wgmma) on random geometries of the whole space it covers
(utils.suite.fuzz_case: kernels 1-11, strides 1-4, dilation 1-3, pools 1-4 of any stride,
padding and ceil mode, up to 300 channels), in float32 (TF32), float16 and bfloat16, with NCHW,
channels-last and column-strided inputs; on one case per tile of its table; and with NaN and
infinities in the input, judged against float64 with cuDNN off (whose FFT and Winograd
algorithms would spread one inf over whole tiles). Every seed is printed (the `seed` fixture).
Skipped without a Hopper GPU (the kernel is sm_90a code).
"""
import random
from dataclasses import replace

import pytest
import torch

from utils import kernel_choice
from utils.references import LAYOUTS, case_operands, with_layout
from utils.references import reference_float64 as reference
from utils.suite import ConvPoolCase, fuzz_case

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs a Hopper GPU (sm_90a)")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
ELEMENT = {torch.float32: kernel_choice.FLOAT32, torch.float16: kernel_choice.FLOAT16,
           torch.bfloat16: kernel_choice.BFLOAT16}
# TF32 products (10-bit significands) and fp32 sums; 16-bit outputs rounded once (as in
# tests/test_gpu_correctness.py: a layout or indexing bug gives O(1) errors).
TOLERANCE = {torch.float32: 1e-2, torch.float16: 1e-2, torch.bfloat16: 2e-2}


# Every form of the kernel, every test in each (while they all exist): the warp-specialized one
# fed by the tensor copy engine (general_ws_kernel.cuh, the plan's input "tma", the default where
# it runs: one tile a block, merged box rows where they apply, split reductions through the
# cluster's shared memory), the same with one 16-byte slice a box row
# ($CONV_POOL_GENERAL_TMA_MERGED=0), with split reductions through global memory
# ($CONV_POOL_GENERAL_CLUSTER=0), persistent ($CONV_POOL_GENERAL_PERSISTENT=1), launched as the
# preparation launch's programmatic dependent ($CONV_POOL_GENERAL_PDL=1: the default form's
# plans, its blocks waiting for the previous kernel before any global access), and the one whose
# warps copy with cp.async (general_kernel.cuh; $CONV_POOL_GENERAL_TMA=0). The 3xTF32 form is
# the last kind either way. tma_narrow_pool: the default form with $CONV_POOL_GENERAL_WIDE_POOL=0
# (a channels-last output's window loops over 2 channels at once, not 16 bytes, on one-block
# tiles too). tma_staged_pairs: the default form with $CONV_POOL_GENERAL_DIRECT_PAIRS=0 (paired
# plans without a split stage their windows' maxima for the pooling loops instead of storing
# them from the registers), also persistent (tma_persistent_staged: a barrier between a
# block's tiles). tma_full_tail: the default form with $CONV_POOL_GENERAL_NARROW_TAIL=0 (a last
# channel block at most half full runs the tile's N, not half of it: Plan::tail_n = 0).
# tma_whole_rect: the default form with $CONV_POOL_GENERAL_POOL_RECT=0 (Plan::pool_rect off: the
# pooling's threads over the tile's whole pooled rectangle, positions past the output refused one
# by one; the first bias read after the first steps). tma_group_pairs: the default form with
# $CONV_POOL_GENERAL_POOL_POSITIONS=0 and $CONV_POOL_GENERAL_PIXEL_MAJOR=0 (a channels-last
# output's tile staged [channel][pixel], its pooling (channel group, position) pairs in turn,
# not one position a thread and its groups over a [pixel][channel] tile: Plan::pool_positions,
# Plan::pixel_major); tma_channel_major: with only the second (one position a thread over a
# [channel][pixel] tile); tma_pixel_groups: with only the first (the pairs over a
# [pixel][channel] tile). tma_strided_pack: the default form with
# $CONV_POOL_GENERAL_COALESCED_PACK=0 (the weight packing's threads in the packed order, one
# element a load, not over OIHW weights tap first nor an OHWI weight's 16 bytes at once).
# tma_even_steps: $CONV_POOL_GENERAL_EVEN_STEPS=1 (a reduction's chunks spread evenly over its
# chunk steps: no step of zero chunks at the end).
PATH_HOOKS = {"tma": {}, "tma_slices": {"CONV_POOL_GENERAL_TMA_MERGED": "0"},
              "tma_full_tail": {"CONV_POOL_GENERAL_NARROW_TAIL": "0"},
              "tma_narrow_pool": {"CONV_POOL_GENERAL_WIDE_POOL": "0"},
              "tma_staged_pairs": {"CONV_POOL_GENERAL_DIRECT_PAIRS": "0"},
              "tma_persistent_staged": {"CONV_POOL_GENERAL_PERSISTENT": "1",
                                        "CONV_POOL_GENERAL_DIRECT_PAIRS": "0"},
              "tma_global_split": {"CONV_POOL_GENERAL_CLUSTER": "0"},
              "tma_persistent": {"CONV_POOL_GENERAL_PERSISTENT": "1"},
              "tma_pdl": {"CONV_POOL_GENERAL_PDL": "1"},
              "tma_whole_rect": {"CONV_POOL_GENERAL_POOL_RECT": "0"},
              "tma_group_pairs": {"CONV_POOL_GENERAL_POOL_POSITIONS": "0",
                                  "CONV_POOL_GENERAL_PIXEL_MAJOR": "0"},
              "tma_channel_major": {"CONV_POOL_GENERAL_PIXEL_MAJOR": "0"},
              "tma_pixel_groups": {"CONV_POOL_GENERAL_POOL_POSITIONS": "0"},
              "tma_strided_pack": {"CONV_POOL_GENERAL_COALESCED_PACK": "0"},
              "tma_even_steps": {"CONV_POOL_GENERAL_EVEN_STEPS": "1"},
              "cpasync": {"CONV_POOL_GENERAL_TMA": "0"}}
# The forms whose plans are the default's (split reductions through the cluster).
CLUSTER_PATHS = ("tma", "tma_slices", "tma_pdl", "tma_narrow_pool", "tma_staged_pairs",
                 "tma_full_tail", "tma_whole_rect", "tma_group_pairs", "tma_channel_major",
                 "tma_pixel_groups", "tma_strided_pack", "tma_even_steps")
# The forms whose paired plans without a split store from the registers (Plan::direct_pairs).
DIRECT_PATHS = tuple(path for path, hooks in PATH_HOOKS.items()
                     if path.startswith("tma") and "CONV_POOL_GENERAL_DIRECT_PAIRS" not in hooks)


@pytest.fixture(autouse=True, params=list(PATH_HOOKS))
def path(request, monkeypatch):
    for hooks in PATH_HOOKS.values():
        for key in hooks:
            monkeypatch.delenv(key, raising=False)
    for key, value in PATH_HOOKS[request.param].items():
        monkeypatch.setenv(key, value)
    return request.param


@pytest.fixture(scope="module")
def ext():
    import cuda_extension
    return cuda_extension


@pytest.fixture(scope="module")
def lib(ext):
    return kernel_choice.load(ext)


@pytest.fixture(scope="module")
def device(lib):
    return kernel_choice.device_of(lib)


def general_config(ext) -> int:
    return ext.conv2d_relu_maxpool_variants()["general_wgmma"]


def operands(case: ConvPoolCase, seed: int, dtype: torch.dtype):
    return case_operands(case, seed, dtype)


def run_general(ext, case, x, w, b):
    return ext.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), general_config(ext), None)


def check(ext, case, x, w, b, dtype, what):
    out = run_general(ext, case, x, w, b)
    expected = reference(case, x, w, b)
    assert out.dtype == dtype and out.shape == expected.shape, what
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol,
                               msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_random_geometries_match_float64(ext, lib, device, seed, dtype, layout, path):
    rng = random.Random(seed)
    ran = tma = 0
    for i in range(16):
        case = fuzz_case(rng, f"fuzz_{i}")
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        # The kernel runs every geometry of the fuzz space (its limits lie outside it).
        assert plan is not None, f"general_wgmma refused {case}"
        tma += plan["input"] == "tma"
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        check(ext, case, with_layout(x, layout), w, b, dtype, f"{case} plan {plan}")
        ran += 1
    assert ran == 16
    # The copy engine's limits (strides up to 8) leave the warp-specialized form most of them in
    # 16 bits. The plan asked here is the NCHW one: float32 layers of out_channels x taps below
    # kTmaCopyMinWork read NCHW element by element (the cp.async loaders), so in float32 only
    # the other forms are pinned here (test_tma_reads_channels_last_in_place_or_from_the_copy
    # pins the float32 warp-specialized one).
    if not path.startswith("tma"):
        assert tma == 0, tma
    elif dtype != torch.float32:
        assert tma >= 8, tma


# Every tile of the kernel's table (kernels/hopper/general_plan.h), forced through the host's
# tuning hook $CONV_POOL_GENERAL_TILE (the plan is made per call), on a case with tails in every
# dimension, an overlapping padded ceil-mode pool and, at batch 1, a split reduction.
TILES = ["wide_n128", "square_n128", "wide_n64", "square_n64", "tall_n64"]
TILE_CASES = [
    ConvPoolCase("tails", 3, 40, 136, 37, 45, (3, 3), padding=(1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2), pool_padding=(1, 1), ceil_mode=True),
    ConvPoolCase("split", 1, 320, 72, 15, 23, (3, 3), padding=(1, 1)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("tile", TILES)
def test_every_tile_matches_float64(ext, lib, device, seed, tile, dtype, path, monkeypatch):
    monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
    splits = set()
    n = int(tile.rsplit("_n", 1)[1])
    for case in TILE_CASES:
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        assert plan is not None and plan["tile"] == tile, plan
        splits.add(plan["split"] > 1)
        # The copy engine's plans (but tma_full_tail's): 136 channels (8 past the last full
        # block) narrow on every tile, 72 on the N = 64 ones.
        tail = case.out_channels - (-(-case.out_channels // n) - 1) * n
        narrow = path != "tma_full_tail" and plan["input"] == "tma" and tail <= n // 2
        assert plan["tail_n"] == (n // 2 if narrow else 0), plan
        x, w, b = operands(case, seed, dtype)
        for layout in LAYOUTS:
            check(ext, case, with_layout(x, layout), w, b, dtype, f"{tile} {case.name} {layout}")
    assert splits == {False, True}


# Plan::paired_pool: 2 x 2 / 2 pools whose windows never clip take their maxima in registers
# (stage_pooled_pairs), in every tile of the warp-specialized kernel (the cp.async loaders and
# the cluster split stage the whole conv tile, checked here as well). Every tile, both layouts, odd conv sizes
# (floor mode drops the last row and column), a split reduction at batch 1, channels past the
# last block, and NaN and infinities (judged against float64 with cuDNN off).
PAIRED_CASES = [
    ConvPoolCase("paired_odd", 3, 40, 136, 37, 45, (3, 3), padding=(1, 1)),
    ConvPoolCase("paired_pointwise", 2, 72, 72, 30, 62, (1, 1)),
    ConvPoolCase("paired_split", 1, 320, 72, 15, 23, (3, 3), padding=(1, 1)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("tile", TILES)
def test_paired_2x2_pools_match_float64(ext, lib, device, seed, tile, dtype, path, monkeypatch):
    monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
    paired = 0
    for case in PAIRED_CASES:
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        assert plan is not None and plan["tile"] == tile, plan
        pairs = plan["input"] == "tma" and plan["passes"] == 1 and not plan["cluster"]
        assert plan["paired"] == int(pairs), plan
        direct = path in DIRECT_PATHS and pairs and plan["split"] == 1
        assert plan["direct"] == int(direct), plan
        paired += pairs
        x, w, b = operands(case, seed, dtype)
        x[0, 1, 4, 5] = float("nan")
        x[-1, 2, 9, 10] = float("inf")
        x[0, 3, 12, 7] = float("-inf")
        expected = reference(case, x, w, b)
        assert torch.isnan(expected).any() and torch.isinf(expected).any()
        tol = TOLERANCE[dtype]
        for layout in LAYOUTS:
            out = run_general(ext, case, with_layout(x, layout), w, b)
            torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol, equal_nan=True,
                                       msg=lambda m: f"{tile} {case.name} {layout} {plan}: {m}")
    if path in CLUSTER_PATHS:
        assert paired >= 2, paired  # (the split case sums through the cluster)


# Split reductions of 2, 4 and 8 blocks a tile, forced through the host's hook
# $CONV_POOL_GENERAL_SPLIT on both tile widths (N = 64 and 128) and both epilogue layouts: in the
# warp-specialized kernel's default form each block of a tile's cluster sums and pools its share
# of the channels (1 / split of them, down to 8), elsewhere one block sums them all from global
# memory. Padded overlapping pools, tails in every dimension, channels past the last block; the
# channel counts let every form split 8 ways (the steps divide into 8 shares). The persistent
# forms' square tiles keep room for their staged windows and take fewer, larger steps, so their
# pointwise layer has more channels (split_cases).
SPLIT_CASES = [
    ConvPoolCase("split_odd", 1, 120, 72, 13, 19, (3, 3), padding=(1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2), pool_padding=(1, 1), ceil_mode=True),
    ConvPoolCase("split_pointwise", 2, 680, 136, 7, 9, (1, 1)),
]
PERSISTENT_SPLIT_CASES = [SPLIT_CASES[0],
                          ConvPoolCase("split_pointwise", 2, 1152, 136, 7, 9, (1, 1))]


def split_cases(path: str) -> list[ConvPoolCase]:
    persistent = PATH_HOOKS.get(path, {}).get("CONV_POOL_GENERAL_PERSISTENT") == "1"
    return PERSISTENT_SPLIT_CASES if persistent else SPLIT_CASES


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("tile", ["wide_n64", "square_n128"])
@pytest.mark.parametrize("split", [2, 4, 8])
def test_split_reductions_match_float64(ext, lib, device, seed, tile, split, dtype, path,
                                        monkeypatch):
    monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
    monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT", str(split))
    for case in split_cases(path):
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        assert plan["tile"] == tile and plan["split"] == split, plan
        in_cluster = path in CLUSTER_PATHS and plan["input"] == "tma"
        assert plan["cluster"] == int(in_cluster), plan
        x, w, b = operands(case, seed, dtype)
        for layout in LAYOUTS:
            check(ext, case, with_layout(x, layout), w, b, dtype,
                  f"{tile} split {split} {case.name} {layout} {plan}")


# Layers of more tiles than the SMs whose whole tiles' last round leaves SMs idle split each
# tile in two through L2 by default (kWaveSplitShare), the shares over several rounds of
# resident blocks, the last to arrive summing them: a 7 x 7 layer of 384 channels (the fuzz's
# `fuzz_49`: 6 tiles an image of 60 or more steps) at the first batch whose plan so splits on
# this GPU, every dtype, NCHW and channels-last. The persistent forms' plans stay whole (the
# rule leaves persistent plans alone), and so do the cp.async form's (two blocks an SM).
WAVE_CASE = ConvPoolCase("wave", 1, 384, 384, 112, 5, (7, 7), stride=(2, 4), padding=(2, 1),
                         pool_kernel=(3, 3), pool_stride=(3, 3), pool_padding=(1, 1))


@pytest.mark.parametrize("layout", ["dense", "channels_last"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_splits_over_several_rounds_match_float64(ext, lib, device, seed, dtype, layout, path):
    if PATH_HOOKS[path].get("CONV_POOL_GENERAL_PERSISTENT") == "1" or path == "cpasync":
        pytest.skip("this form's plan of the layer is persistent or two blocks an SM")
    channels_last = layout == "channels_last"
    for batch in range(1, 65):
        case = replace(WAVE_CASE, batch=batch)
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device,
                                          channels_last=channels_last)
        if plan["tiles"] > device.sm_count:
            break
    assert plan["split"] == 2 and plan["blocks_per_sm"] == 1, plan
    assert plan["tiles"] * plan["split"] > device.sm_count, plan
    x, w, b = operands(case, seed, dtype)
    check(ext, case, with_layout(x, layout), w, b, dtype, f"batch {batch} {layout} {plan}")


# Tiles of several small images side by side (plan.images, forced by the host's hook
# $CONV_POOL_GENERAL_IMAGES): batches that leave the last tile short of images, an overlapping
# padded ceil-mode pool, stride 2 (each image's columns rounded up to the column stride), at
# batch 4 a split reduction, and a one-step layer that no form splits.
IMAGE_CASES = [
    ConvPoolCase("images_tails", 7, 40, 136, 7, 7, (3, 3), padding=(1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2), pool_padding=(1, 1), ceil_mode=True),
    ConvPoolCase("images_strided", 5, 24, 72, 13, 15, (3, 3), stride=(2, 2), padding=(1, 1)),
    ConvPoolCase("images_split", 4, 320, 72, 6, 5, (3, 3), padding=(1, 1)),
    ConvPoolCase("images_unsplit", 6, 8, 40, 7, 7, (1, 1)),
]
# The tiles whose square columns split into that many shares of at least 8 conv columns.
IMAGE_TILES = {2: set(TILES), 4: {"wide_n128", "wide_n64", "tall_n64"}}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=DTYPE_IDS.get)
def test_16bit_3x3_first_layers_take_the_general_kernel(ext, seed, dtype):
    """SqueezeNet 1.1's 3 x 3 / 2 RGB layer at batch 32: from either layout of x the automatic
    choice gives it the general kernel (kFewChannelGeneralMinTaps), whose output keeps x's
    layout and matches float64."""
    case = ConvPoolCase("squeezenet1_1_c0", 32, 3, 64, 224, 224, (3, 3), stride=(2, 2),
                        pool_kernel=(3, 3), pool_stride=(2, 2))
    x, w, b = operands(case, seed, dtype)
    expected = reference(case, x, w, b)
    for layout in ("channels_last", "dense"):
        x_in = with_layout(x, layout)
        assert ext.conv2d_relu_maxpool_choose(x_in, w, b, *case.op_args()) == "general_wgmma", \
            layout
        out = ext.conv2d_relu_maxpool_forward(x_in, w, b, *case.op_args(), -1, None)
        assert out.is_contiguous(memory_format=torch.channels_last
                                 if layout == "channels_last" else torch.contiguous_format)
        torch.testing.assert_close(out.double(), expected, atol=TOLERANCE[dtype],
                                   rtol=TOLERANCE[dtype], msg=lambda m: f"{layout}: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("images", [2, 4])
def test_images_side_by_side_match_float64(ext, lib, device, seed, images, dtype, monkeypatch):
    monkeypatch.setenv("CONV_POOL_GENERAL_IMAGES", str(images))
    rng = random.Random(seed)
    ran = 0
    for i in range(400):  # random draws until 15 of them take `images` images a tile
        if ran == 15:
            break
        case = fuzz_case(rng, f"small_{i}", max_size=16, batch=rng.randint(2, 9))
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        if plan is None or plan["images"] != images:  # that many images do not fit a tile
            continue
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        layout = LAYOUTS[ran % len(LAYOUTS)]
        check(ext, case, with_layout(x, layout), w, b, dtype, f"{case} {layout} plan {plan}")
        ran += 1
    assert ran >= 15, ran
    tiles, splits = set(), set()
    for tile in TILES:
        monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
        for case in IMAGE_CASES:
            plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
            if plan["tile"] != tile or plan["images"] != images:
                continue
            tiles.add(tile)
            splits.add(plan["split"] > 1)
            x, w, b = operands(case, seed, dtype)
            for layout in LAYOUTS:
                check(ext, case, with_layout(x, layout), w, b, dtype,
                      f"{tile} {case.name} {layout} {plan}")
    assert tiles == IMAGE_TILES[images] and splits == {False, True}, (tiles, splits)


# Paired plans of small images side by side (the host's hook $CONV_POOL_GENERAL_IMAGES): each
# image's windows in its share of the tile's columns (odd sizes: floor mode drops the last row
# and column), the batch's last tile short of images, channels past the last block.
PAIRED_IMAGES_CASE = ConvPoolCase("paired_images", 5, 24, 72, 7, 7, (3, 3), padding=(1, 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("images", [2, 4])
def test_paired_pools_of_images_side_by_side_match_float64(ext, lib, device, seed, images,
                                                           dtype, path, monkeypatch):
    monkeypatch.setenv("CONV_POOL_GENERAL_IMAGES", str(images))
    case = PAIRED_IMAGES_CASE
    x, w, b = operands(case, seed, dtype)
    ran = set()
    for tile in sorted(IMAGE_TILES[images]):
        monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        assert plan["tile"] == tile and plan["images"] == images, plan
        pairs = plan["input"] == "tma" and plan["passes"] == 1 and not plan["cluster"]
        assert plan["paired"] == int(pairs), plan
        assert plan["direct"] == int(path in DIRECT_PATHS and pairs and plan["split"] == 1), plan
        for layout in LAYOUTS:
            check(ext, case, with_layout(x, layout), w, b, dtype, f"{tile} {layout} {plan}")
        ran.add(tile)
    assert ran == IMAGE_TILES[images]
    if path.startswith("tma"):
        assert plan["paired"] == 1, plan


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", [
    # 5 x 5 over 512 channels: the weights of all 25 taps do not fit one stage, so steps take
    # groups of kernel rows, the last one short.
    ConvPoolCase("row_groups", 2, 512, 192, 27, 27, (5, 5), padding=(2, 2), pool_kernel=(3, 3),
                 pool_stride=(2, 2)),
    # Stride 2 read over x's gathered rows ($CONV_POOL_GENERAL_SUBSAMPLE=split): one halo row
    # per conv row, two column phases.
    ConvPoolCase("gathered_rows", 2, 64, 128, 57, 57, (1, 1), stride=(2, 2)),
    # Stride 4, dilation 3, 11 x 11: four column phases, a wide halo.
    ConvPoolCase("strided_dilated", 1, 16, 64, 90, 90, (11, 11), stride=(4, 4), padding=(5, 5),
                 dilation=(3, 3)),
    # 1 x 7 and 7 x 1 (Inception) with an overlapping padded pool.
    ConvPoolCase("asymmetric", 2, 96, 128, 17, 17, (1, 7), padding=(0, 3), pool_kernel=(3, 3),
                 pool_stride=(2, 2), pool_padding=(1, 1)),
    ConvPoolCase("asymmetric_t", 2, 96, 128, 17, 17, (7, 1), padding=(3, 0), pool_kernel=(3, 2),
                 pool_stride=(1, 2)),
], ids=lambda c: c.name)
def test_staging_modes_match_float64(ext, lib, device, seed, case, dtype, monkeypatch):
    if case.name == "row_groups":
        # An N = 128 tile, whose stage cannot hold one chunk's weights of all 5 kernel rows in
        # any dtype (the cost model may pick an N = 64 tile, whose stage can in float32).
        monkeypatch.setenv("CONV_POOL_GENERAL_TILE", "square_n128")
    if case.name == "gathered_rows":
        monkeypatch.setenv("CONV_POOL_GENERAL_SUBSAMPLE", "split")
    plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
    assert plan is not None
    if case.name == "row_groups":
        assert plan["group_rows"] < case.kernel_size[0], plan
    if case.name == "gathered_rows":
        assert plan["gathered"] == 1 and plan["phases"] == 1, plan
    if case.name == "strided_dilated":
        assert plan["phases"] == 4, plan
    x, w, b = operands(case, seed, dtype)
    for layout in LAYOUTS:
        check(ext, case, with_layout(x, layout), w, b, dtype, f"{case.name} {layout} {plan}")


ONE_BLOCK_HOOKS = {
    "rows4_s1": {"CONV_POOL_GENERAL_TILE": "square_n128"},
    "rows3_images": {"CONV_POOL_GENERAL_TILE": "tall_n64", "CONV_POOL_GENERAL_IMAGES": "2"},
    "rows2_wide": {"CONV_POOL_GENERAL_TILE": "wide_n128"},
}


# Pool windows of 1 to 7 columns (the fuzz draws 1-4 only; the epilogue loops over up to 4 at
# a constant width and over wider ones at run time), stride-1 and overlapping, padded, ceil
# mode, windows clipped at the tiles' and the output's edges; pools of stride 1 down the rows
# over 2-4 rows in one-block tiles, over images side by side, output-channel tails, padded at
# the top and bottom.
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", [
    ConvPoolCase("w5_s1", 2, 24, 72, 23, 29, (3, 3), padding=(1, 1), pool_kernel=(5, 5),
                 pool_stride=(1, 1), pool_padding=(2, 2)),
    ConvPoolCase("w7_s13", 1, 16, 40, 19, 44, (1, 1), pool_kernel=(2, 7), pool_stride=(1, 3),
                 ceil_mode=True),
    ConvPoolCase("w6_s25", 2, 32, 96, 30, 37, (3, 3), padding=(1, 1), pool_kernel=(3, 6),
                 pool_stride=(2, 5), pool_padding=(1, 3), ceil_mode=True),
    ConvPoolCase("w4_s1", 1, 40, 136, 21, 26, (2, 2), pool_kernel=(4, 4), pool_stride=(1, 1),
                 pool_padding=(2, 1)),
    ConvPoolCase("w3_s1", 3, 8, 64, 17, 15, (5, 5), padding=(2, 2), pool_kernel=(1, 3),
                 pool_stride=(1, 1), pool_padding=(0, 1)),
    ConvPoolCase("rows4_s1", 2, 64, 136, 37, 21, (3, 3), padding=(1, 1), pool_kernel=(4, 3),
                 pool_stride=(1, 1), pool_padding=(2, 1)),
    ConvPoolCase("rows3_images", 9, 16, 72, 9, 7, (1, 1), pool_kernel=(3, 1),
                 pool_stride=(1, 2), pool_padding=(1, 0), ceil_mode=True),
    ConvPoolCase("rows2_wide", 1, 32, 256, 26, 70, (3, 3), stride=(1, 2), padding=(1, 1),
                 pool_kernel=(2, 4), pool_stride=(1, 3)),
], ids=lambda c: c.name)
def test_pool_windows_of_every_width_match_float64(ext, lib, device, seed, case, dtype, path,
                                                   monkeypatch):
    # One-block tiles (the cost model gives these layers wide_n64).
    hooks = ONE_BLOCK_HOOKS.get(case.name, {})
    for key, value in hooks.items():
        monkeypatch.setenv(key, value)
    plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
    assert plan is not None and plan["paired"] == 0, plan
    if hooks:
        assert plan["tile"] == hooks["CONV_POOL_GENERAL_TILE"], plan
        assert plan["images"] == int(hooks.get("CONV_POOL_GENERAL_IMAGES", 1)), plan
    x, w, b = operands(case, seed, dtype)
    for layout in LAYOUTS:
        check(ext, case, with_layout(x, layout), w, b, dtype, f"{case.name} {layout} {plan}")


@pytest.mark.parametrize("nhwc_copy", ["0", "1"])
def test_float32_nchw_inputs_both_ways_match_float64(ext, lib, device, seed, nhwc_copy,
                                                     monkeypatch):
    """The cp.async loaders' float32 inputs without contiguous channels, read element by element
    or from the launch's NHWC copy (forced by $CONV_POOL_GENERAL_NHWC), on random geometries
    (few-channel layers unfolded: folded, they read the dense folded copy)."""
    monkeypatch.setenv("CONV_POOL_GENERAL_TMA", "0")
    monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
    monkeypatch.setenv("CONV_POOL_GENERAL_NHWC", nhwc_copy)
    rng = random.Random(seed)
    for i in range(12):
        case = fuzz_case(rng, f"fuzz_{i}")
        plan = kernel_choice.general_plan(lib, case, ELEMENT[torch.float32], device)
        assert plan["nhwc_copy"] == int(nhwc_copy), plan
        x, w, b = operands(case, rng.randrange(2**31), torch.float32)
        layout = [layout for layout in LAYOUTS if layout != "channels_last"][i % 2]
        check(ext, case, with_layout(x, layout), w, b, torch.float32, f"{case} {layout} {plan}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("copy", ["in_place", "in_place_wide", "in_place_slices", "copy"])
def test_tma_reads_channels_last_in_place_or_from_the_copy(ext, lib, device, seed, dtype, copy,
                                                           monkeypatch):
    """The warp-specialized form reads a channels-last x whose channels fill whole 16-byte
    slices in place (its boxes step through x's own strides) into swizzled stages of 32-128
    byte channel groups where the channels allow (Plan::x_swizzle), or one 16-byte slice a box
    row ($CONV_POOL_GENERAL_SWIZZLE=0 forces it; in_place_wide: steps of up to 4 chunks,
    $CONV_POOL_GENERAL_STEP_CHUNKS, for the 64- and 128-byte groups), or from the launch's
    slice-planar copy ($CONV_POOL_GENERAL_TMA_COPY=1 forces it), on random geometries with such channel counts
    and on inputs in a wider tensor (x a channel slice of it). The op's plan for those tensors
    says which (nhwc_copy, swizzle), and for the dense one it is the host's channels-last
    plan."""
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA", raising=False)
    if copy == "copy":
        monkeypatch.setenv("CONV_POOL_GENERAL_TMA_COPY", "1")
    if copy == "in_place_slices":
        monkeypatch.setenv("CONV_POOL_GENERAL_SWIZZLE", "0")
    if copy == "in_place_wide":
        monkeypatch.setenv("CONV_POOL_GENERAL_STEP_CHUNKS", "4")
    per_slice = 4 if dtype == torch.float32 else 8
    rng = random.Random(seed)
    ran, swizzles = 0, set()
    # Whole slices of channels (every third case a multiple of 128 bytes of them), and (float32)
    # enough output channels that NCHW inputs take the copy rather than the cp.async loaders
    # (kTmaCopyMinWork = 128); in_place_wide also a 1 x 1 layer of 512-byte pixels, whose
    # steps of 2 or 4 chunks fit every tile (64- or 128-byte groups).
    cases = []
    for i in range(12):
        case = fuzz_case(rng, f"fuzz_{i}")
        taps = case.kernel_size[0] * case.kernel_size[1]
        per_group = per_slice * (8 if i % 3 == 0 else 1)
        cases.append(replace(
            case, in_channels=max(per_group, case.in_channels // per_group * per_group),
            out_channels=max(case.out_channels, -(-128 // taps))))
    if copy == "in_place_wide":
        cases.append(ConvPoolCase("pointwise_wide", 2, 32 * per_slice, 136, 20, 36, (1, 1),
                                  pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)))
    for case in cases:
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        if plan["input"] != "tma":
            continue
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        wide = torch.zeros(case.batch, case.in_channels + 2 * per_slice, case.height, case.width,
                           device=x.device, dtype=dtype).contiguous(
                               memory_format=torch.channels_last)
        wide[:, per_slice:per_slice + case.in_channels] = x
        dense = x.contiguous(memory_format=torch.channels_last)
        for x_in in (dense, wide[:, per_slice:per_slice + case.in_channels]):
            check(ext, case, x_in, w, b, dtype, f"{case} {copy} {plan}")
            used = kernel_choice.parse_general(ext.conv2d_relu_maxpool_plan(
                x_in, w, b, *case.op_args(), general_config(ext))["general"])
            assert used["nhwc_copy"] == int(copy == "copy"), (case, used)
            if copy in ("in_place_slices", "copy"):
                assert used["swizzle"] == 0, (case, used)
            swizzles.add(used["swizzle"])
            if x_in is dense:
                assert used == kernel_choice.general_plan(lib, case, ELEMENT[dtype], device,
                                                          channels_last=True), case
        ran += 1
    assert ran >= 6, ran
    if copy == "in_place":
        assert len(swizzles - {0}) >= 1, swizzles
    if copy == "in_place_wide":
        assert max(swizzles) >= 64, swizzles


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("copy", ["blocks", "launch"])
def test_blocks_copy_their_own_part_of_nchw_x(ext, lib, device, seed, dtype, copy, path,
                                             monkeypatch):
    """Plan::self_copy: on small 1 x 1 layers over an NCHW x whose blocks fit one round, each
    block writes the part of the slice-planar copy its own boxes read (blocks), or the
    preparation launch copies x ($CONV_POOL_GENERAL_SELF_COPY=0: launch); random layers at
    batch 1-3, strided ones (the layer over x' at stride 1), channel counts that leave the
    last group of 4 slices short, and x a channel slice of a wider tensor. The copy's memory is
    NaN before ($CONV_POOL_GENERAL_POISON_COPY=1), so a slot some box reads but no block wrote
    shows. The op's plan for the tensors says which copy ran."""
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA", raising=False)
    monkeypatch.setenv("CONV_POOL_GENERAL_POISON_COPY", "1")
    if copy == "launch":
        monkeypatch.setenv("CONV_POOL_GENERAL_SELF_COPY", "0")
    per_slice = 4 if dtype == torch.float32 else 8
    rng = random.Random(seed)
    ran = blocks = 0
    while ran < 6:
        case = fuzz_case(rng, f"fuzz_{ran}")
        stride = 1 + ran % 3 // 2
        case = replace(case, batch=1 + ran % 3, kernel_size=(1, 1), dilation=(1, 1),
                       padding=(0, 0), stride=(stride, stride),
                       in_channels=per_slice * rng.randint(1, 16),
                       height=min(case.height, 31), width=min(case.width, 29))
        if min(case.pooled_out()) < 1:
            continue
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        wide = torch.zeros(case.batch, case.in_channels + 2 * per_slice, case.height,
                           case.width, device=x.device, dtype=dtype)
        wide[:, per_slice:per_slice + case.in_channels] = x
        for x_in in (x, wide[:, per_slice:per_slice + case.in_channels]):
            used = kernel_choice.parse_general(ext.conv2d_relu_maxpool_plan(
                x_in, w, b, *case.op_args(), general_config(ext))["general"])
            check(ext, case, x_in, w, b, dtype, f"{case} {copy} {used}")
            assert copy == "blocks" or used["self_copy"] == 0, (case, used)
            blocks += used["self_copy"]
        ran += 1
    if copy == "blocks" and path in CLUSTER_PATHS:
        assert blocks >= 4, blocks


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_nchw_copy_of_any_plane_and_offset_matches_float64(ext, lib, device, seed, dtype,
                                                          monkeypatch):
    """The launch's slice-planar copy of an NCHW x (one pixel's slice a thread; the positions of
    every image's planes in segments of 512): planes below, at and past a segment, odd ones
    (segments then cross planes and images), channel counts that do
    not fill their last slice, and x a channel slice of a wider tensor that starts one element
    off 16-byte alignment ($CONV_POOL_GENERAL_TMA_COPY=1: float32 layers take the copy too)."""
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA", raising=False)
    monkeypatch.setenv("CONV_POOL_GENERAL_TMA_COPY", "1")
    rng = random.Random(seed)
    for height, width in [(7, 7), (16, 32), (1, 512), (19, 27), (23, 45)]:
        in_channels = rng.choice([3, 13, 24, 37])
        case = ConvPoolCase(f"copy_{height}x{width}", rng.choice([1, 3]), in_channels,
                            rng.choice([16, 72]), height, width, (1, 1), (1, 1), (0, 0),
                            pool_kernel=(1, 2), pool_stride=(1, 2))
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        assert plan["input"] == "tma", plan
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        wide = torch.zeros(case.batch, in_channels + 2, height, width, device=x.device,
                           dtype=dtype)
        wide[:, 1:1 + in_channels] = x
        for x_in in (x, wide[:, 1:1 + in_channels]):
            check(ext, case, x_in, w, b, dtype, f"{case} {plan} offset={x_in.storage_offset()}")


# Column strides 2-4 over widths that are and are not a multiple of the stride, with padding,
# dilation and a kernel that uses some of the column phases only (1 x 1 at stride 4).
PHASED_CASES = [
    ConvPoolCase("s2_odd_width", 2, 24, 40, 17, 23, (3, 3), stride=(2, 2), padding=(1, 1)),
    ConvPoolCase("s3_dilated", 3, 13, 72, 20, 29, (3, 2), stride=(1, 3), padding=(2, 1),
                 dilation=(2, 2), pool_kernel=(2, 3), pool_stride=(1, 2), ceil_mode=True),
    ConvPoolCase("s4_pointwise", 1, 37, 64, 9, 30, (1, 1), stride=(4, 4), pool_kernel=(1, 2)),
    ConvPoolCase("s2_padded", 2, 16, 32, 12, 12, (5, 5), stride=(2, 2), padding=(2, 3),
                 pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    # Rows no tap reads: odd rows only (3 x 3 at row stride 2, dilation 2, padding 1); rows
    # 0 and 2 mod 3 (2 x 1 at row stride 3, padding 1).
    ConvPoolCase("s2_odd_rows", 2, 20, 48, 21, 18, (3, 3), stride=(2, 1), padding=(1, 1),
                 dilation=(2, 1)),
    ConvPoolCase("s3_rows", 3, 24, 40, 26, 15, (2, 1), stride=(3, 2), padding=(1, 0),
                 pool_kernel=(2, 1), pool_stride=(1, 1)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("copy", ["preparation", "separate", "channels_last"])
def test_column_phased_copy_of_strided_layers_matches_float64(ext, lib, device, seed, dtype,
                                                              copy, path, monkeypatch):
    """The slice-planar copy of x for a layer of column stride P holds each row's columns by
    phase (column w at (w % P) x ceil(W / P) + w / P, zeros where no column is; the phases and
    the rows no tap reads are not written), so that a box row is one run of a phase's slices:
    made in the preparation launch (NCHW planes, or a channels-last x copied:
    $CONV_POOL_GENERAL_TMA_COPY=1) or in a launch of its own
    ($CONV_POOL_GENERAL_SEPARATE_PREP=1). The copy's memory is NaN before it
    ($CONV_POOL_GENERAL_POISON_COPY=1), so a slot the kernel reads but the copy skipped shows."""
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA", raising=False)
    monkeypatch.setenv("CONV_POOL_GENERAL_TMA_COPY", "1")
    monkeypatch.setenv("CONV_POOL_GENERAL_POISON_COPY", "1")
    if copy == "separate":
        monkeypatch.setenv("CONV_POOL_GENERAL_SEPARATE_PREP", "1")
    rng = random.Random(seed)
    merged = rows_masked = 0
    for case in PHASED_CASES:
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        assert plan["input"] == "tma", plan
        rows_masked += plan["copy_rows"] != "1:1"
        image_cols = int(plan["halo"].split("x")[1]) // plan["images"]
        expected = path != "tma_slices" and -(-image_cols // case.stride[1]) * 2 <= 256
        assert plan["merged"] == int(expected), plan
        merged += expected
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        if copy == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        check(ext, case, x, w, b, dtype, f"{case} {copy} {plan}")
    assert merged >= (0 if path == "tma_slices" else 2), merged
    assert rows_masked >= 3, rows_masked  # s4_pointwise, s2_odd_rows, s3_rows


# Few-channel layers run column-folded (kernels/hopper/general_fold.cu), or with
# $CONV_POOL_GENERAL_FOLD=0 one tap a chunk step:
# kernel_w x C channels of x' and a one-column kernel; 1-7 channels, kernels of 2-11 columns,
# column strides 1-4, dilation, padding wider than the kernel's reach on one side, a first layer
# under an overlapping padded pool, ceil mode.
FOLD_CASES = [
    ConvPoolCase("stem_7x7", 2, 3, 64, 61, 67, (7, 7), stride=(2, 2), padding=(3, 3),
                 pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    ConvPoolCase("alexnet_like", 2, 3, 40, 67, 71, (11, 11), stride=(4, 4), padding=(2, 2),
                 pool_kernel=(3, 3), pool_stride=(2, 2), ceil_mode=True),
    ConvPoolCase("c1_5x3", 3, 1, 24, 30, 33, (5, 3), stride=(1, 3), padding=(2, 4),
                 dilation=(1, 2)),
    ConvPoolCase("c7_2x2", 2, 7, 72, 20, 26, (2, 2), padding=(1, 0), pool_kernel=(3, 1),
                 pool_stride=(1, 1)),
    ConvPoolCase("c5_3x9", 1, 5, 96, 40, 44, (3, 9), stride=(2, 2), padding=(1, 4),
                 bias=False),
    # 301 conv columns, a pool of 2 x 3.
    ConvPoolCase("c3_wide_row", 1, 3, 40, 6, 301, (3, 5), padding=(1, 2), pool_kernel=(2, 3),
                 pool_stride=(2, 3)),
    # 12 images of 160 x 160: 614,400 folded pixels, a fold launch of many blocks across rows
    # and images.
    ConvPoolCase("c3_many_pixels", 12, 3, 24, 160, 160, (3, 3), padding=(1, 1)),
]


@pytest.mark.parametrize("fold", ["folded", "unfolded"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_column_folded_few_channel_layers_match_float64(ext, lib, device, seed, dtype, layout,
                                                       fold, monkeypatch):
    """A layer of fewer channels than a chunk runs as kernel_w x C channels (padded to whole
    slices) and a one-column kernel over the folded copy of x: the plan's chunks are the folded
    channels', and every output matches float64; so does the unfolded form
    ($CONV_POOL_GENERAL_FOLD=0, one chunk a tap)."""
    if fold == "unfolded":
        monkeypatch.setenv("CONV_POOL_GENERAL_FOLD", "0")
    else:
        monkeypatch.delenv("CONV_POOL_GENERAL_FOLD", raising=False)
    rng = random.Random(seed)
    slice_channels = 4 if dtype == torch.float32 else 8
    for case in FOLD_CASES:
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device,
                                          channels_last=layout == "channels_last")
        folded = -(-case.kernel_size[1] * case.in_channels // slice_channels) * slice_channels
        # (x' at most 8 times x: kMaxFoldedGrowth)
        fits = case.conv_out()[1] * folded <= 8 * case.width * case.in_channels
        if fold == "unfolded":
            assert plan["chunks"] == 1, (case, plan)
        elif folded <= 64 and fits:
            assert plan["chunks"] == -(-folded // (2 * slice_channels)), (case, plan)
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        check(ext, case, with_layout(x, layout), w, b, dtype, f"{case} {fold} {plan}")


def strided_input(x: torch.Tensor, layout: str) -> torch.Tensor:
    """x's values in storage the copy engine cannot read in place: channels-last with channels
    that do not fill their last 16-byte slice (the caller picks such counts), every image the
    same one expanded (batch stride 0), or rows and columns swapped in memory."""
    if layout == "channels_last":
        return with_layout(x, layout)
    if layout == "expanded":
        return x[:1].expand_as(x)
    assert layout == "transposed", layout
    return x.transpose(2, 3).contiguous().transpose(2, 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["channels_last", "expanded", "transposed"])
def test_slice_planar_copy_of_any_strides_matches_float64(ext, lib, device, seed, dtype, layout,
                                                          monkeypatch):
    """The launch's slice-planar copy reads x through its own strides (each thread one pixel's
    slices): channels-last x (copied where its channels, 13 and 37 here, do not fill the last
    16-byte slice; read in place otherwise), an expanded x and one of swapped row and column
    strides, on the column-strided layers above (phased
    copies, some phases and rows unread) and on unit-stride ones, in the preparation launch and
    in a launch of its own; the copy's memory NaN before it, as in the test above."""
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA", raising=False)
    monkeypatch.setenv("CONV_POOL_GENERAL_POISON_COPY", "1")
    rng = random.Random(seed)
    cases = PHASED_CASES + [
        ConvPoolCase("s1_3x3", 3, 13, 40, 15, 21, (3, 3), padding=(1, 1)),
        ConvPoolCase("s1_pointwise", 2, 37, 24, 8, 70, (1, 1), pool_kernel=(2, 2),
                     pool_stride=(2, 2)),
    ]
    for separate in ("0", "1"):
        monkeypatch.setenv("CONV_POOL_GENERAL_SEPARATE_PREP", separate)
        for case in cases:
            x, w, b = operands(case, rng.randrange(2**31), dtype)
            x_in = strided_input(x, layout)
            check(ext, case, x_in, w, b, dtype,
                  f"{case} {layout} separate={separate} strides={x_in.stride()}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("weights", ["in_place", "packed", "packed_strided"])
def test_weights_read_in_place_or_packed_match_float64(ext, lib, device, seed, dtype, weights,
                                                       monkeypatch):
    """On layers of one round of blocks and at least 65536 weights (or fewer where the
    preparation launch would only pack them), the warp-specialized form reads weights whose
    channels are whole 16-byte slices in place (1 x 1 weights, channels-last ones of any
    kernel, a channel slice of a wider weight), and packs the rest (NCHW weights of larger kernels, a
    weight one element off 16-byte alignment), or every weight with
    $CONV_POOL_GENERAL_PACK=1 (packed_strided: with $CONV_POOL_GENERAL_COALESCED_PACK=0 too,
    the packing's reads in the packed order, one element each); random geometries of one or two
    images, NCHW and channels-last x, every weight layout."""
    monkeypatch.delenv("CONV_POOL_GENERAL_TMA", raising=False)
    if weights != "in_place":
        monkeypatch.setenv("CONV_POOL_GENERAL_PACK", "1")
    if weights == "packed_strided":
        monkeypatch.setenv("CONV_POOL_GENERAL_COALESCED_PACK", "0")
    per_slice = 4 if dtype == torch.float32 else 8
    rng = random.Random(seed)
    ran = in_place = 0
    for i in range(10):
        case = replace(fuzz_case(rng, f"fuzz_{i}"), batch=1 + i % 2)
        if i % 3 == 0:  # pointwise layers, the in-place form's commonest
            case = replace(case, kernel_size=(1, 1), dilation=(1, 1), padding=(0, 0),
                           in_channels=max(256, case.in_channels),
                           out_channels=max(256, case.out_channels))
            if case.pooled_out()[0] < 1 or case.pooled_out()[1] < 1:
                continue
        case = replace(case, in_channels=max(per_slice, case.in_channels // per_slice * per_slice))
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        if plan is None or plan["input"] != "tma":
            continue
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        wide = torch.zeros(case.out_channels, case.in_channels + 2 * per_slice,
                           *case.kernel_size, device=w.device, dtype=dtype).contiguous(
                               memory_format=torch.channels_last)
        wide[:, per_slice:per_slice + case.in_channels] = w
        flat = torch.zeros(w.numel() + 1, device=w.device, dtype=dtype)
        misaligned = flat[1:].view_as(w).copy_(w)
        for name, w_in in (("nchw", w), ("channels_last", w.contiguous(
                memory_format=torch.channels_last)),
                           ("slice", wide[:, per_slice:per_slice + case.in_channels]),
                           ("misaligned", misaligned)):
            layout = LAYOUTS[(i + len(name)) % len(LAYOUTS)]
            check(ext, case, with_layout(x, layout), w_in, b, dtype,
                  f"{case} {weights} {name} weight, {layout} x, {plan}")
        ran += 1
        in_place += plan["weights"] == "in_place"  # (the plan of NCHW weights: 1 x 1 only)
    assert ran >= 5, ran
    assert in_place >= 1 if weights == "in_place" else in_place == 0, in_place


# The 3xTF32 form (general_3xtf32_wgmma): float32 operands split into big and small TF32
# parts, 3xTF32 products, each step's sum added in fp32. Judged as fp32: the relative L2 error
# against float64 at most 1e-5 (cuDNN's fp32 is ~1e-6 there; TF32 ~1e-3), or, where the products
# cancel, at most 1e-6 of their own scale; elementwise within 1e-4 of the output's scale.
def general3x_config(ext) -> int:
    return ext.conv2d_relu_maxpool_variants()["general_3xtf32_wgmma"]


def term_scale(case, x, w, b) -> torch.Tensor:
    """Per output, the largest sum of |products| (plus |bias|) in its pooling window: what a
    float32 sum's rounding error scales with, however much the products cancel."""
    with torch.backends.cudnn.flags(enabled=False):
        terms = torch.nn.functional.conv2d(x.double().abs(), w.double().abs(),
                                           None if b is None else b.double().abs(),
                                           case.stride, case.padding, case.dilation)
        return torch.nn.functional.max_pool2d(terms, case.pool_kernel,
                                              case.effective_pool_stride, case.pool_padding, 1,
                                              case.ceil_mode)


def check_3xtf32(ext, case, x, w, b, what):
    out = ext.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), general3x_config(ext), None)
    expected = reference(case, x, w, b)
    assert out.dtype == torch.float32 and out.shape == expected.shape, what
    difference = (out.double() - expected).norm()
    error = (difference / expected.norm().clamp_min(1e-30)).item()
    # Where the products cancel (a few outputs near zero), the relative error says little: the
    # error against the products' own scale must then be float32's (TF32 alone leaves ~1e-4).
    conditioned = (difference / term_scale(case, x, w, b).norm().clamp_min(1e-30)).item()
    assert error <= 1e-5 or conditioned <= 1e-6, (
        f"{what}: relative L2 error {error:.2e}, {conditioned:.2e} of the products' scale")
    scale = expected.abs().max().item()
    torch.testing.assert_close(out.double(), expected, atol=1e-4 * scale, rtol=1e-4,
                               msg=lambda m: f"{what}: {m}")
    return error


# The path hooks change no 3xTF32 plan (it is the cp.async kernel's, unsplit across a cluster,
# never persistent, never narrowed), so its tests run under the default path alone, not once a
# form; and under tma_whole_rect, whose pooling the 3xTF32 form shares.
ONE_PATH = pytest.mark.parametrize("path", ["tma", "tma_whole_rect"], indirect=True)


@pytest.fixture(params=["staged", "registers"])
def split_form(request, monkeypatch):
    """The 3xTF32 form's two ways to its split x: the consumers' registers (the default,
    Plan::split_registers; x read as the TF32 form reads it) and the launch's split NHWC copy
    ($CONV_POOL_GENERAL_SPLIT_REGISTERS=0). Returns the plan's `registers` field the form has."""
    if request.param == "registers":
        monkeypatch.delenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", raising=False)
    else:
        monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", "0")
    return int(request.param == "registers")


def split_plan(lib, device, case, split_form, channels_last=False, fallback=False):
    """The 3xTF32 plan of `case`, checked to be of the form split_form asked for (fallback:
    or the staged form, where the registers form's step does not fit: general_search.cu)."""
    plan = kernel_choice.general_plan(lib, case, ELEMENT[torch.float32], device, split=True,
                                      channels_last=channels_last)
    assert plan is not None, f"general_3xtf32_wgmma refused {case}"
    assert plan["registers"] == split_form or (fallback and plan["registers"] == 0), plan
    return plan


@ONE_PATH
@pytest.mark.parametrize("layout", LAYOUTS)
def test_3xtf32_random_geometries_match_float64_as_fp32(ext, lib, device, seed, layout,
                                                        split_form):
    rng = random.Random(seed)
    worst, forms = 0.0, []
    for i in range(12):
        case = fuzz_case(rng, f"fuzz_{i}")
        plan = split_plan(lib, device, case, split_form, layout == "channels_last",
                          fallback=True)
        forms.append(plan["registers"])
        x, w, b = operands(case, rng.randrange(2**31), torch.float32)
        worst = max(worst, check_3xtf32(ext, case, with_layout(x, layout), w, b,
                                        f"{case} {layout} plan {plan}"))
    print(f"largest relative L2 error {worst:.2e}; plans of the registers form: "
          f"{sum(forms)} of {len(forms)}")
    assert split_form == 0 or sum(forms) >= len(forms) // 2, forms


@ONE_PATH
def test_3xtf32_registers_form_agrees_with_the_staged_form(ext, lib, device, seed,
                                                           monkeypatch):
    """Both forms make the same products in the same order within a step; their steps (and so
    where the fp32 sums restart) may differ, so the outputs agree within 1e-5 of the output's
    scale rather than bit for bit (printed: how many of them are bitwise equal)."""
    rng = random.Random(seed)
    for i in range(4):
        case = fuzz_case(rng, f"fuzz_{i}")
        x, w, b = operands(case, rng.randrange(2**31), torch.float32)
        outs = []
        for form in (0, 1):
            monkeypatch.setenv("CONV_POOL_GENERAL_SPLIT_REGISTERS", str(form))
            plan = split_plan(lib, device, case, form, fallback=True)
            outs.append(ext.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(),
                                                        general3x_config(ext), None))
        scale = outs[0].abs().max().item()
        torch.testing.assert_close(outs[1], outs[0], atol=1e-5 * scale, rtol=1e-5,
                                   msg=lambda m: f"{case} registers plan {plan}: {m}")
        equal = (outs[0] == outs[1]).sum().item()
        print(f"{case.name}: {equal} of {outs[0].numel()} outputs bitwise equal")


@ONE_PATH
@pytest.mark.parametrize("tile", ["wide_n64", "square_n64"])
def test_3xtf32_every_tile_and_long_reductions_match_float64(ext, lib, device, seed, tile,
                                                             monkeypatch, split_form):
    """Both of its tiles forced, on the tile cases (tails, a split reduction) and on long
    reductions (512 channels x 5 x 5 and 7 x 7), where summing every step in one wgmma
    accumulator would leave ~6e-5."""
    monkeypatch.setenv("CONV_POOL_GENERAL_TILE", tile)
    cases = TILE_CASES + [
        ConvPoolCase("long_k5", 2, 512, 64, 17, 17, (5, 5), padding=(2, 2), pool_kernel=(3, 3),
                     pool_stride=(2, 2)),
        ConvPoolCase("long_k7_s2", 2, 256, 72, 31, 29, (7, 7), stride=(2, 2), padding=(3, 3)),
    ]
    splits = set()
    for case in cases:
        plan = split_plan(lib, device, case, split_form)
        assert plan["tile"] == tile, plan
        splits.add(plan["split"] > 1)
        x, w, b = operands(case, seed, torch.float32)
        for layout in LAYOUTS:
            check_3xtf32(ext, case, with_layout(x, layout), w, b, f"{tile} {case.name} {layout}")
    assert splits == {False, True}


# Strided layers whose taps read every stride-th row or column alone (a one-tap kernel, or a
# dilation the stride divides): every form runs them over those rows and columns
# (general_subsample.h); the paddings leave r0 = (-pad) mod stride of 0 to 3.
SUBSAMPLED_CASES = [
    ConvPoolCase("pointwise_s2", 2, 64, 96, 28, 27, (1, 1), stride=(2, 2)),
    ConvPoolCase("pointwise_s3x2_padded", 3, 40, 24, 35, 33, (1, 1), stride=(3, 2),
                 padding=(2, 1), dilation=(2, 2), pool_kernel=(4, 3), pool_stride=(4, 3),
                 pool_padding=(2, 1), ceil_mode=True, bias=False),
    ConvPoolCase("dilated_k3_s2", 2, 24, 72, 31, 30, (3, 3), stride=(2, 2), padding=(3, 2),
                 dilation=(4, 2), pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    ConvPoolCase("columns_only", 2, 32, 40, 19, 41, (3, 1), stride=(1, 3), padding=(1, 4),
                 pool_kernel=(2, 2)),
    ConvPoolCase("rows_only_s4", 1, 48, 64, 45, 22, (1, 3), stride=(4, 1), padding=(5, 1),
                 pool_kernel=(2, 3), pool_stride=(1, 2)),
]


@ONE_PATH
@pytest.mark.parametrize("subsample", ["subsampled", "whole_x"])
def test_3xtf32_subsampled_strided_layers_match_float64(ext, lib, device, seed, subsample,
                                                        monkeypatch, split_form):
    """The layers above, both layouts, run over x' (the default) and over all of x
    ($CONV_POOL_GENERAL_SUBSAMPLE=0): x' is a view with r0 rows and columns skipped, so its
    copy is a stride-th of x's and the layer's far-side zeros come from the bounds."""
    if subsample == "whole_x":
        monkeypatch.setenv("CONV_POOL_GENERAL_SUBSAMPLE", "0")
    else:
        monkeypatch.delenv("CONV_POOL_GENERAL_SUBSAMPLE", raising=False)
    for i, case in enumerate(SUBSAMPLED_CASES):
        plan = split_plan(lib, device, case, split_form)
        x, w, b = operands(case, seed + i, torch.float32)
        for layout in LAYOUTS:
            check_3xtf32(ext, case, with_layout(x, layout), w, b,
                         f"{case} {layout} {subsample} plan {plan}")


@pytest.mark.parametrize("subsample", ["subsampled", "gathered"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_subsampled_strided_layers_in_every_form_match_float64(ext, lib, device, seed, dtype,
                                                               subsample, monkeypatch):
    """The TF32 and 16-bit forms over x' (the default: their inputs read in place, from the
    slice-planar copy or by the cp.async loaders, as each plan says) and over x's gathered
    rows ($CONV_POOL_GENERAL_SUBSAMPLE=split: x' in the 3xTF32 form alone)."""
    if subsample == "gathered":
        monkeypatch.setenv("CONV_POOL_GENERAL_SUBSAMPLE", "split")
    else:
        monkeypatch.delenv("CONV_POOL_GENERAL_SUBSAMPLE", raising=False)
    check_cases(ext, lib, device, seed, dtype, SUBSAMPLED_CASES, subsample)


def check_cases(ext, lib, device, seed, dtype, cases, label):
    """Each case in both layouts against float64 on the general kernel, whose plan must run it
    (the message names the plan of the NCHW input)."""
    for i, case in enumerate(cases):
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device)
        assert plan is not None, f"general_wgmma refused {case}"
        x, w, b = operands(case, seed + i, dtype)
        for layout in LAYOUTS:
            check(ext, case, with_layout(x, layout), w, b, dtype,
                  f"{case} {layout} {label} plan {plan}")


# Small and narrow images, whose tiles lie mostly past their edge, and pools whose windows
# leave a tile's last rows and columns unread: each tile's halo holds the input under the
# conv pixels its pooling reads alone (general_search.cu's clip_halo), the other squares
# reading whatever the stage holds past it.
CLIPPED_CASES = [
    ConvPoolCase("pointwise_7x7", 1, 96, 64, 7, 7, (1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2)),
    ConvPoolCase("k3_14x14_images", 3, 48, 72, 14, 14, (3, 3), padding=(1, 1)),
    ConvPoolCase("narrow_k7_s2x4", 2, 40, 48, 56, 5, (7, 7), stride=(2, 4), padding=(2, 1),
                 pool_kernel=(3, 3), pool_stride=(3, 3), pool_padding=(1, 1)),
    ConvPoolCase("pool3s3_ceil", 2, 32, 40, 17, 23, (2, 3), padding=(0, 1),
                 pool_kernel=(3, 3), pool_stride=(3, 3), ceil_mode=True),
    ConvPoolCase("dilated_17x17", 1, 64, 128, 17, 17, (3, 3), padding=(2, 2),
                 dilation=(2, 2), pool_kernel=(3, 3), pool_stride=(2, 2)),
]


@pytest.mark.parametrize("clip", ["clipped", "whole_tile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_clipped_halos_match_float64(ext, lib, device, seed, dtype, clip, monkeypatch):
    """The layers above, both layouts, with each halo clipped to the pixels the pooling reads
    (the default) and whole ($CONV_POOL_GENERAL_CLIP=0)."""
    if clip == "whole_tile":
        monkeypatch.setenv("CONV_POOL_GENERAL_CLIP", "0")
    else:
        monkeypatch.delenv("CONV_POOL_GENERAL_CLIP", raising=False)
    check_cases(ext, lib, device, seed, dtype, CLIPPED_CASES, clip)


# Layers the kernel may run as their transpose (general_transpose.h): tall or narrow images,
# kernels, strides, dilations and pools unlike along rows and columns, a one-column kernel,
# ceil mode and pool padding. Their channels fill whole 16-byte slices, so channels-last x is
# read in place; NCHW x the copy engine reads from the preparation launch's copy (of the
# transposed view where the layer runs transposed).
TRANSPOSED_CASES = [
    ConvPoolCase("tall_k5_s2x3", 2, 64, 96, 67, 11, (5, 5), stride=(2, 3), padding=(1, 3),
                 pool_kernel=(2, 4), pool_stride=(2, 4), pool_padding=(1, 0)),
    ConvPoolCase("column_kernel", 2, 48, 40, 40, 9, (7, 1), stride=(1, 2), padding=(3, 0),
                 pool_kernel=(3, 2), pool_stride=(2, 2), ceil_mode=True),
    ConvPoolCase("dilated_narrow", 1, 32, 72, 50, 6, (3, 2), padding=(2, 1), dilation=(2, 1),
                 pool_kernel=(4, 1), pool_stride=(4, 1)),
    ConvPoolCase("pointwise_tall", 3, 64, 48, 45, 4, (1, 1), pool_kernel=(3, 3),
                 pool_stride=(2, 2), pool_padding=(1, 1)),
]


def transposed_storage(x: torch.Tensor) -> torch.Tensor:
    """x's values with its rows and columns exchanged in memory (strides n, c, 1, height): the
    slice-planar copy then goes by bands of columns (ToSlices::columns_first)."""
    return x.transpose(2, 3).contiguous().transpose(2, 3)


@pytest.mark.parametrize("transpose", ["force", "1", "0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_transposed_layers_match_float64(ext, lib, device, seed, dtype, transpose, monkeypatch):
    """The layers above in every layout and in x stored transposed, with
    $CONV_POOL_GENERAL_TRANSPOSE=force (every channels-last one runs transposed, and every
    NCHW one the copy engine reads: their plans say so), =1 (where the cost model says: the
    default) and =0 (never: x stored transposed is then the copy's own case)."""
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", transpose)
    if transpose == "force":
        for case in TRANSPOSED_CASES:
            for channels_last in (False, True):
                plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device,
                                                  channels_last=channels_last)
                want = channels_last or plan["input"] == "tma"
                assert plan["transposed"] == int(want), (case, plan)
    check_cases(ext, lib, device, seed, dtype, TRANSPOSED_CASES, f"transpose={transpose}")
    for i, case in enumerate(TRANSPOSED_CASES):
        x, w, b = operands(case, seed + 100 + i, dtype)
        check(ext, case, transposed_storage(x), w, b, dtype,
              f"{case} stored transposed, transpose={transpose}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_transposed_random_geometries_match_float64(ext, lib, device, seed, dtype, path,
                                                    monkeypatch):
    """Random layers of the fuzz space (channels rounded up to whole 16-byte slices), NCHW and
    channels-last, with $CONV_POOL_GENERAL_TRANSPOSE=force, in every form: most channels-last
    ones run transposed (here, the host plans of 200 such layers: all in float32, ~3/4 in 16
    bits, the rest folded)."""
    monkeypatch.setenv("CONV_POOL_GENERAL_TRANSPOSE", "force")
    rng = random.Random(seed)
    transposed = 0
    for i in range(12):
        case = fuzz_case(rng, f"fuzz_{i}")
        case = replace(case, in_channels=-(-case.in_channels // 8) * 8)
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        for channels_last in (False, True):
            plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device,
                                              channels_last=channels_last)
            assert plan is not None, f"general_wgmma refused {case}"
            transposed += channels_last and plan["transposed"]
            layout = "channels_last" if channels_last else "dense"
            check(ext, case, with_layout(x, layout), w, b, dtype, f"{case} {layout} {plan}")
    assert transposed >= 3, transposed


@ONE_PATH
@pytest.mark.parametrize("integers", [False, True], ids=["random", "integer_inputs"])
def test_3xtf32_nan_and_inf_propagate_like_float64(ext, lib, device, seed, integers,
                                                   split_form):
    """NaN and infinities in x, and an infinite weight; with integer-valued inputs (whose small
    parts are only the 2^-30 term) the cross terms must still give fp32's infinities, not the
    NaN of inf * 0."""
    case = ConvPoolCase("special", 2, 24, 40, 20, 22, (3, 3), padding=(1, 1),
                        pool_kernel=(3, 3), pool_stride=(2, 2), ceil_mode=True)
    split_plan(lib, device, case, split_form)
    x, w, b = operands(case, seed, torch.float32)
    if integers:
        x = torch.randint(1, 4, x.shape, device=x.device).float()
    x[0, 3, 5, 7] = float("nan")
    x[1, 0, 10, 2] = float("inf")
    x[1, 5, 2, 15] = float("-inf")
    w[7, 11, 1, 2] = float("inf")
    out = ext.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), general3x_config(ext), None)
    expected = reference(case, x, w, b)
    assert torch.isnan(expected).any() and torch.isinf(expected).any()
    assert torch.equal(torch.isnan(out), torch.isnan(expected))
    assert torch.equal(torch.isinf(out), torch.isinf(expected))
    finite = torch.isfinite(expected)
    torch.testing.assert_close(out.double()[finite], expected[finite], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_nan_and_inf_propagate_like_float64(ext, seed, dtype):
    case = ConvPoolCase("special", 2, 24, 40, 20, 22, (3, 3), padding=(1, 1),
                        pool_kernel=(3, 3), pool_stride=(2, 2), ceil_mode=True)
    x, w, b = operands(case, seed, dtype)
    x[0, 3, 5, 7] = float("nan")
    x[1, 0, 10, 2] = float("inf")
    x[1, 5, 2, 15] = float("-inf")
    x[0, 1, 17, 17] = float("inf")
    x[0, 2, 17, 18] = float("-inf")  # window sums inf - inf = NaN
    out = run_general(ext, case, x, w, b)
    expected = reference(case, x, w, b)
    tol = TOLERANCE[dtype]
    assert torch.isnan(expected).any() and torch.isinf(expected).any()
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol, equal_nan=True)


def test_output_is_fully_written(ext, seed):
    """Every output element is written: the op's output starts as whatever the allocator
    held, so a poisoned cache shows unwritten ones as NaN."""
    case = ConvPoolCase("poison", 3, 40, 136, 33, 47, (3, 3), stride=(2, 1), padding=(1, 2),
                        pool_kernel=(2, 3), pool_stride=(2, 2), pool_padding=(1, 1),
                        ceil_mode=True)
    x, w, b = operands(case, seed, torch.float32)
    poison = torch.full((1 << 24,), float("nan"), device="cuda")
    del poison  # its block goes back to the caching allocator, still full of NaN
    out = run_general(ext, case, x, w, b)
    assert not torch.isnan(out).any()
    check(ext, case, x, w, b, torch.float32, "poisoned")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_channels_last_in_gives_channels_last_out_from_every_kind_of_variant(ext, seed, dtype):
    """The output follows PyTorch's layout rule (channels-last when x or weight is): the
    general kernel writes it itself (channels fastest), the other variants write NCHW and the
    binding re-lays it out; values as in NCHW."""
    case = ConvPoolCase("layout", 2, 16, 72, 23, 29, (3, 3), padding=(1, 1), pool_kernel=(3, 3),
                        pool_stride=(2, 2), pool_padding=(1, 1), ceil_mode=True)
    x, w, b = operands(case, seed, dtype)
    expected = reference(case, x, w, b)
    direct = "direct" if dtype == torch.float32 else "direct_16bit"
    variants = ext.conv2d_relu_maxpool_variants()
    for x_in, w_in in ((x.contiguous(memory_format=torch.channels_last), w),
                       (x, w.contiguous(memory_format=torch.channels_last))):
        for config in (-1, variants["general_wgmma"], variants[direct]):
            out = ext.conv2d_relu_maxpool_forward(x_in, w_in, b, *case.op_args(), config, None)
            assert out.is_contiguous(memory_format=torch.channels_last), config
            tol = TOLERANCE[dtype]
            torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol,
                                       msg=lambda m: f"config {config}: {m}")
    nchw = ext.conv2d_relu_maxpool_forward(x, w, b, *case.op_args(), -1, None)
    assert nchw.is_contiguous()


# Window-major 1 x 1 layers (kernels/hopper/general_windows.cu, $CONV_POOL_GENERAL_WINDOWS=1):
# x' holds the pooling windows' conv pixels side by side (made by the preparation launch's
# slice-planar copy from NCHW x in the warp-specialized forms, else gathered) and the epilogue
# stores each window's outputs at its place in the layer's output. Odd conv sizes (floor mode
# drops a row and a column), a strided padded conv under a padded ceil-mode pool (window
# elements in the padding repeat the window's own pixels), 3 x 3 / 3 and 2 x 1 / 2 windows,
# pools whose stride skips conv pixels, no pool at all and a 1 x 1 / 2 one, a batch-1 layer of
# fewer windows than a row of x', channels past the last block, and a layer of whole rows of
# windows (256).
WINDOW_CASES = [
    ConvPoolCase("w2_odd", 3, 40, 72, 15, 23, (1, 1)),
    ConvPoolCase("w2_ceil_pad", 2, 24, 40, 21, 26, (1, 1), stride=(2, 3), padding=(1, 2),
                 pool_kernel=(2, 2), pool_stride=(2, 2), pool_padding=(1, 1), ceil_mode=True),
    ConvPoolCase("w3_s3", 2, 32, 48, 20, 17, (1, 1), pool_kernel=(3, 3), pool_stride=(3, 3),
                 ceil_mode=True),
    ConvPoolCase("w2x1_gaps", 2, 16, 64, 19, 25, (1, 1), pool_kernel=(2, 1), pool_stride=(3, 2),
                 bias=False),
    ConvPoolCase("w_identity", 2, 24, 40, 9, 13, (1, 1), pool_kernel=(1, 1), pool_stride=(1, 1)),
    ConvPoolCase("w1_s2", 1, 40, 24, 13, 18, (1, 1), pool_kernel=(1, 1), pool_stride=(2, 2)),
    ConvPoolCase("w2_batch1", 1, 64, 136, 7, 7, (1, 1)),
    ConvPoolCase("w2_whole_rows", 2, 48, 72, 16, 32, (1, 1)),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_window_major_pointwise_layers_match_float64(ext, lib, device, seed, dtype, layout,
                                                     monkeypatch, path):
    """Every case above runs windowed (the plan says so, and which way x' is made) in every
    form of the kernel and matches float64 from every layout of x, its output memory NaN
    before the call."""
    monkeypatch.setenv("CONV_POOL_GENERAL_WINDOWS", "1")
    rng = random.Random(seed)
    # 2: the preparation launch's copy makes x' (NCHW x, the warp-specialized kernel); 1: gathered
    made = 1 if layout == "channels_last" or path == "cpasync" else 2
    for case in WINDOW_CASES:
        plan = kernel_choice.general_plan(lib, case, ELEMENT[dtype], device,
                                          channels_last=layout == "channels_last")
        assert plan is not None and plan["windows"] == made, (case, plan)
        x, w, b = operands(case, rng.randrange(2**31), dtype)
        # (the allocator hands the output this block back: unwritten outputs would be NaN)
        poison = torch.full(reference(case, x, w, b).shape, float("nan"), dtype=dtype,
                            device="cuda")
        del poison
        check(ext, case, with_layout(x, layout), w, b, dtype, f"{case} {layout} plan {plan}")
    monkeypatch.setenv("CONV_POOL_GENERAL_WINDOWS", "0")
    plan = kernel_choice.general_plan(lib, WINDOW_CASES[0], ELEMENT[dtype], device)
    assert plan["windows"] == 0, plan


@ONE_PATH
def test_3xtf32_window_major_pointwise_layers_match_float64(ext, lib, device, seed, monkeypatch,
                                                            split_form):
    """The same layers in the 3xTF32 form, judged as fp32."""
    monkeypatch.setenv("CONV_POOL_GENERAL_WINDOWS", "1")
    for i, case in enumerate(WINDOW_CASES):
        plan = split_plan(lib, device, case, split_form, fallback=True)
        assert plan["windows"] == 1, (case, plan)
        x, w, b = operands(case, seed + i, torch.float32)
        for layout in LAYOUTS:
            check_3xtf32(ext, case, with_layout(x, layout), w, b, f"{case} {layout} {plan}")
