"""ModelNew: Model's Conv2d -> ReLU -> MaxPool2d as one fused CUDA kernel.

Same constructor arguments and parameter names as model.Model, so
`ModelNew(*args).load_state_dict(Model(*args).state_dict())` works. The forward
calls only `cuda_extension.conv2d_relu_maxpool_forward`; `self.conv` is kept as
an nn.Conv2d purely to hold the weight and bias with Model's names and
initialisation, and is never called.
"""
from typing import Optional, Sequence, Tuple, Union

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


def _pair(value: IntPair, name: str) -> Tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) == 1:
        return (int(value[0]), int(value[0]))
    if len(value) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return (int(value[0]), int(value[1]))


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.conv2d_relu_maxpool_forward(
            x, self.conv.weight, self.conv.bias, self.stride, self.padding, self.dilation,
            self.pool_kernel, self.pool_stride, self.pool_padding, self.ceil_mode, self.config)

    def extra_repr(self) -> str:
        return (f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
                f"pool_kernel={self.pool_kernel}, pool_stride={self.pool_stride}, "
                f"pool_padding={self.pool_padding}, ceil_mode={self.ceil_mode}")
