"""ModelNew: Model's Conv2d -> ReLU -> MaxPool2d as one fused CUDA kernel.

Same constructor arguments and parameter names as model.Model, so
`ModelNew(*args).load_state_dict(Model(*args).state_dict())` works. `self.conv` is kept as
an nn.Conv2d purely to hold the weight and bias with Model's names and initialisation, and
is never called.

The kernel is a PyTorch custom op, `torch.ops.fused_conv.conv2d_relu_maxpool`
(torch.library), on top of the pybind function `cuda_extension.conv2d_relu_maxpool_forward`,
which stays callable on its own. As a custom op it has
  * a CUDA implementation: the pybind function, which guards x's device and launches on
    that device's current stream (so inputs on cuda:1 run on cuda:1, and CUDA-graph capture
    works);
  * a CPU "implementation" that only runs the binding's argument checks and raises its
    error ("x must be a CUDA tensor ..."): the op has no CPU kernel;
  * a fake (meta) implementation that checks the arguments like the binding and computes
    the output shape with PyTorch's formulas: torch.compile(fullgraph=True) and
    torch.export trace through it without a graph break;
  * an autograd formula whose backward raises: the op is forward-only. An output computed
    from tensors that require grad requires grad too, so `.backward()` reaches that clear
    error instead of "does not require grad" or silently missing gradients. The raise sits
    in a second op (fused_conv::conv2d_relu_maxpool_backward_unsupported) whose fake
    implementation returns empty gradients, so torch.compile can still trace a model with
    grad enabled; the error comes when the backward actually runs.

In plain eager calls on CUDA tensors (no torch.compile or export, no functorch transform,
mode or profiler; `_plain_eager_call`), ModelNew.forward skips the op's Python dispatch and
calls the pybind function itself (through a small autograd.Function whose backward raises the
same error when grad is on): same kernel and checks, a fraction of the host time, which is
what small layers are bound by. `conv2d_relu_maxpool(...)` is that call path as a function.

`ModelNew.prepack()` keeps the weight re-laid out for the Hopper kernels between calls (the
op's optional `packed_weight`, made by `cuda_extension.conv2d_relu_maxpool_pack_weight`), so
that a call skips that step; off by default, see its caveat.

`fuse_conv_relu_maxpool(module)` rewrites Conv2d -> ReLU -> MaxPool2d runs inside the
nn.Sequential containers of any model into ModelNew modules (e.g. torchvision's VGG
`.features`).
"""
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

try:
    import cuda_extension
except ImportError as error:  # pragma: no cover - exercised by users without a build
    raise ImportError(
        "cuda_extension is not built: run `bash utils/compile.sh` (or `pip install -e .`) "
        f"first ({error})") from error

IntPair = Union[int, Sequence[int]]

AUTO_CONFIG = -1
# Kernel variants the binding accepts as `config` (ids 0 .. VARIANT_COUNT - 1; -1 = auto).
VARIANT_COUNT = len(cuda_extension.conv2d_relu_maxpool_variants())

OP_NAMESPACE = "fused_conv"
OP_NAME = "conv2d_relu_maxpool"
OP_QUALNAME = f"{OP_NAMESPACE}::{OP_NAME}"
OP_SCHEMA = ("(Tensor x, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, "
             "int[2] dilation, int[2] pool_kernel, int[2] pool_stride, int[2] pool_padding, "
             "bool ceil_mode, int config=-1, Tensor? packed_weight=None) -> Tensor")
BACKWARD_OP_NAME = "conv2d_relu_maxpool_backward_unsupported"
BACKWARD_OP_QUALNAME = f"{OP_NAMESPACE}::{BACKWARD_OP_NAME}"
BACKWARD_OP_SCHEMA = ("(Tensor grad_output, SymInt[] x_shape, SymInt[] weight_shape, "
                      "SymInt[] bias_shape) -> (Tensor, Tensor, Tensor)")
FORWARD_ONLY_MESSAGE = (
    "fused_conv::conv2d_relu_maxpool (ModelNew, and the modules fuse_conv_relu_maxpool "
    "puts in) is forward-only: it has no backward, so no gradient can flow through it. "
    "Run it for inference under `with torch.no_grad():` or `with torch.inference_mode():`; "
    "to train, use the unfused layers (model.Model, or the model before "
    "fuse_conv_relu_maxpool).")


def _pair(value: IntPair, name: str) -> Tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) == 1:
        return (int(value[0]), int(value[0]))
    if len(value) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return (int(value[0]), int(value[1]))


# ---- the custom op -------------------------------------------------------------------------

def _conv2d_relu_maxpool_binding(x: torch.Tensor, weight: torch.Tensor,
                                 bias: Optional[torch.Tensor], stride: List[int],
                                 padding: List[int], dilation: List[int],
                                 pool_kernel: List[int], pool_stride: List[int],
                                 pool_padding: List[int], ceil_mode: bool,
                                 config: int = AUTO_CONFIG,
                                 packed_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The op's CUDA kernel (and CPU error path): the pybind function, which checks every
    argument, guards x's device and launches on that device's current stream."""
    return cuda_extension.conv2d_relu_maxpool_forward(
        x, weight, bias, stride, padding, dilation, pool_kernel, pool_stride, pool_padding,
        ceil_mode, config, packed_weight)


def conv_length(length: Any, kernel: Any, pad: int, stride: int, dilation: int) -> Any:
    """Convolution output length (kernels/conv_pool_shape.h conv_length; 0 when none)."""
    numerator = length + 2 * pad - dilation * (kernel - 1) - 1
    if numerator < 0:
        return 0
    return numerator // stride + 1


def pooled_length(length: Any, kernel: int, pad: int, stride: int, ceil_mode: bool) -> Any:
    """Pooling output length exactly as PyTorch's pooling_output_shape (and
    kernels/conv_pool_shape.h): in ceil mode the last window must start inside the input or
    the left padding."""
    numerator = length + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)
    out = numerator // stride + 1  # Python's // floors, also for a negative numerator
    if ceil_mode and (out - 1) * stride >= length + pad:
        out = out - 1
    return out


def _op_pair(value: Sequence[int], name: str) -> Tuple[int, int]:
    """The binding's pair rule: one value is used for both dimensions."""
    if len(value) not in (1, 2):
        raise RuntimeError(f"{name} must be an int pair (h, w), got {len(value)} values")
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def _shape_string(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(size) for size in t.shape) + "]"


# c10's names of dtypes, as the binding prints them ("x must be float32, float16 or bfloat16, got
# Double").
C10_DTYPE_NAMES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
    torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}


def _dtype_string(dtype: torch.dtype) -> str:
    return C10_DTYPE_NAMES.get(dtype, str(dtype))


# The dtypes the kernels take (x decides; weight and bias must match it), as the binding names
# them in its messages ("weight must be float16 like x, got Float").
KERNEL_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16",
                      torch.bfloat16: "bfloat16"}


def _conv2d_relu_maxpool_fake(x: torch.Tensor, weight: torch.Tensor,
                              bias: Optional[torch.Tensor], stride: List[int],
                              padding: List[int], dilation: List[int], pool_kernel: List[int],
                              pool_stride: List[int], pool_padding: List[int], ceil_mode: bool,
                              config: int = AUTO_CONFIG,
                              packed_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Output shape (and the binding's checks that need no data): used by torch.compile,
    torch.export and meta tensors. Messages are the binding's."""
    if x.dtype not in KERNEL_DTYPE_NAMES:
        raise RuntimeError("x must be float32, float16 or bfloat16, got "
                           f"{_dtype_string(x.dtype)}")
    for tensor, name, layout in ((x, "x", "(N, C, H, W)"),
                                 (weight, "weight", "(out_channels, in_channels, kH, kW)")):
        if tensor.dtype != x.dtype:
            raise RuntimeError(f"{name} must be {KERNEL_DTYPE_NAMES[x.dtype]} like x, got "
                               f"{_dtype_string(tensor.dtype)}")
        if tensor.dim() != 4:
            raise RuntimeError(f"{name} must be 4-D {layout}, got {tensor.dim()}-D with shape "
                               f"{_shape_string(tensor)}")
    batch, in_channels, in_h, in_w = x.shape
    out_channels, weight_in_channels, kernel_h, kernel_w = weight.shape
    torch._check(in_channels >= 1, lambda: "x must have at least 1 channel, got shape "
                 f"{_shape_string(x)}")
    torch._check(out_channels >= 1 and kernel_h >= 1 and kernel_w >= 1,
                 lambda: "weight must have out_channels, kH and kW >= 1, got shape "
                 f"{_shape_string(weight)}")
    torch._check(weight_in_channels == in_channels,
                 lambda: f"channel mismatch: x has {in_channels} channels but weight expects "
                 f"{weight_in_channels} (weight shape {_shape_string(weight)}); groups other "
                 "than 1 are not supported")
    if bias is not None:
        if bias.dtype != x.dtype:
            raise RuntimeError(f"bias must be {KERNEL_DTYPE_NAMES[x.dtype]} like x, got "
                               f"{_dtype_string(bias.dtype)}")
        torch._check(bias.dim() == 1 and bias.shape[0] == out_channels,
                     lambda: f"bias must be 1-D with out_channels = {out_channels} elements, "
                     f"got shape {_shape_string(bias)}")

    stride_h, stride_w = _op_pair(stride, "stride")
    pad_h, pad_w = _op_pair(padding, "padding")
    dil_h, dil_w = _op_pair(dilation, "dilation")
    pool_h, pool_w = _op_pair(pool_kernel, "pool_kernel")
    # An empty pool_stride means "same as pool_kernel", as in F.max_pool2d.
    pool_stride_h, pool_stride_w = ((pool_h, pool_w) if len(pool_stride) == 0
                                    else _op_pair(pool_stride, "pool_stride"))
    pool_pad_h, pool_pad_w = _op_pair(pool_padding, "pool_padding")
    for name, (h, w), lowest, what in (
            ("stride", (stride_h, stride_w), 1, "positive"),
            ("dilation", (dil_h, dil_w), 1, "positive"),
            ("padding", (pad_h, pad_w), 0, "non-negative"),
            ("pool_kernel", (pool_h, pool_w), 1, "positive"),
            ("pool_stride", (pool_stride_h, pool_stride_w), 1, "positive"),
            ("pool_padding", (pool_pad_h, pool_pad_w), 0, "non-negative")):
        if h < lowest or w < lowest:
            raise RuntimeError(f"{name} must be {what}, got ({h}, {w})")
    if pool_pad_h > pool_h // 2 or pool_pad_w > pool_w // 2:
        raise RuntimeError(f"pool_padding must be at most half of pool_kernel, got pool_padding "
                           f"({pool_pad_h}, {pool_pad_w}) for pool_kernel ({pool_h}, {pool_w})")
    if not AUTO_CONFIG <= config < VARIANT_COUNT:
        raise RuntimeError(f"config must be -1 (auto) or a variant id in [0, "
                           f"{VARIANT_COUNT - 1}], got {config}")

    conv_h = conv_length(in_h, kernel_h, pad_h, stride_h, dil_h)
    conv_w = conv_length(in_w, kernel_w, pad_w, stride_w, dil_w)
    torch._check(conv_h >= 1 and conv_w >= 1,
                 lambda: f"convolution output is smaller than 1 element: input {in_h}x{in_w} "
                 f"with kernel {kernel_h}x{kernel_w}, padding ({pad_h}, {pad_w}), dilation "
                 f"({dil_h}, {dil_w}) gives {conv_h}x{conv_w}")
    out_h = pooled_length(conv_h, pool_h, pool_pad_h, pool_stride_h, ceil_mode)
    out_w = pooled_length(conv_w, pool_w, pool_pad_w, pool_stride_w, ceil_mode)
    torch._check(out_h >= 1 and out_w >= 1,
                 lambda: f"pooled output is smaller than 1 element: convolution output "
                 f"{conv_h}x{conv_w} with pool_kernel ({pool_h}, {pool_w}), pool_stride "
                 f"({pool_stride_h}, {pool_stride_w}), pool_padding ({pool_pad_h}, "
                 f"{pool_pad_w}) gives {out_h}x{out_w}")

    # Devices last, as in the binding. Meta tensors (shape-only) pass; CPU ones cannot run.
    if x.device.type == "cpu":
        raise RuntimeError(f"x must be a CUDA tensor, got device {x.device}")
    if weight.device != x.device:
        raise RuntimeError(f"weight must be on x's device {x.device}, got {weight.device}")
    if bias is not None and bias.device != x.device:
        raise RuntimeError(f"bias must be on x's device {x.device}, got {bias.device}")
    # packed_weight: what the binding can check without the device's packed layout (its length
    # depends on the GPU; an empty one means none).
    if packed_weight is not None and packed_weight.numel() > 0:
        if packed_weight.dtype != x.dtype:
            raise RuntimeError(f"packed_weight must be {KERNEL_DTYPE_NAMES[x.dtype]} like x, got "
                               f"{_dtype_string(packed_weight.dtype)}")
        if packed_weight.device != x.device:
            raise RuntimeError(f"packed_weight must be on x's device {x.device}, got "
                               f"{packed_weight.device}")
        if packed_weight.dim() != 1:
            raise RuntimeError("packed_weight must be conv2d_relu_maxpool_pack_weight(weight): a "
                               f"1-D tensor, got shape {_shape_string(packed_weight)}")
    # The binding allocates a contiguous NCHW output in x's dtype, whatever x's layout.
    return x.new_empty((batch, out_channels, out_h, out_w))


def _setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, bias = inputs[:3]
    # Shapes only: the backward never computes anything, so no tensor is kept alive.
    ctx.x_shape = list(x.shape)
    ctx.weight_shape = list(weight.shape)
    ctx.bias_shape = None if bias is None else list(bias.shape)


def _conv2d_relu_maxpool_backward(ctx: Any, grad_output: torch.Tensor) -> Tuple[Any, ...]:
    """Autograd formula of the fused op: runs the op that raises FORWARD_ONLY_MESSAGE.

    Through an op rather than a plain raise so that torch.compile can trace a forward with
    grad enabled (the fake implementation returns empty gradients); the error comes when the
    backward runs, in eager and compiled code alike."""
    raise_forward_only = torch.ops.fused_conv.conv2d_relu_maxpool_backward_unsupported
    grad_x, grad_weight, grad_bias = raise_forward_only(grad_output, ctx.x_shape,
                                                        ctx.weight_shape, ctx.bias_shape or [])
    no_grad_for_settings = (None,) * 9  # stride ... config, packed_weight
    return (grad_x, grad_weight, None if ctx.bias_shape is None else grad_bias,
            *no_grad_for_settings)


def _backward_unsupported(grad_output: torch.Tensor, x_shape: List[int],
                          weight_shape: List[int],
                          bias_shape: List[int]) -> Tuple[torch.Tensor, torch.Tensor,
                                                          torch.Tensor]:
    raise RuntimeError(FORWARD_ONLY_MESSAGE)


def _backward_unsupported_fake(grad_output: torch.Tensor, x_shape: List[int],
                               weight_shape: List[int],
                               bias_shape: List[int]) -> Tuple[torch.Tensor, torch.Tensor,
                                                               torch.Tensor]:
    return (grad_output.new_empty(x_shape), grad_output.new_empty(weight_shape),
            grad_output.new_empty(bias_shape))


def _op_is_registered(name: str) -> bool:
    return hasattr(getattr(torch.ops, OP_NAMESPACE), name)


def _register_ops() -> None:
    """Defines both ops once per process. Re-importing this module (importlib.reload in a
    notebook, or a second import under another name) keeps the first registration: the
    dispatcher refuses a second definition of the same name."""
    if not _op_is_registered(BACKWARD_OP_NAME):
        backward_op = torch.library.custom_op(BACKWARD_OP_QUALNAME, mutates_args=(),
                                              schema=BACKWARD_OP_SCHEMA)(_backward_unsupported)
        backward_op.register_fake(_backward_unsupported_fake)
    if not _op_is_registered(OP_NAME):
        op = torch.library.custom_op(OP_QUALNAME, mutates_args=(), device_types="cuda",
                                     schema=OP_SCHEMA)(_conv2d_relu_maxpool_binding)
        # No CPU kernel exists; the binding's checks give the error ("x must be a CUDA
        # tensor", or whichever argument is wrong first), as the pybind function does.
        op.register_kernel("cpu")(_conv2d_relu_maxpool_binding)
        op.register_fake(_conv2d_relu_maxpool_fake)
        op.register_autograd(_conv2d_relu_maxpool_backward, setup_context=_setup_context)


_register_ops()


# ---- the eager call path -------------------------------------------------------------------

class _ForwardOnly(torch.autograd.Function):
    """Autograd node of the direct path below when grad is on: the backward raises
    FORWARD_ONLY_MESSAGE, as the op's formula does."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                *settings: Any) -> torch.Tensor:
        return _conv2d_relu_maxpool_binding(x, weight, bias, *settings)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Tuple[Any, ...]:
        raise RuntimeError(FORWARD_ONLY_MESSAGE)


_PLAIN_TENSOR_TYPES = (torch.Tensor, nn.Parameter)
_functorch_level = torch._C._functorch.maybe_current_level
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes_on = torch._C._is_torch_function_mode_enabled
_profiler_on = torch._C._autograd._profiler_enabled


def _nothing_watches(x: Any, weight: Any, bias: Any) -> bool:
    """Whether nothing would see the op between the caller and its kernel: plain tensors (no
    subclass, fake tensor or proxy), no torch.compile / torch.export / jit tracing, no vmap or
    other functorch transform, no torch function or dispatch mode, no profiler (whose traces
    name the op)."""
    # is_compiling() first: under torch.compile it is the constant True, so Dynamo never
    # traces the checks after it.
    return (not torch.compiler.is_compiling() and not torch.jit.is_tracing()
            and type(x) is torch.Tensor and type(weight) in _PLAIN_TENSOR_TYPES
            and (bias is None or type(bias) in _PLAIN_TENSOR_TYPES)
            and not _function_modes_on() and _dispatch_modes() == 0
            and _functorch_level() is None and not _profiler_on())


def _plain_eager_call(x: Any, weight: Any, bias: Any) -> bool:
    """Whether conv2d_relu_maxpool may skip the op: nothing watches, and x is on a GPU (CPU
    and meta tensors take the op, whose CPU kernel raises and whose fake one gives shapes)."""
    return _nothing_watches(x, weight, bias) and x.is_cuda


def conv2d_relu_maxpool(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                        stride: Sequence[int], padding: Sequence[int],
                        dilation: Sequence[int], pool_kernel: Sequence[int],
                        pool_stride: Sequence[int], pool_padding: Sequence[int],
                        ceil_mode: bool, config: int = AUTO_CONFIG,
                        packed_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """torch.ops.fused_conv.conv2d_relu_maxpool, minus its Python dispatch in plain eager
    calls (what ModelNew.forward runs).

    The custom op's dispatch (torch.library's Python wrappers, then the autograd formula)
    costs more host time than the kernels of small layers take on the GPU. Where nothing
    could see the op (`_plain_eager_call`), this calls the pybind function itself: under
    no_grad or inference_mode directly, with grad on through `_ForwardOnly`, whose backward
    raises the op's error. Same kernel, same checks and errors, same stream. Everywhere else
    (torch.compile, torch.export, vmap, fake or meta tensors, modes, the profiler) it calls
    the op."""
    if not _plain_eager_call(x, weight, bias):
        return torch.ops.fused_conv.conv2d_relu_maxpool(
            x, weight, bias, stride, padding, dilation, pool_kernel, pool_stride, pool_padding,
            ceil_mode, config, packed_weight)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return _ForwardOnly.apply(x, weight, bias, stride, padding, dilation, pool_kernel,
                                  pool_stride, pool_padding, ceil_mode, config, packed_weight)
    return _conv2d_relu_maxpool_binding(x, weight, bias, stride, padding, dilation, pool_kernel,
                                        pool_stride, pool_padding, ceil_mode, config,
                                        packed_weight)


# ---- the module ----------------------------------------------------------------------------

class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntPair,
                 pool_kernel_size: IntPair, stride: IntPair = 1, padding: IntPair = 0,
                 dilation: IntPair = 1, pool_stride: Optional[IntPair] = None,
                 pool_padding: IntPair = 0, ceil_mode: bool = False, bias: bool = True):
        super().__init__()
        if isinstance(padding, str):
            raise ValueError("padding must be an int or a pair of ints; string padding "
                             f"({padding!r}) is not supported by the fused kernel")
        # Parameter holder only: gives Model's names (conv.weight, conv.bias) and init.
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation,
                              bias=bias)
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        self.pool_kernel = _pair(pool_kernel_size, "pool_kernel_size")
        self.pool_stride = self.pool_kernel if pool_stride is None else _pair(pool_stride,
                                                                             "pool_stride")
        self.pool_padding = _pair(pool_padding, "pool_padding")
        self.ceil_mode = bool(ceil_mode)
        self.config = AUTO_CONFIG
        self.prepack(False)

    def prepack(self, enabled: bool = True) -> "ModelNew":
        """Keeps a packed copy of the weight for the Hopper (wgmma) kernels, so that a call
        does not re-lay the weight out first (on the H200: VGG-16's block 5 at batch 32 6-9%
        faster, large layers within noise; docs/PERF.md v18). Layers of few tiles (batch 1 to
        8 of VGG-like layers) do not use the copy: they run narrower blocks that pack their
        own weights, which measured faster there (v19, v20). Returns self;
        prepack(False) drops the copy.

        The copy is made on the next forward and made again whenever the weight is replaced
        (`.to()`, `.half()`, a new Parameter) or changed in place through PyTorch (optimizer
        steps, load_state_dict, nn.init, `weight.copy_()` under no_grad: anything that bumps
        its version counter). Writes that bypass the version counter are not seen: after
        `weight.data.copy_(...)` / `weight.data[...] = ...`, or on a weight made under
        torch.inference_mode(), call prepack() again. In eager mode only: traced by
        torch.compile or torch.export, the op re-lays the weight out on each call as usual.
        Costs one more copy of the weight in GPU memory; helps only 3x3 convolutions on
        Hopper (elsewhere the copy is empty and nothing changes)."""
        self._prepack = bool(enabled)
        self._packed_weight: Optional[torch.Tensor] = None
        self._packed_source: Optional[torch.Tensor] = None
        self._packed_version = -1
        return self

    def _current_packed_weight(self) -> Optional[torch.Tensor]:
        """The packed copy of self.conv.weight as it is now, packing it when it changed."""
        weight = self.conv.weight
        if not weight.is_cuda:
            return None  # the op raises its device error
        # Inference tensors have no version counter: their in-place changes are not seen
        # (the docstring above says so).
        version = -1 if weight.is_inference() else weight._version
        source = self._packed_source
        # _packed_source (a detached alias: same storage, same version counter) keeps the
        # storage the copy was packed from alive, so a new weight cannot take its address.
        if (source is None or source.data_ptr() != weight.data_ptr()
                or source.dtype != weight.dtype or source.shape != weight.shape
                or source.stride() != weight.stride() or version != self._packed_version):
            self._packed_weight = cuda_extension.conv2d_relu_maxpool_pack_weight(
                weight.detach())
            self._packed_source = weight.detach()
            self._packed_version = version
        return self._packed_weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = None
        if self._prepack and not torch.compiler.is_compiling():
            packed = self._current_packed_weight()
        return conv2d_relu_maxpool(
            x, self.conv.weight, self.conv.bias, self.stride, self.padding, self.dilation,
            self.pool_kernel, self.pool_stride, self.pool_padding, self.ceil_mode, self.config,
            packed)

    def extra_repr(self) -> str:
        return (f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
                f"pool_kernel={self.pool_kernel}, pool_stride={self.pool_stride}, "
                f"pool_padding={self.pool_padding}, ceil_mode={self.ceil_mode}"
                + (", prepack=True" if self._prepack else ""))


# ---- fusing the layers of an existing model ------------------------------------------------

def _has_hooks(module: nn.Module) -> bool:
    """Hooks on a layer would be lost by replacing it, so such layers are not fused."""
    return any(getattr(module, name, None) for name in (
        "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"))


def _conv_padding(conv: nn.Conv2d) -> Optional[Tuple[int, int]]:
    """conv's padding as a symmetric pair, or None when the kernel cannot express it."""
    if not isinstance(conv.padding, str):
        return _pair(conv.padding, "padding")
    if conv.padding == "valid":
        return (0, 0)
    # 'same' pads dilation * (kernel - 1) in total per dimension, the extra element on the
    # right when that is odd: fusable only when it splits evenly.
    totals = [d * (k - 1) for d, k in zip(_pair(conv.dilation, "dilation"),
                                          _pair(conv.kernel_size, "kernel_size"))]
    if any(total % 2 for total in totals):
        return None
    return (totals[0] // 2, totals[1] // 2)


def _fusable_conv(conv: nn.Module) -> bool:
    # Exact types: a subclass may override forward with something else.
    if type(conv) is not nn.Conv2d or _has_hooks(conv):
        return False
    if conv.groups != 1 or conv.padding_mode != "zeros" or _conv_padding(conv) is None:
        return False
    dtype = conv.weight.dtype
    return dtype in KERNEL_DTYPE_NAMES and (conv.bias is None or conv.bias.dtype == dtype)


def _fusable_relu(relu: nn.Module) -> bool:
    return type(relu) is nn.ReLU and not _has_hooks(relu)


def _fusable_pool(pool: nn.Module) -> bool:
    if type(pool) is not nn.MaxPool2d or _has_hooks(pool) or pool.return_indices:
        return False
    return _pair(pool.dilation, "dilation") == (1, 1)


def fused_from_layers(conv: nn.Conv2d, pool: nn.MaxPool2d) -> ModelNew:
    """A ModelNew computing pool(relu(conv(x))) that holds `conv` itself as its parameter
    holder: the same Parameter objects (same device, dtype, requires_grad), no copy."""
    with torch.device("meta"):  # skip allocating and initialising a throw-away Conv2d
        fused = ModelNew(conv.in_channels, conv.out_channels, conv.kernel_size,
                         pool.kernel_size, stride=conv.stride, padding=_conv_padding(conv),
                         dilation=conv.dilation, pool_stride=pool.stride,
                         pool_padding=pool.padding, ceil_mode=pool.ceil_mode,
                         bias=conv.bias is not None)
    fused.conv = conv
    fused.train(conv.training)
    return fused


def _fuse_sequential(sequence: nn.Sequential, prepack: bool) -> int:
    """Fuses the Conv2d, ReLU, MaxPool2d runs of one Sequential in place; returns how many."""
    fused_count = 0
    index = 0
    while index + 2 < len(sequence):
        conv, relu, pool = sequence[index], sequence[index + 1], sequence[index + 2]
        if _fusable_conv(conv) and _fusable_relu(relu) and _fusable_pool(pool):
            sequence[index] = fused_from_layers(conv, pool).prepack(prepack)
            sequence[index + 1] = nn.Identity()
            sequence[index + 2] = nn.Identity()
            fused_count += 1
            index += 3
        else:
            index += 1
    return fused_count


def fuse_conv_relu_maxpool(module: nn.Module, prepack: bool = False) -> nn.Module:
    """Replaces, in place, every Conv2d -> ReLU -> MaxPool2d run of consecutive layers in
    the nn.Sequential containers of `module` (at any depth, `module` itself included) by one
    ModelNew, and returns `module`.

    The ModelNew holds the original Conv2d (weights shared, not copied; same device and
    dtype); the ReLU and MaxPool2d positions become nn.Identity, so the indices of all
    other layers stay valid (e.g. torchvision VGG's `features[i]`). Parameter names change
    from `features.0.weight` to `features.0.conv.weight`: load a state dict before fusing.

    Fused only what the kernel computes exactly: an nn.Conv2d (exact type) with groups=1,
    padding_mode='zeros', numeric, 'valid' or evenly splitting 'same' padding, weight and
    bias both float32, float16 or bfloat16; an nn.ReLU (inplace or not); an nn.MaxPool2d
    with dilation 1 and return_indices=False; none of the three with hooks. Sequential
    subclasses that override forward are left alone. Everything else is untouched. The fused
    modules run on CUDA only, and forward only (see ModelNew). prepack=True calls
    ModelNew.prepack() on each (read its caveat on weight writes that bypass the version
    counter).
    """
    sequences = [m for m in module.modules()
                 if isinstance(m, nn.Sequential) and type(m).forward is nn.Sequential.forward]
    for sequence in sequences:
        _fuse_sequential(sequence, prepack)
    return module
