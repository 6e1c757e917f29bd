"""The extension's host-side choice functions (kernels/conv_relu_maxpool.h) through ctypes:
which variant, and which wgmma tile, the op picks for a shape on a described device. Plain
host code in the built module, so no GPU is needed (device_of reads a real GPU's description;
H200 is the one measured). For tests and tuning:

    from dataclasses import replace
    import cuda_extension
    from utils import kernel_choice
    from utils.suite import find_case
    lib = kernel_choice.load(cuda_extension)
    kernel_choice.wgmma_tile(lib, find_case("batch1"))              # 'wide_n64'
    kernel_choice.takes_packed_weight(lib, find_case("batch1"))     # False
    kernel_choice.wgmma_split(lib, replace(find_case("vgg_b5"), batch=1))   # 8 (on the H200)
"""
import ctypes
from typing import Optional

from utils.suite import ConvPoolCase

# ConvPoolElement (kernels/conv_pool_shape.h).
FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2
# ConvPoolElement by dtype name (a profiling record's "dtype", torch.float16's "float16").
ELEMENT_BY_NAME = {"float32": FLOAT32, "float16": FLOAT16, "bfloat16": BFLOAT16}


class ConvPoolShape(ctypes.Structure):
    """Mirror of kernels/conv_pool_shape.h (field order and types must match)."""
    _fields_ = [(name, ctypes.c_int) for name in (
        "batch", "in_channels", "in_height", "in_width", "out_channels", "kernel_h", "kernel_w",
        "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "conv_height",
        "conv_width", "pool_h", "pool_w", "pool_stride_h", "pool_stride_w", "pool_pad_h",
        "pool_pad_w", "out_height", "out_width")] + [("has_bias", ctypes.c_bool),
                                                     ("element", ctypes.c_int),
                                                     ("channels_last", ctypes.c_bool)]


MAX_CLUSTER = 8  # kConvPoolMaxCluster


class ConvPoolOperands(ctypes.Structure):
    """Mirror of ConvPoolOperands in kernels/conv_relu_maxpool.h (each union one pointer), for
    asking the host's rules about operands of given strides and addresses (e.g. the workspace
    that conv_relu_maxpool_workspace_bytes wants for them); the pointers are never read."""
    _fields_ = [("x", ctypes.c_void_p), ("x_stride", ctypes.c_int64 * 4),
                ("weight", ctypes.c_void_p), ("weight_stride", ctypes.c_int64 * 4),
                ("bias", ctypes.c_void_p), ("bias_stride", ctypes.c_int64),
                ("out", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("packed_weight", ctypes.c_void_p)]


class ConvPoolVariantInfo(ctypes.Structure):
    """Mirror of ConvPoolVariantInfo in kernels/conv_relu_maxpool.h (a registry row)."""
    _fields_ = [("name", ctypes.c_char_p), ("family", ctypes.c_char_p), ("math", ctypes.c_char_p),
                ("source", ctypes.c_char_p), ("elements", ctypes.c_uint), ("arch", ctypes.c_int),
                ("name_16bit", ctypes.c_char_p), ("math_16bit", ctypes.c_char_p),
                ("source_16bit", ctypes.c_char_p)]


class ConvPoolPlanInfo(ctypes.Structure):
    """Mirror of ConvPoolPlanInfo in kernels/conv_relu_maxpool.h (one variant's plan)."""
    _fields_ = [("variant", ctypes.c_int), ("unsupported", ctypes.c_char_p),
                ("workspace_bytes", ctypes.c_int64), ("takes_packed_weight", ctypes.c_bool),
                ("wgmma_tile", ctypes.c_char_p), ("wgmma_tiles", ctypes.c_int64),
                ("wgmma_split", ctypes.c_int), ("packs_weight_apart", ctypes.c_bool),
                ("flat_tiling", ctypes.c_char_p), ("out_block", ctypes.c_int),
                ("general", ctypes.c_char * 384)]


class ConvPoolDevice(ctypes.Structure):
    """Mirror of ConvPoolDevice in kernels/conv_relu_maxpool.h."""
    _fields_ = [("max_shared_bytes", ctypes.c_int), ("sm_count", ctypes.c_int),
                ("compute_capability", ctypes.c_int),
                ("max_clusters", ctypes.c_int * (MAX_CLUSTER + 1))]


def clusters(at_once: dict) -> ctypes.Array:
    """A max_clusters array from {cluster size: clusters at once}."""
    return (ctypes.c_int * (MAX_CLUSTER + 1))(*(at_once.get(s, 0)
                                                for s in range(MAX_CLUSTER + 1)))


# What the binding reads off the H200 (conv_relu_maxpool_query_device: device attributes, and
# cudaOccupancyMaxActiveClusters of one-block-per-SM clusters of 2-8, read there by device_of,
# docs/PERF.md), and an Ampere-like device.
H200_CLUSTERS = {2: 66, 3: 39, 4: 30, 5: 22, 6: 17, 7: 15, 8: 15}
H200 = ConvPoolDevice(232448, 132, 90, clusters(H200_CLUSTERS))
A100_LIKE = ConvPoolDevice(166912, 108, 80)


def load(extension) -> ctypes.CDLL:
    """The built module (`import cuda_extension`) as a C library, its choice functions typed."""
    lib = ctypes.CDLL(extension.__file__)
    shape = ctypes.POINTER(ConvPoolShape)
    lib.conv_relu_maxpool_choose.restype = ctypes.c_int
    lib.conv_relu_maxpool_choose.argtypes = [shape, ctypes.c_int, ctypes.c_bool,
                                             ctypes.POINTER(ConvPoolDevice)]
    lib.conv_relu_maxpool_unsupported.restype = ctypes.c_char_p
    lib.conv_relu_maxpool_unsupported.argtypes = [shape, ctypes.c_int,
                                                  ctypes.POINTER(ConvPoolDevice)]
    lib.conv_relu_maxpool_variant_name.restype = ctypes.c_char_p
    lib.conv_relu_maxpool_variant_name.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.conv_relu_maxpool_takes_packed_weight.restype = ctypes.c_bool
    lib.conv_relu_maxpool_takes_packed_weight.argtypes = [shape, ctypes.c_int]
    lib.conv_relu_maxpool_writes_strided_output.restype = ctypes.c_bool
    lib.conv_relu_maxpool_writes_strided_output.argtypes = [shape, ctypes.c_int]
    lib.conv_relu_maxpool_query_device.restype = ctypes.c_int
    lib.conv_relu_maxpool_query_device.argtypes = [ctypes.c_int, ctypes.POINTER(ConvPoolDevice)]
    lib.conv_relu_maxpool_wgmma_tile_origin.restype = ctypes.c_int
    lib.conv_relu_maxpool_wgmma_tile_origin.argtypes = [shape, ctypes.c_int, ctypes.c_int,
                                                        ctypes.POINTER(ctypes.c_int64)]
    lib.conv_relu_maxpool_variant_plan.restype = ctypes.c_bool
    lib.conv_relu_maxpool_variant_plan.argtypes = [shape, ctypes.c_int,
                                                   ctypes.POINTER(ConvPoolDevice),
                                                   ctypes.POINTER(ConvPoolOperands),
                                                   ctypes.POINTER(ConvPoolPlanInfo)]
    lib.conv_relu_maxpool_variant_info.restype = ctypes.c_bool
    lib.conv_relu_maxpool_variant_info.argtypes = [ctypes.c_int,
                                                   ctypes.POINTER(ConvPoolVariantInfo)]
    lib.conv_relu_maxpool_workspace_bytes.restype = ctypes.c_int64
    lib.conv_relu_maxpool_workspace_bytes.argtypes = [shape, ctypes.c_int,
                                                      ctypes.POINTER(ConvPoolDevice),
                                                      ctypes.c_void_p]
    return lib


def device_of(lib: ctypes.CDLL, index: int = 0) -> ConvPoolDevice:
    """The ConvPoolDevice the binding reads off CUDA device `index` (needs a GPU)."""
    device = ConvPoolDevice()
    error = lib.conv_relu_maxpool_query_device(index, ctypes.byref(device))
    if error != 0:
        raise RuntimeError(f"conv_relu_maxpool_query_device({index}): cudaError_t {error}")
    return device


def shape_of(case: ConvPoolCase, element: int = FLOAT32,
             channels_last: bool = False) -> ConvPoolShape:
    """The ConvPoolShape the binding builds for `case` with inputs of `element` (and a
    channels-last output: x or the weight channels-last)."""
    conv_h, conv_w = case.conv_out()
    out_h, out_w = case.pooled_out()
    pool_stride = case.effective_pool_stride
    return ConvPoolShape(
        case.batch, case.in_channels, case.height, case.width, case.out_channels,
        *case.kernel_size, *case.stride, *case.padding, *case.dilation, conv_h, conv_w,
        *case.pool_kernel, *pool_stride, *case.pool_padding, out_h, out_w, case.bias, element,
        channels_last)


def variant_name(lib: ctypes.CDLL, variant: int, element: int = FLOAT32) -> Optional[str]:
    """The name of `variant` for inputs of `element` (its member's: direct_16bit for float16),
    None when `variant` is out of range."""
    found = lib.conv_relu_maxpool_variant_name(variant, element)
    return None if found is None else found.decode()


def chosen_variant(lib: ctypes.CDLL, case: ConvPoolCase, element: int = FLOAT32,
                   device: ConvPoolDevice = H200, allow_tf32: bool = True,
                   channels_last: bool = False) -> str:
    """The name of the variant the automatic choice (conv_relu_maxpool_choose) takes for
    `case` on `device` (its `element` member's name), for a channels-last output where
    channels_last is set."""
    shape = shape_of(case, element, channels_last)
    chosen = lib.conv_relu_maxpool_choose(ctypes.byref(shape), -1, allow_tf32,
                                          ctypes.byref(device))
    return variant_name(lib, chosen, element)


def variant_id(lib: ctypes.CDLL, name: str) -> int:
    """The config id of the variant with a member called `name` (dtype twins share one)."""
    variant = 0
    while (found := variant_name(lib, variant)) is not None:
        if name in (found, variant_name(lib, variant, FLOAT16)):
            return variant
        variant += 1
    raise KeyError(name)


def fast_path(case: ConvPoolCase) -> bool:
    """fast_path_applies (kernels/conv_pool_shape.h): 3 x 3 / 1 under a 2 x 2 / 2 pool."""
    (conv_h, conv_w), (out_h, out_w) = case.conv_out(), case.pooled_out()
    return (case.kernel_size == (3, 3) and case.stride == (1, 1) and case.dilation == (1, 1)
            and case.pool_kernel == (2, 2) and case.effective_pool_stride == (2, 2)
            and case.pool_padding == (0, 0) and 2 * out_h <= conv_h and 2 * out_w <= conv_w)


def few_channel_general(case: ConvPoolCase, device: ConvPoolDevice = H200,
                        element: int = FLOAT32, channels_last: bool = False) -> bool:
    """Whether conv_relu_maxpool_choose gives a layer of fewer than 8 input channels the general
    kernel rather than the flat ones (kFewChannelGeneralMinTaps in
    kernels/conv_pool_heuristics.h), with TF32 allowed or 16 bits: Hopper, off the 3 x 3 / 2 x 2
    path, more than 32 output channels (16 bits with a channels-last output: more than 16), 9 to
    49 taps (float32 NCHW: 25 to 49), strides of at most 3 (4 in 16 bits channels-last), and at
    least one wave of N = 64 tiles of 256 conv pixels. A mirror for tests, not the rule
    itself."""
    taps = case.kernel_size[0] * case.kernel_size[1]
    conv_h, conv_w = case.conv_out()
    tile_pixels = case.batch * conv_h * conv_w * -(-case.out_channels // 64)
    layout_16bit = channels_last and element != FLOAT32
    float32_nchw = not channels_last and element == FLOAT32
    return (device.compute_capability == 90 and case.in_channels < 8 and not fast_path(case)
            and case.out_channels > (16 if layout_16bit else 32)
            and (25 if float32_nchw else 9) <= taps <= 49
            and max(case.stride) <= (4 if layout_16bit else 3)
            and tile_pixels >= 256 * device.sm_count)


def wgmma_geometry(case: ConvPoolCase) -> bool:
    """wgmma_3x3_applies (kernels/conv_pool_shape.h): the 3 x 3 wgmma kernels' geometry, the
    fast path's or the same convolution with no pool (1 x 1 / stride 1)."""
    return fast_path(case) or (
        case.kernel_size == (3, 3) and case.stride == (1, 1) and case.dilation == (1, 1)
        and case.pool_kernel == (1, 1) and case.effective_pool_stride == (1, 1)
        and case.pool_padding == (0, 0))


def wgmma_variant(lib: ctypes.CDLL, element: int) -> int:
    """The config id of the 3 x 3 wgmma variant (tiled_tf32_wgmma / tiled_16bit_wgmma, one id
    for every element type)."""
    return variant_id(lib, "tiled_tf32_wgmma")


def dense_operands(case: ConvPoolCase, channels_last: bool = False) -> ConvPoolOperands:
    """Operands of `case` as dense tensors would give them: x NCHW or channels-last, the weight
    contiguous, every address 16-byte aligned (the pointers are never read)."""
    operands = ConvPoolOperands()
    c, h, w = case.in_channels, case.height, case.width
    operands.x_stride[:] = (c * h * w, 1, w * c, c) if channels_last else (c * h * w, h * w, w, 1)
    kh, kw = case.kernel_size
    operands.weight_stride[:] = (c * kh * kw, kh * kw, kw, 1)
    return operands


def variant_plan(lib: ctypes.CDLL, case: ConvPoolCase, variant, element: int = FLOAT32,
                 device: ConvPoolDevice = H200, channels_last: bool = False) -> dict:
    """What `variant` (a config id or a name) would do with `case` on `device` with a dense x,
    NCHW or channels-last, as a dict of ConvPoolPlanInfo's fields
    (conv_relu_maxpool_variant_plan): unsupported (why not, or None), workspace_bytes,
    takes_packed_weight, wgmma_tile, wgmma_tiles, wgmma_split, packs_weight_apart, flat_tiling,
    out_block, general (the general kernel's plan text, or None). Fields that do not apply are
    None, 0, False (wgmma_split 1)."""
    if isinstance(variant, str):
        variant = variant_id(lib, variant)
    info = ConvPoolPlanInfo()
    operands = dense_operands(case, channels_last)
    shape = shape_of(case, element, channels_last)
    if not lib.conv_relu_maxpool_variant_plan(ctypes.byref(shape), variant,
                                              ctypes.byref(device), ctypes.byref(operands),
                                              ctypes.byref(info)):
        raise KeyError(variant)
    def text(value: Optional[bytes]) -> Optional[str]:
        return value.decode() if value else None

    return dict(variant=info.variant, unsupported=text(info.unsupported),
                workspace_bytes=info.workspace_bytes,
                takes_packed_weight=info.takes_packed_weight, wgmma_tile=text(info.wgmma_tile),
                wgmma_tiles=info.wgmma_tiles, wgmma_split=info.wgmma_split,
                packs_weight_apart=info.packs_weight_apart, flat_tiling=text(info.flat_tiling),
                out_block=info.out_block, general=text(info.general))


def wgmma_tile(lib: ctypes.CDLL, case: ConvPoolCase, element: int = FLOAT32,
               name: Optional[str] = None) -> Optional[str]:
    """The tile the wgmma variant `name` (by default the one of `element`; tiled_3xtf32_wgmma
    for the fp32-accurate one) runs `case` with ("wide_n128", "square_n64", "strip_n128", ...;
    the plan's wgmma_tile)."""
    variant = wgmma_variant(lib, element) if name is None else variant_id(lib, name)
    return variant_plan(lib, case, variant, element)["wgmma_tile"]


def flat_tiling(lib: ctypes.CDLL, case: ConvPoolCase, element: int = FLOAT32,
                device: ConvPoolDevice = H200, name: Optional[str] = None) -> str:
    """The warp tiling the flat variant `name` (by default the one of `element`: tiled_tf32_flat
    or tiled_16bit_flat) runs `case` with on `device` ("n64_warp32x32", ...; the plan's
    flat_tiling)."""
    if name is None:
        name = "tiled_tf32_flat" if element == FLOAT32 else "tiled_16bit_flat"
    return variant_plan(lib, case, name, element, device)["flat_tiling"]


def tiled_out_block(lib: ctypes.CDLL, case: ConvPoolCase, name: str,
                    device: ConvPoolDevice = H200, element: int = FLOAT32) -> int:
    """Output channels per block of tiled variant `name` on `case` and `device` (0 for the
    variants without a tile plan; the plan's out_block)."""
    return variant_plan(lib, case, name, element, device)["out_block"]


def wgmma_tile_origins(lib: ctypes.CDLL, case: ConvPoolCase, tiles, element: int = FLOAT32):
    """(tile count, {tile: (image, first output channel, first pooled row, first pooled
    column)}) of the wgmma variant of `element` on `case`, for the tile indices in `tiles`
    below the count (conv_relu_maxpool_wgmma_tile_origin: the kernel's tile_origin)."""
    shape, variant = shape_of(case, element), wgmma_variant(lib, element)
    origin = (ctypes.c_int64 * 4)()
    count = lib.conv_relu_maxpool_wgmma_tile_origin(ctypes.byref(shape), variant, -1, origin)
    origins = {}
    for tile in tiles:
        if 0 <= tile < count:
            lib.conv_relu_maxpool_wgmma_tile_origin(ctypes.byref(shape), variant, tile, origin)
            origins[tile] = tuple(origin)
    return count, origins


def takes_packed_weight(lib: ctypes.CDLL, case: ConvPoolCase, element: int = FLOAT32) -> bool:
    """Whether the wgmma variant of `element` reads a packed_weight given for `case`
    (conv_relu_maxpool_takes_packed_weight, the binding's own test); else it packs its own."""
    return lib.conv_relu_maxpool_takes_packed_weight(ctypes.byref(shape_of(case, element)),
                                                     wgmma_variant(lib, element))


def writes_strided_output(lib: ctypes.CDLL, case: ConvPoolCase, variant,
                          element: int = FLOAT32) -> bool:
    """Whether `variant` (name or id) writes `case`'s output at any strides, a channels-last
    one directly (conv_relu_maxpool_writes_strided_output); else the op re-lays out its NCHW
    output."""
    if isinstance(variant, str):
        variant = variant_id(lib, variant)
    return lib.conv_relu_maxpool_writes_strided_output(ctypes.byref(shape_of(case, element)),
                                                       variant)


def packs_weight_apart(lib: ctypes.CDLL, case: ConvPoolCase, element: int = FLOAT32,
                       device: ConvPoolDevice = H200, name: Optional[str] = None) -> bool:
    """Whether the wgmma variant `name` (by default the one of `element`), given no packed
    weights, packs them in a launch of its own on every SM first (the plan's
    packs_weight_apart)."""
    variant = wgmma_variant(lib, element) if name is None else variant_id(lib, name)
    return variant_plan(lib, case, variant, element, device)["packs_weight_apart"]


def wgmma_split(lib: ctypes.CDLL, case: ConvPoolCase, element: int = FLOAT32,
                device: ConvPoolDevice = H200, name: Optional[str] = None) -> int:
    """Blocks per tile of the wgmma variant `name` (by default the one of `element`): > 1 when
    it splits each tile's reduction over a cluster of that many blocks (the plan's
    wgmma_split)."""
    variant = wgmma_variant(lib, element) if name is None else variant_id(lib, name)
    return variant_plan(lib, case, variant, element, device)["wgmma_split"]


def general_plan(lib: ctypes.CDLL, case: ConvPoolCase, element: int = FLOAT32,
                 device: ConvPoolDevice = H200, split: bool = False,
                 channels_last: bool = False) -> Optional[dict]:
    """The general wgmma kernel's plan for `case` on `device` with a dense NCHW or
    channels-last x as a dict ({"tile": "wide_n128", "pooled": "4x16", "steps": 72, ...}; the
    plan's general text), None where that kernel does not run it; split=True: its 3xTF32 form
    (general_3xtf32_wgmma)."""
    name = "general_3xtf32_wgmma" if split else "general_wgmma"
    return parse_general(variant_plan(lib, case, name, element, device, channels_last)["general"])


def general_rounds(plan: dict, device: ConvPoolDevice = H200) -> int:
    """How many rounds of `device`'s resident blocks a general-kernel plan (general_plan's
    dict) takes: its blocks (tiles x split) over the SMs times the blocks an SM holds, rounded
    up. One round: every block runs at once, and the layer's time is one block's chain."""
    return -(-plan["tiles"] * plan["split"] // (device.sm_count * plan["blocks_per_sm"]))


def parse_general(text: Optional[str]) -> Optional[dict]:
    """The general kernel's plan text ("tile=wide_n128 pooled=4x16 steps=72 ...": a plan's
    general field, or the op's conv2d_relu_maxpool_plan(...)["general"] for given tensors) as
    a dict, numbers as ints; None for None."""
    if text is None:
        return None
    plan = {}
    for item in text.split():
        key, value = item.split("=", 1)
        plan[key] = int(value) if value.lstrip("-").isdigit() else value
    return plan


def variant_table(lib: ctypes.CDLL) -> list[dict]:
    """The registry's rows (conv_relu_maxpool_variant_info) in id order: id, name (the float32
    member's), family, math, source, elements (ConvPoolElement values), arch, and name_16bit,
    math_16bit, source_16bit (the 16-bit member's, None where it has none)."""
    rows, variant = [], 0
    while True:
        info = ConvPoolVariantInfo()
        if not lib.conv_relu_maxpool_variant_info(variant, ctypes.byref(info)):
            return rows
        def text(value: Optional[bytes]) -> Optional[str]:
            return None if value is None else value.decode()

        rows.append(dict(id=variant, name=info.name.decode(), family=info.family.decode(),
                         math=info.math.decode(), source=info.source.decode(),
                         elements=[e for e in (FLOAT32, FLOAT16, BFLOAT16)
                                   if info.elements >> e & 1], arch=info.arch,
                         name_16bit=text(info.name_16bit), math_16bit=text(info.math_16bit),
                         source_16bit=text(info.source_16bit)))
        variant += 1


def why_not(lib: ctypes.CDLL, case: ConvPoolCase, variant: int, element: int = FLOAT32,
            device: ConvPoolDevice = H200) -> Optional[str]:
    """Why `variant` cannot run `case` on `device` (conv_relu_maxpool_unsupported), None when it
    can."""
    why = lib.conv_relu_maxpool_unsupported(ctypes.byref(shape_of(case, element)), variant,
                                            ctypes.byref(device))
    return None if why is None else why.decode()
