"""The fused op as a PyTorch custom op (torch.ops.fused_conv.conv2d_relu_maxpool), and
fuse_conv_relu_maxpool on real networks.

CPU (CI): registration and schema, the fake implementation's shapes and checks (meta and fake
tensors, against Model's shapes on the CPU), torch.compile / torch.export tracing on meta
tensors, the autograd wiring (forward-only), re-import, and the rewriting done by
fuse_conv_relu_maxpool. GPU (skipped without one): opcheck, the backward error, torch.compile,
torch.export, CUDA graphs, channels-last input, the current stream, a second GPU and a
two-process NCCL run, and torchvision's VGG-16 fused against eager.

    python -m pytest -q tests/test_model_new_library.py
"""
import ast
import copy
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import reference_conv_relu_maxpool
from model import Model
from utils import kernel_choice, verification
from utils.suite import GRID, SUITE, ConvPoolCase, find_case, random_case

REPO = Path(__file__).resolve().parents[1]
SCHEMA = ("fused_conv::conv2d_relu_maxpool(Tensor x, Tensor weight, Tensor? bias, "
          "int[2] stride, int[2] padding, int[2] dilation, int[2] pool_kernel, "
          "int[2] pool_stride, int[2] pool_padding, bool ceil_mode, int config=-1, "
          "Tensor? packed_weight=None) -> Tensor")
TOLERANCE = dict(atol=1e-2, rtol=1e-2)
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")


@pytest.fixture(scope="module")
def model_new(extension):
    import model_new
    return model_new


@pytest.fixture(scope="module")
def op(model_new):
    return torch.ops.fused_conv.conv2d_relu_maxpool


def small_channels(case: ConvPoolCase) -> ConvPoolCase:
    """The same geometry with few channels and a small batch: shapes only depend on the
    spatial arguments, and Model then runs in milliseconds on the CPU."""
    return replace(case, batch=2, in_channels=3, out_channels=5)


def model_output_shape(case: ConvPoolCase):
    """Model's output shape on the CPU in float32, or None when PyTorch refuses the case."""
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            return tuple(Model(**case.model_kwargs())(torch.randn(case.input_shape())).shape)
    except RuntimeError:
        return None


def new_on(device, case: ConvPoolCase, model_new):
    torch.manual_seed(0)
    return model_new.ModelNew(**case.model_kwargs()).to(device)


def op_args_for(case: ConvPoolCase, device) -> tuple:
    x = torch.empty(case.input_shape(), device=device)
    weight = torch.empty(case.weight_shape(), device=device)
    bias = torch.empty(case.out_channels, device=device) if case.bias else None
    return (x, weight, bias, *case.op_args())


SHAPE_CASES = [small_channels(case) for case in SUITE + GRID]


# ---- registration ------------------------------------------------------------------------

def test_op_is_registered_with_its_schema(op):
    assert str(op.default._schema) == SCHEMA
    assert op.default.namespace == verification.ALLOWED_OP_NAMESPACE


def test_op_kernels_are_the_bindings_own_cpp(op):
    """A call through torch.ops (torch.compile's graphs, torch.export) reaches the kernel with
    no Python on the way: the CPU, CUDA and autograd kernels are registered from the binding's
    C++, and only the fake (Meta) kernel from Python."""
    table = {line.split(":")[0]: line for line in
             torch._C._dispatch_dump(f"{op.default.namespace}::{op.default._opname}").splitlines()}
    for key in ("CPU", "CUDA", "Autograd[alias]"):
        assert "conv_relu_maxpool_binding.cpp" in table[key], table[key]
    assert "conv_relu_maxpool_binding.cpp" not in table["Meta"]


def test_pybind_function_stays_callable(extension):
    x, weight, bias = torch.randn(2, 3, 12, 12), torch.randn(8, 3, 3, 3), torch.randn(8)
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
        extension.conv2d_relu_maxpool_forward(x, weight, bias, [1, 1], [0, 0], [1, 1], [2, 2],
                                              [2, 2], [0, 0], False)


def test_model_new_forward_calls_the_registered_op(model_new):
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    fused = model_new.ModelNew(3, 8, 3, 2).to("meta")
    with torch.no_grad(), Record():
        fused(torch.empty(2, 3, 16, 16, device="meta"))
    assert torch.ops.fused_conv.conv2d_relu_maxpool.default in seen


def test_cpu_input_gets_the_bindings_device_error(model_new, op):
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor, got device cpu"):
        op(*op_args_for(SHAPE_CASES[0], "cpu"))
    # Argument errors come first, as from the pybind function.
    x, weight, bias, *settings = op_args_for(SHAPE_CASES[0], "cpu")
    with pytest.raises(RuntimeError, match="weight must be float32 like x, got Double"):
        op(x, weight.double(), bias, *settings)


def test_reimporting_model_new_does_not_register_twice(model_new, op):
    spec = importlib.util.spec_from_file_location("model_new_imported_again",
                                                  REPO / "model_new.py")
    again = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(again)  # a second execution of the module: no double definition
    fused = again.ModelNew(3, 8, 3, 2).to("meta")
    with torch.no_grad():
        assert fused(torch.empty(2, 3, 16, 16, device="meta")).shape == (2, 8, 7, 7)
    assert torch.ops.fused_conv.conv2d_relu_maxpool is op


def test_torch_op_guard_lets_model_new_forward_through(model_new):
    fused = model_new.ModelNew(3, 8, 3, 2).to("meta")
    with torch.no_grad(), verification.TorchOpGuard():
        out = fused(torch.empty(2, 3, 16, 16, device="meta"))
    assert out.shape == (2, 8, 7, 7)
    assert verification.is_allowed_torch_op(torch.ops.fused_conv.conv2d_relu_maxpool)
    assert verification.is_allowed_torch_op(torch.ops.fused_conv.conv2d_relu_maxpool.default)


@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda case: case.name)
def test_model_new_passes_its_settings_to_the_op_in_schema_order(model_new, reference_cpu_kernel,
                                                                 case):
    reference = Model(**case.model_kwargs())
    fused = model_new.ModelNew(**case.model_kwargs())
    fused.load_state_dict(reference.state_dict())
    x = torch.randn(case.input_shape())
    with torch.no_grad():
        torch.testing.assert_close(fused(x), reference(x), atol=0, rtol=0)


def test_the_cpu_kernel_is_restored_after_the_reference_stand_in(model_new):
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
        model_new.ModelNew(3, 8, 3, 2)(torch.randn(2, 3, 16, 16))


# ---- the fake implementation: shapes and checks -------------------------------------------

@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda case: case.name)
def test_fake_shape_matches_model_on_meta_tensors(model_new, case):
    expected = model_output_shape(case)
    with torch.no_grad():
        out = new_on("meta", case, model_new)(torch.empty(case.input_shape(), device="meta"))
    assert tuple(out.shape) == expected == case.output_shape()
    assert out.is_contiguous() and out.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fake_output_has_the_dtype_of_x(model_new, dtype):
    fused = model_new.ModelNew(3, 8, 3, 2).to("meta", dtype)
    with torch.no_grad():
        out = fused(torch.empty(2, 3, 16, 16, device="meta", dtype=dtype))
    assert out.dtype == dtype and out.shape == (2, 8, 7, 7)


@pytest.mark.parametrize("case", SHAPE_CASES[:10], ids=lambda case: case.name)
def test_fake_shape_matches_model_under_fake_tensor_mode(op, case):
    with FakeTensorMode():
        out = op(*op_args_for(case, "cuda"))
    assert tuple(out.shape) == model_output_shape(case)
    assert out.device == torch.device("cuda:0") and out.is_contiguous()


def test_fake_accepts_and_refuses_exactly_what_pytorch_does_on_random_configurations(op):
    """Valid or not (windows beyond the input, pool padding beyond half the window, ...):
    where PyTorch gives an output the fake gives its shape, where PyTorch raises so does the
    fake."""
    rng = random.Random(20240611)
    refused = 0
    for index in range(300):
        case = small_channels(random_case(rng))
        # Push about half beyond validity: smaller inputs, larger strides and pool windows.
        if rng.random() < 0.5:
            case = replace(case, height=rng.randint(1, 8), width=rng.randint(1, 8),
                           pool_kernel=(rng.randint(1, 6), rng.randint(1, 6)),
                           pool_padding=(rng.randint(0, 3), rng.randint(0, 3)))
        expected = model_output_shape(case)
        args = op_args_for(case, "meta")
        if expected is None:
            refused += 1
            with pytest.raises(RuntimeError):
                op(*args)
        else:
            assert tuple(op(*args).shape) == expected, (index, case)
    assert 30 < refused < 270  # both sides of validity were exercised


REFUSALS = [  # (change to valid arguments, the binding's message)
    (lambda a: {"x": a["x"].double()}, "x must be float32, float16 or bfloat16, got Double"),
    (lambda a: {"weight": a["weight"].half()}, "weight must be float32 like x, got Half"),
    (lambda a: {"x": a["x"].half()}, "weight must be float16 like x, got Float"),
    (lambda a: {"x": a["x"].bfloat16(), "weight": a["weight"].bfloat16()},
     "bias must be bfloat16 like x, got Float"),
    (lambda a: {"weight": a["weight"][0]}, "weight must be 4-D"),
    (lambda a: {"weight": torch.empty(8, 2, 3, 3, device=a["x"].device)},
     "channel mismatch: x has 3 channels but weight expects 2"),
    (lambda a: {"bias": torch.empty(7, device=a["x"].device)},
     "bias must be 1-D with out_channels = 8 elements, got shape [7]"),
    (lambda a: {"bias": a["bias"].half()}, "bias must be float32 like x, got Half"),
    (lambda a: {"stride": [0, 1]}, "stride must be positive, got (0, 1)"),
    (lambda a: {"padding": [1, 1, 1]}, "padding must be an int pair (h, w), got 3 values"),
    (lambda a: {"pool_padding": [2, 0]}, "pool_padding must be at most half of pool_kernel"),
    (lambda a: {"config": 99}, "config must be -1"),
    (lambda a: {"weight": torch.empty(8, 3, 13, 13, device=a["x"].device)},
     "convolution output is smaller than 1 element: input 12x12"),
    (lambda a: {"pool_kernel": [11, 11]}, "pooled output is smaller than 1 element"),
]


@pytest.mark.parametrize("change,message", REFUSALS,
                         ids=[message.split(":")[0].split(",")[0] for _, message in REFUSALS])
def test_fake_refuses_what_the_binding_refuses_with_its_message(op, change, message):
    args = dict(x=torch.empty(2, 3, 12, 12, device="meta"),
                weight=torch.empty(8, 3, 3, 3, device="meta"),
                bias=torch.empty(8, device="meta"), stride=[1, 1], padding=[0, 0],
                dilation=[1, 1], pool_kernel=[2, 2], pool_stride=[2, 2], pool_padding=[0, 0],
                ceil_mode=False, config=-1)
    args.update(change(args))
    with pytest.raises(RuntimeError, match=re.escape(message)):
        op(**args)


@pytest.mark.parametrize("change,message", REFUSALS,
                         ids=[message.split(":")[0].split(",")[0] for _, message in REFUSALS])
def test_binding_refuses_cpu_tensors_with_the_same_message_as_the_fake(extension, change,
                                                                       message):
    args = dict(x=torch.randn(2, 3, 12, 12), weight=torch.randn(8, 3, 3, 3),
                bias=torch.randn(8), stride=[1, 1], padding=[0, 0],
                dilation=[1, 1], pool_kernel=[2, 2], pool_stride=[2, 2], pool_padding=[0, 0],
                ceil_mode=False, config=-1)
    args.update(change(args))
    with pytest.raises(RuntimeError, match=re.escape(message)):
        extension.conv2d_relu_maxpool_forward(**args)


# Every bad input that needs no device to be refused, for the test below: (change to valid
# arguments, made on their device).
BAD_INPUTS = REFUSALS + [
    (lambda a: {"x": a["x"].to(torch.int32)}, "x must be float32, float16 or bfloat16, got Int"),
    (lambda a: {"x": a["x"][0]}, "x must be 4-D (N, C, H, W), got 3-D with shape [3, 12, 12]"),
    (lambda a: {"x": a["x"][:, :0], "weight": a["weight"][:, :0]},
     "x must have at least 1 channel, got shape [2, 0, 12, 12]"),
    (lambda a: {"weight": a["weight"][:0]},
     "weight must have out_channels, kH and kW >= 1, got shape [0, 3, 3, 3]"),
    (lambda a: {"x": torch.empty(2, 4, 12, 12, device=a["x"].device),
                "weight": torch.empty(8, 2, 3, 3, device=a["x"].device)},
     "groups other than 1 are not supported: weight expects 2 input channels per group and "
     "x has 4 (groups=2)"),
    (lambda a: {"bias": torch.empty(1, 8, device=a["x"].device)},
     "bias must be 1-D with out_channels = 8 elements, got shape [1, 8]"),
    (lambda a: {"dilation": [1, 0]}, "dilation must be positive, got (1, 0)"),
    (lambda a: {"padding": [-1]}, "padding must be non-negative, got (-1, -1)"),
    (lambda a: {"pool_kernel": [0, 2]}, "pool_kernel must be positive, got (0, 2)"),
    (lambda a: {"pool_stride": [2, 0]}, "pool_stride must be positive, got (2, 0)"),
    (lambda a: {"pool_padding": [0, -1]}, "pool_padding must be non-negative, got (0, -1)"),
    (lambda a: {"pool_stride": [1, 2, 3]}, "pool_stride must be an int pair (h, w), got 3 values"),
    (lambda a: {"config": -2}, "config must be -1 (auto) or a variant id in [0, "),
    (lambda a: {"x": torch.empty((), device=a["x"].device).expand(2, 3, 2**31, 1)},
     "a size or parameter = 2147483648 is too large (at most 2^31 - 1)"),
    (lambda a: {"stride": [2**31, 1]},
     "a size or parameter = 2147483648 is too large (at most 2^31 - 1)"),
    (lambda a: {"packed_weight": torch.empty(4, 4, device=a["x"].device)},
     "packed_weight must be conv2d_relu_maxpool_pack_weight(weight): a 1-D tensor, got shape "
     "[4, 4]"),
    (lambda a: {"packed_weight": torch.empty(16, device=a["x"].device, dtype=torch.float16)},
     "packed_weight must be float32 like x, got Half"),
]


@pytest.mark.parametrize("change,message", BAD_INPUTS,
                         ids=[f"{i}-{m.split(':')[0].split(',')[0]}"
                              for i, (_, m) in enumerate(BAD_INPUTS)])
def test_the_op_the_fake_and_the_binding_refuse_a_bad_input_with_one_message(
        op, extension, change, message):
    """The fake holds no checks of its own: the op on meta tensors (its fake), the binding's
    shape function on them, and the binding's forward on CPU tensors (which reach every check
    before the device's) refuse each bad input with the same whole message."""
    def arguments(device: str) -> dict:
        args = dict(x=torch.empty(2, 3, 12, 12, device=device),
                    weight=torch.empty(8, 3, 3, 3, device=device),
                    bias=torch.empty(8, device=device), stride=[1, 1], padding=[0, 0],
                    dilation=[1, 1], pool_kernel=[2, 2], pool_stride=[2, 2],
                    pool_padding=[0, 0], ceil_mode=False, config=-1, packed_weight=None)
        args.update(change(args))
        return args

    calls = {"op (fake)": lambda: op(**arguments("meta")),
             "conv2d_relu_maxpool_output": lambda: extension.conv2d_relu_maxpool_output(
                 **arguments("meta")),
             "conv2d_relu_maxpool_forward": lambda: extension.conv2d_relu_maxpool_forward(
                 **arguments("cpu"))}
    seen = {}
    for name, call in calls.items():
        with pytest.raises(RuntimeError) as raised:
            call()
        seen[name] = str(raised.value)
    assert len(set(seen.values())) == 1, seen
    assert seen["op (fake)"].startswith(message)


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                    reason="with one visible GPU, even a fake cuda:1 tensor is refused")
def test_fake_follows_x_to_its_device_and_refuses_a_weight_elsewhere(op):
    case = SHAPE_CASES[0]
    with FakeTensorMode():
        x, weight, bias, *settings = op_args_for(case, "cuda:1")
        assert op(x, weight, bias, *settings).device == torch.device("cuda:1")
        with pytest.raises(RuntimeError, match="weight must be on x's device cuda:1, got cuda:0"):
            op(x, weight.to("cuda:0"), bias, *settings)


def test_fake_output_follows_pytorch_conv_into_channels_last(op):
    """Channels-last out when x or weight is channels-last (as PyTorch's convolution, and the
    max-pool that keeps its input's layout), NCHW otherwise: the binding's rule."""
    case = SHAPE_CASES[0]
    x, weight, bias, *settings = op_args_for(case, "meta")
    last = torch.channels_last
    assert op(x, weight, bias, *settings).is_contiguous()
    for x_in, w_in in ((x.to(memory_format=last), weight), (x, weight.to(memory_format=last)),
                       (x.to(memory_format=last), weight.to(memory_format=last))):
        out = op(x_in, w_in, bias, *settings)
        assert out.is_contiguous(memory_format=last) and not out.is_contiguous()
        expected = F.max_pool2d(F.relu(F.conv2d(x_in, w_in, bias, *settings[:3])),
                                *settings[3:6], 1, settings[6])
        assert out.shape == expected.shape


# ---- tracing on meta tensors: compile and export without a GPU ------------------------------

@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_traces_model_new_on_meta(model_new, dynamic):
    torch._dynamo.reset()
    case = small_channels(find_case("ceil_mode_odd"))
    compiled = torch.compile(new_on("meta", case, model_new), fullgraph=True,
                             backend="aot_eager", dynamic=dynamic)
    with torch.no_grad():
        for height, width in ((case.height, case.width), (case.height + 3, case.width + 5)):
            resized = replace(case, height=height, width=width)
            out = compiled(torch.empty(resized.input_shape(), device="meta"))
            assert tuple(out.shape) == model_output_shape(resized)


def test_export_records_the_op_on_meta(model_new):
    case = small_channels(find_case("ceil_mode_pool3_s2_pad1"))
    exported = torch.export.export(new_on("meta", case, model_new),
                                   (torch.empty(case.input_shape(), device="meta"),))
    targets = [node.target for node in exported.graph.nodes if node.op == "call_function"]
    assert targets == [torch.ops.fused_conv.conv2d_relu_maxpool.default]
    out = exported.module()(torch.empty(case.input_shape(), device="meta"))
    assert tuple(out.shape) == case.output_shape()


def test_export_with_a_dynamic_batch_and_image_size_keeps_them_symbolic(model_new):
    """The fake's checks add no guard that narrows a dynamic dimension (e.g. sizes below 2^31,
    which the forward checks when it runs): batch and H, W stay symbolic, and the exported
    program gives PyTorch's shapes at other sizes."""
    from torch.export import Dim
    case = small_channels(find_case("padding1"))
    fused = new_on("meta", case, model_new)
    dims = {"x": {0: Dim("batch"), 2: Dim("height", min=8), 3: Dim("width", min=8)}}
    exported = torch.export.export(fused, (torch.empty(case.input_shape(), device="meta"),),
                                   dynamic_shapes=dims)
    (node,) = [n for n in exported.graph.nodes if n.op == "call_function"]
    assert all(isinstance(size, torch.SymInt) for size in (node.meta["val"].shape[0],
                                                             node.meta["val"].shape[2]))
    for batch, height, width in ((1, 9, 17), (5, case.height + 6, case.width + 3)):
        resized = replace(case, batch=batch, height=height, width=width)
        out = exported.module()(torch.empty(resized.input_shape(), device="meta"))
        assert tuple(out.shape) == model_output_shape(resized), resized


# ---- autograd: forward-only, with a clear error -------------------------------------------

def test_output_requires_grad_when_parameters_do(model_new):
    fused = model_new.ModelNew(3, 8, 3, 2).to("meta")
    out = fused(torch.empty(2, 3, 16, 16, device="meta"))
    assert out.requires_grad and out.grad_fn is not None  # .backward() reaches the formula
    with torch.no_grad():
        assert not fused(torch.empty(2, 3, 16, 16, device="meta")).requires_grad


def test_backward_on_meta_tensors_raises_the_forward_only_error(model_new):
    """A meta-device ModelNew's .backward() runs the backward op and refuses, as on CUDA
    (it used to return empty gradients silently)."""
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    fused = model_new.ModelNew(3, 8, 3, 2, bias=False).to("meta")
    x = torch.empty(2, 3, 16, 16, device="meta", requires_grad=True)
    out = fused(x)
    with Record(), pytest.raises(RuntimeError, match="forward-only"):
        out.sum().backward()
    assert torch.ops.fused_conv.conv2d_relu_maxpool_backward_unsupported.default in seen
    assert x.grad is None and fused.conv.weight.grad is None


def test_backward_traces_with_fake_gradients_under_fake_tensors(model_new):
    """Under fake tensors (what torch.compile and torch.export trace with) the backward gives
    gradients of the right shapes, so a forward with grad enabled traces."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    fused = model_new.ModelNew(3, 8, 3, 2, bias=False).to("meta")
    mode = FakeTensorMode()
    weight = mode.from_tensor(fused.conv.weight.detach()).requires_grad_()
    x = mode.from_tensor(torch.empty(2, 3, 16, 16, device="meta")).requires_grad_()
    with mode:
        out = torch.func.functional_call(fused, {"conv.weight": weight}, (x,))
        grad_x, grad_weight = torch.autograd.grad(out.sum(), (x, weight))
    assert grad_x.shape == x.shape and grad_weight.shape == (8, 3, 3, 3)


def test_backward_op_raises_forward_only_error_on_real_tensors(model_new):
    """What the op's autograd kernel (C++) runs as its backward, on a real gradient."""
    unsupported = torch.ops.fused_conv.conv2d_relu_maxpool_backward_unsupported
    with pytest.raises(RuntimeError, match="forward-only") as raised:
        unsupported(torch.zeros(2, 8, 7, 7), [2, 3, 16, 16], [8, 3, 3, 3], [8])
    assert "torch.no_grad()" in str(raised.value)
    assert "torch.inference_mode()" in str(raised.value)


def test_backward_through_model_new_raises_the_forward_only_error_on_cpu(model_new,
                                                                       reference_cpu_kernel):
    fused = model_new.ModelNew(3, 8, 3, 2)
    out = fused(torch.randn(2, 3, 16, 16))
    with pytest.raises(RuntimeError, match="forward-only") as raised:
        out.sum().backward()
    assert "torch.inference_mode()" in str(raised.value)
    assert fused.conv.weight.grad is None and fused.conv.bias.grad is None


def test_backward_raises_when_only_the_input_requires_grad(model_new, reference_cpu_kernel):
    fused = model_new.ModelNew(3, 8, 3, 2).requires_grad_(False)
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    out = fused(x)
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="forward-only"):
        out.sum().backward()
    assert x.grad is None


# ---- the eager call path: the op's dispatch skipped where nothing watches ------------------

def plain_arguments():
    layer = nn.Conv2d(3, 8, 3)
    return torch.randn(2, 3, 16, 16), layer.weight, layer.bias


@pytest.mark.parametrize("grad", [False, True])
def test_nothing_watches_plain_tensors_in_eager_code(model_new, grad):
    x, weight, bias = plain_arguments()
    with torch.set_grad_enabled(grad):
        assert model_new._nothing_watches(x, weight, bias)
        assert model_new._nothing_watches(x, weight.detach(), None)
    # ... but a CPU or meta x takes the op (its CPU kernel raises, its fake one gives shapes).
    assert not model_new._plain_eager_call(x, weight, bias)
    assert not model_new._plain_eager_call(x.to("meta"), weight.to("meta"), None)


class SubclassedTensor(torch.Tensor):
    pass


class PassThroughDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def watched_under(context: str, model_new) -> bool:
    """Whether _nothing_watches says False for plain arguments inside `context`."""
    x, weight, bias = plain_arguments()
    if context == "subclass":
        return not model_new._nothing_watches(x.as_subclass(SubclassedTensor), weight, bias)
    if context == "fake tensors":
        with FakeTensorMode() as mode:
            fake_x = mode.from_tensor(x)
        return not model_new._nothing_watches(fake_x, weight, bias)
    if context == "vmap":
        seen = []
        torch.func.vmap(lambda t: seen.append(model_new._nothing_watches(t, weight, bias)) or t)(
            x)
        return seen == [False]
    if context == "torch.compile":
        def branch(t):
            return t + 1 if model_new._nothing_watches(t, weight, bias) else t - 1
        torch._dynamo.reset()
        out = torch.compile(branch, backend="eager", fullgraph=True)(x)
        return torch.equal(out, x - 1)
    if context == "jit.trace":
        seen = []
        torch.jit.trace(lambda t: seen.append(model_new._nothing_watches(t, weight, bias)) or t,
                        x, check_trace=False)
        return seen == [False]
    modes = {"torch function mode": verification.TorchOpGuard,
             "torch dispatch mode": PassThroughDispatch,
             "profiler": lambda: torch.profiler.profile(
                 activities=[torch.profiler.ProfilerActivity.CPU])}
    with modes[context]():
        return not model_new._nothing_watches(x, weight, bias)


@pytest.mark.parametrize("context", ["subclass", "fake tensors", "vmap", "torch.compile",
                                     "jit.trace", "torch function mode", "torch dispatch mode",
                                     "profiler"])
def test_the_op_runs_wherever_something_watches(model_new, context):
    assert watched_under(context, model_new)


# ---- fuse_conv_relu_maxpool ---------------------------------------------------------------

class Block(nn.Module):
    """A custom module holding a Sequential, as real networks do."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True))
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(self.body(x))


def sample_network() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2),                       # 0-2 fused
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),                             # 3-4 no pool
        nn.Conv2d(8, 8, (3, 5), stride=(1, 2), padding=(1, 2), dilation=(1, 2), bias=False),
        nn.ReLU(), nn.MaxPool2d((2, 3), stride=1, padding=(1, 0)),             # 5-7 fused
        Block(),                                                              # 8 nested
        nn.Conv2d(4, 4, 3, padding=1, groups=2), nn.ReLU(), nn.MaxPool2d(2),  # 9-11 grouped
        nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, dilation=2),  # 12-14 dilated
        nn.Conv2d(4, 4, 3, padding="same"), nn.ReLU(), nn.MaxPool2d(2),       # 15-17 fused
        nn.Conv2d(4, 4, 2, padding="same"), nn.ReLU(), nn.MaxPool2d(2),       # 18-20 asymmetric
        nn.Conv2d(4, 4, 1, padding="valid"), nn.ReLU(), nn.MaxPool2d(1),      # 21-23 fused
        nn.Conv2d(4, 4, 1, padding_mode="reflect"), nn.ReLU(), nn.MaxPool2d(1),  # 24-26
        nn.Conv2d(4, 4, 1), nn.ReLU(), nn.MaxPool2d(1, return_indices=True),  # 27-29 indices
    )


def fused_positions(sequence: nn.Sequential, model_new) -> list:
    return [i for i, layer in enumerate(sequence) if isinstance(layer, model_new.ModelNew)]


def test_fuse_replaces_exactly_the_supported_runs_and_keeps_indices(model_new):
    network = sample_network()
    before = list(network)
    result = model_new.fuse_conv_relu_maxpool(network)
    assert result is network and len(network) == len(before)
    assert fused_positions(network, model_new) == [0, 5, 15, 21]
    for start in (0, 5, 15, 21):
        assert isinstance(network[start + 1], nn.Identity)
        assert isinstance(network[start + 2], nn.Identity)
    assert fused_positions(network[8].body, model_new) == [0]
    untouched = [3, 4, 9, 10, 11, 12, 13, 14, 18, 19, 20, 24, 25, 26, 27, 28, 29]
    for index in untouched:
        assert network[index] is before[index], index
    assert network[8] is before[8] and network[8].head is before[8].head


def test_fused_modules_share_the_original_parameters_and_carry_settings(model_new):
    network = sample_network()
    convs = {i: network[i] for i in (0, 5, 15, 21)}
    weights = {name: p for name, p in network.named_parameters()}
    model_new.fuse_conv_relu_maxpool(network)
    for index, conv in convs.items():
        assert network[index].conv is conv  # the same Parameters: no copy, same device/dtype
    assert all(any(p is q for q in network.parameters()) for p in weights.values())
    rect = network[5]
    assert (rect.stride, rect.padding, rect.dilation) == ((1, 2), (1, 2), (1, 2))
    assert (rect.pool_kernel, rect.pool_stride, rect.pool_padding) == ((2, 3), (1, 1), (1, 0))
    assert rect.conv.bias is None and rect.ceil_mode is False
    nested = network[8].body[0]
    assert (nested.pool_kernel, nested.pool_stride, nested.pool_padding) == ((3, 3), (2, 2),
                                                                             (1, 1))
    assert nested.ceil_mode is True
    assert network[15].padding == (1, 1)  # 'same' with a 3x3 kernel
    assert network[21].padding == (0, 0)  # 'valid'


def test_fused_network_has_the_same_output_shapes_on_meta(model_new):
    network = sample_network()[:9].to("meta")  # up to the nested block: channels line up
    fused = model_new.fuse_conv_relu_maxpool(copy.deepcopy(network))
    x = torch.empty(2, 3, 40, 44, device="meta")
    with torch.no_grad():
        assert fused(x).shape == network(x).shape


def test_fuse_leaves_float64_and_hooked_layers_alone(model_new):
    hooked = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2))
    hooked[1].register_forward_hook(lambda module, args, out: None)
    networks = [nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2)).double(),
                hooked, nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU6(), nn.MaxPool2d(2)),
                nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AvgPool2d(2))]
    for network in networks:
        before = list(network)
        model_new.fuse_conv_relu_maxpool(network)
        assert list(network) == before


def test_a_sequential_subclass_fuses_where_its_traced_forward_shows_the_run(model_new):
    """The Sequential pass skips subclasses that override forward (positions may mean
    something else there); the torch.fx pass sees what the forward does, and fuses a run whose
    tensors do flow conv -> relu -> pool."""
    class Reordering(nn.Sequential):
        def forward(self, x):
            return super().forward(x)

    class Skipping(nn.Sequential):
        def forward(self, x):  # the ReLU's output never reaches the pool
            return self[2](self[0](x)) + self[1](x).sum()

    network = Reordering(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2))
    model_new.fuse_conv_relu_maxpool(network)
    assert isinstance(network[0], model_new.ModelNew)
    assert isinstance(network[1], nn.Identity) and isinstance(network[2], nn.Identity)
    skipping = Skipping(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2))
    before = list(skipping)
    model_new.fuse_conv_relu_maxpool(skipping)
    assert list(skipping) == before


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fuse_fuses_16_bit_layers(model_new, dtype):
    network = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2)).to(dtype)
    model_new.fuse_conv_relu_maxpool(network)
    assert isinstance(network[0], model_new.ModelNew)
    assert network[0].conv.weight.dtype == dtype


def test_fuse_keeps_the_training_flag_and_a_fused_model_still_fuses_nothing_more(model_new):
    network = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2)).eval()
    model_new.fuse_conv_relu_maxpool(network)
    assert not network[0].training
    again = list(network)
    model_new.fuse_conv_relu_maxpool(network)
    assert list(network) == again


def test_fused_state_dict_names_gain_the_conv_infix(model_new):
    network = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2))
    model_new.fuse_conv_relu_maxpool(network)
    assert list(network.state_dict()) == ["0.conv.weight", "0.conv.bias"]


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # the unfused even-kernel conv
def test_fused_network_computes_what_the_original_does(model_new, reference_cpu_kernel):
    network = sample_network()[:9].eval()  # fused runs of every kind, nested block included
    fused = model_new.fuse_conv_relu_maxpool(copy.deepcopy(network))
    x = torch.randn(2, 3, 40, 44)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), network(x))
    tail = nn.Sequential(*list(sample_network())[9:]).eval()  # grouped, dilated pool, 'same'...
    fused_tail = model_new.fuse_conv_relu_maxpool(copy.deepcopy(tail))
    x = torch.randn(2, 4, 64, 64)
    with torch.no_grad():
        expected = tail[:-3](x)  # the MaxPool2d with return_indices ends with a tuple
        torch.testing.assert_close(fused_tail[:-3](x), expected)


def test_vgg16_features_fuse_at_the_five_pooled_blocks(model_new):
    torchvision = pytest.importorskip("torchvision")
    features = torchvision.models.vgg16(weights=None).features
    original = list(features)
    model_new.fuse_conv_relu_maxpool(features)
    assert len(features) == 31
    assert fused_positions(features, model_new) == [2, 7, 14, 21, 28]
    for start in (2, 7, 14, 21, 28):
        assert features[start].conv is original[start]
        assert (features[start].padding, features[start].pool_kernel) == ((1, 1), (2, 2))
    convs = [i for i, layer in enumerate(features) if isinstance(layer, nn.Conv2d)]
    assert convs == [0, 5, 10, 12, 17, 19, 24, 26]  # the convolutions without a pool after
    x = torch.empty(2, 3, 224, 224, device="meta")
    with torch.no_grad():
        assert features.to("meta")(x).shape == (2, 512, 7, 7)


def test_fused_vgg16_features_compute_what_eager_does(model_new, reference_cpu_kernel):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    features = torchvision.models.vgg16(weights=None).features.eval()
    fused = model_new.fuse_conv_relu_maxpool(copy.deepcopy(features))
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), features(x))


# ---- weights packed ahead of time (ModelNew.prepack) ---------------------------------------

def test_prepack_is_off_by_default_returns_the_module_and_shows_in_repr(model_new):
    fused = model_new.ModelNew(3, 8, 3, 2)
    assert "prepack" not in repr(fused)
    assert fused.prepack() is fused and "prepack=True" in repr(fused)
    assert fused.prepack(False) is fused and "prepack" not in repr(fused)


def test_fuse_with_prepack_prepacks_every_fused_module(model_new):
    network = sample_network()
    model_new.fuse_conv_relu_maxpool(network, prepack=True)
    fused = [layer for layer in network.modules() if isinstance(layer, model_new.ModelNew)]
    assert len(fused) == 5 and all(layer._prepack for layer in fused)
    plain = model_new.fuse_conv_relu_maxpool(sample_network())
    assert not any(layer._prepack for layer in plain.modules()
                   if isinstance(layer, model_new.ModelNew))


def test_prepacked_model_new_on_the_cpu_passes_no_packed_weight(model_new, op):
    """A CPU weight is never packed (the op then raises its device error, or here, with the
    reference standing in for the CPU kernel, computes the reference)."""
    seen = []

    def record(x, weight, bias, stride, padding, dilation, pool_kernel, pool_stride,
               pool_padding, ceil_mode, config=-1, packed_weight=None):
        seen.append(packed_weight)
        return reference_conv_relu_maxpool(x, weight, bias, stride, padding, dilation,
                                           pool_kernel, pool_stride, pool_padding, ceil_mode)

    scope = torch.library.Library(model_new.OP_NAMESPACE, "FRAGMENT")
    torch.library.register_kernel(model_new.OP_QUALNAME, "cpu", record, lib=scope)
    try:
        reference = Model(3, 8, 3, 2)
        fused = model_new.ModelNew(3, 8, 3, 2).prepack()
        fused.load_state_dict(reference.state_dict())
        x = torch.randn(2, 3, 16, 16)
        with torch.no_grad():
            torch.testing.assert_close(fused(x), reference(x), atol=0, rtol=0)
    finally:
        scope._destroy()  # the op's own CPU kernel again
    assert seen == [None]


def test_compile_fullgraph_traces_a_prepacked_model_new_on_meta(model_new):
    torch._dynamo.reset()
    fused = model_new.ModelNew(3, 8, 3, 2).prepack().to("meta")
    with torch.no_grad():
        out = torch.compile(fused, fullgraph=True)(torch.empty(2, 3, 16, 16, device="meta"))
    assert out.shape == (2, 8, 7, 7)


@pytest.mark.parametrize("packed,message", [
    (lambda x: torch.empty(10, dtype=torch.float16, device=x.device),
     "packed_weight must be float32 like x, got Half"),
    (lambda x: torch.empty(2, 5, device=x.device),
     r"packed_weight must be conv2d_relu_maxpool_pack_weight\(weight\): a 1-D tensor, got "
     r"shape \[2, 5\]"),
    (lambda x: torch.empty(10, device="cpu"), "packed_weight must be on x's device meta, got cpu"),
])
def test_fake_refuses_a_packed_weight_of_the_wrong_kind(op, packed, message):
    x, weight, bias, *settings = op_args_for(SHAPE_CASES[0], "meta")
    with pytest.raises(RuntimeError, match=message):
        op(x, weight, bias, *settings, -1, packed(x))
    empty = torch.empty(0, device="meta")  # what packing gives where nothing takes it
    assert op(x, weight, bias, *settings, -1, empty).shape == op(x, weight, bias, *settings).shape


def test_pack_weight_refuses_a_cpu_weight(extension):
    with pytest.raises(RuntimeError, match="weight must be a CUDA tensor, got device cpu"):
        extension.conv2d_relu_maxpool_pack_weight(torch.randn(8, 4, 3, 3))
    with pytest.raises(RuntimeError, match="weight must be float32, float16 or bfloat16, got Int"):
        extension.conv2d_relu_maxpool_pack_weight(torch.zeros(8, 4, 3, 3, dtype=torch.int32))


# ---- the benchmark and the notebook (their GPU runs are manual) ----------------------------

def test_bench_vgg16_parses_targets_and_needs_a_gpu():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import bench_vgg16
    finally:
        sys.path.remove(str(REPO / "tools"))
    args = bench_vgg16.build_parser().parse_args(["--targets", "fused,compile"])
    assert args.targets == ["eager", "fused", "compile"] and args.batch == 32
    assert args.size == 224 and args.iters >= 50
    with pytest.raises(SystemExit):
        bench_vgg16.build_parser().parse_args(["--targets", "eager,no_such_target"])
    if not torch.cuda.is_available():
        assert bench_vgg16.main([]) == 2


def test_quickstart_notebook_is_valid_nbformat_4_and_ran_top_to_bottom():
    # Committed as executed on the H200 (tools/run_notebook.py): every code cell ran once, in
    # order, without an error output. (A notebook cleared of outputs passes too.)
    notebook = json.loads((REPO / "examples" / "quickstart.ipynb").read_text())
    assert notebook["nbformat"] == 4
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code
    counts = [cell["execution_count"] for cell in code]
    assert counts == list(range(1, len(code) + 1)) or (
        all(count is None for count in counts) and all(cell["outputs"] == [] for cell in code))
    for cell in code:
        assert all(output["output_type"] != "error" for output in cell["outputs"])
    sources = ["".join(cell["source"]) for cell in code]
    for source in sources:  # Python, once IPython's `!command` lines are set aside
        ast.parse("\n".join(line.replace("!", "pass  # !", 1) if line.lstrip().startswith("!")
                            else line for line in source.splitlines()))
    joined = "\n".join(sources)
    for needed in ("bash utils/compile.sh", "load_state_dict", "ModelNew",
                   "fuse_conv_relu_maxpool", "torch.cuda.Event"):
        assert needed in joined, needed


# ---- GPU ---------------------------------------------------------------------------------

def gpu_pair(case: ConvPoolCase, model_new, device="cuda"):
    """Model and ModelNew with Model's weights on `device`, and an input."""
    torch.manual_seed(random.randrange(2**31))
    reference = Model(**case.model_kwargs()).to(device).eval()
    fused = model_new.ModelNew(**case.model_kwargs()).to(device).eval()
    fused.load_state_dict(reference.state_dict())
    return reference, fused, torch.randn(case.input_shape(), device=device)


GPU_CASES = [find_case(name) for name in ("default_small", "padding1", "pool3_stride2_pad1",
                                          "ceil_mode_pool3_s2_pad1", "no_bias")]


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda case: case.name)
def test_opcheck_passes_on_gpu(op, case):
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(case.input_shape(), generator=generator).cuda()
    weight = (torch.randn(case.weight_shape(), generator=generator) * 0.1).cuda()
    bias = torch.randn(case.out_channels, generator=generator).cuda() if case.bias else None
    torch.library.opcheck(op.default, (x, weight, bias, *case.op_args()))


@pytest.mark.requires_cuda
def test_backward_through_model_new_raises_the_forward_only_error(model_new):
    reference, fused, x = gpu_pair(find_case("default_small"), model_new)
    out = fused(x)  # parameters require grad: so does the output
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="forward-only") as raised:
        out.sum().backward()
    assert "torch.no_grad()" in str(raised.value)
    assert fused.conv.weight.grad is None  # nothing half-written
    only_input = x.clone().requires_grad_()
    fused.requires_grad_(False)
    with pytest.raises(RuntimeError, match="forward-only"):
        fused(only_input).sum().backward()


@pytest.mark.requires_cuda
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "grad"])
def test_eager_model_new_skips_the_op_dispatch_and_gives_the_ops_bits(model_new, op, mode,
                                                                      monkeypatch):
    reference, fused, x = gpu_pair(find_case("padding1"), model_new)
    case_args = find_case("padding1").op_args()
    with torch.no_grad():
        expected = op(x, fused.conv.weight, fused.conv.bias, *case_args)
    calls = []

    def counted(*args):
        calls.append(1)
        return op(*args)

    monkeypatch.setattr(torch.ops.fused_conv, "conv2d_relu_maxpool", counted)
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
               "grad": torch.enable_grad}[mode]
    with context():
        out = fused(x)
    assert calls == []
    assert torch.equal(out.detach(), expected)  # the same kernel: the same bits
    assert out.requires_grad == (mode == "grad")
    if mode == "grad":
        assert type(out.grad_fn).__name__ == "_ForwardOnlyBackward"
    with context(), PassThroughDispatch():  # a mode is on: the op runs
        watched = fused(x)
    assert calls == [1] and torch.equal(watched.detach(), expected)


@pytest.mark.requires_cuda
def test_backward_through_compiled_model_new_raises_the_forward_only_error(model_new):
    torch._dynamo.reset()
    reference, fused, x = gpu_pair(find_case("default_small"), model_new)
    out = torch.compile(fused, fullgraph=True)(x)  # tracing with grad enabled works
    torch.testing.assert_close(out.detach(), reference(x).detach(), **TOLERANCE)
    with pytest.raises(RuntimeError, match="forward-only"):
        out.sum().backward()


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", GPU_CASES[:3], ids=lambda case: case.name)
def test_compile_fullgraph_matches_model(model_new, case):
    torch._dynamo.reset()
    reference, fused, x = gpu_pair(case, model_new)
    compiled = torch.compile(fused, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), reference(x), **TOLERANCE)
        smaller = x[:1, :, :-3, :-2].contiguous()  # a recompile with another shape
        torch.testing.assert_close(compiled(smaller), reference(smaller), **TOLERANCE)


@pytest.mark.requires_cuda
def test_export_runs_and_matches_model(model_new):
    reference, fused, x = gpu_pair(find_case("ceil_mode_pool3_s2_pad1"), model_new)
    exported = torch.export.export(fused, (x,))
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(x), reference(x), **TOLERANCE)


@pytest.mark.requires_cuda
def test_cuda_graph_capture_and_replay_match_model(model_new):
    reference, fused, static_x = gpu_pair(find_case("default_small"), model_new)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        fused(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = fused(static_x)
    for _ in range(2):
        static_x.copy_(torch.randn_like(static_x))
        static_out.fill_(float("nan"))
        graph.replay()
        with torch.no_grad():
            torch.testing.assert_close(static_out, reference(static_x), **TOLERANCE)


@pytest.mark.requires_cuda
def test_compile_reduce_overhead_uses_cuda_graphs_and_matches(model_new):
    torch._dynamo.reset()
    reference, fused, x = gpu_pair(find_case("padding1"), model_new)
    compiled = torch.compile(fused, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x).clone(), reference(x), **TOLERANCE)


# default_small's geometry over 20 images: 80 tiles of 128 channels, so that the wgmma kernel
# reads the packed weights (layers of at most 64 pack their own: kFewTiles).
PREPACK_CASE = replace(find_case("default_small"), name="default_small_20", batch=20)


def prepacked_pair(case: ConvPoolCase, model_new):
    """A prepacked ModelNew, an unpacked copy with the same weights, and an input."""
    reference, fused, x = gpu_pair(case, model_new)
    return fused.prepack(), copy.deepcopy(fused).prepack(False), x


def test_the_prepack_case_reads_its_packed_weights(extension):
    assert kernel_choice.takes_packed_weight(kernel_choice.load(extension), PREPACK_CASE)


@pytest.mark.requires_cuda
def test_opcheck_passes_with_a_packed_weight(op, extension):
    case = PREPACK_CASE
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(case.input_shape(), generator=generator).cuda()
    weight = (torch.randn(case.weight_shape(), generator=generator) * 0.1).cuda()
    bias = torch.randn(case.out_channels, generator=generator).cuda()
    packed = extension.conv2d_relu_maxpool_pack_weight(weight)
    torch.library.opcheck(op.default, (x, weight, bias, *case.op_args(), -1, packed))


@pytest.mark.requires_cuda
def test_prepacked_model_new_follows_every_weight_change_pytorch_tracks(model_new):
    """Bit for bit the unpacked module's output, after each kind of weight change that the
    version counter or the storage shows: in-place ops under no_grad, nn.init,
    load_state_dict, a new Parameter, .half() / .float(), a round trip through the CPU with
    a change on the way. A write through .data is not seen until prepack() is called again
    (documented in ModelNew.prepack)."""
    fused, plain, x = prepacked_pair(PREPACK_CASE, model_new)
    changes = [
        lambda m: m.conv.weight.mul_(-0.5),
        lambda m: m.conv.weight.add_(0.01),
        lambda m: (torch.manual_seed(7), nn.init.normal_(m.conv.weight, std=0.05)),
        lambda m: m.load_state_dict({"conv.weight": torch.ones_like(m.conv.weight) * 0.01,
                                     "conv.bias": torch.zeros_like(m.conv.bias)}),
        lambda m: setattr(m.conv, "weight", nn.Parameter(torch.full_like(m.conv.weight, -0.02))),
        lambda m: m.half(),
        lambda m: m.float(),
        lambda m: (m.cpu(), m.conv.weight.mul_(3), m.cuda()),
    ]
    with torch.no_grad():
        assert torch.equal(fused(x), plain(x))
        if torch.cuda.get_device_capability() == (9, 0):
            assert fused._packed_weight.numel() > 0  # packed, and used (the Hopper kernels)
        for change in changes:
            change(fused)
            change(plain)
            xin = x.to(fused.conv.weight.dtype)
            assert torch.equal(fused(xin), plain(xin))
        fused.conv.weight.data.mul_(2)
        plain.conv.weight.data.mul_(2)
        fused.prepack()
        assert torch.equal(fused(x), plain(x))


@pytest.mark.requires_cuda
def test_prepacked_model_new_in_a_cuda_graph_and_under_compile(model_new):
    torch._dynamo.reset()
    fused, plain, static_x = prepacked_pair(PREPACK_CASE, model_new)
    with torch.no_grad():
        fused(static_x)  # packs outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = fused(static_x)
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        assert torch.equal(static_out, plain(static_x))
        compiled = torch.compile(fused, fullgraph=True)  # packs per call inside the op
        assert torch.equal(compiled(static_x), plain(static_x))


@pytest.mark.requires_cuda
def test_prepack_packs_nothing_for_a_layer_no_hopper_kernel_takes(model_new):
    reference, fused, x = gpu_pair(find_case("kernel5"), model_new)
    fused.prepack()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), reference(x), **TOLERANCE)
    assert fused._packed_weight.numel() == 0


@pytest.mark.requires_cuda
def test_fuse_with_prepack_matches_without(model_new):
    torch.manual_seed(random.randrange(2**31))
    network = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    network = network.cuda().eval()
    plain = model_new.fuse_conv_relu_maxpool(copy.deepcopy(network))
    packed = model_new.fuse_conv_relu_maxpool(copy.deepcopy(network), prepack=True)
    # 40 images: the second layer's 160 tiles read the packed weights (kFewTiles).
    x = torch.randn(40, 3, 64, 64, device="cuda")
    with torch.no_grad():
        assert torch.equal(packed(x), plain(x))
        torch.testing.assert_close(packed(x), network(x), **TOLERANCE)


@pytest.mark.requires_cuda
def test_channels_last_input_matches_without_a_copy(model_new):
    # x far larger than the output: a copy of x would stand out in the peak memory.
    case = replace(find_case("default_small"), batch=4, in_channels=64, out_channels=8)
    reference, fused, x = gpu_pair(case, model_new)
    x_last = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = reference(x)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = fused(x_last)
        torch.cuda.synchronize()
        grown = torch.cuda.max_memory_allocated() - before
    torch.testing.assert_close(out, expected, **TOLERANCE)
    assert out.is_contiguous(memory_format=torch.channels_last)  # as PyTorch's conv and pool
    assert grown < x.nbytes // 2, f"{grown} bytes allocated: was x copied?"


@pytest.mark.requires_cuda
def test_current_stream_is_honoured(model_new):
    reference, fused, x = gpu_pair(find_case("default_small"), model_new)
    expected = reference(x).detach()
    staged = torch.zeros_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        torch.cuda._sleep(50_000_000)  # the stream is busy when the op is queued
        staged.copy_(x)
        out = fused(staged)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(out, expected, **TOLERANCE)


@pytest.mark.requires_cuda
@two_gpus
def test_input_on_second_gpu_runs_there(model_new):
    torch.cuda.set_device(0)
    reference, fused, x = gpu_pair(find_case("padding1"), model_new, device="cuda:1")
    with torch.no_grad():
        out = fused(x)
        expected = reference(x)
    assert out.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0
    torch.testing.assert_close(out, expected, **TOLERANCE)
    side = torch.cuda.Stream(device="cuda:1")  # and its current stream there
    side.wait_stream(torch.cuda.current_stream("cuda:1"))
    with torch.cuda.stream(side), torch.no_grad():
        torch.cuda._sleep(20_000_000)
        staged = x.clone()
        out_side = fused(staged)
    torch.cuda.current_stream("cuda:1").wait_stream(side)
    torch.testing.assert_close(out_side, expected, **TOLERANCE)


@pytest.mark.requires_cuda
@two_gpus
def test_split_layer_on_second_gpu_runs_there(model_new, extension):
    """A layer whose tiles split their reduction over clusters (VGG block 5 at batch 1 with 136
    channels) launches the weight packing and then the cluster kernel, sized from the GPU's
    own cluster counts: with cuda:0 current and the module on cuda:1, both run on cuda:1,
    plainly and after prepack() (which this layer ignores: it packs apart)."""
    case = ConvPoolCase("split_second_gpu", 1, 512, 136, 14, 14, (3, 3), padding=(1, 1))
    library = kernel_choice.load(extension)
    second = kernel_choice.device_of(library, 1)
    assert kernel_choice.wgmma_split(library, case, kernel_choice.FLOAT32, second) > 1
    torch.cuda.set_device(0)
    reference, fused, x = gpu_pair(case, model_new, device="cuda:1")
    with torch.no_grad():
        expected = reference(x)
        out = fused(x)
        packed = fused.prepack()(x)
    assert torch.cuda.current_device() == 0
    for result in (out, packed):
        assert result.device == torch.device("cuda:1")
        torch.testing.assert_close(result, expected, **TOLERANCE)


@pytest.mark.requires_cuda
@two_gpus
def test_two_nccl_processes_each_match_model_on_their_gpu():
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    result = subprocess.run([sys.executable, str(REPO / "tools" / "check_distributed.py")],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout


@pytest.mark.requires_cuda
def test_fused_vgg16_features_match_eager(model_new):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    features = torchvision.models.vgg16(weights=None).features.cuda().eval()
    fused = model_new.fuse_conv_relu_maxpool(copy.deepcopy(features))
    x = torch.randn(4, 3, 224, 224, device="cuda")
    with torch.no_grad():
        expected = features(x)
        out = fused(x)
    scale = expected.abs().max().item()
    assert scale > 0
    torch.testing.assert_close(out / scale, expected / scale, **TOLERANCE)


@pytest.mark.parametrize("setting,message", [
    ({"padding": -1}, "padding must be non-negative, got (-1, -1)"),
    ({"stride": 0}, "stride must be positive, got (0, 0)"),
    ({"pool_kernel_size": (2, 2, 2)}, "pool_kernel must be an int pair (h, w), got 3 values"),
    ({"pool_padding": (1, 1, 1)}, "pool_padding must be an int pair (h, w), got 3 values")])
def test_bad_settings_construct_as_in_model_and_are_refused_at_forward(model_new, setting,
                                                                       message):
    """Model (nn.Conv2d, nn.MaxPool2d) constructs with these and fails at forward; so does
    ModelNew, with the op's message behind the layer's name."""
    arguments = {"pool_kernel_size": 2, **setting}
    x = torch.randn(1, 3, 12, 12)
    with pytest.raises(RuntimeError):
        Model(3, 8, 3, **arguments)(x)
    fused = model_new.ModelNew(3, 8, 3, **arguments)
    with pytest.raises(RuntimeError, match=re.escape(f"ModelNew (3 -> 8, kernel 3x3): {message}")):
        fused(x)


def test_errors_of_other_kinds_pass_through_the_layer_unchanged(model_new, monkeypatch):
    """Only the op's refusals get the layer's name; an out-of-memory error keeps its type."""
    fused = model_new.ModelNew(3, 8, 3, 2)

    def out_of_memory(x):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(fused, "_forward", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError, match="^CUDA out of memory$"):
        fused(torch.randn(1, 3, 12, 12))
