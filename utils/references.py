"""Operands, input layouts and float64 references of ConvPoolCases: the one home of these for
the general kernel's GPU tests (tests/test_general_wgmma_gpu.py) and its development check
(tools/check_general.py)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from utils.suite import ConvPoolCase

LAYOUTS = ("dense", "channels_last", "every_other")


def case_operands(case: ConvPoolCase, seed: int, dtype: torch.dtype = torch.float32,
                  device: str = "cuda"):
    """(x, weight, bias or None) of `case` from `seed`: normal x, weights scaled by
    1 / sqrt(fan-in) so that outputs stay O(1), rounded to `dtype` (a reference then sees the
    very values the kernel reads)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(case.input_shape(), generator=generator)
    fan_in = case.in_channels * case.kernel_size[0] * case.kernel_size[1]
    weight = torch.randn(case.weight_shape(), generator=generator) / fan_in ** 0.5
    bias = torch.randn(case.out_channels, generator=generator) if case.bias else None
    to = lambda t: None if t is None else t.to(dtype).to(device)  # noqa: E731
    return to(x), to(weight), to(bias)


def reference_float64(case: ConvPoolCase, x: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The layer in float64 on x's device with cuDNN off (the direct definition: cuDNN's FFT
    and Winograd algorithms would spread one inf or NaN over whole tiles)."""
    with torch.backends.cudnn.flags(enabled=False):
        conv = F.conv2d(x.double(), weight.double(), None if bias is None else bias.double(),
                        case.stride, case.padding, case.dilation)
        return F.max_pool2d(F.relu(conv), case.pool_kernel, case.effective_pool_stride,
                            case.pool_padding, 1, case.ceil_mode)


def with_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """x's values as `layout`: "dense" (x itself), "channels_last", or "every_other" (every
    other column of a tensor twice as wide: a column stride of 2)."""
    if layout == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    if layout == "every_other":
        wide = torch.empty(*x.shape[:3], 2 * x.shape[3], device=x.device, dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    if layout != "dense":
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    return x
