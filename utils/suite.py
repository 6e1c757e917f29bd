"""Problem configurations for Conv2d -> ReLU -> MaxPool2d: the single source of shapes.

`SUITE` is the public benchmark suite (the shapes in ../shared/PEERS-H200.md), `DEFAULT` its
first entry (model.py's problem), `GRID` the small correctness grid that the GPU tests and
`python -m utils.verification` sweep, and `random_cases` draws further valid configurations.

Every case knows its geometry (conv_out, pooled_out, computed with PyTorch's formulas), its
work (flops, min_bytes) and how to build Model / ModelNew (`init_args`, `model_kwargs`) and
call the raw op (`op_args`). Plain Python, no torch import, so CPU tests can use it freely.

    python -m utils.suite          # prints every case with its output shape and GFLOP
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields
from typing import Optional

Pair = tuple[int, int]

BYTES_PER_ELEMENT = 4  # float32


def conv_length(size: int, kernel: int, pad: int, stride: int, dilation: int) -> int:
    """Output length of one convolution dimension, 0 where the kernel does not fit (as the
    binding's, kernels/conv_pool_shape.h; this copy describes the cases, the tests hold the
    binding to PyTorch's shapes)."""
    numerator = size + 2 * pad - dilation * (kernel - 1) - 1
    return 0 if numerator < 0 else numerator // stride + 1


def pooled_length(size: int, kernel: int, pad: int, stride: int, ceil_mode: bool) -> int:
    """Output length of one max-pool dimension, as PyTorch's pooling_output_shape (dilation 1).

    In ceil mode the last window must still start inside the input or its left padding.
    """
    numerator = size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)
    out = numerator // stride + 1  # Python's // floors, also for negative numerators
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


@dataclass(frozen=True)
class ConvPoolCase:
    """One fused Conv2d -> ReLU -> MaxPool2d problem, float32 NCHW."""
    name: str
    batch: int
    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel_size: Pair
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    pool_kernel: Pair = (2, 2)
    pool_stride: Optional[Pair] = None  # None: same as pool_kernel, as nn.MaxPool2d
    pool_padding: Pair = (0, 0)
    ceil_mode: bool = False
    bias: bool = True

    @property
    def effective_pool_stride(self) -> Pair:
        return self.pool_kernel if self.pool_stride is None else self.pool_stride

    # ---- constructing the models and calling the op -------------------------------------
    def model_kwargs(self) -> dict:
        """Keyword arguments for model.Model / model_new.ModelNew (Model's parameter names)."""
        return dict(in_channels=self.in_channels, out_channels=self.out_channels,
                    kernel_size=self.kernel_size, pool_kernel_size=self.pool_kernel,
                    stride=self.stride, padding=self.padding, dilation=self.dilation,
                    pool_stride=self.pool_stride, pool_padding=self.pool_padding,
                    ceil_mode=self.ceil_mode, bias=self.bias)

    def init_args(self) -> list:
        """Positional arguments for Model / ModelNew, in Model's parameter order."""
        return list(self.model_kwargs().values())

    def op_args(self) -> tuple:
        """The spatial arguments of cuda_extension.conv2d_relu_maxpool_forward after bias:
        (stride, padding, dilation, pool_kernel, pool_stride, pool_padding, ceil_mode)."""
        return (list(self.stride), list(self.padding), list(self.dilation),
                list(self.pool_kernel), list(self.effective_pool_stride),
                list(self.pool_padding), self.ceil_mode)

    # ---- geometry ----------------------------------------------------------------------
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.in_channels, self.height, self.width)

    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_channels, *self.kernel_size)

    def conv_out(self) -> Pair:
        """(P, Q): height and width of the convolution output (never stored by the fused op)."""
        return tuple(conv_length(size, k, p, s, d) for size, k, p, s, d in zip(
            (self.height, self.width), self.kernel_size, self.padding, self.stride,
            self.dilation))

    def pooled_out(self) -> Pair:
        """Height and width of the pooled output."""
        return tuple(pooled_length(size, k, p, s, self.ceil_mode) for size, k, p, s in zip(
            self.conv_out(), self.pool_kernel, self.pool_padding, self.effective_pool_stride))

    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_channels, *self.pooled_out())

    def is_valid(self) -> bool:
        """True when PyTorch (and the op) accept the problem and every output is >= 1."""
        pairs = (self.kernel_size, self.stride, self.dilation, self.pool_kernel,
                 self.effective_pool_stride)
        if min(min(p) for p in pairs) < 1 or min(self.padding) < 0 or min(self.pool_padding) < 0:
            return False
        if any(pad > k // 2 for pad, k in zip(self.pool_padding, self.pool_kernel)):
            return False
        if min(self.batch, self.in_channels, self.out_channels, self.height, self.width) < 1:
            return False
        return min(self.conv_out()) >= 1 and min(self.pooled_out()) >= 1

    # ---- work --------------------------------------------------------------------------
    def flops(self) -> float:
        """Convolution FLOPs, 2 * N * K * P * Q * C * kh * kw (ReLU and pooling not counted)."""
        conv_h, conv_w = self.conv_out()
        kernel_h, kernel_w = self.kernel_size
        return 2.0 * self.batch * self.out_channels * conv_h * conv_w * self.in_channels \
            * kernel_h * kernel_w

    def input_elements(self) -> int:
        return self.batch * self.in_channels * self.height * self.width

    def output_elements(self) -> int:
        out_h, out_w = self.pooled_out()
        return self.batch * self.out_channels * out_h * out_w

    def min_bytes(self, bytes_per_element: int = BYTES_PER_ELEMENT) -> float:
        """Bytes moved if input, weight, bias and pooled output each cross HBM exactly once."""
        weight = self.out_channels * self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        bias = self.out_channels if self.bias else 0
        return float(bytes_per_element
                     * (self.input_elements() + weight + bias + self.output_elements()))

    # ---- reporting ---------------------------------------------------------------------
    def label(self) -> str:
        """Compact shape string: N,C,K,H,W,kernel,stride,pad,pool kernel,pool stride (as in
        PEERS-H200.md), with dilation, pool padding, ceil mode and bias appended when set."""
        def short(pair: Pair) -> str:
            return str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}x{pair[1]}"
        text = ",".join([str(self.batch), str(self.in_channels), str(self.out_channels),
                         str(self.height), str(self.width), short(self.kernel_size),
                         short(self.stride), short(self.padding), short(self.pool_kernel),
                         short(self.effective_pool_stride)])
        if self.dilation != (1, 1):
            text += f",dil={short(self.dilation)}"
        if self.pool_padding != (0, 0):
            text += f",pool_pad={short(self.pool_padding)}"
        if self.ceil_mode:
            text += ",ceil"
        if not self.bias:
            text += ",no_bias"
        return text

    def to_dict(self) -> dict:
        """Plain-JSON description of the case, geometry and work included."""
        record = asdict(self)
        record["pool_stride"] = list(self.effective_pool_stride)
        for key, value in record.items():
            if isinstance(value, tuple):
                record[key] = list(value)
        record.update(conv_out=list(self.conv_out()), pooled_out=list(self.pooled_out()),
                      flops=self.flops(), min_bytes=self.min_bytes(), label=self.label())
        return record

    @classmethod
    def from_dict(cls, record: dict) -> "ConvPoolCase":
        """The case to_dict describes (a JSON record's "case"; its derived keys ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{key: tuple(value) if isinstance(value, list) else value
                      for key, value in record.items() if key in names})


def _case(name: str, batch: int, in_channels: int, out_channels: int, height: int, width: int,
          kernel: int, stride: int, pad: int, pool_kernel: int, pool_stride: int) -> ConvPoolCase:
    """A square-parameter case in PEERS-H200.md's column order."""
    return ConvPoolCase(name, batch, in_channels, out_channels, height, width,
                        kernel_size=(kernel, kernel), stride=(stride, stride), padding=(pad, pad),
                        pool_kernel=(pool_kernel, pool_kernel),
                        pool_stride=(pool_stride, pool_stride))


# The public suite: name, N, C, K, H, W, kernel, stride, pad, pool kernel, pool stride.
SUITE: list[ConvPoolCase] = [
    _case("default", 128, 64, 128, 128, 128, 3, 1, 0, 2, 2),
    _case("vgg_b2", 32, 128, 128, 112, 112, 3, 1, 1, 2, 2),
    _case("vgg_b3", 32, 256, 256, 56, 56, 3, 1, 1, 2, 2),
    _case("vgg_b5", 32, 512, 512, 14, 14, 3, 1, 1, 2, 2),
    _case("rgb_stem", 64, 3, 64, 224, 224, 3, 1, 1, 2, 2),
    _case("alexnet_c1", 32, 3, 64, 224, 224, 11, 4, 2, 3, 2),
    _case("lenet_c1", 1024, 1, 6, 32, 32, 5, 1, 0, 2, 2),
    _case("batch1", 1, 64, 128, 128, 128, 3, 1, 0, 2, 2),
]

DEFAULT: ConvPoolCase = SUITE[0]

C = ConvPoolCase  # shorthand for the grid below only

# The correctness grid: small problems (fast on a GPU, and in float64 on a CPU) that each
# pin down one piece of geometry or one code path. The comment says what each one is for.
GRID: list[ConvPoolCase] = [
    # The default problem's channels at a reduced spatial size.
    C("default_small", 2, 64, 128, 34, 34, (3, 3)),
    C("padding1", 2, 16, 24, 20, 20, (3, 3), padding=(1, 1)),
    C("stride2", 2, 8, 16, 33, 33, (3, 3), stride=(2, 2)),
    C("dilation2", 2, 8, 16, 30, 30, (3, 3), dilation=(2, 2)),
    C("dilation_asym_2x3", 2, 6, 10, 31, 27, (3, 3), dilation=(2, 3), padding=(1, 2)),
    C("rect_kernel_3x5_rect_input", 2, 5, 12, 29, 37, (3, 5)),
    C("pool3_stride2_overlap", 2, 8, 16, 27, 27, (3, 3), pool_kernel=(3, 3), pool_stride=(2, 2)),
    C("pool3_stride2_pad1", 2, 8, 16, 26, 26, (3, 3), pool_kernel=(3, 3), pool_stride=(2, 2),
      pool_padding=(1, 1)),
    C("ceil_mode_odd", 3, 8, 16, 23, 25, (3, 3), ceil_mode=True),
    C("ceil_mode_pool3_s2_pad1", 2, 8, 16, 24, 22, (3, 3), pool_kernel=(3, 3),
      pool_stride=(2, 2), pool_padding=(1, 1), ceil_mode=True),
    # Conv output 10x13, pool 2 stride 3 pad 1: ceil mode's extra window would start in the
    # right padding, so PyTorch drops it (the `(out - 1) * stride >= size + pad` rule).
    C("ceil_mode_last_window_dropped", 2, 8, 16, 12, 15, (3, 3), pool_kernel=(2, 2),
      pool_stride=(3, 3), pool_padding=(1, 1), ceil_mode=True),
    # Conv output 23x25: floor-mode pooling drops the last conv row and column.
    C("odd_drops_border", 2, 8, 16, 25, 27, (3, 3)),
    C("c3_k7", 2, 3, 7, 32, 32, (3, 3), padding=(1, 1)),
    C("c1", 4, 1, 6, 32, 32, (5, 5)),
    C("c13_k19_unaligned", 2, 13, 19, 21, 23, (3, 3), padding=(1, 1)),
    # K > 128: several output-channel blocks and a partial last one.
    C("k136_channel_tail", 2, 16, 136, 18, 18, (3, 3)),
    # Long reduction: C * kh * kw = 1188, many K-steps of any tile.
    C("c132_long_reduction", 2, 132, 32, 12, 12, (3, 3), padding=(1, 1)),
    C("batch1", 1, 32, 40, 34, 34, (3, 3)),
    C("no_bias", 2, 8, 16, 20, 20, (3, 3), bias=False),
    C("alexnet_like_11x11_s4", 2, 3, 16, 63, 63, (11, 11), stride=(4, 4), padding=(2, 2),
      pool_kernel=(3, 3), pool_stride=(2, 2)),
    # Stride 3, a 7 x 7 kernel and overlapping 3 x 3 windows on 3 channels (the flat kernel).
    C("stride3_kernel7", 2, 3, 16, 41, 47, (7, 7), stride=(3, 3), padding=(3, 3),
      pool_kernel=(3, 3), pool_stride=(2, 2)),
    C("kernel5", 2, 8, 16, 28, 28, (5, 5), padding=(2, 2)),
    C("kernel1", 2, 32, 24, 20, 20, (1, 1)),
    C("asym_stride_1x2_pad_2x0", 2, 8, 16, 22, 31, (3, 3), stride=(1, 2), padding=(2, 0)),
    # Pool window taller than 8 rows, and a pool that keeps every conv output.
    C("pool_9x3_stride_9x3", 2, 4, 8, 38, 26, (3, 3), pool_kernel=(9, 3), pool_stride=(9, 3)),
    C("pool_1x1", 2, 8, 16, 17, 19, (3, 3), pool_kernel=(1, 1)),
    C("pool_stride_gt_kernel", 2, 8, 16, 30, 30, (3, 3), pool_kernel=(2, 2),
      pool_stride=(3, 3)),
    # Small image (VGG block 5's 14 x 14): the wgmma kernel's 16 x 16 tile; 136 output
    # channels = a full and a partial 128-channel block.
    C("small_image_14x14", 2, 24, 136, 14, 14, (3, 3), padding=(1, 1)),
    # One tile per image: the wgmma kernel reads whole image planes as 4-pixel vectors that wrap
    # into the next row. Square tile, width % 4 == 0, N = 64 (40 channels: a 16-bit tail);
    # no padding, the image filling the halo (a 2-channel last output block); the 8 x 32 tile
    # on an 8 x 30 image. 7 x 7 has no whole vectors (49 pixels): the scalar loads.
    C("whole_image_16x16", 2, 40, 64, 16, 16, (3, 3), padding=(1, 1)),
    C("whole_image_pad0_18x18", 2, 20, 130, 18, 18, (3, 3)),
    C("whole_image_wide_8x30", 2, 12, 24, 8, 30, (3, 3), padding=(1, 1)),
    C("small_image_7x7", 2, 16, 32, 7, 7, (3, 3), padding=(1, 1)),
    # Rows of squares that are not a multiple of 4 long: the wgmma kernel's strips of four
    # 8 x 8 squares, which go on in the next square row and the next image (7 squares per row,
    # a last strip of 3; 6 squares per row, an odd width: scalar halo loads).
    C("strip_tiles_20x56", 3, 24, 136, 20, 56, (3, 3), padding=(1, 1)),
    C("strip_tiles_pad0_22x45", 2, 8, 130, 22, 45, (3, 3)),
    # Many tiles along both spatial axes, with partial tiles at the far edges.
    C("large_spatial_200x300", 1, 8, 16, 200, 300, (3, 3), padding=(1, 1)),
    # small_fp32's patch loop (stride 1, 3x3 / 5x5, 2x2 windows): windows cut by pool padding
    # and ceil mode; an input region too large to double-buffer (one buffer, > 48 KB of shared
    # memory). tests/test_gpu_correctness.py adds a batch with more tiles than resident blocks.
    C("patch3_pool_pad_ceil", 2, 3, 8, 23, 21, (3, 3), padding=(1, 1), pool_kernel=(2, 2),
      pool_stride=(2, 2), pool_padding=(1, 1), ceil_mode=True),
    C("patch3_single_buffer", 3, 16, 8, 64, 64, (3, 3), padding=(1, 1)),
    # small_tf32 (the small kernel's tensor-core loop, <= 8 channels, 2x2 / stride 2 windows) off
    # LeNet's geometry: stride, dilation, padding and pool padding in ceil mode, 7 channels, a
    # reduction of 3 x 3 x 11 = 99 (12 K steps of 8 and a padded 13th); 4 channels (a 4-wide
    # weight row), no bias, 2 x 5 x 5 = 50, tiles side by side whose input regions start 4
    # columns left of the image (16-byte copies of float32 rows, some wholly outside); a 9 x 11
    # image (m-tiles past the tile's columns) with 2 channels and one input channel.
    C("small_tf32_strided_dilated", 2, 3, 7, 37, 41, (3, 11), stride=(2, 1), padding=(1, 2),
      dilation=(1, 2), pool_kernel=(2, 2), pool_stride=(2, 2), pool_padding=(1, 1),
      ceil_mode=True),
    C("small_tf32_aligned_rows_no_bias", 3, 2, 4, 70, 72, (5, 5), padding=(4, 4), bias=False),
    C("small_tf32_tiny_image", 3, 1, 2, 9, 11, (3, 3)),
]

# The flat kernels' warp tilings (kernels/conv_relu_maxpool.cu, flat_tiling; the one each layer
# runs on the H200 is pinned in tests/test_variant_choice.py), each layer on more tiles than
# the blocks resident at once, so that the persistent blocks loop: AlexNet's first layer (16
# warps of 32 x 32), with 96 and 300 output channels (two and five channel blocks of 64: the
# grid a multiple of them), a ResNet stem (float32: 16 warps; 16 bits: two blocks of 8 warps of
# 32 x 64 per SM), the same with 96 channels (16 bits: two such blocks per SM, two channel
# blocks), and 5 x 5 layers of 32 and 64 channels.
FLAT_TILING_CASES: list[ConvPoolCase] = [
    C("flat_alexnet", 12, 3, 64, 224, 224, (11, 11), stride=(4, 4), padding=(2, 2),
      pool_kernel=(3, 3), pool_stride=(2, 2)),
    C("flat_alexnet_k96", 4, 3, 96, 224, 224, (11, 11), stride=(4, 4), padding=(2, 2),
      pool_kernel=(3, 3), pool_stride=(2, 2)),
    C("flat_k300", 16, 3, 300, 63, 63, (11, 11), stride=(4, 4), padding=(2, 2),
      pool_kernel=(3, 3), pool_stride=(2, 2)),
    C("flat_resnet_stem", 4, 3, 64, 224, 224, (7, 7), stride=(2, 2), padding=(3, 3),
      pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    C("flat_k96_7x7", 4, 3, 96, 224, 224, (7, 7), stride=(2, 2), padding=(3, 3),
      pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1)),
    C("flat_k32_5x5", 8, 3, 32, 128, 128, (5, 5), padding=(2, 2)),
    C("flat_k64_5x5", 8, 3, 64, 128, 128, (5, 5), padding=(2, 2)),
]

del C


def random_case(rng: random.Random, name: str = "random") -> ConvPoolCase:
    """One valid random configuration with every parameter in a small range."""
    while True:
        kernel = (rng.randint(1, 5), rng.randint(1, 5))
        pool_kernel = (rng.randint(1, 4), rng.randint(1, 4))
        case = ConvPoolCase(
            name=name,
            batch=rng.randint(1, 3),
            in_channels=rng.choice([1, 2, 3, 4, 7, 8, 16, 19, 32, 64]),
            out_channels=rng.choice([1, 3, 6, 8, 16, 24, 33, 64, 130]),
            height=rng.randint(4, 40),
            width=rng.randint(4, 40),
            kernel_size=kernel,
            stride=(rng.randint(1, 3), rng.randint(1, 3)),
            padding=(rng.randint(0, 2), rng.randint(0, 2)),
            dilation=(rng.randint(1, 2), rng.randint(1, 2)),
            pool_kernel=pool_kernel,
            pool_stride=rng.choice([None, (rng.randint(1, 4), rng.randint(1, 4))]),
            pool_padding=(rng.randint(0, pool_kernel[0] // 2),
                          rng.randint(0, pool_kernel[1] // 2)),
            ceil_mode=rng.random() < 0.3,
            bias=rng.random() < 0.8,
        )
        if case.is_valid():
            return case


def fuzz_case(rng: random.Random, name: str = "fuzz", max_size: int = 40,
              max_channels: int = 300, batch: Optional[int] = None) -> ConvPoolCase:
    """One valid random configuration over the space the general wgmma kernel covers: kernels
    1-11 (square half the time), strides 1-4, dilation 1-3, any padding up to the dilated
    kernel's half plus one, pools 1-4 of any stride, padding and ceil mode, channel counts up
    to `max_channels`, images up to `max_size`."""
    kernel_sizes = [1, 1, 2, 3, 3, 3, 4, 5, 5, 7, 11]
    channels = [c for c in (1, 3, 4, 8, 12, 16, 24, 32, 40, 64, 96, 130, 192, 256, 300, 384,
                            512, 768, 1024) if c <= max_channels]
    while True:
        kernel = (rng.choice(kernel_sizes), rng.choice(kernel_sizes))
        if rng.random() < 0.5:
            kernel = (kernel[0], kernel[0])
        dilation = (rng.choice([1, 1, 1, 2, 3]), rng.choice([1, 1, 1, 2, 3]))
        pool = (rng.randint(1, 4), rng.randint(1, 4))
        case = ConvPoolCase(
            name=name, batch=batch if batch is not None else rng.randint(1, 3),
            in_channels=rng.choice(channels), out_channels=rng.choice(channels),
            height=rng.randint(5, max_size), width=rng.randint(5, max_size),
            kernel_size=kernel, stride=(rng.randint(1, 4), rng.randint(1, 4)),
            padding=(rng.randint(0, kernel[0] * dilation[0] // 2 + 1),
                     rng.randint(0, kernel[1] * dilation[1] // 2 + 1)),
            dilation=dilation, pool_kernel=pool,
            pool_stride=rng.choice([None, (rng.randint(1, 4), rng.randint(1, 4))]),
            pool_padding=(rng.randint(0, pool[0] // 2), rng.randint(0, pool[1] // 2)),
            ceil_mode=rng.random() < 0.3, bias=rng.random() < 0.8)
        if case.is_valid():
            return case


def random_cases(rng: random.Random, count: int) -> list[ConvPoolCase]:
    """`count` valid random configurations named random_0, random_1, ..."""
    return [random_case(rng, f"random_{i}") for i in range(count)]


def find_case(name: str) -> ConvPoolCase:
    """The SUITE or GRID case called `name`."""
    for case in SUITE + GRID:
        if case.name == name:
            return case
    known = ", ".join(dict.fromkeys(c.name for c in SUITE + GRID))  # each name once
    raise KeyError(f"no case named {name!r}; known: {known}")


if __name__ == "__main__":
    for group, cases in (("SUITE", SUITE), ("GRID", GRID)):
        print(group)
        for case in cases:
            print(f"  {case.name:28s} {case.label():44s} -> {str(case.output_shape()):22s} "
                  f"{case.flops() / 1e9:9.3f} GFLOP")
