"""Relative L2 error against float64 of an fp32-accurate variant and of cuDNN's fp32, over
reductions of 144 to 9216 taps (3x3 kernels, 16 to 1024 input channels), three seeds each, with
torch.backends.cudnn.allow_tf32 = False (docs/PERF.md v34, v35):

    python tools/error_by_reduction.py [TAG] [VARIANT]

TAG starts each line (for A/B runs: PYTHONPATH=path/to/old/tree python tools/...); VARIANT
defaults to tiled_3xtf32_wgmma. The last two layers have few tiles: on the H200 the wgmma
kernel splits their reductions over clusters.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.append(str(Path(__file__).resolve().parents[1]))
import cuda_extension as ext  # noqa: E402

# (batch, input channels, output channels, height = width); padding 1, 2 x 2 / 2 pooling
LAYERS = [(8, 16, 64, 56), (8, 64, 128, 56), (8, 256, 256, 28), (32, 512, 512, 14),
          (4, 1024, 128, 14), (1, 512, 512, 14)]


def relative_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    return ((out.double() - expected).norm() / expected.norm()).item()


def main() -> int:
    tag = sys.argv[1] if len(sys.argv) > 1 else "run"
    name = sys.argv[2] if len(sys.argv) > 2 else "tiled_3xtf32_wgmma"
    config = ext.conv2d_relu_maxpool_variants()[name]
    torch.backends.cudnn.allow_tf32 = False
    for batch, channels, out_channels, size in LAYERS:
        ours, cudnn = [], []
        for seed in range(3):
            generator = torch.Generator(device="cuda").manual_seed(seed)
            x = torch.randn(batch, channels, size, size, device="cuda", generator=generator)
            weight = torch.randn(out_channels, channels, 3, 3, device="cuda",
                                 generator=generator) / (9 * channels) ** 0.5
            bias = torch.randn(out_channels, device="cuda", generator=generator)

            def model(x, weight, bias):
                return F.max_pool2d(F.relu(F.conv2d(x, weight, bias, 1, 1)), 2, 2)

            expected = model(x.double(), weight.double(), bias.double())
            out = ext.conv2d_relu_maxpool_forward(x, weight, bias, [1, 1], [1, 1], [1, 1],
                                                  [2, 2], [2, 2], [0, 0], False, config)
            ours.append(relative_error(out, expected))
            cudnn.append(relative_error(model(x, weight, bias), expected))
        print(f"{tag} batch {batch:3d} {channels:5d} -> {out_channels:4d} {size}x{size} "
              f"taps {9 * channels:5d}  {name} " + " ".join(f"{e:.2e}" for e in ours)
              + "  cudnn fp32 " + " ".join(f"{e:.2e}" for e in cudnn), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
