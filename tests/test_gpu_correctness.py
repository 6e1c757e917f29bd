"""GPU correctness of the fused op against PyTorch, on fresh random inputs.

Every case of utils.suite.GRID runs through the automatic choice and through
every kernel variant that supports it. References:
  * TF32 variants (and the automatic choice under PyTorch's default allow_tf32)
    against the float64 result at the workspace tolerance, atol = rtol = 1e-2;
  * FP32-accurate variants (direct, tiled_fp32, tiled_3xtf32, tiled_3xtf32_flat, small_fp32)
    against float64 at
    atol = rtol = 1e-4, far tighter than TF32 could pass;
  * float16 / bfloat16 inputs (direct_16bit, tiled_16bit_mma, tiled_16bit_wgmma on Hopper, the
    automatic choice, ModelNew after .half() / .bfloat16(), torch.compile) against float64 and
    PyTorch's own 16-bit ops, at the tolerances explained above SIXTEEN_BIT_TOLERANCE.
Skipped without a GPU.
"""
import random
import re
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from utils import kernel_choice
from utils.suite import FLAT_TILING_CASES, GRID, SUITE, ConvPoolCase, find_case
from utils.verification import cudnn_tf32

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

FP32_VARIANTS = ("direct", "tiled_fp32", "tiled_3xtf32", "tiled_3xtf32_flat", "tiled_3xtf32_wgmma",
                 "small_fp32", "general_3xtf32_wgmma")
TF32_TOLERANCE = dict(atol=1e-2, rtol=1e-2)
FP32_TOLERANCE = dict(atol=1e-4, rtol=1e-4)

# The tests that move an input of more than 2^31 elements.
needs_60_gib = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_properties(0).total_memory < 60 * 2**30,
    reason="needs a GPU with >= 60 GiB")


@pytest.fixture(scope="module")
def ext():
    import cuda_extension
    return cuda_extension


@pytest.fixture(scope="module")
def choice(ext):
    """The module's host-side choice functions (utils/kernel_choice.py)."""
    return kernel_choice.load(ext)


ELEMENT_OF = {torch.float32: kernel_choice.FLOAT32, torch.float16: kernel_choice.FLOAT16,
              torch.bfloat16: kernel_choice.BFLOAT16}


def wgmma_tile(choice, case: ConvPoolCase, dtype: torch.dtype) -> str:
    """The wgmma tile the op runs `case` with in `dtype` ("strip_n128", "wide_n64", ...)."""
    return kernel_choice.wgmma_tile(choice, case, ELEMENT_OF[dtype])


def make_operands(case: ConvPoolCase, seed: int, device: str = "cuda"):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(case.input_shape(), generator=generator)
    fan_in = case.in_channels * case.kernel_size[0] * case.kernel_size[1]
    weight = torch.randn(case.weight_shape(), generator=generator) / fan_in ** 0.5
    bias = torch.randn(case.out_channels, generator=generator) if case.bias else None
    to = lambda t: None if t is None else t.to(device)
    return to(x), to(weight), to(bias)


def reference(case: ConvPoolCase, x, weight, bias):
    """float64 result on the CPU: the direct definition, whatever cuDNN would pick."""
    x64, w64 = x.double().cpu(), weight.double().cpu()
    b64 = None if bias is None else bias.double().cpu()
    conv = F.conv2d(x64, w64, b64, case.stride, case.padding, case.dilation)
    return F.max_pool2d(F.relu(conv), case.pool_kernel, case.effective_pool_stride,
                        case.pool_padding, 1, case.ceil_mode)


def check_float64(out, expected, tolerance: dict, seed: int, case, special: bool = False):
    """out against the float64 reference `expected` at `tolerance`; special (inputs from
    inject_nan_and_inf): NaN and inf exactly where the reference has them (which it must),
    the finite values at the tolerance."""
    out = out.double().cpu()
    assert out.shape == expected.shape, case.name
    if special:
        assert expected.isnan().any() and expected.isinf().any()
        assert torch.equal(out.isnan(), expected.isnan()), seed
        assert torch.equal(out.isinf(), expected.isinf()), seed
        finite = expected.isfinite()
        out, expected = out[finite], expected[finite]
    torch.testing.assert_close(out, expected, **tolerance,
                               msg=lambda m: f"seed {seed} {case}: {m}")


def inject_nan_and_inf(x: torch.Tensor) -> None:
    """A NaN, +-inf, and a +inf next to a -inf (some window sums become inf - inf = NaN)."""
    x[0, 3, 5, 7] = float("nan")
    x[1, 0, 10, 2] = float("inf")
    x[1, 5, 2, 15] = float("-inf")
    x[0, 1, 17, 17] = float("inf")
    x[0, 2, 17, 18] = float("-inf")


def run_op(ext, case: ConvPoolCase, x, weight, bias, config: int = -1, packed_weight=None):
    return ext.conv2d_relu_maxpool_forward(x, weight, bias, *case.op_args(), config,
                                           packed_weight)


def variant_runs(ext, case, x, weight, bias, name: str) -> bool:
    config = ext.conv2d_relu_maxpool_variants()[name]
    try:
        ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args(), config)
        run_op(ext, case, x[:1], weight, bias, config)
    except RuntimeError as error:
        assert "cannot run this shape" in str(error)
        return False
    return True


def plan_of(ext, case: ConvPoolCase, x, weight, bias, config: int = -1) -> dict:
    return ext.conv2d_relu_maxpool_plan(x, weight, bias, *case.op_args(), config)


def refusal(ext, case, x, weight, bias, config: int):
    """The op's error for `config` on `case`, or None when it runs."""
    try:
        run_op(ext, case, x[:1], weight, bias, config)
    except RuntimeError as error:
        return str(error)
    return None


@pytest.mark.parametrize("case", GRID, ids=lambda c: c.name)
def test_every_variant_matches_float64_reference(ext, case, seed):
    """The automatic choice and every variant the host's plan says can run the case match
    float64; every variant it says cannot run refuses, with the plan's reason."""
    x, weight, bias = make_operands(case, seed=seed)
    expected = reference(case, x, weight, bias)
    auto = run_op(ext, case, x, weight, bias)
    assert auto.shape == expected.shape
    torch.testing.assert_close(auto.double().cpu(), expected, **TF32_TOLERANCE)
    plan = plan_of(ext, case, x, weight, bias)
    # Every variant once, by its float32 member's name (the 16-bit names share those ids).
    names = {row["name"]: row["id"] for row in ext.conv2d_relu_maxpool_variant_table()}
    assert set(plan["passed_over"]) | {plan["variant"]} == set(names)
    ran = []
    for name, config in names.items():
        why = plan["passed_over"].get(name, "runs it")
        if not why.startswith("runs it"):
            error = refusal(ext, case, x, weight, bias, config)
            assert error is not None and f"cannot run this shape: {why}" in error, (name, error)
            continue
        out = run_op(ext, case, x, weight, bias, config)
        tolerance = FP32_TOLERANCE if name in FP32_VARIANTS else TF32_TOLERANCE
        torch.testing.assert_close(out.double().cpu(), expected, **tolerance,
                                   msg=lambda m: f"variant {name}: {m}")
        ran.append(name)
    assert "direct" in ran and plan["variant"] in ran


def test_every_variant_runs_some_grid_case(ext, choice, seed):
    """Each member of each row of the registry (float32, and float16 where the row has a 16-bit
    member) runs, and matches float64 on, at least one GRID case on this GPU: no variant is
    tested only by its refusals."""
    device = kernel_choice.device_of(choice)
    hopper = torch.cuda.get_device_capability() == (9, 0)
    ran = set()
    for row in ext.conv2d_relu_maxpool_variant_table():
        if row["arch"] == 90 and not hopper:
            continue
        for dtype in (torch.float32, torch.float16):
            name = row["names"].get(DTYPE_NAMES[dtype])
            if name is None:
                continue
            case = next((c for c in GRID if kernel_choice.why_not(
                choice, c, row["id"], ELEMENT_OF[dtype], device) is None), None)
            assert case is not None, f"{name}: no GRID case it runs"
            x, weight, bias = (None if t is None else t.to(dtype)
                               for t in make_operands(case, seed=seed))
            assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args(),
                                                  row["id"]) == name
            out = run_op(ext, case, x, weight, bias, row["id"])
            tolerance = (SIXTEEN_BIT_TOLERANCE[dtype] if dtype != torch.float32 else
                         FP32_TOLERANCE if name in FP32_VARIANTS else TF32_TOLERANCE)
            torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                                       **tolerance, msg=lambda m: f"{name} on {case.name}: {m}")
            ran.add(name)
    assert set(SIXTEEN_BIT_VARIANTS) - ran <= ({"tiled_16bit_wgmma", "tiled_16bit_flat_wgmma"}
                                               if not hopper else set())


def test_default_problem_matches_model_and_uses_tensor_cores(ext):
    from model import Model, get_init_inputs
    from model_new import ModelNew
    torch.manual_seed(random.randrange(2**31))
    model = Model(*get_init_inputs()).cuda()
    fused = ModelNew(*get_init_inputs()).cuda()
    fused.load_state_dict(model.state_dict())
    x = torch.randn(16, 64, 128, 128, device="cuda")  # default problem at batch 16
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x), **TF32_TOLERANCE)
    case = SUITE[0]
    assert ext.conv2d_relu_maxpool_choose(x, model.conv.weight, model.conv.bias,
                                          *case.op_args()) == "tiled_tf32_wgmma"


def test_tf32_disallowed_selects_fp32_accurate_path(ext):
    case = find_case("default_small")
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    with cudnn_tf32(False):
        chosen = ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args())
        out = run_op(ext, case, x, weight, bias)
    assert chosen in FP32_VARIANTS
    torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                               **FP32_TOLERANCE)


@pytest.mark.parametrize("config_name,case_name", [
    ("auto", "padding1"), ("direct", "padding1"), ("tiled_tf32", "padding1"),
    ("tiled_tf32_16w", "padding1"), ("tiled_3xtf32", "padding1"),
    ("tiled_tf32_flat", "padding1"), ("tiled_3xtf32_flat", "padding1"),
    ("tiled_tf32_wgmma", "padding1"), ("tiled_3xtf32_wgmma", "padding1"),
    ("small_fp32", "kernel5"), ("small_tf32", "patch3_single_buffer")])
def test_nan_and_inf_propagate_like_pytorch(ext, config_name, case_name):
    case = find_case(case_name)
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    inject_nan_and_inf(x)
    expected = reference(case, x, weight, bias)
    assert expected.isnan().any() and expected.isinf().any()
    config = -1 if config_name == "auto" else ext.conv2d_relu_maxpool_variants()[config_name]
    out = run_op(ext, case, x, weight, bias, config).double().cpu()
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out.isinf(), expected.isinf())
    finite = expected.isfinite()
    torch.testing.assert_close(out[finite], expected[finite], **TF32_TOLERANCE)


@pytest.mark.parametrize("config_name,case_name", [
    ("tiled_3xtf32", "padding1"), ("tiled_3xtf32_flat", "padding1"),
    ("tiled_3xtf32_wgmma", "padding1"), ("small_fp32", "kernel5"), ("direct", "padding1")])
def test_fp32_accurate_paths_keep_nans_whose_payload_is_in_the_low_bits(ext, config_name,
                                                                        case_name):
    """A NaN whose mantissa bits all lie in the 13 a TF32 operand drops (0x7f800001) still
    gives NaN on the fp32-accurate paths: 3xTF32's small and cross parts carry a canonical NaN
    (the big part alone would read as infinity)."""
    case = find_case(case_name)
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    low_payload_nan = torch.tensor([0x7F800001, 0x7F801FFF], dtype=torch.int32).view(torch.float32)
    x[0, 1, 4, 6], x[1, 0, 9, 3] = low_payload_nan.to(x.device)
    weight[1, 2, 0, 0] = low_payload_nan[1]
    expected = reference(case, x, weight, bias)
    assert expected.isnan().any() and not expected.isnan().all()
    config = ext.conv2d_relu_maxpool_variants()[config_name]
    out = run_op(ext, case, x, weight, bias, config).double().cpu()
    assert torch.equal(out.isnan(), expected.isnan())
    finite = expected.isfinite()
    torch.testing.assert_close(out[finite], expected[finite], **FP32_TOLERANCE)


def test_all_negative_preactivations_give_zeros(ext):
    case = find_case("padding1")
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    x = x.abs() + 0.1
    weight = -weight.abs()
    bias = -bias.abs() - 0.1
    out = run_op(ext, case, x, weight, bias)
    assert torch.equal(out, torch.zeros_like(out))


def test_large_magnitudes(ext):
    case = find_case("c13_k19_unaligned")
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    x = x * 1e4
    expected = reference(case, x, weight, bias)
    out = run_op(ext, case, x, weight, bias).double().cpu()
    torch.testing.assert_close(out, expected, atol=1e-2 * expected.abs().max().item(), rtol=1e-2)


@pytest.mark.parametrize("layout", ["channels_last", "sliced", "transposed_hw"])
def test_non_contiguous_inputs_are_handled(ext, layout):
    case = find_case("c13_k19_unaligned")
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
        weight = weight.to(memory_format=torch.channels_last)
    elif layout == "sliced":
        wide = torch.randn(case.batch, case.in_channels, case.height, 2 * case.width,
                           device="cuda")
        x = wide[:, :, :, ::2]
    else:
        x = x.transpose(2, 3).contiguous().transpose(2, 3)
    assert not x.is_contiguous()
    expected = reference(case, x, weight, bias)
    torch.testing.assert_close(run_op(ext, case, x, weight, bias).double().cpu(), expected,
                               **TF32_TOLERANCE)


def on_side_stream(fn):
    """fn() on a new stream that waits for the current one, which then waits for it: (its
    result, the stream)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = fn()
    torch.cuda.current_stream().wait_stream(stream)
    return out, stream


def captured(fn, stream):
    """A CUDA graph of fn() and the output it writes, after one warm-up call on `stream`
    outside capture."""
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def test_runs_on_the_current_stream_and_in_a_cuda_graph(ext):
    case = find_case("default_small")
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    on_stream, stream = on_side_stream(lambda: run_op(ext, case, x, weight, bias))
    torch.testing.assert_close(on_stream.double().cpu(), reference(case, x, weight, bias),
                               **TF32_TOLERANCE)

    static_x = x.clone()
    graph, static_out = captured(lambda: run_op(ext, case, static_x, weight, bias), stream)
    fresh = torch.randn_like(x)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out.double().cpu(), reference(case, fresh, weight, bias),
                               **TF32_TOLERANCE)


def test_split_reductions_on_a_side_stream_and_in_a_cuda_graph(ext, choice):
    """A layer whose tiles split their reduction over clusters (VGG block 5's geometry at batch
    1 with 136 output channels) launches two kernels, the weight packing and the cluster
    launch: both run on the current stream, and a CUDA graph captures both, so a replay packs
    again and a weight changed in place between replays is used. The partial sums are added
    in a fixed order, so the stream's and the graph's outputs equal the eager call's bit for
    bit."""
    case = ConvPoolCase("split_graph", 1, 512, 136, 14, 14, (3, 3), padding=(1, 1))
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    assert kernel_choice.wgmma_split(choice, case, kernel_choice.FLOAT32, device) > 1
    seed = random.randrange(2**31)
    x, weight, bias = make_operands(case, seed)
    eager = run_op(ext, case, x, weight, bias)
    torch.testing.assert_close(eager.double().cpu(), reference(case, x, weight, bias),
                               **TF32_TOLERANCE)
    on_stream, stream = on_side_stream(lambda: run_op(ext, case, x, weight, bias))
    assert torch.equal(on_stream, eager)

    static_x, static_weight = x.clone(), weight.clone()
    graph, static_out = captured(lambda: run_op(ext, case, static_x, static_weight, bias),
                                 stream)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, eager)
    fresh_x, fresh_weight, _ = make_operands(case, seed + 1)
    static_x.copy_(fresh_x)
    static_weight.copy_(fresh_weight)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out.double().cpu(),
                               reference(case, fresh_x, fresh_weight, bias), **TF32_TOLERANCE,
                               msg=lambda m: f"seed {seed}: {m}")


def test_repeated_calls_are_bitwise_equal(ext):
    case = find_case("default_small")
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    assert torch.equal(run_op(ext, case, x, weight, bias), run_op(ext, case, x, weight, bias))


@pytest.mark.parametrize("width, padding", [(32, 0), (32, 8), (32, 1), (31, 0)],
                         ids=["lenet", "padding_8", "odd_first_column", "odd_width"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
def test_small_blocks_that_loop_over_several_tiles_match_reference(ext, dtype, width, padding):
    """small_fp32 / small_tf32 / small_16bit launch only the blocks that fit at once; with 1500
    LeNet images (one tile each; 4 with padding 8) every block computes several tiles, staging
    the next one's input meanwhile. float32: rows of whole 4-column vectors from a column
    multiple of 4 (LeNet, padding 8) move as 16-byte copies, the others (padding 1, odd width)
    element by element. 16 bits: the next region moves as 16-byte vectors of 8 columns where
    every region starts at a multiple of 8 (LeNet; padding 8, whose regions of 36 columns start
    at -8 and 24: vectors wholly outside the image on both sides), as column pairs from the even
    column at or left of its first (padding 1: one column left), or element by element when the
    width is odd."""
    case = ConvPoolCase("lenet_many_tiles", 1500, 1, 6, 32, width, (5, 5),
                        padding=(padding, padding))
    x, weight, bias = (t.to(dtype) for t in make_operands(case, seed=random.randrange(2**31)))
    names = ("small_fp32", "small_tf32") if dtype == torch.float32 else ("small_16bit",)
    assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == names[0]
    expected = reference(case, x, weight, bias)
    for name in names:
        out = run_op(ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[name])
        assert out.dtype == dtype
        tolerance = (SIXTEEN_BIT_TOLERANCE[dtype] if dtype != torch.float32 else
                     FP32_TOLERANCE if name in FP32_VARIANTS else TF32_TOLERANCE)
        torch.testing.assert_close(out.double().cpu(), expected, **tolerance,
                                   msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("width", [224, 223], ids=["rows_of_4", "odd_width"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
def test_flat_persistent_blocks_over_several_tiles_match_reference(ext, dtype, width):
    """AlexNet's first layer (3 channels, 11 x 11 / stride 4, 3 x 3 / stride 2 pooling) on more
    tiles than resident blocks: tiled_tf32_flat / tiled_16bit_flat keep the weights and stage
    the next tile's planes while this one computes; every other image of a larger batch. Rows
    of 4 elements move as vectors (16-bit: copied raw, converted when released); a width of
    223 (a column slice) takes the element-wise copies."""
    case = ConvPoolCase("alexnet_many_tiles", 12, 3, 64, 224, width, (11, 11), stride=(4, 4),
                        padding=(2, 2), pool_kernel=(3, 3), pool_stride=(2, 2))
    wide = replace(case, batch=2 * case.batch, width=224)
    x, weight, bias = (t.to(dtype) for t in make_operands(wide, seed=random.randrange(2**31)))
    x = x[::2, :, :, :width]
    name = FLAT_VARIANTS[dtype][0]
    if torch.cuda.get_device_capability() == (9, 0):
        name = FLAT_VARIANTS[dtype][1]  # one block of 64 channels per SM: the wgmma mainloop
    assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
    expected = reference(case, x, weight, bias)
    tolerance = TF32_TOLERANCE if dtype == torch.float32 else SIXTEEN_BIT_TOLERANCE[dtype]
    for config in flat_variants_to_run(ext, case, x, weight, bias):
        out = run_op(ext, case, x, weight, bias, config)
        assert out.dtype == dtype
        torch.testing.assert_close(out.double().cpu(), expected, **tolerance)


# The flat variants per dtype: the mma.sync kernel, then its wgmma mainloop (Hopper only).
FLAT_VARIANTS = {torch.float32: ("tiled_tf32_flat", "tiled_tf32_flat_wgmma"),
                 torch.float16: ("tiled_16bit_flat", "tiled_16bit_flat_wgmma"),
                 torch.bfloat16: ("tiled_16bit_flat", "tiled_16bit_flat_wgmma")}


def flat_variants_to_run(ext, case, x, weight, bias) -> list[int]:
    """The automatic choice (-1), then each flat variant of x's dtype that runs here (the
    mma.sync one and, on Hopper, the wgmma one) by name."""
    variants = ext.conv2d_relu_maxpool_variants()
    names = FLAT_VARIANTS[x.dtype]
    configs = [-1] + [variants[name] for name in names
                      if variant_runs(ext, case, x, weight, bias, name)]
    assert variants[names[0]] in configs
    return configs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", FLAT_TILING_CASES, ids=lambda c: c.name)
def test_flat_warp_tilings_match_reference(ext, choice, case, dtype):
    """Each warp tiling of the flat kernels (flat_tiling: 8 warps of 32 x 64 two blocks per SM,
    16 warps of 32 x 32, blocks of 32), persistent blocks looping over tiles of one channel
    block (two and five blocks of 64 for 96 and 300 channels), forced and through the automatic
    choice (on Hopper the general kernel for the 3 x 3 to 7 x 7 layers that fill the SMs),
    against float64."""
    element = ELEMENT_OF[dtype]
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    tiling = kernel_choice.flat_tiling(choice, case, element, device)
    if device.max_shared_bytes == kernel_choice.H200.max_shared_bytes:
        assert tiling == kernel_choice.flat_tiling(choice, case, element)  # the H200's
    x, weight, bias = (t.to(dtype) for t in make_operands(case, seed=random.randrange(2**31)))
    name = FLAT_VARIANTS[dtype][0]
    if tiling == "n64_warp32x32" and torch.cuda.get_device_capability() == (9, 0):
        name = FLAT_VARIANTS[dtype][1]  # one block of 64 channels per SM: the wgmma mainloop
    if kernel_choice.few_channel_general(case, device, element):
        name = "general_wgmma"  # 3 x 3 to 7 x 7 first layers that fill the SMs
    assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
    expected = reference(case, x, weight, bias)
    tolerance = TF32_TOLERANCE if dtype == torch.float32 else SIXTEEN_BIT_TOLERANCE[dtype]
    for config in flat_variants_to_run(ext, case, x, weight, bias):
        out = run_op(ext, case, x, weight, bias, config)
        assert out.dtype == dtype
        torch.testing.assert_close(out.double().cpu(), expected, **tolerance,
                                   msg=lambda m: f"{tiling}, config {config}: {m}")


@pytest.mark.parametrize("case", FLAT_TILING_CASES, ids=lambda c: c.name)
def test_flat_3xtf32_tilings_match_float64_at_fp32_tolerance(ext, choice, case):
    """allow_tf32 = False on the flat layers (AlexNet's first layer took `direct` before): the
    automatic choice is tiled_3xtf32_flat, with blocks of 32 or of 64 channels as 16 warps
    (flat_tiling), persistent blocks looping over tiles, and it matches float64 at the fp32
    tolerance, which TF32 products do not."""
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    tiling = kernel_choice.flat_tiling(choice, case, device=device, name="tiled_3xtf32_flat")
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    expected = reference(case, x, weight, bias)
    with cudnn_tf32(False):
        chosen = ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args())
        out = run_op(ext, case, x, weight, bias)
    assert chosen == "tiled_3xtf32_flat"
    torch.testing.assert_close(out.double().cpu(), expected, **FP32_TOLERANCE,
                               msg=lambda m: f"{tiling}: {m}")
    tf32 = run_op(ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()["tiled_tf32_flat"])
    tf32_error = (tf32.double().cpu() - expected).norm() / expected.norm()
    error = (out.double().cpu() - expected).norm() / expected.norm()
    assert error < tf32_error / 10, (error.item(), tf32_error.item())


@pytest.mark.parametrize("case", [
    ConvPoolCase("wide_3xtf32_fast", 8, 32, 136, 64, 64, (3, 3), padding=(1, 1)),
    ConvPoolCase("wide_3xtf32_generic", 8, 24, 136, 66, 70, (3, 3), padding=(1, 2),
                 pool_kernel=(3, 3), pool_stride=(2, 2)),
], ids=lambda c: c.name)
def test_3xtf32_blocks_of_128_channels_match_float64(ext, choice, case):
    """tiled_3xtf32's 128-channel blocks (layers that fill the GPU with them), on the fast
    3x3 / 2x2 geometry and the generic one, with a channel tail (136 = 128 + 8), NaN and
    infinities, against float64 at the fp32 tolerance."""
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    assert kernel_choice.tiled_out_block(choice, case, "tiled_3xtf32", device) == 128
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    config = ext.conv2d_relu_maxpool_variants()["tiled_3xtf32"]
    expected = reference(case, x, weight, bias)
    torch.testing.assert_close(run_op(ext, case, x, weight, bias, config).double().cpu(),
                               expected, **FP32_TOLERANCE)
    inject_nan_and_inf(x)
    expected = reference(case, x, weight, bias)
    out = run_op(ext, case, x, weight, bias, config).double().cpu()
    assert torch.equal(out.isnan(), expected.isnan()) and expected.isnan().any()
    assert torch.equal(out.isinf(), expected.isinf()) and expected.isinf().any()
    finite = expected.isfinite()
    torch.testing.assert_close(out[finite], expected[finite], **FP32_TOLERANCE)


def test_3xtf32_wgmma_error_does_not_grow_with_the_reduction(ext, choice):
    """tiled_3xtf32_wgmma restarts its tensor-core sums every 8 chunks (576 taps) and adds the
    runs in fp32 (flush_run): over 4608 taps (512 channels, 8 runs, no split reduction) its
    relative L2 error against float64 stays at one run's level. On the H200 one run over 576
    taps measured 1.1e-6 to 1.3e-6, a single sum over the 4608 taps 7.4e-6 to 7.7e-6, cuDNN's
    fp32 3.1e-7 (docs/PERF.md v34, v35)."""
    if not on_hopper():
        pytest.skip("the wgmma kernels need a Hopper GPU")
    case = ConvPoolCase("runs_of_8_chunks", 264, 512, 64, 8, 8, (3, 3), padding=(1, 1))
    name = "tiled_3xtf32_wgmma"
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    assert kernel_choice.wgmma_split(choice, case, kernel_choice.FLOAT32, device, name=name) == 1
    seed = random.randrange(2**31)
    x, weight, bias = make_operands(case, seed)
    with cudnn_tf32(False):
        assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
        out = run_op(ext, case, x, weight, bias).double()
    # float64 on the GPU (cuDNN: 10 GFLOP would take long on the CPU)
    conv = F.conv2d(x.double(), weight.double(), bias.double(), case.stride, case.padding)
    expected = F.max_pool2d(F.relu(conv), case.pool_kernel, case.effective_pool_stride)
    error = ((out - expected).norm() / expected.norm()).item()
    assert error < 3e-6, f"seed {seed}: relative L2 error {error:.2e}"


@pytest.mark.parametrize("layout", ["dense", "channels_last", "every_other"])
@pytest.mark.parametrize("case,tile", [
    # one 14 x 14 image per square tile (whole-plane vector loads when dense), 5 chunks of
    # input channels, an output-channel tail (72 = 64 + 8)
    (ConvPoolCase("split_square", 6, 40, 72, 14, 14, (3, 3), padding=(1, 1)), "square_n64"),
    # wide tiles, rows in aligned runs of 4 (row vectors), several tiles per image
    (ConvPoolCase("split_wide", 2, 24, 136, 32, 64, (3, 3), padding=(1, 1)), "wide_n64"),
    # odd widths and 13 channels: scalar loads, an input-channel tail inside a slice
    (ConvPoolCase("split_scalars", 3, 13, 40, 19, 30, (3, 3)), "wide_n64"),
    # 9 chunks, more tiles than SMs (no split reduction): a run of 8 chunks whose sums go to
    # the master slots, then a run of 1 that adds them back (flush_run, add_master)
    (ConvPoolCase("split_runs", 140, 72, 64, 8, 8, (3, 3), padding=(1, 1)), "wide_n64"),
], ids=lambda v: v.name if isinstance(v, ConvPoolCase) else v)
def test_3xtf32_wgmma_matches_float64_with_infinities_in_both_operands(ext, choice, case, tile,
                                                                       layout):
    """tiled_3xtf32_wgmma (allow_tf32 = False on Hopper) against float64 at the fp32
    tolerance, well inside TF32's error, through its halo loaders; then with NaN and
    infinities in x and infinite weights over integer-valued inputs, whose 3xTF32 small parts
    are zero: the cross terms must give the infinity fp32 gives, not inf * 0 = NaN."""
    if not on_hopper():
        pytest.skip("the wgmma kernels need a Hopper GPU")
    seed = random.randrange(2**31)
    name = "tiled_3xtf32_wgmma"
    assert kernel_choice.wgmma_tile(choice, case, name=name) == tile  # (strips: strip tests)
    config = ext.conv2d_relu_maxpool_variants()[name]

    def laid_out(x):
        if layout == "channels_last":
            return x.contiguous(memory_format=torch.channels_last)
        if layout == "every_other":
            return torch.stack([x, torch.zeros_like(x)], dim=1).flatten(0, 1)[::2]
        return x

    x, weight, bias = make_operands(case, seed)
    x = laid_out(x)
    expected = reference(case, x, weight, bias)
    with cudnn_tf32(False):
        assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
        out = run_op(ext, case, x, weight, bias, config).double().cpu()
    torch.testing.assert_close(out, expected, **FP32_TOLERANCE,
                               msg=lambda m: f"seed {seed} {layout}: {m}")
    tf32 = run_op(ext, case, x, weight, bias,
                  ext.conv2d_relu_maxpool_variants()["tiled_tf32_wgmma"]).double().cpu()
    error = (out - expected).norm() / expected.norm()
    tf32_error = (tf32 - expected).norm() / expected.norm()
    assert error < tf32_error / 10, (error.item(), tf32_error.item())

    x = torch.randint(-3, 4, case.input_shape(), device="cuda").float()
    h, w = case.height, case.width
    x[0, 0, h // 2, w // 2] = float("nan")
    x[1, 1, 1, 2], x[1, 2, h - 2, w - 3] = float("inf"), float("-inf")
    x[0, 3, 5, 5], x[0, 4, 5, 6] = float("inf"), float("-inf")  # some sums are inf - inf
    x = laid_out(x)
    weight = weight.clone()
    inf = float("inf")
    weight[3, 1, 1, 1], weight[5, 0, 0, 2], weight[9, 2, 2, 0] = inf, -inf, inf
    expected = reference(case, x, weight, bias)
    out = run_op(ext, case, x, weight, bias, config).double().cpu()
    assert expected.isinf().any() and expected.isnan().any()
    assert torch.equal(out.isnan(), expected.isnan()), f"seed {seed} {layout}"
    assert torch.equal(out.isinf(), expected.isinf()), f"seed {seed} {layout}"
    finite = expected.isfinite()
    torch.testing.assert_close(out[finite], expected[finite], **FP32_TOLERANCE)


def test_empty_batch_returns_empty_output(ext):
    case = find_case("padding1")
    x, weight, bias = make_operands(case, seed=0)
    out = run_op(ext, case, x[:0], weight, bias)
    assert out.shape == (0, case.out_channels, *case.pooled_out())


def test_random_configurations(ext):
    from utils.suite import random_cases
    seed = random.randrange(2**31)
    for case in random_cases(random.Random(seed), 12):
        x, weight, bias = make_operands(case, seed=seed)
        expected = reference(case, x, weight, bias)
        torch.testing.assert_close(run_op(ext, case, x, weight, bias).double().cpu(), expected,
                                   **TF32_TOLERANCE, msg=lambda m: f"seed {seed} {case}: {m}")


@needs_60_gib
def test_input_over_2_pow_31_elements(ext):
    """64-bit indexing: x has 2.15e9 elements; image 1's channels start past 2^31."""
    case = ConvPoolCase("huge", 2, 4, 8, 16384, 16400, (3, 3), padding=(1, 1))
    assert case.input_elements() > 2**31
    torch.manual_seed(random.randrange(2**31))
    x = torch.randn(case.input_shape(), device="cuda")
    weight = torch.randn(case.weight_shape(), device="cuda") / 6
    bias = torch.randn(case.out_channels, device="cuda")
    out = run_op(ext, case, x, weight, bias)
    with cudnn_tf32(False):
        expected = F.max_pool2d(F.relu(F.conv2d(x, weight, bias, 1, 1)), 2)
    torch.testing.assert_close(out, expected, **TF32_TOLERANCE)
    # The last image's last rows are where 32-bit offsets would have wrapped.
    torch.testing.assert_close(out[-1, :, -8:], expected[-1, :, -8:], **TF32_TOLERANCE)


# ---- float16 / bfloat16 -------------------------------------------------------------------
#
# References are computed from the very 16-bit values the kernel reads (random fp32 data
# rounded to the 16-bit type first), so input rounding is not an error source. Our kernels
# multiply 16-bit operands exactly in fp32 and accumulate in fp32: for these reductions
# (at most a few thousand terms of size ~1) that adds ~1e-6 absolute error, far below the one
# rounding of the result to 16 bits, which is at most half a unit in the last place: relative
# 2^-11 = 4.9e-4 for float16 and 2^-8 = 3.9e-3 for bfloat16 (8 significant bits). PyTorch's
# own 16-bit conv (cuDNN, fp32 accumulation) rounds its conv output once too, so it differs
# from ours by at most about two such roundings. The tolerances leave about 10x (float16) and
# 5x (bfloat16) over that per-value rounding bound; outputs here are O(1), so atol equals rtol
# (a fragment-layout or indexing bug gives O(1) errors, far outside either).
SIXTEEN_BIT_DTYPES = [torch.float16, torch.bfloat16]
SIXTEEN_BIT_VARIANTS = ("direct_16bit", "tiled_16bit_mma", "tiled_16bit_wgmma", "small_16bit",
                        "tiled_16bit_flat", "stem_16bit", "tiled_16bit_flat_wgmma")
SIXTEEN_BIT_TOLERANCE = {torch.float16: dict(atol=1e-2, rtol=1e-2),
                         torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}
DTYPE_IDS = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
DTYPE_NAMES = {torch.float32: "float32", **DTYPE_IDS}


def on_hopper() -> bool:
    return torch.cuda.get_device_capability() == (9, 0)


def require_runs(ext, case, x, weight, bias, name: str) -> None:
    """Skips a variant not built for this GPU (the registry's arch: 90 is sm_90a, Hopper only);
    any other refusal fails: these tests pick their cases so that every variant they name runs
    them."""
    row = next(r for r in ext.conv2d_relu_maxpool_variant_table()
               if name in r["names"].values())
    major, minor = torch.cuda.get_device_capability()
    capability = 10 * major + minor
    if row["arch"] > capability or (row["arch"] == 90 and capability != 90):  # sm_90a only
        pytest.skip(f"{name} is built for compute capability {row['arch'] / 10:.1f}")
    config = ext.conv2d_relu_maxpool_variants()[name]
    error = refusal(ext, case, x, weight, bias, config)
    assert error is None, f"{name} refused {case.name}: {error}"


def case_for_variant(case: ConvPoolCase, variant: str) -> ConvPoolCase:
    """`case` with at most 16 output channels for the small kernels and at most 3 input
    channels for the stem kernel (their limits), so that a test parametrized over variants runs
    every one of them instead of skipping some."""
    if variant.startswith("small_"):
        return replace(case, name=f"{case.name}_k16", out_channels=min(case.out_channels, 16))
    if variant.startswith("stem_"):  # a reduction of at most 32
        return replace(case, name=f"{case.name}_c3", in_channels=min(case.in_channels, 3))
    return case


def make_operands_16bit(case: ConvPoolCase, seed: int, dtype: torch.dtype):
    """make_operands rounded to `dtype`: the references then see exactly the kernel's input."""
    x, weight, bias = make_operands(case, seed)
    return x.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype)


def pytorch_16bit(case: ConvPoolCase, x, weight, bias):
    """PyTorch's own Conv2d -> ReLU -> MaxPool2d in the 16-bit dtype, on the GPU."""
    conv = F.conv2d(x, weight, bias, case.stride, case.padding, case.dilation)
    return F.max_pool2d(F.relu(conv), case.pool_kernel, case.effective_pool_stride,
                        case.pool_padding, 1, case.ceil_mode)


def check_16bit(out, x, case, weight, bias, dtype, what=""):
    assert out.dtype == dtype, f"{what}: output dtype {out.dtype}, expected {dtype}"
    expected = reference(case, x, weight, bias)
    assert out.shape == expected.shape
    torch.testing.assert_close(out.double().cpu(), expected, **SIXTEEN_BIT_TOLERANCE[dtype],
                               msg=lambda m: f"{what} vs float64: {m}")
    torch.testing.assert_close(out, pytorch_16bit(case, x, weight, bias),
                               **SIXTEEN_BIT_TOLERANCE[dtype],
                               msg=lambda m: f"{what} vs PyTorch {dtype}: {m}")


ALL_DTYPES = [torch.float32, *SIXTEEN_BIT_DTYPES]
ALL_DTYPE_IDS = {torch.float32: "float32", **DTYPE_IDS}


# The stem kernel (stem_tf32, stem_16bit): reductions of at most 32, at most 64 channels, 2x2 /
# stride 2 pools, a block tile of a few pooled rows by up to 128 pooled columns.
STEM_CASES = [
    # RGB 3 x 3 into 64 channels: whole 16-byte vectors in and out, two pooled rows a tile, the
    # last tile of each image one row short (18 pooled rows).
    ConvPoolCase("stem_rgb", 3, 3, 64, 37, 224, (3, 3), padding=(1, 1)),
    # Odd width: element-wise halo copies; pooled rows of 30 stored one element at a time; 36
    # channels (a channels-last output in stores of 4).
    ConvPoolCase("stem_odd_width", 2, 3, 36, 26, 61, (3, 3), padding=(1, 1)),
    # 300 pooled columns: column tiles of 128, 128 and 44; 48 channels (6 of 8 n-tiles).
    ConvPoolCase("stem_column_tiles", 2, 3, 48, 10, 600, (3, 3), padding=(1, 1)),
    # LeNet: 25 of 32 k columns real, 6 channels in one n-tile, a 14 x 14 image per tile.
    ConvPoolCase("stem_lenet", 64, 1, 6, 32, 32, (5, 5)),
    # 9 k columns: two k steps, the second mostly the zero plane; 16 channels (2 n-tiles).
    ConvPoolCase("stem_c1_k16", 8, 1, 16, 28, 28, (3, 3), padding=(1, 1)),
    # Stride, dilation and padding that differ between the axes; 32 channels (4 n-tiles).
    ConvPoolCase("stem_strided_dilated", 4, 2, 32, 50, 47, (3, 3), stride=(2, 1),
                 padding=(2, 1), dilation=(1, 2)),
    # The whole reduction (4 x 2 x 4 = 32), 33 channels, no bias.
    ConvPoolCase("stem_reduction_32", 3, 4, 33, 21, 70, (2, 4), padding=(0, 3), bias=False),
    # 600 images of one tile each: every block loops over many tiles.
    ConvPoolCase("stem_many_tiles", 600, 3, 64, 16, 16, (3, 3), padding=(1, 1)),
    # Ceil mode on an even conv output: no partial window, so the kernel takes it.
    ConvPoolCase("stem_ceil_even", 2, 3, 24, 30, 34, (3, 3), padding=(1, 1), ceil_mode=True),
]


def stem_variant(dtype: torch.dtype) -> str:
    return "stem_tf32" if dtype == torch.float32 else "stem_16bit"


def with_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """x's values in a channels-last tensor, or in every other column of a wider one."""
    if layout == "channels_last":
        return x.to(memory_format=torch.channels_last)
    if layout == "every_other":
        wide = torch.empty(*x.shape[:3], 2 * x.shape[3], device=x.device, dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    return x


@pytest.mark.parametrize("layout", ["dense", "channels_last", "channels_last_relayout",
                                    "every_other"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
@pytest.mark.parametrize("case", STEM_CASES, ids=lambda c: c.name)
def test_stem_kernel_matches_reference(ext, case, dtype, layout, monkeypatch):
    """Every stem case against PyTorch in each layout. channels_last: the kernel writes the
    channels-last output itself, with no re-layout launch, where the channel count is a
    multiple of 4 (8 channels a store from a swizzled pooled tile where it is a multiple of 8,
    else 4); else NCHW and a re-layout. channels_last_relayout: NCHW and a re-layout
    ($CONV_POOL_STEM_STRIDED_OUT=0)."""
    x, weight, bias = (None if t is None else t.to(dtype)
                       for t in make_operands(case, seed=random.randrange(2**31)))
    strided_out = layout.startswith("channels_last") and case.out_channels % 4 == 0
    monkeypatch.delenv("CONV_POOL_STEM_STRIDED_OUT", raising=False)
    if layout == "channels_last_relayout":
        monkeypatch.setenv("CONV_POOL_STEM_STRIDED_OUT", "0")
        strided_out = False
    if layout != "every_other":
        layout = "dense" if layout == "dense" else "channels_last"
    x = with_layout(x, layout)
    name = stem_variant(dtype)
    assert variant_runs(ext, case, x, weight, bias, name)
    if on_hopper():  # where it was measured: 17..64 channels take it
        chosen = ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args())
        assert (chosen == name) == (case.out_channels > 16), chosen
    out, kernels = run_listing_kernels(
        lambda: run_op(ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[name]))
    if strided_out:
        check_output_layout(out, layout, kernels, case)
    if dtype == torch.float32:
        torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                                   **TF32_TOLERANCE)
    else:
        check_16bit(out, x, case, weight, bias, dtype, f"{layout} {name}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
def test_stem_kernel_keeps_nan_and_inf_like_pytorch(ext, dtype):
    case = find_stem_case("stem_rgb")
    x, weight, bias = (t.to(dtype) for t in make_operands(case, seed=random.randrange(2**31)))
    x[0, 0, 5, 7] = float("nan")
    x[1, 0, 10, 2] = float("inf")
    x[1, 2, 2, 15] = float("-inf")
    x[0, 1, 17, 17] = float("inf")  # next to a -inf: inf - inf = NaN in some windows
    x[0, 2, 17, 18] = float("-inf")
    expected = reference(case, x, weight, bias)
    assert expected.isnan().any() and expected.isinf().any()
    out = run_op(ext, case, x, weight, bias,
                 ext.conv2d_relu_maxpool_variants()[stem_variant(dtype)]).double().cpu()
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out.isinf(), expected.isinf())
    finite = expected.isfinite()
    tolerance = TF32_TOLERANCE if dtype == torch.float32 else SIXTEEN_BIT_TOLERANCE[dtype]
    torch.testing.assert_close(out[finite], expected[finite], **tolerance)


def find_stem_case(name: str) -> ConvPoolCase:
    return next(case for case in STEM_CASES if case.name == name)


def automatic_3x3(case: ConvPoolCase, name: str) -> str:
    """What the automatic choice runs on the H200 for a 3 x 3 / 2 x 2 layer whose wgmma
    variant is `name` (allow_tf32 as that variant needs): the general kernel for an odd conv
    output height or width at a batch of 8 or more with TF32 allowed or in 16 bits
    (kFastPathOddGeneralMinBatch; the rule itself is pinned in tests/test_variant_choice.py),
    else `name`."""
    conv_h, conv_w = case.conv_out()
    odd = case.batch >= 8 and (conv_h % 2 == 1 or conv_w % 2 == 1)
    return "general_wgmma" if odd and name != "tiled_3xtf32_wgmma" else name


def wgmma_run(dtype: torch.dtype, x, weight, bias):
    """The Hopper variant for `dtype`, its tolerance, and the operands cast to `dtype`."""
    if not on_hopper():
        pytest.skip("the wgmma kernels need a Hopper GPU")
    if dtype == torch.float32:
        return "tiled_tf32_wgmma", TF32_TOLERANCE, (x, weight, bias)
    operands = (x.to(dtype), weight.to(dtype), bias.to(dtype))
    return "tiled_16bit_wgmma", SIXTEEN_BIT_TOLERANCE[dtype], operands


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
def test_wgmma_whole_image_tiles_over_many_images(ext, dtype):
    """VGG block 5's geometry (one 14 x 14 image per tile, read as whole-plane 4-pixel vectors)
    with more tiles than resident blocks, so each block computes several images; every other
    image of a larger batch (an image stride that is not C * H * W); channel tails."""
    case = ConvPoolCase("small_images_many", 300, 20, 72, 14, 14, (3, 3), padding=(1, 1))
    wide = ConvPoolCase("wide", 600, 20, 72, 14, 14, (3, 3), padding=(1, 1))
    x, weight, bias = make_operands(wide, random.randrange(2**31))
    name, tolerance, (x, weight, bias) = wgmma_run(dtype, x[::2], weight, bias)
    assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
    out = run_op(ext, case, x, weight, bias)
    torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias), **tolerance)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
def test_wgmma_random_small_images(ext, dtype):
    """Random small images through the wgmma kernels' three halo loaders: whole-image plane
    vectors (tests/test_wgmma_plane_halo_cpu.py models which geometries get them), row
    vectors and scalar loads, with random channel counts and padding."""
    seed = random.randrange(2**31)
    rng = random.Random(seed)
    for i in range(12):
        pad = rng.choice([0, 1])
        case = ConvPoolCase(f"small_{i}", rng.randint(1, 3), rng.choice([1, 3, 8, 13, 16, 24, 40]),
                            rng.choice([1, 8, 24, 64, 72, 130]), rng.randint(4 - 2 * pad, 18),
                            rng.randint(4 - 2 * pad, 34), (3, 3), padding=(pad, pad))
        name, tolerance, (x, weight, bias) = wgmma_run(dtype, *make_operands(case, seed + i))
        out = run_op(ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[name])
        torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                                   **tolerance, msg=lambda m: f"seed {seed} {case}: {m}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
def test_wgmma_channels_last_inputs(ext, dtype):
    """Channels-last inputs through the wgmma kernels: the pixel-vector instances where one
    16-byte vector holds a whole channel slice (channel counts that are multiples of 4 fp32 or
    8 16-bit channels), scalar loads for the other counts; random sizes over several tiles,
    padding, channel, width and output-channel tails; besides dense tensors, every other image
    of a larger channels-last batch (an image stride that is not C * H * W) and the last C
    channels of a wider one (a pixel stride that is not C, the data 8 channels in)."""
    seed = random.randrange(2**31)
    rng = random.Random(seed)
    for i in range(12):
        pad = rng.choice([0, 1])
        case = ConvPoolCase(f"channels_last_{i}", rng.randint(1, 3),
                            rng.choice([4, 8, 12, 13, 16, 24, 40, 64]),
                            rng.choice([8, 40, 64, 72, 130]), rng.randint(4 - 2 * pad, 40),
                            rng.randint(4 - 2 * pad, 70), (3, 3), padding=(pad, pad))
        layout = rng.choice(["dense", "every_other", "channel_slice"])
        full = replace(case, batch=2 * case.batch if layout == "every_other" else case.batch,
                       in_channels=case.in_channels + (8 if layout == "channel_slice" else 0))
        x, weight, bias = make_operands(full, seed + i)
        name, tolerance, (x, weight, bias) = wgmma_run(
            dtype, x.contiguous(memory_format=torch.channels_last), weight, bias)
        if layout == "every_other":
            x = x[::2]
        elif layout == "channel_slice":
            x, weight = x[:, 8:], weight[:, 8:]
        assert x.shape[:2] == (case.batch, case.in_channels), (layout, x.shape)
        assert x.stride(1) == 1 and not x.is_contiguous()
        out = run_op(ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[name])
        torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                                   **tolerance, msg=lambda m: f"seed {seed} {case}: {m}")


def wgmma_layout_operands(case: ConvPoolCase, layout: str, dtype: torch.dtype, seed: int):
    """(variant name, tolerance, x, weight, bias) for the wgmma variant of `dtype`, x laid out
    as `layout`: "dense", "channels_last", or "every_other" (every other image of a batch twice
    as large: an image stride that is not C * H * W)."""
    full = replace(case, batch=2 * case.batch) if layout == "every_other" else case
    x, weight, bias = make_operands(full, seed)
    name, tolerance, (x, weight, bias) = wgmma_run(dtype, x, weight, bias)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "every_other":
        x = x[::2]
    return name, tolerance, x, weight, bias


@pytest.mark.parametrize("dtype", [*ALL_DTYPES, "3xtf32"], ids=lambda d: ALL_DTYPE_IDS.get(d, d))
@pytest.mark.parametrize("layout", ["dense", "channels_last", "every_other"])
def test_wgmma_strip_tiles(ext, choice, dtype, layout):
    """Shapes whose rows of 8 x 8 squares are not a multiple of 4 long run on strips of four
    consecutive squares, which may go on in the next square row or the next image
    (tests/test_wgmma_plane_halo_cpu.py models the choice): VGG block 3's 56 x 56 images with
    more strips than resident blocks; a last strip of 2 squares; every padding 0-3 (halo
    column shifts 0, 3, 2, 1); odd widths (scalar loads); channels-last inputs (pixel vectors)
    and every other image of a larger batch; output-channel tails. Each batch makes more than
    64 strips of 128 channels (fewer run 64-channel wide or square tiles: kFewTiles). Outputs
    in the input's layout, channels-last written by the kernel (check_output_layout). "3xtf32":
    float32 with allow_tf32 = False, tiled_3xtf32_wgmma's strips of 64 channels, at the fp32
    tolerance."""
    accurate = dtype == "3xtf32"
    dtype = torch.float32 if accurate else dtype
    cases = [ConvPoolCase("strip_vgg_b3", 42, 16, 136, 56, 56, (3, 3), padding=(1, 1)),
             ConvPoolCase("strip_pad0_odd", 9, 8, 130, 22, 45, (3, 3)),
             ConvPoolCase("strip_pad2", 9, 24, 136, 17, 41, (3, 3), padding=(2, 2)),
             ConvPoolCase("strip_pad3", 10, 32, 200, 19, 50, (3, 3), padding=(3, 3))]
    seed = random.randrange(2**31)
    for i, case in enumerate(cases):
        name, tolerance, x, weight, bias = wgmma_layout_operands(case, layout, dtype, seed + i)
        if accurate:
            name, tolerance = "tiled_3xtf32_wgmma", FP32_TOLERANCE
        assert kernel_choice.wgmma_tile(choice, case, ELEMENT_OF[dtype], name=name) == (
            "strip_n64" if accurate else "strip_n128"), case.name
        config = ext.conv2d_relu_maxpool_variants()[name]
        with cudnn_tf32(not accurate):
            assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == \
                automatic_3x3(case, name), case.name
            out, kernels = run_listing_kernels(
                lambda: run_op(ext, case, x, weight, bias, config))
        check_output_layout(out, layout, kernels, case)
        torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                                   **tolerance, msg=lambda m: f"seed {seed} {case}: {m}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["dense", "channels_last", "every_other"])
def test_wgmma_few_tiles_run_64_channel_blocks(ext, choice, dtype, layout):
    """Layers of at most 64 tiles of 128 output channels (batch 1 and the like) run blocks of
    64 channels (kFewTiles): the wide tile (the one-block-per-SM instance of it), the square
    one over whole 14 x 14 images, and a strip shape of few strips, which takes the wide tile;
    output-channel tails (136 and 200: a last block of 8). A large weight over few blocks is
    packed apart first, by a launch of its own, which a kernel instance for packed weights
    then reads (the two cases with 200 and 264 input channels, which also split their tiles'
    reductions: test_wgmma_split_reductions). Weights packed ahead of time (for 128-channel
    blocks) are not read: the same output bit for bit, even from a copy packed from
    2 * weight. Outputs in the input's layout (check_output_layout)."""
    cases = [(ConvPoolCase("few_wide", 1, 16, 136, 34, 66, (3, 3)), "wide_n64", False),
             (ConvPoolCase("few_square", 3, 24, 200, 14, 14, (3, 3), padding=(1, 1)),
              "square_n64", False),
             (ConvPoolCase("few_strips", 1, 16, 130, 56, 56, (3, 3), padding=(1, 1)),
              "wide_n64", False),
             (ConvPoolCase("few_packed_apart", 1, 264, 136, 14, 14, (3, 3), padding=(1, 1)),
              "square_n64", True),
             (ConvPoolCase("few_wide_packed_apart", 1, 200, 136, 18, 34, (3, 3)), "wide_n64",
              True)]
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    seed = random.randrange(2**31)
    for i, (case, tile, apart) in enumerate(cases):
        name, tolerance, x, weight, bias = wgmma_layout_operands(case, layout, dtype, seed + i)
        assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
        assert wgmma_tile(choice, case, dtype) == tile, case.name
        assert not kernel_choice.takes_packed_weight(choice, case, ELEMENT_OF[dtype])
        assert kernel_choice.packs_weight_apart(choice, case, ELEMENT_OF[dtype], device) == \
            apart, case.name
        expected = reference(case, x, weight, bias)
        out, kernels = run_listing_kernels(lambda: run_op(ext, case, x, weight, bias))
        check_output_layout(out, layout, kernels, case)
        torch.testing.assert_close(out.double().cpu(), expected, **tolerance,
                                   msg=lambda m: f"seed {seed} {case}: {m}")
        ignored = ext.conv2d_relu_maxpool_pack_weight(2 * weight)
        assert ignored.numel() > 0
        assert torch.equal(run_op(ext, case, x, weight, bias, -1, ignored), out), case.name


@pytest.mark.parametrize("dtype", [*ALL_DTYPES, "3xtf32"], ids=lambda d: ALL_DTYPE_IDS.get(d, d))
@pytest.mark.parametrize("layout", ["dense", "channels_last", "every_other"])
def test_wgmma_split_reductions(ext, choice, dtype, layout):
    """Layers of few tiles with long reductions split each tile's chunks over a cluster of
    2, 4 or 8 blocks, whose partial sums meet in distributed shared memory before the pooling
    (kSplitK): the square tile over one 14 x 14 image with an output-channel tail (8 blocks a
    tile on the H200), shares that do not divide (200 input channels: there 7 blocks of 4, 4,
    4, 4, 4, 4 and 1 TF32 chunks; 4 of 4, 4, 4, 1 16-bit ones), the wide tile, and NaN / inf
    inputs, which the partial sums carry as one sum would. Against float64; the kernel
    launched is the split instance (its last template argument true), and the output is in
    the input's layout (check_output_layout). "3xtf32": float32 with
    allow_tf32 = False (tiled_3xtf32_wgmma), at the fp32 tolerance."""
    accurate = dtype == "3xtf32"
    dtype = torch.float32 if accurate else dtype
    cases = [ConvPoolCase("split_square", 1, 512, 136, 14, 14, (3, 3), padding=(1, 1)),
             ConvPoolCase("split_uneven", 2, 200, 128, 14, 14, (3, 3), padding=(1, 1)),
             ConvPoolCase("split_wide", 1, 160, 72, 18, 66, (3, 3)),
             ConvPoolCase("split_nan", 2, 256, 128, 18, 20, (3, 3), padding=(1, 1))]
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    seed = random.randrange(2**31)
    for i, case in enumerate(cases):
        name, tolerance, x, weight, bias = wgmma_layout_operands(case, layout, dtype, seed + i)
        if accurate:
            name, tolerance = "tiled_3xtf32_wgmma", FP32_TOLERANCE
        if case.name == "split_nan":
            inject_nan_and_inf(x)
        with cudnn_tf32(not accurate):
            assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
            out, launched = run_listing_kernels(lambda: run_op(ext, case, x, weight, bias))
        kernels = [k for k in launched if "conv_pool_wgmma_kernel" in k]
        assert kernel_choice.wgmma_split(choice, case, ELEMENT_OF[dtype], device,
                                         name=name) > 1, case
        assert len(kernels) == 1 and re.search(r", (true|false), true, true>", kernels[0]), \
            kernels
        check_output_layout(out, layout, launched, case)
        check_float64(out, reference(case, x, weight, bias), tolerance, seed, case,
                      special=case.name == "split_nan")


# Conv -> ReLU with no pool (a 1 x 1 / stride 1 one) on the 3 x 3 wgmma kernel (kPool = 1: the
# same tiles on conv outputs, stored from the accumulators by store_conv_rows (NCHW) and
# store_conv_channels_last), each with the tile the choice gives it on the H200 and whether a
# cluster splits its reductions: the wide, square and strip tiles of 128 channels with output-channel tails (136: a last block of 8), an N = 64
# layer at an odd width (scalar halo loads for dense inputs; the last column of every row a
# pair's lone first element), a layer of few tiles whose long reduction splits over a cluster,
# and padding 2 with NaN / inf inputs.
UNPOOLED_CASES = [
    (ConvPoolCase("conv_wide", 8, 16, 136, 34, 66, (3, 3), pool_kernel=(1, 1)), "wide_n128",
     False),
    (ConvPoolCase("conv_square", 80, 24, 128, 14, 14, (3, 3), padding=(1, 1),
                  pool_kernel=(1, 1)), "square_n128", False),
    (ConvPoolCase("conv_strips", 12, 16, 136, 56, 56, (3, 3), padding=(1, 1),
                  pool_kernel=(1, 1)), "strip_n128", False),
    (ConvPoolCase("conv_narrow_odd", 4, 16, 64, 37, 71, (3, 3), padding=(1, 1),
                  pool_kernel=(1, 1)), "wide_n64", False),
    (ConvPoolCase("conv_split", 1, 512, 136, 14, 14, (3, 3), padding=(1, 1),
                  pool_kernel=(1, 1)), "square_n64", True),
    (ConvPoolCase("conv_nan_pad2", 2, 256, 128, 18, 20, (3, 3), padding=(2, 2),
                  pool_kernel=(1, 1)), "wide_n64", True),
]


@pytest.mark.parametrize("dtype", [*ALL_DTYPES, "3xtf32"], ids=lambda d: ALL_DTYPE_IDS.get(d, d))
@pytest.mark.parametrize("layout", ["dense", "channels_last", "every_other"])
def test_wgmma_without_a_pool_matches_float64(ext, choice, dtype, layout):
    """UNPOOLED_CASES through the automatic choice: the 3 x 3 wgmma variant of the dtype
    ("3xtf32": float32 with allow_tf32 = False, tiled_3xtf32_wgmma, whose N = 64 tiles take
    the 128-channel shapes, at the fp32 tolerance), the tile and split listed, the output
    against float64 (NaN and inf where float64 has them), in the input's layout and, for
    channels-last, written so by the kernel (no re-layout launch), and, where the variant reads
    weights packed ahead of time, those giving the same output bit for bit."""
    accurate = dtype == "3xtf32"
    dtype = torch.float32 if accurate else dtype
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    seed = random.randrange(2**31)
    tiles = []
    for i, (case, tile, split) in enumerate(UNPOOLED_CASES):
        name, tolerance, x, weight, bias = wgmma_layout_operands(case, layout, dtype, seed + i)
        if accurate:
            name, tolerance = "tiled_3xtf32_wgmma", FP32_TOLERANCE
            tile = tile.replace("n128", "n64")
        if case.name == "conv_nan_pad2":
            inject_nan_and_inf(x)
        with cudnn_tf32(not accurate):
            assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == name
            out, kernels = run_listing_kernels(lambda: run_op(ext, case, x, weight, bias))
        check_output_layout(out, layout, kernels, case)
        plan = kernel_choice.variant_plan(choice, case, name, ELEMENT_OF[dtype], device)
        assert plan["wgmma_tile"] == tile, (case.name, plan)
        assert (plan["wgmma_split"] > 1) == split, (case.name, plan)
        tiles.append(plan["wgmma_tile"])
        if not accurate and plan["takes_packed_weight"]:
            packed = ext.conv2d_relu_maxpool_pack_weight(weight)
            torch.testing.assert_close(run_op(ext, case, x, weight, bias, -1, packed), out,
                                       rtol=0, atol=0, equal_nan=True)
        check_float64(out, reference(case, x, weight, bias), tolerance, seed, case,
                      special=case.name == "conv_nan_pad2")
    assert {"wide_n64", "square_n64"} <= set(tiles) and any("strip" in t for t in tiles)


@pytest.mark.parametrize("dtype", [*ALL_DTYPES, "3xtf32"], ids=lambda d: ALL_DTYPE_IDS.get(d, d))
@pytest.mark.parametrize("layout", ["dense", "channels_last"])
def test_wgmma_without_a_pool_on_few_input_channels(ext, dtype, layout):
    """The 3 x 3 kernel without a pool on RGB-like inputs (3 or 4 channels: VGG's first layer,
    which the automatic choice runs on it in 16 bits), the variant named: odd widths (scalar
    halo loads, rows that are not whole 8-output vectors), 64 and 48 output channels, padding
    1 and 0. Against float64, the output in the input's layout with no re-layout launch.
    "3xtf32": float32 with allow_tf32 = False (tiled_3xtf32_wgmma) at the fp32 tolerance."""
    accurate = dtype == "3xtf32"
    dtype = torch.float32 if accurate else dtype
    cases = [ConvPoolCase("rgb_conv", 2, 3, 64, 40, 72, (3, 3), padding=(1, 1),
                          pool_kernel=(1, 1)),
             ConvPoolCase("rgb_conv_odd", 3, 4, 48, 23, 37, (3, 3), pool_kernel=(1, 1))]
    seed = random.randrange(2**31)
    for i, case in enumerate(cases):
        name, tolerance, x, weight, bias = wgmma_layout_operands(case, layout, dtype, seed + i)
        if accurate:
            name, tolerance = "tiled_3xtf32_wgmma", FP32_TOLERANCE
        with cudnn_tf32(not accurate):
            out, kernels = run_listing_kernels(lambda: run_op(
                ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[name]))
        assert any("conv_pool_wgmma_kernel" in k for k in kernels), kernels
        check_output_layout(out, layout, kernels, case)
        check_float64(out, reference(case, x, weight, bias), tolerance, seed, case)


# Pooled widths that are a multiple of 4 (rgb_stem's 112, VGG's 56 and 28) on every tile, with
# the tile the choice gives each: wide N = 128, square N = 128, strips (whose second piece
# starts a run), the wide N = 64 tile two blocks per SM with a last tile past the width (36 of
# 48 columns) and rows past the height, and the square N = 64 one; output-channel tails (136
# and 48 channels).
EVERY_POOLED_TILE = [
    (ConvPoolCase("runs_wide", 20, 16, 136, 10, 66, (3, 3)), "wide_n128"),
    (ConvPoolCase("runs_square", 40, 16, 136, 16, 16, (3, 3), padding=(1, 1)), "square_n128"),
    (ConvPoolCase("runs_strip", 12, 16, 136, 24, 56, (3, 3), padding=(1, 1)), "strip_n128"),
    (ConvPoolCase("runs_narrow", 3, 3, 64, 40, 72, (3, 3), padding=(1, 1)), "wide_n64"),
    (ConvPoolCase("runs_narrow_square", 16, 8, 48, 40, 40, (3, 3), padding=(1, 1)), "square_n64"),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
def test_wgmma_output_rows_in_runs_of_4(ext, choice, dtype):
    """EVERY_POOLED_TILE: the epilogue stores runs of 4 pooled outputs as one vector
    (p.vector_out) on every tile. Against float64."""
    seed = random.randrange(2**31)
    for i, (case, tile) in enumerate(EVERY_POOLED_TILE):
        name, tolerance, (x, weight, bias) = wgmma_run(dtype, *make_operands(case, seed + i))
        assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == \
            automatic_wgmma_or_stem(ext, case, dtype, x, weight, bias, name)
        assert wgmma_tile(choice, case, dtype) == tile, case.name
        out = run_op(ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[name])
        assert out.shape[-1] % 4 == 0, out.shape
        torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                                   **tolerance, msg=lambda m: f"seed {seed} {case}: {m}")


@pytest.mark.parametrize("dtype", [*ALL_DTYPES, "3xtf32"], ids=lambda d: ALL_DTYPE_IDS.get(d, d))
def test_wgmma_pooled_channels_last_outputs_on_every_tile(ext, choice, dtype):
    """Channels-last inputs give channels-last outputs that the pooled tiles write themselves
    (store_pooled_channels_last: 16 bytes of channels a lane), with no re-layout launch:
    EVERY_POOLED_TILE, plus output channels that are not a multiple of a store's 4 or 8
    (130: element stores) and NaN / inf inputs. "3xtf32": float32 with allow_tf32 = False
    (tiled_3xtf32_wgmma), at the fp32 tolerance. Against float64."""
    accurate = dtype == "3xtf32"
    dtype = torch.float32 if accurate else dtype
    cases = [case for case, _ in EVERY_POOLED_TILE] + [
        ConvPoolCase("cl_odd_channels", 6, 16, 130, 20, 34, (3, 3), padding=(1, 1)),
        ConvPoolCase("cl_nan", 4, 24, 72, 18, 30, (3, 3), padding=(2, 2))]
    seed = random.randrange(2**31)
    for i, case in enumerate(cases):
        name, tolerance, x, weight, bias = wgmma_layout_operands(case, "channels_last", dtype,
                                                                 seed + i)
        if accurate:
            name, tolerance = "tiled_3xtf32_wgmma", FP32_TOLERANCE
        if case.name == "cl_nan":
            inject_nan_and_inf(x)
        with cudnn_tf32(not accurate):
            out, kernels = run_listing_kernels(lambda: run_op(
                ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[name]))
        assert any("conv_pool_wgmma_kernel" in k for k in kernels), kernels
        check_output_layout(out, "channels_last", kernels, case)
        check_float64(out, reference(case, x, weight, bias), tolerance, seed, case,
                      special=case.name == "cl_nan")


def automatic_wgmma_or_stem(ext, case, dtype, x, weight, bias, wgmma: str) -> str:
    """What the automatic choice runs on Hopper for a wgmma-geometry layer: the stem kernel
    where it runs and the layer has 17-64 output channels from at most 4 input channels, else
    `wgmma`.
    The wgmma tests below then name their variant, so that its tiles stay covered."""
    stem = stem_variant(dtype)
    takes_stem = (case.out_channels > 16 and case.in_channels <= 4
                  and variant_runs(ext, case, x, weight, bias, stem))
    return stem if takes_stem else wgmma


def kernels_run(fn) -> list:
    """The kernels (demangled names) that `fn()` launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def run_listing_kernels(fn) -> tuple:
    """(fn()'s result, the kernels (demangled names) it launched)."""
    results = []
    kernels = kernels_run(lambda: results.append(fn()))
    return results[0], kernels


def wgmma_kernels_run(fn) -> list:
    """The wgmma kernel instances (demangled names) that `fn()` launches."""
    return [name for name in kernels_run(fn) if "conv_pool_wgmma_kernel" in name]


def check_output_layout(out: torch.Tensor, layout: str, kernels: list, case) -> None:
    """The output's layout follows the input's (channels-last in, channels-last out), written
    so by the kernel itself: no re-layout launch among `kernels` (kernels_run)."""
    memory_format = (torch.channels_last if layout == "channels_last"
                     else torch.contiguous_format)
    assert out.is_contiguous(memory_format=memory_format), (case.name, out.stride())
    assert not any("to_channels_last" in k for k in kernels), (case.name, kernels)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
def test_wgmma_narrow_layers_take_every_halo_load(ext, choice, dtype):
    """Layers of at most 64 output channels (rgb_stem, VGG block 1) run an N = 64 tile two
    blocks per SM, the 8 x 32 one or the 16 x 16 one (whole 14 x 14 or 13 x 13 images),
    through each halo loader: row or plane vectors, channels-last pixel vectors, and scalar
    loads (an odd width; channels-last with 3 channels). The 16-bit two-blocks instance has
    no scalar loads (kScalarHalo): those inputs run on its one-block-per-SM twin, the
    instance whose tile ends in `true>`; so does, in TF32, a square layer of too few tiles to
    pair blocks (at most 128). The 16-bit square tile runs one block per SM (no twin) and,
    alone of these, reads weights packed ahead of time."""
    half = dtype != torch.float32
    tf32 = not half
    cases = [(ConvPoolCase("narrow_rows", 2, 3, 64, 34, 68, (3, 3), padding=(1, 1)), "dense",
              "wide_n64", False),
             (ConvPoolCase("narrow_odd_width", 2, 3, 64, 34, 67, (3, 3), padding=(1, 1)),
              "dense", "wide_n64", half),
             (ConvPoolCase("narrow_pixels", 2, 16, 48, 30, 66, (3, 3)), "channels_last",
              "wide_n64", False),
             (ConvPoolCase("narrow_last_c3", 3, 3, 40, 20, 130, (3, 3), padding=(1, 1)),
              "channels_last", "wide_n64", half),
             (ConvPoolCase("narrow_every_other", 2, 24, 64, 18, 64, (3, 3)), "every_other",
              "wide_n64", False),
             (ConvPoolCase("narrow_squares", 130, 3, 64, 14, 14, (3, 3), padding=(1, 1)),
              "dense", "square_n64", False),
             (ConvPoolCase("narrow_squares_odd", 130, 3, 64, 13, 13, (3, 3), padding=(1, 1)),
              "dense", "square_n64", False),
             (ConvPoolCase("narrow_squares_pixels", 130, 8, 48, 14, 14, (3, 3),
                           padding=(1, 1)), "channels_last", "square_n64", False),
             (ConvPoolCase("narrow_squares_every_other", 130, 8, 64, 14, 14, (3, 3),
                           padding=(1, 1)), "every_other", "square_n64", False),
             (ConvPoolCase("narrow_few_squares", 128, 3, 64, 14, 14, (3, 3), padding=(1, 1)),
              "dense", "square_n64", tf32)]
    seed = random.randrange(2**31)
    for i, (case, layout, tile_name, twin) in enumerate(cases):
        name, tolerance, x, weight, bias = wgmma_layout_operands(case, layout, dtype, seed + i)
        assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == \
            automatic_wgmma_or_stem(ext, case, dtype, x, weight, bias, name)
        assert wgmma_tile(choice, case, dtype) == tile_name, case.name
        assert kernel_choice.takes_packed_weight(choice, case, ELEMENT_OF[dtype]) == \
            (half and tile_name == "square_n64"), case.name
        config = ext.conv2d_relu_maxpool_variants()[name]
        outs = []
        kernels = wgmma_kernels_run(
            lambda: outs.append(run_op(ext, case, x, weight, bias, config)))
        torch.testing.assert_close(outs[0].double().cpu(), reference(case, x, weight, bias),
                                   **tolerance, msg=lambda m: f"seed {seed} {case}: {m}")
        assert len(kernels) == 1, kernels
        # WgmmaTile<operands, 8, 32 | 16, 16, 64, (TileShape)0, kOneBlockTwin>
        tile = re.search(r", (8, 32|16, 16), 64, [^,]*TileShape\)0, (true|false), [12]>",
                         kernels[0])
        assert tile, kernels
        assert tile.group(1) == ("8, 32" if tile_name == "wide_n64" else "16, 16"), kernels[0]
        assert (tile.group(2) == "true") == twin, (case.name, kernels[0])


# Weights packed ahead of time (conv2d_relu_maxpool_pack_weight): the 16 x 16 tile over whole
# 14 x 14 images, the strips, and the N = 64 tiles of layers of at most 64 channels, 8 x 32
# and 16 x 16 (the two-blocks-per-SM instances and their twins pack in the kernel whatever they
# are given: `ignored_by`; the 16-bit 16 x 16 one is a one-block instance that reads them);
# channel tails in and out (C not a multiple of 8 or 16, K of 128).
# The first two with more than 64 tiles of 128 channels (fewer would run 64-channel blocks,
# which pack their own weights: kFewTiles, test_wgmma_few_tiles_...).
PACKED_CASES = [
    (ConvPoolCase("packed_whole_images", 36, 40, 136, 14, 14, (3, 3), padding=(1, 1)), ()),
    (ConvPoolCase("packed_strips", 9, 24, 130, 22, 45, (3, 3)), ()),
    (ConvPoolCase("packed_wide_n64", 2, 20, 48, 18, 64, (3, 3)), tuple(ALL_DTYPES)),
    (ConvPoolCase("packed_square_n64", 2, 12, 64, 14, 14, (3, 3), padding=(1, 1)),
     (torch.float32,)),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["dense", "channels_last", "strided_weight"])
def test_packed_weights_give_the_same_output_bit_for_bit(ext, dtype, layout):
    """The op with packed_weight = pack_weight(weight) runs the same arithmetic as without it
    (the kernel reads the same staged bytes), so the outputs are equal bit for bit; and it
    really reads packed_weight: packed from 2 * weight (exact), the output is the one of 2 *
    weight, except on the instance that ignores packed weights."""
    seed = random.randrange(2**31)
    for i, (case, ignored_by) in enumerate(PACKED_CASES):
        x, weight, bias = make_operands(case, seed + i)
        name, tolerance, (x, weight, bias) = wgmma_run(dtype, x, weight, bias)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        elif layout == "strided_weight":  # the packing's element-by-element path
            weight = weight.transpose(2, 3).contiguous().transpose(2, 3)
        assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args()) == \
            automatic_3x3(case, name), case.name
        config = ext.conv2d_relu_maxpool_variants()[name]
        packed = ext.conv2d_relu_maxpool_pack_weight(weight)
        assert packed.dim() == 1 and packed.numel() > 0 and packed.dtype == dtype
        out = run_op(ext, case, x, weight, bias, config)
        torch.testing.assert_close(out.double().cpu(), reference(case, x, weight, bias),
                                   **tolerance, msg=lambda m: f"seed {seed} {case}: {m}")
        assert torch.equal(run_op(ext, case, x, weight, bias, config, packed), out), case.name
        doubled = run_op(ext, case, x, weight, bias, config,
                         ext.conv2d_relu_maxpool_pack_weight(2 * weight))
        expected = (out if dtype in ignored_by
                    else run_op(ext, case, x, 2 * weight, bias, config))
        assert torch.equal(doubled, expected), case.name


def test_packed_weights_are_ignored_where_no_wgmma_kernel_runs(ext):
    """allow_tf32=False (tiled_3xtf32), an explicit other variant, and a weight the wgmma
    kernels do not take (5 x 5: the packing is empty) all run as without packed_weight."""
    if not on_hopper():
        pytest.skip("the wgmma kernels need a Hopper GPU")
    case, _ = PACKED_CASES[0]
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    wrong = ext.conv2d_relu_maxpool_pack_weight(2 * weight)  # would show if it were read
    with cudnn_tf32(False):
        assert torch.equal(run_op(ext, case, x, weight, bias, -1, wrong),
                           run_op(ext, case, x, weight, bias))
    direct = ext.conv2d_relu_maxpool_variants()["direct"]
    assert torch.equal(run_op(ext, case, x, weight, bias, direct, wrong),
                       run_op(ext, case, x, weight, bias, direct))
    case5 = find_case("kernel5")
    x5, weight5, bias5 = make_operands(case5, seed=1)
    empty = ext.conv2d_relu_maxpool_pack_weight(weight5)
    assert empty.numel() == 0 and empty.dtype == weight5.dtype
    assert torch.equal(run_op(ext, case5, x5, weight5, bias5, -1, empty),
                       run_op(ext, case5, x5, weight5, bias5))


@pytest.mark.parametrize("change,message", [
    ("other_shape", r"packed_weight must be conv2d_relu_maxpool_pack_weight\(weight\): a 1-D "
                    r"tensor of \d+ elements for weight of shape \[136, 40, 3, 3\]"),
    ("dtype", "packed_weight must be float32 like x, got Half"),
    ("cpu", "packed_weight must be on x's device cuda:0, got cpu"),
    ("two_d", "packed_weight must be conv2d_relu_maxpool_pack_weight"),
    ("offset", "packed_weight must be conv2d_relu_maxpool_pack_weight\\(weight\\): contiguous "
               "and 16-byte aligned, got a view with offset 1"),
])
def test_a_packed_weight_that_does_not_fit_gets_a_clear_error(ext, change, message):
    if not on_hopper():
        pytest.skip("the wgmma kernels need a Hopper GPU")
    case, _ = PACKED_CASES[0]
    x, weight, bias = make_operands(case, seed=random.randrange(2**31))
    packed = ext.conv2d_relu_maxpool_pack_weight(weight)
    bad = {"other_shape": lambda: ext.conv2d_relu_maxpool_pack_weight(weight[:, :24]),
           "dtype": lambda: packed.half(),
           "cpu": lambda: packed.cpu(),
           "two_d": lambda: packed.view(-1, 4),
           "offset": lambda: torch.cat([packed[:1], packed])[1:]}[change]()
    with pytest.raises(RuntimeError, match=message):
        run_op(ext, case, x, weight, bias, -1, bad)


def test_pack_weight_refuses_what_it_cannot_pack(ext):
    with pytest.raises(RuntimeError,
                       match="weight must be float32, float16 or bfloat16, got Double"):
        ext.conv2d_relu_maxpool_pack_weight(torch.randn(8, 4, 3, 3, device="cuda").double())
    with pytest.raises(RuntimeError, match="weight must be 4-D"):
        ext.conv2d_relu_maxpool_pack_weight(torch.randn(8, 36, device="cuda"))
    with pytest.raises(RuntimeError, match="weight must have out_channels, in_channels, kH and kW"):
        ext.conv2d_relu_maxpool_pack_weight(torch.randn(8, 0, 3, 3, device="cuda"))


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", GRID, ids=lambda c: c.name)
def test_16bit_every_variant_matches_float64_and_pytorch(ext, choice, case, dtype):
    x, weight, bias = make_operands_16bit(case, random.randrange(2**31), dtype)
    chosen = ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args())
    fits_tile = case.pool_kernel[0] <= 8 and case.pool_kernel[1] <= 32
    wgmma = on_hopper() and kernel_choice.wgmma_geometry(case)
    # small_16bit and tiled_16bit_flat are small_fp32 and tiled_tf32_flat for 16-bit operands:
    # the same limits (tiled_16bit_flat's 16-bit weights also fit where some float32 ones do
    # not), and the same order in the automatic choice off the wgmma geometry.
    x32, weight32, bias32 = make_operands(case, 0)
    small = variant_runs(ext, case, x, weight, bias, "small_16bit")
    flat = variant_runs(ext, case, x, weight, bias, "tiled_16bit_flat")
    assert small == variant_runs(ext, case, x32, weight32, bias32, "small_fp32")
    assert flat or not variant_runs(ext, case, x32, weight32, bias32, "tiled_tf32_flat")
    stem = (on_hopper() and case.out_channels > 16 and case.in_channels <= 4
            and variant_runs(ext, case, x, weight, bias, "stem_16bit"))
    # On Hopper the flat kernel's wgmma mainloop where its blocks of 64 run one per SM.
    device = kernel_choice.device_of(choice, torch.cuda.current_device())
    flat_wgmma = (flat and on_hopper() and case.out_channels > 32 and
                  kernel_choice.flat_tiling(choice, case, ELEMENT_OF[dtype], device) ==
                  "n64_warp32x32" and
                  variant_runs(ext, case, x, weight, bias, "tiled_16bit_flat_wgmma"))
    # Everything else on Hopper: the general kernel (general_wgmma runs every GRID geometry).
    general = on_hopper() and variant_runs(ext, case, x, weight, bias, "general_wgmma")
    assert chosen == ("stem_16bit" if stem else
                      "tiled_16bit_wgmma" if wgmma else
                      "small_16bit" if small else
                      "general_wgmma"
                      if general and kernel_choice.few_channel_general(case, device,
                                                                       ELEMENT_OF[dtype]) else
                      ("tiled_16bit_flat_wgmma" if flat_wgmma else "tiled_16bit_flat")
                      if flat and case.in_channels < 8 and not kernel_choice.fast_path(case)
                      else "general_wgmma" if general
                      else "tiled_16bit_mma" if fits_tile else "direct_16bit")
    check_16bit(run_op(ext, case, x, weight, bias), x, case, weight, bias, dtype, "auto")
    ran = []
    for row in ext.conv2d_relu_maxpool_variant_table():  # each variant by its 16-bit name
        name, config = row["names"].get(DTYPE_NAMES[dtype], row["name"]), row["id"]
        if not variant_runs(ext, case, x, weight, bias, name):
            if name == "tiled_16bit_mma":  # only a pooling window beyond the tile stops it
                assert not fits_tile
            if name == "tiled_16bit_wgmma":  # Hopper and the 3x3 / 2x2 geometry
                assert not wgmma
            continue
        check_16bit(run_op(ext, case, x, weight, bias, config), x, case, weight, bias, dtype,
                    name)
        ran.append(name)
    # Only the 16-bit variants and the general kernel (both element types) take 16-bit inputs,
    # the direct one takes every shape, and on Hopper so does the general one.
    assert set(ran) <= set(SIXTEEN_BIT_VARIANTS) | {"general_wgmma"} and "direct_16bit" in ran
    assert ("general_wgmma" in ran) == on_hopper()


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_float32_only_variant_is_refused_by_name(ext, dtype):
    case = find_case("padding1")
    x, weight, bias = make_operands_16bit(case, 0, dtype)
    config = ext.conv2d_relu_maxpool_variants()["tiled_3xtf32"]
    with pytest.raises(RuntimeError, match=r"config 3 \(tiled_3xtf32\) cannot run this shape: "
                                           r"needs float32 input"):
        run_op(ext, case, x, weight, bias, config)


def test_a_16bit_name_runs_its_float32_twin_on_float32_input(ext):
    """tiled_16bit_mma and tiled_tf32 are one variant id: given float32 input, the float32
    member runs (TF32 mma.sync), and matches float64."""
    case = find_case("padding1")
    seed = random.randrange(2**31)
    x, weight, bias = make_operands(case, seed)
    config = ext.conv2d_relu_maxpool_variants()["tiled_16bit_mma"]
    assert config == ext.conv2d_relu_maxpool_variants()["tiled_tf32"]
    assert ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args(),
                                          config) == "tiled_tf32"
    torch.testing.assert_close(run_op(ext, case, x, weight, bias, config).double().cpu(),
                               reference(case, x, weight, bias), **TF32_TOLERANCE,
                               msg=lambda m: f"seed {seed}: {m}")


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_random_configurations(ext, dtype):
    from utils.suite import random_cases
    seed = random.randrange(2**31)
    for case in random_cases(random.Random(seed), 12):
        x, weight, bias = make_operands_16bit(case, seed, dtype)
        for name in SIXTEEN_BIT_VARIANTS:
            if not variant_runs(ext, case, x, weight, bias, name):
                continue
            config = ext.conv2d_relu_maxpool_variants()[name]
            check_16bit(run_op(ext, case, x, weight, bias, config), x, case, weight, bias, dtype,
                        f"seed {seed} {case} {name}")


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("variant", SIXTEEN_BIT_VARIANTS)
@pytest.mark.parametrize("layout", ["channels_last", "sliced", "transposed_hw"])
def test_16bit_non_contiguous_inputs_are_handled(ext, layout, variant, dtype):
    case = case_for_variant(find_case("c13_k19_unaligned"), variant)
    x, weight, bias = make_operands_16bit(case, random.randrange(2**31), dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
        weight = weight.to(memory_format=torch.channels_last)
    elif layout == "sliced":
        wide = torch.randn(case.batch, case.in_channels, case.height, 2 * case.width,
                           device="cuda").to(dtype)
        x = wide[:, :, :, ::2]
    else:
        x = x.transpose(2, 3).contiguous().transpose(2, 3)
    assert not x.is_contiguous()
    require_runs(ext, case, x, weight, bias, variant)
    config = ext.conv2d_relu_maxpool_variants()[variant]
    check_16bit(run_op(ext, case, x, weight, bias, config), x, case, weight, bias, dtype,
                f"{layout} {variant}")


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_channels_last_default_channels(ext, dtype):
    # 64 input channels (4 chunks of 16), 128 output channels: the 128-channel block.
    case = find_case("default_small")
    x, weight, bias = make_operands_16bit(case, random.randrange(2**31), dtype)
    x = x.to(memory_format=torch.channels_last)
    check_16bit(run_op(ext, case, x, weight, bias), x, case, weight, bias, dtype, "auto")


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("config_name,case_name", [
    ("auto", "padding1"), ("direct_16bit", "padding1"), ("tiled_16bit_mma", "padding1"),
    ("tiled_16bit_mma", "kernel5"), ("tiled_16bit_mma", "c13_k19_unaligned"),
    ("small_16bit", "kernel5"), ("tiled_16bit_flat", "kernel5"),
    ("tiled_16bit_flat_wgmma", "kernel5"),
    # wgmma: 8-byte row loads (width 20) and the strided fallback (width 23, 13 channels).
    ("tiled_16bit_wgmma", "padding1"), ("tiled_16bit_wgmma", "c13_k19_unaligned")])
def test_16bit_nan_and_inf_propagate_like_pytorch(ext, config_name, case_name, dtype):
    case = find_case(case_name)
    x, weight, bias = make_operands_16bit(case, random.randrange(2**31), dtype)
    if config_name != "auto":
        require_runs(ext, case, x, weight, bias, config_name)
    inject_nan_and_inf(x)
    expected = reference(case, x, weight, bias)
    assert expected.isnan().any() and expected.isinf().any()
    config = -1 if config_name == "auto" else ext.conv2d_relu_maxpool_variants()[config_name]
    out = run_op(ext, case, x, weight, bias, config)
    assert out.dtype == dtype
    out = out.double().cpu()
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out.isinf(), expected.isinf())
    finite = expected.isfinite()
    torch.testing.assert_close(out[finite], expected[finite], **SIXTEEN_BIT_TOLERANCE[dtype])
    # Not compared with cuDNN's 16-bit result: its algorithm (e.g. Winograd) may spread a NaN
    # or an infinity to neighbouring outputs; the float64 CPU result is the definition.


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("variant", SIXTEEN_BIT_VARIANTS)
def test_16bit_all_negative_preactivations_give_zeros(ext, variant, dtype):
    case = case_for_variant(find_case("padding1"), variant)
    x, weight, bias = make_operands_16bit(case, random.randrange(2**31), dtype)
    x = x.abs() + 0.1
    weight = -weight.abs()
    bias = -bias.abs() - 0.1
    require_runs(ext, case, x, weight, bias, variant)
    out = run_op(ext, case, x, weight, bias, ext.conv2d_relu_maxpool_variants()[variant])
    assert torch.equal(out, torch.zeros_like(out)) and out.dtype == dtype


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_large_magnitudes(ext, dtype):
    # x * 100: outputs up to a few thousand, still far from float16's 65504.
    case = find_case("c132_long_reduction")
    x, weight, bias = make_operands_16bit(case, random.randrange(2**31), dtype)
    x = x * 100
    expected = reference(case, x, weight, bias)
    out = run_op(ext, case, x, weight, bias)
    scale = expected.abs().max().item()
    tolerance = SIXTEEN_BIT_TOLERANCE[dtype]
    torch.testing.assert_close(out.double().cpu(), expected, atol=tolerance["atol"] * scale,
                               rtol=tolerance["rtol"])


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_repeated_calls_are_bitwise_equal_and_empty_batch_works(ext, dtype):
    case = find_case("default_small")
    x, weight, bias = make_operands_16bit(case, random.randrange(2**31), dtype)
    assert torch.equal(run_op(ext, case, x, weight, bias), run_op(ext, case, x, weight, bias))
    empty = run_op(ext, case, x[:0], weight, bias)
    assert empty.shape == (0, case.out_channels, *case.pooled_out()) and empty.dtype == dtype


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_mixed_dtypes_give_a_clear_error_on_the_gpu(ext, dtype):
    case = find_case("padding1")
    x, weight, bias = make_operands_16bit(case, 0, dtype)
    name = DTYPE_IDS[dtype]
    with pytest.raises(RuntimeError, match=f"weight must be {name} like x, got Float"):
        run_op(ext, case, x, weight.float(), bias)
    with pytest.raises(RuntimeError, match=f"bias must be {name} like x, got Float"):
        run_op(ext, case, x, weight, bias.float())
    with pytest.raises(RuntimeError, match="x must be float32, float16 or bfloat16, got Double"):
        run_op(ext, case, x.double(), weight.double(), bias.double())


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_default_problem_matches_pytorch_and_uses_wgmma_on_hopper(ext, dtype):
    # The default problem at batch 8: 4 chunks of 16 channels, persistent blocks with several
    # tiles each (1024 tiles), 8-byte halo loads (width 128).
    case = SUITE[0]
    generator = torch.Generator(device="cpu").manual_seed(random.randrange(2**31))
    x = torch.randn(8, *case.input_shape()[1:], generator=generator).to("cuda", dtype)
    weight = (torch.randn(case.weight_shape(), generator=generator) / 24).to("cuda", dtype)
    bias = torch.randn(case.out_channels, generator=generator).to("cuda", dtype)
    chosen = ext.conv2d_relu_maxpool_choose(x, weight, bias, *case.op_args())
    assert chosen == ("tiled_16bit_wgmma" if on_hopper() else "tiled_16bit_mma")
    out = run_op(ext, case, x, weight, bias)
    assert out.dtype == dtype
    torch.testing.assert_close(out, pytorch_16bit(case, x, weight, bias),
                               **SIXTEEN_BIT_TOLERANCE[dtype])


@pytest.mark.parametrize("move", ["half", "bfloat16"])
def test_16bit_model_new_matches_model_after_half_or_bfloat16(move):
    from model import Model
    from model_new import ModelNew
    torch.manual_seed(random.randrange(2**31))
    args = (32, 64, 3, 2)
    model = getattr(Model(*args).cuda(), move)()
    fused = getattr(ModelNew(*args).cuda(), move)()
    fused.load_state_dict(model.state_dict())
    dtype = model.conv.weight.dtype
    x = torch.randn(4, 32, 40, 40, device="cuda").to(dtype)
    with torch.no_grad():
        out = fused(x)
        expected = model(x)
    assert out.dtype == dtype == expected.dtype
    torch.testing.assert_close(out, expected, **SIXTEEN_BIT_TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", SIXTEEN_BIT_DTYPES, ids=DTYPE_IDS.get)
def test_16bit_torch_compile_of_model_new(dtype):
    from model import Model
    from model_new import ModelNew
    torch._dynamo.reset()
    torch.manual_seed(random.randrange(2**31))
    args = (16, 24, 3, 2)
    model = Model(*args).cuda().to(dtype)
    fused = ModelNew(*args).cuda().to(dtype)
    fused.load_state_dict(model.state_dict())
    compiled = torch.compile(fused, fullgraph=True)
    x = torch.randn(2, 16, 30, 30, device="cuda").to(dtype)
    with torch.no_grad():
        out = compiled(x)
        assert out.dtype == dtype
        assert torch.equal(out, fused(x))  # the same kernel as eager
        torch.testing.assert_close(out, model(x), **SIXTEEN_BIT_TOLERANCE[dtype])


@needs_60_gib
def test_16bit_input_over_2_pow_31_elements(ext):
    """64-bit indexing in the packing and main kernels: x has 2.15e9 float16 elements."""
    case = ConvPoolCase("huge16", 2, 16, 8, 8192, 8200, (3, 3), padding=(1, 1))
    assert case.input_elements() > 2**31
    torch.manual_seed(random.randrange(2**31))
    x = torch.randn(case.input_shape(), device="cuda", dtype=torch.float16)
    weight = (torch.randn(case.weight_shape(), device="cuda") / 12).half()
    bias = torch.randn(case.out_channels, device="cuda").half()
    out = run_op(ext, case, x, weight, bias)
    expected = pytorch_16bit(case, x, weight, bias)
    tolerance = SIXTEEN_BIT_TOLERANCE[torch.float16]
    torch.testing.assert_close(out, expected, **tolerance)
    # The last image's last rows are where 32-bit offsets would have wrapped.
    torch.testing.assert_close(out[-1, :, -8:], expected[-1, :, -8:], **tolerance)
