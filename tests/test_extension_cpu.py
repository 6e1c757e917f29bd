"""The cuda_extension module and its argument checks, on CPU tensors (no GPU needed).

The binding checks shapes, dtypes and parameters before devices, so every bad-input error is
reachable on a CPU-only machine; a valid CPU input reaches the last check, "must be a CUDA
tensor". Each case runs through conv2d_relu_maxpool_forward, conv2d_relu_maxpool_choose and
conv2d_relu_maxpool_plan (they share the checks). Inputs are fresh random tensors every run.
"""
import re

import pytest
import torch

OPS = ["conv2d_relu_maxpool_forward", "conv2d_relu_maxpool_choose", "conv2d_relu_maxpool_plan"]


@pytest.fixture(params=OPS, ids=["forward", "choose", "plan"])
def op(request, extension):
    return getattr(extension, request.param)


def valid_args(**overrides):
    """A valid call: x (2, 3, 12, 12), weight (8, 3, 3, 3), bias (8,), 2x2 pool."""
    args = dict(
        x=torch.randn(2, 3, 12, 12),
        weight=torch.randn(8, 3, 3, 3),
        bias=torch.randn(8),
        stride=[1, 1], padding=[0, 0], dilation=[1, 1],
        pool_kernel=[2, 2], pool_stride=[], pool_padding=[0, 0],
        ceil_mode=False, config=-1,
    )
    args.update(overrides)
    return args


def raises(message: str):
    """The error must start with `message`, literally: "stride ..." is not "pool_stride ..."."""
    return pytest.raises(RuntimeError, match="^" + re.escape(message))


NOT_CUDA = "x must be a CUDA tensor, got device cpu"


# --- the module ---------------------------------------------------------------------------------

def test_module_exposes_forward_choose_and_variants(extension):
    for name in ("conv2d_relu_maxpool_forward", "conv2d_relu_maxpool_choose",
                 "conv2d_relu_maxpool_plan", "conv2d_relu_maxpool_variants",
                 "conv2d_relu_maxpool_variant_table"):
        assert callable(getattr(extension, name, None)), f"cuda_extension.{name} is missing"


def test_registered_bindings_lists_conv_relu_maxpool(extension):
    assert "conv_relu_maxpool" in list(extension.registered_bindings)


def test_variants_map_names_to_ids_from_zero(extension):
    variants = extension.conv2d_relu_maxpool_variants()
    assert variants["direct"] == 0, "the direct fallback must stay config 0"
    table = extension.conv2d_relu_maxpool_variant_table()
    assert sorted(set(variants.values())) == list(range(len(table)))
    assert all(isinstance(name, str) and name for name in variants)
    # Every member's name, and nothing else: a dtype twin's two names share its id.
    assert variants == {name: row["id"] for row in table for name in row["names"].values()}
    assert variants["direct_16bit"] == 0


@pytest.mark.parametrize("side", ["above", "below"])
def test_config_out_of_range_names_the_valid_range(op, extension, side):
    count = len(extension.conv2d_relu_maxpool_variant_table())
    config = count if side == "above" else -2
    with raises(f"config must be -1 (auto) or a variant id in [0, {count - 1}], got {config}"):
        op(**valid_args(config=config))


@pytest.mark.parametrize("config", [-1, 0])
def test_valid_cpu_input_is_refused_as_not_cuda(op, config):
    with raises(NOT_CUDA):
        op(**valid_args(config=config))


def test_valid_cpu_input_without_bias_is_refused_as_not_cuda(op):
    with raises(NOT_CUDA):
        op(**valid_args(bias=None))


@pytest.mark.parametrize("layout", ["channels_last", "transposed_hw"])
def test_strided_input_passes_the_checks(op, layout):
    x = torch.randn(2, 3, 12, 12)
    x = x.to(memory_format=torch.channels_last) if layout == "channels_last" else x.transpose(2, 3)
    with raises(NOT_CUDA):
        op(**valid_args(x=x))


# --- tensors: dtype, rank, channels, bias -------------------------------------------------------

@pytest.mark.parametrize("dtype,shown", [(torch.float64, "Double"), (torch.int32, "Int"),
                                         (torch.float8_e4m3fn, "Float8_e4m3fn")])
def test_x_of_an_unsupported_dtype_names_its_dtype(op, dtype, shown):
    x = torch.randn(2, 3, 12, 12).mul(4).to(dtype)
    with raises(f"x must be float32, float16 or bfloat16, got {shown}"):
        op(**valid_args(x=x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_16_bit_and_float32_inputs_pass_the_checks(op, dtype):
    args = valid_args()
    for name in ("x", "weight", "bias"):
        args[name] = args[name].to(dtype)
    with raises(NOT_CUDA):
        op(**args)


def test_16_bit_input_without_bias_passes_the_checks(op):
    with raises(NOT_CUDA):
        op(**valid_args(x=torch.randn(2, 3, 12, 12).half(),
                        weight=torch.randn(8, 3, 3, 3).half(), bias=None))


@pytest.mark.parametrize("argument,x_dtype,other_dtype,expected,shown", [
    ("weight", torch.float16, torch.float32, "float16", "Float"),
    ("weight", torch.bfloat16, torch.float16, "bfloat16", "Half"),
    ("weight", torch.float32, torch.bfloat16, "float32", "BFloat16"),
    ("weight", torch.float32, torch.float64, "float32", "Double"),
    ("bias", torch.float16, torch.float32, "float16", "Float"),
    ("bias", torch.bfloat16, torch.float16, "bfloat16", "Half"),
    ("bias", torch.float32, torch.float16, "float32", "Half"),
])
def test_weight_or_bias_of_another_dtype_than_x_names_both(op, argument, x_dtype, other_dtype,
                                                           expected, shown):
    tensors = dict(x=torch.randn(2, 3, 12, 12).to(x_dtype),
                   weight=torch.randn(8, 3, 3, 3).to(x_dtype), bias=torch.randn(8).to(x_dtype))
    tensors[argument] = tensors[argument].to(other_dtype)
    with raises(f"{argument} must be {expected} like x, got {shown}"):
        op(**valid_args(**tensors))


@pytest.mark.parametrize("shape", [(3, 12, 12), (2, 3, 1, 12, 12), (12,)])
def test_x_not_4d_names_its_shape(op, shape):
    x = torch.randn(shape)
    shown = "[" + ", ".join(map(str, shape)) + "]"
    with raises(f"x must be 4-D (N, C, H, W), got {len(shape)}-D with shape {shown}"):
        op(**valid_args(x=x))


@pytest.mark.parametrize("name,expected", [
    ("x", "x must be a 4-D tensor (N, C, H, W), got None"),
    ("weight", "weight must be a 4-D tensor (out_channels, in_channels, kH, kW), got None")])
def test_a_missing_x_or_weight_is_named(op, name, expected):
    with raises(expected):
        op(**valid_args(**{name: None}))


@pytest.mark.parametrize("shape", [(8, 3, 3), (8, 3, 3, 3, 1)])
def test_weight_not_4d_names_its_shape(op, shape):
    with raises(f"weight must be 4-D (out_channels, in_channels, kH, kW), got {len(shape)}-D"):
        op(**valid_args(weight=torch.randn(shape)))


@pytest.mark.parametrize("dtype,shown", [(torch.float64, "Double"), (torch.float16, "Half")])
def test_weight_not_float32_names_its_dtype(op, dtype, shown):
    with raises(f"weight must be float32 like x, got {shown}"):
        op(**valid_args(weight=torch.randn(8, 3, 3, 3, dtype=dtype)))


def test_channel_mismatch_names_both_counts(op):
    with raises("channel mismatch: x has 3 channels but weight expects 4 "
                "(weight shape [8, 4, 3, 3])"):
        op(**valid_args(x=torch.randn(2, 3, 12, 12), weight=torch.randn(8, 4, 3, 3)))


@pytest.mark.parametrize("x_channels,weight_channels,groups", [(4, 2, 2), (6, 1, 6)])
def test_grouped_weight_is_refused_as_unsupported_groups(op, x_channels, weight_channels, groups):
    with raises(f"groups other than 1 are not supported: weight expects {weight_channels} input "
                f"channels per group and x has {x_channels} (groups={groups})"):
        op(**valid_args(x=torch.randn(2, x_channels, 12, 12),
                        weight=torch.randn(8, weight_channels, 3, 3)))


def test_x_without_channels_is_refused(op):
    with raises("x must have at least 1 channel, got shape [2, 0, 12, 12]"):
        op(**valid_args(x=torch.randn(2, 0, 12, 12), weight=torch.randn(8, 0, 3, 3)))


@pytest.mark.parametrize("shape", [(0, 3, 3, 3), (8, 3, 0, 3), (8, 3, 3, 0)])
def test_empty_weight_dimension_is_refused(op, shape):
    with raises("weight must have out_channels, kH and kW >= 1"):
        op(**valid_args(weight=torch.randn(shape), bias=None))


@pytest.mark.parametrize("shape", [(7,), (9,), (1, 8), ()])
def test_bias_of_wrong_shape_names_out_channels(op, shape):
    shown = "[" + ", ".join(map(str, shape)) + "]"
    with raises(f"bias must be 1-D with out_channels = 8 elements, got shape {shown}"):
        op(**valid_args(bias=torch.randn(shape)))


@pytest.mark.parametrize("dtype,shown", [(torch.float64, "Double"), (torch.float16, "Half")])
def test_bias_not_float32_names_its_dtype(op, dtype, shown):
    with raises(f"bias must be float32 like x, got {shown}"):
        op(**valid_args(bias=torch.randn(8, dtype=dtype)))


# --- convolution and pooling parameters ---------------------------------------------------------

@pytest.mark.parametrize("name", ["stride", "dilation", "pool_kernel", "pool_stride"])
@pytest.mark.parametrize("value", [[0, 1], [2, -1], [0]])
def test_non_positive_parameter_is_refused(op, name, value):
    h, w = (value[0], value[0]) if len(value) == 1 else value
    with raises(f"{name} must be positive, got ({h}, {w})"):
        op(**valid_args(**{name: value}))


@pytest.mark.parametrize("name", ["padding", "pool_padding"])
@pytest.mark.parametrize("value", [[-1, 0], [0, -3]])
def test_negative_padding_is_refused(op, name, value):
    with raises(f"{name} must be non-negative, got ({value[0]}, {value[1]})"):
        op(**valid_args(**{name: value}))


@pytest.mark.parametrize("pool_kernel,pool_padding", [([2, 2], [2, 0]), ([3, 3], [0, 2]),
                                                      ([1, 1], [1, 1])])
def test_pool_padding_beyond_half_the_pool_kernel_is_refused(op, pool_kernel, pool_padding):
    with raises(f"pool_padding must be at most half of pool_kernel, got pool_padding "
                f"({pool_padding[0]}, {pool_padding[1]}) for pool_kernel "
                f"({pool_kernel[0]}, {pool_kernel[1]})"):
        op(**valid_args(pool_kernel=pool_kernel, pool_padding=pool_padding))


def test_pool_padding_of_exactly_half_the_pool_kernel_is_accepted(op):
    with raises(NOT_CUDA):
        op(**valid_args(pool_kernel=[3, 2], pool_padding=[1, 1]))


@pytest.mark.parametrize("kernel,padding,dilation", [(13, 0, 1), (3, 0, 6), (15, 1, 1)])
def test_kernel_larger_than_padded_input_leaves_no_convolution_output(op, kernel, padding,
                                                                     dilation):
    with raises("convolution output is smaller than 1 element: input 12x12"):
        op(**valid_args(weight=torch.randn(8, 3, kernel, kernel), padding=[padding, padding],
                        dilation=[dilation, dilation]))


def test_padding_can_make_a_large_kernel_fit(op):
    with raises(NOT_CUDA):  # 12 + 2 * 1 - 13 + 1 = 2 conv outputs per side
        op(**valid_args(weight=torch.randn(8, 3, 13, 13), padding=[1, 1], pool_kernel=[1, 1]))


def test_pool_window_larger_than_convolution_output_leaves_no_pooled_output(op):
    # 4x4 input, 3x3 kernel: 2x2 convolution output, smaller than one 3x3 pooling window.
    with raises("pooled output is smaller than 1 element: convolution output 2x2"):
        op(**valid_args(x=torch.randn(2, 3, 4, 4), pool_kernel=[3, 3]))


def test_ceil_mode_keeps_the_partial_window_that_floor_mode_drops(op):
    x = torch.randn(2, 3, 4, 4)
    with raises(NOT_CUDA):
        op(**valid_args(x=x, pool_kernel=[3, 3], ceil_mode=True))
    # PyTorch agrees: one (partial) window in ceil mode.
    conv = torch.nn.functional.conv2d(x, torch.randn(8, 3, 3, 3))
    assert torch.nn.functional.max_pool2d(conv, 3, ceil_mode=True).shape[-2:] == (1, 1)


@pytest.mark.parametrize("name", ["stride", "padding", "dilation", "pool_kernel", "pool_stride",
                                  "pool_padding"])
def test_pair_argument_of_three_values_is_refused(op, name):
    with raises(f"{name} must be an int pair (h, w), got 3 values"):
        op(**valid_args(**{name: [1, 1, 1]}))


@pytest.mark.parametrize("name", ["stride", "padding", "dilation", "pool_kernel", "pool_padding"])
def test_empty_pair_argument_is_refused(op, name):
    with raises(f"{name} must be an int pair (h, w), got 0 values"):
        op(**valid_args(**{name: []}))


def test_empty_pool_stride_means_the_pool_kernel(op):
    # 12x12 input, 3x3 kernel: 10x10 conv; pool 4 with stride 4 fits twice, with stride 1 seven
    # times. Either way valid, so the check passes and the device check is reached.
    with raises(NOT_CUDA):
        op(**valid_args(pool_kernel=[4, 4], pool_stride=[]))


def test_single_value_pair_applies_to_both_dimensions(op):
    with raises("stride must be positive, got (0, 0)"):
        op(**valid_args(stride=[0]))


def test_parameter_beyond_int32_is_refused(op):
    with raises("a size or parameter = 2147483648 is too large (at most 2^31 - 1)"):
        op(**valid_args(stride=[2**31, 1], pool_kernel=[1, 1]))


def test_convolution_output_beyond_int32_is_refused(op):
    with raises("an output size = "):
        op(**valid_args(padding=[2**31 - 1, 0], pool_kernel=[1, 1]))


# --- devices (checked last) ---------------------------------------------------------------------

@pytest.mark.requires_cuda
def test_weight_on_another_device_than_x_is_refused(op):
    args = valid_args()
    args["x"] = args["x"].cuda()
    with raises(f"weight must be on x's device {args['x'].device}, got cpu"):
        op(**args)


@pytest.mark.requires_cuda
def test_bias_on_another_device_than_x_is_refused(op):
    args = valid_args()
    args["x"], args["weight"] = args["x"].cuda(), args["weight"].cuda()
    with raises(f"bias must be on x's device {args['x'].device}, got cpu"):
        op(**args)
