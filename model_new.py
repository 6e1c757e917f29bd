"""ModelNew: Model's Conv2d -> ReLU -> MaxPool2d as one fused CUDA kernel.

Same constructor arguments and parameter names as model.Model, so
`ModelNew(*args).load_state_dict(Model(*args).state_dict())` works. `self.conv` is kept as
an nn.Conv2d purely to hold the weight and bias with Model's names and initialisation, and
is never called.

The kernel is a PyTorch custom op, `torch.ops.fused_conv.conv2d_relu_maxpool`, defined in
the binding's C++ (TORCH_LIBRARY, kernels/conv_relu_maxpool_binding.cpp) on top of the pybind
function `cuda_extension.conv2d_relu_maxpool_forward`, which stays callable on its own. A call
through torch.ops meets no Python on its way to the kernel. The op has
  * a CUDA kernel: the binding's forward, which guards x's device and launches on that
    device's current stream (so inputs on cuda:1 run on cuda:1, and CUDA-graph capture
    works);
  * a CPU kernel that only runs the binding's argument checks and raises its error ("x must
    be a CUDA tensor ..."): the op computes nothing on the CPU;
  * a fake (meta) implementation, registered here, that runs the binding's own checks and
    shape function on the tensors' metadata: torch.compile(fullgraph=True) and torch.export
    trace through it without a graph break;
  * an autograd kernel (C++) whose backward raises: the op is forward-only. An output
    computed from tensors that require grad requires grad too, so `.backward()` reaches that
    clear error instead of "does not require grad" or silently missing gradients. The raise
    sits in a second op (fused_conv::conv2d_relu_maxpool_backward_unsupported, defined here)
    whose fake implementation returns empty gradients, so torch.compile can still trace a
    model with grad enabled; the error comes when the backward actually runs.

In plain eager calls on CUDA tensors (no torch.compile or export, no functorch transform,
mode or profiler; `_plain_eager_call`), ModelNew.forward skips the dispatcher and calls the
pybind function itself (through a small autograd.Function whose backward raises the same error
when grad is on): same kernel and checks, less host time, which is what small layers are bound
by. `conv2d_relu_maxpool(...)` is that call path as a function.

`ModelNew.prepack()` keeps the weight re-laid out for the Hopper kernels between calls (the
op's optional `packed_weight`, made by `cuda_extension.conv2d_relu_maxpool_pack_weight`), so
that a call skips that step; off by default, see its caveat.

`fuse_conv_relu_maxpool(module)` rewrites Conv2d -> ReLU -> MaxPool2d runs inside the
nn.Sequential containers of any model into ModelNew modules (e.g. torchvision's VGG
`.features`).
"""
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch
import torch._prims_common
import torch.fx
import torch.nn as nn

try:
    import cuda_extension
except ImportError as error:  # pragma: no cover - exercised by users without a build
    raise ImportError(
        "cuda_extension is not built: run `bash utils/compile.sh` (or `pip install -e .`) "
        f"first ({error})") from error

IntPair = Union[int, Sequence[int]]

AUTO_CONFIG = -1

OP_NAMESPACE = "fused_conv"
OP_NAME = "conv2d_relu_maxpool"
OP_QUALNAME = f"{OP_NAMESPACE}::{OP_NAME}"
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


def _setting(value: IntPair) -> Tuple[int, ...]:
    """A ModelNew setting as the op takes it: an int for both dimensions, a sequence as given
    (one value for both; another length stays, for the op's check to refuse at forward)."""
    if isinstance(value, int):
        return (value, value)
    value = tuple(int(v) for v in value)
    return (value[0], value[0]) if len(value) == 1 else value


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


# The dtypes the kernels take (x decides; weight and bias must match it).
KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _conv2d_relu_maxpool_fake(x: torch.Tensor, weight: torch.Tensor,
                              bias: Optional[torch.Tensor], stride: List[int],
                              padding: List[int], dilation: List[int], pool_kernel: List[int],
                              pool_stride: List[int], pool_padding: List[int], ceil_mode: bool,
                              config: int = AUTO_CONFIG,
                              packed_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The output (shape, dtype, device, layout) for torch.compile, torch.export and meta
    tensors. The binding's own checks decide it (conv2d_relu_maxpool_output: the forward's
    checks on the tensors' metadata, sizes possibly symbolic), so the fake refuses what the
    forward refuses, with its message."""
    shape, channels_last = cuda_extension.conv2d_relu_maxpool_output(
        x, weight, bias, stride, padding, dilation, pool_kernel, pool_stride, pool_padding,
        ceil_mode, config, packed_weight)
    return torch.empty(shape, dtype=x.dtype, device=x.device,
                       memory_format=torch.channels_last if channels_last
                       else torch.contiguous_format)


def _backward_unsupported(grad_output: torch.Tensor, x_shape: List[int],
                          weight_shape: List[int],
                          bias_shape: List[int]) -> Tuple[torch.Tensor, torch.Tensor,
                                                          torch.Tensor]:
    raise RuntimeError(FORWARD_ONLY_MESSAGE)


def _backward_unsupported_fake(grad_output: torch.Tensor, x_shape: List[int],
                               weight_shape: List[int],
                               bias_shape: List[int]) -> Tuple[torch.Tensor, torch.Tensor,
                                                               torch.Tensor]:
    """Empty gradients while torch.compile / torch.export trace (fake tensors), so that a
    forward with grad enabled traces; on real meta tensors (`.backward()` of a meta-device
    ModelNew's output) the backward runs, and raises as it does on CUDA."""
    from torch._subclasses.fake_tensor import FakeTensor
    if not isinstance(grad_output, FakeTensor):
        raise RuntimeError(FORWARD_ONLY_MESSAGE)
    return (grad_output.new_empty(x_shape), grad_output.new_empty(weight_shape),
            grad_output.new_empty(bias_shape))


def _op_is_registered(name: str) -> bool:
    return hasattr(getattr(torch.ops, OP_NAMESPACE), name)


def _register_ops() -> None:
    """Completes both ops once per process. The forward op, with its CPU, CUDA and autograd
    kernels, is defined in C++ (kernels/conv_relu_maxpool_binding.cpp, when cuda_extension
    loads): a call through torch.ops meets no Python on its way to the kernel. Here it gets
    its fake implementation, and the backward op its autograd kernel calls is defined.
    Re-importing this module (importlib.reload in a notebook, or a second import under
    another name) keeps the first registrations."""
    if not _op_is_registered(BACKWARD_OP_NAME):
        backward_op = torch.library.custom_op(BACKWARD_OP_QUALNAME, mutates_args=(),
                                              schema=BACKWARD_OP_SCHEMA)(_backward_unsupported)
        backward_op.register_fake(_backward_unsupported_fake)
    # register_fake also gives the op its Meta kernel: that kernel's presence says whether an
    # earlier import registered the fake already.
    if not torch._C._dispatch_has_kernel_for_dispatch_key(OP_QUALNAME, "Meta"):
        torch.library.register_fake(OP_QUALNAME, _conv2d_relu_maxpool_fake)


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
    """torch.ops.fused_conv.conv2d_relu_maxpool, minus the dispatcher in plain eager calls
    (what ModelNew.forward runs).

    Small layers are bound by host time, and the dispatcher's path (the autograd kernel, then
    the CUDA kernel) adds to it. Where nothing could see the op (`_plain_eager_call`), this calls the pybind function itself: under
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
        # As Model (nn.Conv2d, nn.MaxPool2d): any values construct, and the op's checks name
        # what is wrong at the first forward (a negative padding, a 3-value pool kernel, ...).
        self.stride = _setting(stride)
        self.padding = _setting(padding)
        self.dilation = _setting(dilation)
        self.pool_kernel = _setting(pool_kernel_size)
        self.pool_stride = self.pool_kernel if pool_stride is None else _setting(pool_stride)
        self.pool_padding = _setting(pool_padding)
        self.ceil_mode = bool(ceil_mode)
        self.config = AUTO_CONFIG
        self.prepack(False)

    def prepack(self, enabled: bool = True) -> "ModelNew":
        """Keeps a packed copy of the weight for the Hopper (wgmma) kernels, so that a call
        does not re-lay the weight out first (on the H200: VGG-16's block 5 at batch 32 6-9%
        faster, large layers within noise; docs/PERF.md). Layers of few tiles (batch 1 to
        8 of VGG-like layers) do not use the copy: they run narrower blocks that pack their
        own weights, which measured faster there. Returns self;
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
        if torch.compiler.is_compiling():  # traced as is: no error context to add
            return self._forward(x)
        try:
            return self._forward(x)
        except RuntimeError as error:
            if type(error) is not RuntimeError:  # OutOfMemoryError, AcceleratorError: as raised
                raise
            # Which of a network's fused layers refused its input, and why.
            raise RuntimeError(f"{self._layer_name()}: {error}") from error

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = None
        if self._prepack and not torch.compiler.is_compiling():
            packed = self._current_packed_weight()
        return conv2d_relu_maxpool(
            x, self.conv.weight, self.conv.bias, self.stride, self.padding, self.dilation,
            self.pool_kernel, self.pool_stride, self.pool_padding, self.ceil_mode, self.config,
            packed)

    def _layer_name(self) -> str:
        """'ModelNew features.3 (64 -> 128, kernel 3x3)': the name fuse_conv_relu_maxpool gave
        it in its model, if any, and its geometry."""
        name = getattr(self, "fused_name", None)
        kernel = "x".join(str(k) for k in self.conv.kernel_size)
        return (f"ModelNew{' ' + name if name else ''} ({self.conv.in_channels} -> "
                f"{self.conv.out_channels}, kernel {kernel})")

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
    return dtype in KERNEL_DTYPES and (conv.bias is None or conv.bias.dtype == dtype)


def _fusable_relu(relu: nn.Module) -> bool:
    return type(relu) is nn.ReLU and not _has_hooks(relu)


def _conv_relu_fusable(conv: nn.Conv2d) -> bool:
    """A Conv2d -> ReLU with no pool after it is fused (conv_relu=True) only where the Hopper
    3 x 3 kernel takes it without a pool: 3 x 3, stride 1, dilation 1, at least 8 input
    channels (fewer take the flat kernel, not measured without a pool). Elsewhere the op
    would run its general kernel, which is slower than cuDNN's convolution plus a ReLU."""
    return (_pair(conv.kernel_size, "kernel_size") == (3, 3)
            and _pair(conv.stride, "stride") == (1, 1)
            and _pair(conv.dilation, "dilation") == (1, 1) and conv.in_channels >= 8)


def _fusable_pool(pool: nn.Module) -> bool:
    if type(pool) is not nn.MaxPool2d or _has_hooks(pool) or pool.return_indices:
        return False
    return _pair(pool.dilation, "dilation") == (1, 1)


def _fusable_batch_norm(batch_norm: nn.Module, conv: nn.Conv2d) -> Optional[str]:
    """Why `batch_norm` cannot be folded into `conv`, or None when it can."""
    if type(batch_norm) is not nn.BatchNorm2d or _has_hooks(batch_norm):
        return "a BatchNorm2d subclass or one with hooks"
    if batch_norm.training:
        return "its BatchNorm2d is in training mode (batch statistics): never folded"
    if batch_norm.running_mean is None or batch_norm.running_var is None:
        return "its BatchNorm2d keeps no running statistics"
    if batch_norm.num_features != conv.out_channels:
        return "its BatchNorm2d has another channel count"
    return None


def folded_conv(conv: nn.Conv2d, batch_norm: nn.BatchNorm2d) -> nn.Conv2d:
    """An nn.Conv2d computing batch_norm(conv(x)) for an eval-mode batch_norm: weight scaled
    per output channel by gamma / sqrt(running_var + eps), bias (b - running_mean) times that
    plus beta, worked out in float64 and stored in conv's dtype and device, without
    gradients. A copy: later changes to conv's or batch_norm's parameters do not reach it. Runs
    once, on the parameters, at fusion time (no forward computes with it)."""
    with torch.no_grad():
        scale = torch.rsqrt(batch_norm.running_var.double() + batch_norm.eps)
        shift = -batch_norm.running_mean.double() * scale
        if batch_norm.affine:
            scale = scale * batch_norm.weight.double()
            shift = shift * batch_norm.weight.double() + batch_norm.bias.double()
        weight = conv.weight.double() * scale.reshape(-1, 1, 1, 1)
        bias = shift if conv.bias is None else conv.bias.double() * scale + shift
    with torch.device("meta"):  # the shell only: its parameters are replaced below
        folded = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                           conv.padding, conv.dilation, bias=True,
                           padding_mode=conv.padding_mode)
    dtype = conv.weight.dtype
    folded.weight = nn.Parameter(weight.to(dtype), requires_grad=False)
    folded.bias = nn.Parameter(bias.to(dtype), requires_grad=False)
    folded.train(conv.training)
    return folded


def fused_from_layers(conv: nn.Conv2d, pool: Optional[nn.MaxPool2d],
                      batch_norm: Optional[nn.BatchNorm2d] = None) -> ModelNew:
    """A ModelNew computing pool(relu(conv(x))) (pool(relu(batch_norm(conv(x)))) with an
    eval-mode batch_norm; pool None: relu(conv(x)), as a 1 x 1 / stride 1 pool) that holds
    `conv` itself as its parameter holder: the same Parameter objects (same device, dtype,
    requires_grad), no copy; with a batch_norm, folded_conv's copy instead."""
    holder = conv if batch_norm is None else folded_conv(conv, batch_norm)
    pool_settings = (dict(pool_kernel_size=pool.kernel_size, pool_stride=pool.stride,
                          pool_padding=pool.padding, ceil_mode=pool.ceil_mode)
                     if pool is not None else dict(pool_kernel_size=1))
    with torch.device("meta"):  # skip allocating and initialising a throw-away Conv2d
        fused = ModelNew(conv.in_channels, conv.out_channels, conv.kernel_size,
                         stride=conv.stride, padding=_conv_padding(conv),
                         dilation=conv.dilation, bias=holder.bias is not None,
                         **pool_settings)
    fused.conv = holder
    fused.train(conv.training)
    return fused


@dataclass
class FusionEntry:
    """One nn.Conv2d that fuse_conv_relu_maxpool looked at: fused or not, and why."""
    conv: str                  # its qualified name in the model
    fused: bool
    why: str                   # "fused", "fused, BatchNorm2d folded", "fused (no pool)", ...
                               # or the reason it is not
    batch_norm: Optional[str] = None
    relu: Optional[str] = None  # a module's qualified name, or the function that was called
    pool: Optional[str] = None


class FusionReport(list):
    """fuse_conv_relu_maxpool's account (report=True): a FusionEntry per convolution."""

    def fused(self) -> List[FusionEntry]:
        return [entry for entry in self if entry.fused]

    def __str__(self) -> str:
        lines = [f"{len(self.fused())} of {len(self)} convolutions fused"]
        for entry in self:
            parts = [entry.conv] + [p for p in (entry.batch_norm, entry.relu, entry.pool) if p]
            lines.append(f"  {' -> '.join(parts)}: {entry.why}")
        return "\n".join(lines)


def _set_submodule(root: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, attribute = name.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, attribute, module)


def _fused_why(batch_norm: Optional[nn.Module], pooled: bool) -> str:
    return ("fused" + (", BatchNorm2d folded" if batch_norm is not None else "")
            + ("" if pooled else " (no pool)"))


def _fuse_sequential(sequence: nn.Sequential, prefix: str, prepack: bool, conv_relu: bool,
                     report: FusionReport) -> None:
    """Fuses the Conv2d -> [eval BatchNorm2d] -> ReLU -> MaxPool2d runs of one Sequential's
    consecutive layers in place (conv_relu: also Conv2d -> [BatchNorm2d] -> ReLU runs with no
    fusable pool after them, where _conv_relu_fusable): the run's first position gets the
    ModelNew, the others nn.Identity."""
    index = 0
    while index + 1 < len(sequence):
        conv = sequence[index]
        bn = sequence[index + 1] if type(sequence[index + 1]) is nn.BatchNorm2d else None
        rest = index + (2 if bn is not None else 1)
        if (rest < len(sequence) and _fusable_conv(conv) and _fusable_relu(sequence[rest])
                and (bn is None or _fusable_batch_norm(bn, conv) is None)):
            pooled = rest + 1 < len(sequence) and _fusable_pool(sequence[rest + 1])
            if pooled or (conv_relu and _conv_relu_fusable(conv)):
                end = rest + 1 if pooled else rest  # the run's last position
                keys = list(sequence._modules)  # the children's names ("0", or "conv0" ...)
                names = [f"{prefix}{keys[i]}" for i in range(index, end + 1)]
                pool = sequence[end] if pooled else None
                sequence[index] = fused_from_layers(conv, pool, bn).prepack(prepack)
                sequence[index].fused_name = f"{prefix}{keys[index]}"
                for position in range(index + 1, end + 1):
                    sequence[position] = nn.Identity()
                report.append(FusionEntry(names[0], True, _fused_why(bn, pooled),
                                          names[1] if bn is not None else None,
                                          names[rest - index],
                                          names[-1] if pooled else None))
                index = end + 1
                continue
        index += 1


class _FusionTracer(torch.fx.Tracer):
    """symbolic_trace's tracer, with the fused modules as leaves."""

    def is_leaf_module(self, module: nn.Module, qualified_name: str) -> bool:
        return isinstance(module, ModelNew) or super().is_leaf_module(module, qualified_name)


_RELU_FUNCTIONS = {torch.relu: "torch.relu", torch.relu_: "torch.relu_",
                   torch.nn.functional.relu: "F.relu"}
_MAX_POOL_FUNCTIONS = {torch.nn.functional.max_pool2d: "F.max_pool2d",
                       torch.max_pool2d: "torch.max_pool2d"}


def _only_user(node: "torch.fx.Node") -> Optional["torch.fx.Node"]:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _fuse_traced(module: nn.Module, graph: "torch.fx.Graph", prepack: bool, conv_relu: bool,
                 report: FusionReport) -> None:
    """Fuses, in place, the runs torch.fx's graph of `module` shows across its forward code:
    an nn.Conv2d whose output is used only by an eval nn.BatchNorm2d (optional), whose output
    is used only by a ReLU (nn.ReLU, F.relu, torch.relu, Tensor.relu, inplace or not), whose
    output is used only by an nn.MaxPool2d, each module called nowhere else. The Conv2d's place
    gets the ModelNew, the BatchNorm2d's, nn.ReLU's and MaxPool2d's nn.Identity; a functional
    ReLU stays, applied to the pooled output, where it changes nothing (it is >= 0 or NaN), and
    so does an nn.ReLU that forward calls elsewhere too.
    conv_relu: a run whose ReLU is not followed so by a pool the kernel takes is fused without
    the pool, where _conv_relu_fusable (the ReLU's output may then have any users)."""
    modules = dict(module.named_modules())
    calls = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1

    def called(node: Optional["torch.fx.Node"], kind: type) -> bool:
        return (node is not None and node.op == "call_module"
                and type(modules.get(node.target)) is kind)

    for node in graph.nodes:
        if not called(node, nn.Conv2d):
            continue
        conv = modules[node.target]
        entry = FusionEntry(node.target, False, "")
        report.append(entry)
        if not _fusable_conv(conv):
            entry.why = ("the kernel does not take this convolution (groups, padding mode or "
                         "string padding, dtype, subclass or hooks)")
            continue
        chain = [node]
        following = _only_user(node)
        batch_norm = None
        if called(following, nn.BatchNorm2d):
            batch_norm = modules[following.target]
            entry.batch_norm = following.target
            why = _fusable_batch_norm(batch_norm, conv)
            if why is not None:
                entry.why = why
                continue
            chain.append(following)
            following = _only_user(following)
        relu = following
        if called(relu, nn.ReLU) and _fusable_relu(modules[relu.target]):
            entry.relu = relu.target
        elif relu is not None and relu.op == "call_function" and relu.target in _RELU_FUNCTIONS:
            entry.relu = _RELU_FUNCTIONS[relu.target]
        elif relu is not None and relu.op == "call_method" and relu.target in ("relu", "relu_"):
            entry.relu = f"Tensor.{relu.target}"
        else:
            entry.why = "its output does not go only to a ReLU (after at most a BatchNorm2d)"
            continue
        chain.append(relu)
        pool = _only_user(relu)
        why_no_pool = None
        if pool is not None and pool.op == "call_function" and pool.target in _MAX_POOL_FUNCTIONS:
            why_no_pool = (f"the max-pool is a call of {_MAX_POOL_FUNCTIONS[pool.target]}, "
                           "which cannot be replaced in place (torch.compile with "
                           "enable_inductor_fusion() fuses it)")
        elif not called(pool, nn.MaxPool2d) or not _fusable_pool(modules[pool.target]):
            why_no_pool = "its ReLU's output does not go only to an nn.MaxPool2d the kernel takes"
        if why_no_pool is not None and not (conv_relu and _conv_relu_fusable(conv)):
            if pool is not None and pool.op == "call_function" and \
                    pool.target in _MAX_POOL_FUNCTIONS:
                entry.pool = _MAX_POOL_FUNCTIONS[pool.target]
            entry.why = why_no_pool
            continue
        if why_no_pool is None:
            entry.pool = pool.target
            chain.append(pool)
        # An nn.ReLU called elsewhere too (ResNet's blocks call theirs twice) stays in place,
        # applied to the fused output, where it changes nothing; other modules must be once.
        shared = [n.target for n in chain if n.op == "call_module" and calls[n.target] > 1
                  and type(modules[n.target]) is not nn.ReLU]
        if shared:
            entry.why = f"{shared[0]} is called more than once in forward"
            continue
        pool_module = modules[pool.target] if why_no_pool is None else None
        fused = fused_from_layers(conv, pool_module, batch_norm).prepack(prepack)
        fused.fused_name = node.target
        _set_submodule(module, node.target, fused)
        for later in chain[1:]:
            if later.op == "call_module" and calls[later.target] == 1:
                _set_submodule(module, later.target, nn.Identity())
        entry.fused = True
        entry.why = _fused_why(batch_norm, pool_module is not None)


def fuse_conv_relu_maxpool(module: nn.Module, prepack: bool = False, report: bool = False,
                           conv_relu: bool = False
                           ) -> Union[nn.Module, Tuple[nn.Module, FusionReport]]:
    """Replaces, in place, the Conv2d -> [BatchNorm2d] -> ReLU -> MaxPool2d runs of `module`
    by ModelNew modules and returns `module` (with report=True, `(module, FusionReport)`: for
    every convolution, whether it was fused and why not).

    Two passes, both in place:
      * nn.Sequential containers (at any depth, `module` itself included; not subclasses that
        override forward): runs of consecutive layers;
      * everything else torch.fx can trace (symbolic_trace of `module`): a run whose tensors
        flow conv -> [bn] -> relu -> pool through forward code (ResNet's, GoogLeNet's and
        Inception's stems, DenseNet's first block, F.relu / torch.relu / Tensor.relu calls),
        each intermediate used once and each module called once (but an nn.ReLU, which is
        then left in place: ResNet's blocks call theirs twice). A model fx cannot trace
        (data-dependent control flow) keeps the first pass only.
    The run's Conv2d position gets the ModelNew, its BatchNorm2d, nn.ReLU and MaxPool2d
    positions nn.Identity, so the indices and names of all other layers stay valid (e.g.
    torchvision VGG's `features[i]`). Parameter names change from `features.0.weight` to
    `features.0.conv.weight`: load a state dict before fusing.

    Fused only what the kernel computes exactly: an nn.Conv2d (exact type) with groups=1,
    padding_mode='zeros', numeric, 'valid' or evenly splitting 'same' padding, weight and
    bias both float32, float16 or bfloat16; an nn.BatchNorm2d in eval mode with running
    statistics (folded into the convolution, below), or none; an nn.ReLU (inplace or not) or a
    functional one; an nn.MaxPool2d with dilation 1 and return_indices=False (a functional
    max-pool is left to torch.compile with enable_inductor_fusion()); none of the modules with
    hooks. A BatchNorm2d in training mode is never folded: its run is left alone. Everything
    else is untouched.

    conv_relu=True also fuses Conv2d -> [BatchNorm2d] -> ReLU runs that no such pool follows
    (e.g. VGG's and ResNet's inner 3 x 3 convolutions), as the op with a 1 x 1 / stride 1
    pool, where the convolution is 3 x 3, stride 1, dilation 1 with at least 8 input
    channels: the geometry of the Hopper 3 x 3 kernel without a pool. Off by default: on other
    GPUs those layers would take the op's slower general paths, and on small images (7 x 7)
    the 3 x 3 kernel's tiles are mostly padding.

    Without a BatchNorm2d the ModelNew holds the original Conv2d (weights shared, not copied;
    same device and dtype): later changes to its weights are seen. With one, the model becomes
    an inference model: the ModelNew holds a folded copy (folded_conv, no gradients), so later
    changes to the original convolution's or BatchNorm2d's parameters or statistics are not
    seen; fuse the original model again after them. The fused modules run on CUDA only, and
    forward only (see ModelNew). prepack=True calls ModelNew.prepack() on each (read its caveat
    on weight writes that bypass the version counter).
    """
    entries = FusionReport()
    sequences = [(name, m) for name, m in module.named_modules()
                 if isinstance(m, nn.Sequential) and type(m).forward is nn.Sequential.forward]
    for name, sequence in sequences:
        _fuse_sequential(sequence, f"{name}." if name else "", prepack, conv_relu, entries)
    try:
        graph = _FusionTracer().trace(module)
    except Exception as error:  # noqa: BLE001 - any failure to trace means: no second pass
        fused = [name for name, m in module.named_modules() if isinstance(m, ModelNew)]
        for name, conv in module.named_modules():
            if type(conv) is nn.Conv2d and not any(name.startswith(f"{f}.") for f in fused):
                entries.append(FusionEntry(
                    name, False, "not in a Conv2d -> ReLU -> MaxPool2d run of an nn.Sequential, "
                    f"and torch.fx could not trace the model ({type(error).__name__}: "
                    f"{str(error).splitlines()[0] if str(error) else ''})"))
    else:
        _fuse_traced(module, graph, prepack, conv_relu, entries)
    return (module, entries) if report else module


# ---- torch.compile: the fused op inside Inductor's graphs ---------------------------------

class InductorFusionPass:
    """An Inductor post-grad graph pass (torch._inductor.config.post_grad_custom_post_pass)
    that rewrites aten.convolution -> aten.relu -> max-pool (aten.max_pool2d_with_indices, or
    the low-memory prims._low_memory_max_pool_with_offsets that Inductor decomposes it to) into
    fused_conv::conv2d_relu_maxpool, where each intermediate has that one user, only the
    pooled values are used (not the indices), the convolution has groups=1 and is not
    transposed, the pool has dilation 1, the tensors are on `devices` and the op's fake
    implementation accepts the layer (dtype, geometry). Everything else is left as it was.
    With torch._inductor.config.freezing = True, Inductor folds eval-mode BatchNorm2d into the
    convolution before this pass runs, so those runs fuse too; without freezing the
    BatchNorm2d's arithmetic sits between the convolution and the ReLU and the run is left
    alone. conv_relu=True also rewrites aten.convolution -> aten.relu with no pool after it
    (the op with a 1 x 1 / stride 1 pool), where fuse_conv_relu_maxpool's conv_relu would:
    a 3 x 3, stride 1, dilation 1 convolution of at least 8 input channels."""

    def __init__(self, devices: Sequence[str] = ("cuda",), conv_relu: bool = False):
        self.devices = tuple(devices)
        self.conv_relu = bool(conv_relu)
        self.rewritten = 0  # runs rewritten so far, over every graph this pass has seen

    def uuid(self) -> Any:
        """Identifies this pass for Inductor's FX graph cache (its source and devices)."""
        import hashlib
        import inspect
        text = inspect.getsource(InductorFusionPass) + repr((self.devices, self.conv_relu))
        return hashlib.sha256(text.encode()).hexdigest()

    @staticmethod
    def _pools():
        pools = [torch.ops.aten.max_pool2d_with_indices.default]
        low_memory = getattr(torch.ops.prims, "_low_memory_max_pool_with_offsets", None)
        if low_memory is not None:
            pools.append(low_memory.default)
        return tuple(pools)

    @staticmethod
    def _conv_of(relu: Any) -> Optional["torch.fx.Node"]:
        """The untransposed groups=1 aten.convolution node whose only user is `relu`, when
        `relu` is an aten.relu node; else None."""
        if not (isinstance(relu, torch.fx.Node) and relu.op == "call_function"
                and relu.target == torch.ops.aten.relu.default):
            return None
        conv = relu.args[0]
        if not (isinstance(conv, torch.fx.Node) and conv.op == "call_function"
                and conv.target == torch.ops.aten.convolution.default
                and len(conv.users) == 1):
            return None
        _, _, _, _, _, _, transposed, _, groups = conv.args
        return None if transposed or groups != 1 else conv

    def _on_devices(self, x: Any) -> bool:
        value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        return value is not None and value.device.type in self.devices

    def __call__(self, graph: "torch.fx.Graph") -> None:
        import operator
        pools = self._pools()
        for pool in list(graph.nodes):
            if pool.op != "call_function" or pool.target not in pools:
                continue
            relu = pool.args[0]
            conv = self._conv_of(relu)
            if conv is None or len(relu.users) != 1:
                continue
            getters = [g for g in pool.users
                       if g.op == "call_function" and g.target is operator.getitem]
            if len(getters) != len(pool.users) or any(
                    g.args[1] != 0 and g.users for g in getters):
                continue  # the indices (or offsets) are used
            x, weight, bias, stride, padding, dilation = conv.args[:6]
            kernel = list(pool.args[1])
            pool_stride = list(pool.args[2]) if len(pool.args) > 2 and pool.args[2] else kernel
            pool_padding = list(pool.args[3]) if len(pool.args) > 3 else [0, 0]
            pool_dilation = list(pool.args[4]) if len(pool.args) > 4 else [1, 1]
            ceil_mode = bool(pool.args[5]) if len(pool.args) > 5 else False
            if any(d != 1 for d in pool_dilation) or not self._on_devices(x):
                continue
            args = (x, weight, bias, list(stride), list(padding), list(dilation), kernel,
                    pool_stride, pool_padding, ceil_mode, AUTO_CONFIG, None)
            fake = self._fake_output(args)
            if fake is None:
                continue  # the op refuses this layer
            with graph.inserting_before(pool):
                fused = graph.call_function(torch.ops.fused_conv.conv2d_relu_maxpool.default,
                                            args)
            fused.meta["val"] = fake
            for getter in getters:
                if getter.args[1] == 0:
                    getter.replace_all_uses_with(fused)
                graph.erase_node(getter)
            for node in (pool, relu, conv):
                graph.erase_node(node)
            self.rewritten += 1
        if self.conv_relu:
            self._rewrite_conv_relu(graph)
        graph.lint()

    def _rewrite_conv_relu(self, graph: "torch.fx.Graph") -> None:
        """conv -> relu runs that the pooled rewrite left, as the op with no pool."""
        for relu in list(graph.nodes):
            conv = self._conv_of(relu)
            if conv is None:
                continue
            x, weight, bias, stride, padding, dilation = conv.args[:6]
            weight_value = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
            if (weight_value is None or weight_value.dim() != 4
                    or tuple(weight_value.shape[2:]) != (3, 3) or weight_value.shape[1] < 8
                    or list(stride) != [1, 1] or list(dilation) != [1, 1]
                    or not self._on_devices(x)):
                continue
            args = (x, weight, bias, list(stride), list(padding), list(dilation), [1, 1],
                    [1, 1], [0, 0], False, AUTO_CONFIG, None)
            fake = self._fake_output(args)
            if fake is None:
                continue
            with graph.inserting_before(relu):
                fused = graph.call_function(torch.ops.fused_conv.conv2d_relu_maxpool.default,
                                            args)
            fused.meta["val"] = fake
            relu.replace_all_uses_with(fused)
            graph.erase_node(relu)
            graph.erase_node(conv)
            self.rewritten += 1

    @staticmethod
    def _fake_output(args: Tuple[Any, ...]) -> Optional[torch.Tensor]:
        """The op's output on the nodes' fake values, or None where its checks refuse them
        (the fake implementation run on meta copies, so that it judges the layer and not the
        device, which the pass has checked)."""
        values = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in args]
        x = values[0]
        fake_mode = getattr(x, "fake_mode", None)
        if fake_mode is None or not all(isinstance(v, torch.Tensor) for v in values[:2]):
            return None
        meta = [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
                if isinstance(v, torch.Tensor) else v for v in values]
        try:
            shape = _conv2d_relu_maxpool_fake(*meta).shape
        except RuntimeError:
            return None
        with fake_mode:
            return torch.empty(shape, dtype=x.dtype, device=x.device)


_INDUCTOR_STATE: dict = {}


def enable_inductor_fusion(enabled: bool = True, conv_relu: bool = False
                           ) -> Optional[InductorFusionPass]:
    """Opt-in: makes torch.compile (Inductor) put the fused op into the graphs it compiles,
    so that `torch.compile(model)` of an unchanged model runs its Conv2d -> ReLU -> MaxPool2d
    runs on this kernel (InductorFusionPass says which runs; fullgraph=True still holds: the
    op is a custom op with a fake implementation). Installs the pass as
    torch._inductor.config.post_grad_custom_post_pass and returns it (its `rewritten` counts
    the runs); enable_inductor_fusion(False) puts back whatever was there before, i.e. stock
    behaviour. Off by default. Graphs compiled while it was on stay compiled (torch.compile's
    caches): call torch._dynamo.reset() to recompile. conv_relu: the pass's option (conv ->
    relu runs with no pool too, where the Hopper 3 x 3 kernel takes them)."""
    import torch._inductor.config as inductor_config
    if not enabled:
        if "previous" in _INDUCTOR_STATE:
            inductor_config.post_grad_custom_post_pass = _INDUCTOR_STATE.pop("previous")
        return None
    if "previous" not in _INDUCTOR_STATE:
        _INDUCTOR_STATE["previous"] = inductor_config.post_grad_custom_post_pass
    if _INDUCTOR_STATE["previous"] is not None:
        raise RuntimeError("torch._inductor.config.post_grad_custom_post_pass is already set "
                           "by something else; enable_inductor_fusion would replace it")
    fusion_pass = inductor_fusion_pass(conv_relu=conv_relu)
    inductor_config.post_grad_custom_post_pass = fusion_pass
    return fusion_pass


def inductor_fusion_pass(devices: Sequence[str] = ("cuda",), conv_relu: bool = False
                         ) -> InductorFusionPass:
    """An InductorFusionPass that is also Inductor's CustomGraphPass, so that its uuid() keys
    the FX graph cache (a plain callable makes Inductor bypass the cache). torch._inductor is
    imported here, not when model_new is."""
    from torch._inductor.custom_graph_pass import CustomGraphPass
    if "class" not in _INDUCTOR_STATE:
        _INDUCTOR_STATE["class"] = type("InductorFusionGraphPass",
                                        (InductorFusionPass, CustomGraphPass), {})
    return _INDUCTOR_STATE["class"](devices, conv_relu)
