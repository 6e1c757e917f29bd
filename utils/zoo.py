"""The layer zoo: Conv2d -> ReLU -> MaxPool2d layers of real networks, read off torchvision's
classification models (their definitions only: built on the meta device, no weights, no data).

For each model, one forward pass of a meta input records every leaf module's call in order.
A `groups=1` Conv2d whose output reaches a MaxPool2d through at most a BatchNorm2d and a ReLU
(module or functional: the tensor is followed, not the module order) is a fused layer with
that pool; every other `groups=1` Conv2d is taken under a 2x2 / 2 and under a 3x3 / 2 pool
(where the pooled output is not empty). The zoo is those layers, deduplicated by geometry, at
batch 1, 32 and 128 where input and output fit in `max_bytes`.

    python -m utils.zoo                       # the layers, one per line, with GFLOP
    python -m utils.zoo --models alexnet vgg16 --batches 32
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, replace
from typing import Iterable, Optional, Sequence

from utils.suite import ConvPoolCase

# The networks of issue 32's runs first, then the rest of torchvision's families with groups=1
# convolutions; each with the input size its definition expects.
DEFAULT_MODELS = (
    "alexnet", "vgg11", "vgg16", "vgg19", "vgg11_bn", "vgg16_bn", "vgg19_bn", "resnet18",
    "resnet50", "googlenet", "densenet121", "squeezenet1_1", "inception_v3", "resnet101",
    "resnext50_32x4d", "wide_resnet50_2", "squeezenet1_0", "mobilenet_v2", "mobilenet_v3_large",
    "shufflenet_v2_x1_0", "mnasnet1_0", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny",
)
INPUT_SIZE = {"inception_v3": 299}
BATCHES = (1, 32, 128)
MAX_BYTES = 8 << 30  # input + output of one layer at float32
ZOO_POOLS = ((2, 2), (3, 2))  # (window, stride) for the convolutions no pool follows


@dataclass(frozen=True)
class ZooLayer:
    """One convolution of a model: its geometry at batch 1 and the pool that follows it (or
    None)."""
    model: str
    index: int  # the convolution's position among the model's groups=1 convolutions
    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    bias: bool
    # (kernel, stride, padding, ceil_mode) of the MaxPool2d its output reaches, if any
    pool: Optional[tuple[tuple[int, int], tuple[int, int], tuple[int, int], bool]]


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def model_layers(name: str) -> list[ZooLayer]:
    """The groups=1 convolutions of torchvision's model `name`, with their pools."""
    import torch
    import torch.nn as nn
    import torchvision.models as models

    kwargs = {"aux_logits": False, "init_weights": False} if name in (
        "inception_v3", "googlenet") else {}
    try:
        with torch.device("meta"):
            model = models.get_model(name, weights=None, **kwargs)
    except NotImplementedError:  # a definition that computes its widths with tensors (RegNet)
        model = models.get_model(name, weights=None, **kwargs).to("meta")
    model.eval()
    calls = []  # (module, input tensor, output tensor), in call order

    def hook(module, inputs, output):
        calls.append((module, inputs[0] if inputs else None, output))

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if len(list(m.children())) == 0]
    size = INPUT_SIZE.get(name, 224)
    try:
        with torch.no_grad():
            model(torch.empty(1, 3, size, size, device="meta"))
    finally:
        for handle in handles:
            handle.remove()
    layers = []
    for position, (module, x, out) in enumerate(calls):
        if type(module) is not nn.Conv2d or module.groups != 1 or x is None or x.dim() != 4:
            continue
        if isinstance(module.padding, str) or module.padding_mode != "zeros":
            continue
        pool = None
        current = out
        for later, later_x, later_out in calls[position + 1:]:
            if later_x is not current:
                continue
            if isinstance(later, (nn.BatchNorm2d, nn.ReLU)) or (
                    isinstance(later, nn.Identity)):
                current = later_out
                continue
            if isinstance(later, nn.MaxPool2d) and _pair(later.dilation) == (1, 1):
                pool = (_pair(later.kernel_size), _pair(later.stride or later.kernel_size),
                        _pair(later.padding), bool(later.ceil_mode))
            break
        layers.append(ZooLayer(
            name, len(layers), module.in_channels, module.out_channels, x.shape[2], x.shape[3],
            _pair(module.kernel_size), _pair(module.stride), _pair(module.padding),
            _pair(module.dilation), module.bias is not None, pool))
    return layers


def layer_cases(layer: ZooLayer, batch: int) -> list[ConvPoolCase]:
    """`layer` as ConvPoolCase(s) at `batch`: with its own pool, else under ZOO_POOLS. Names
    are model_c<index>[_p<window>s<stride>]_b<batch>, one per geometry of the zoo."""
    base = ConvPoolCase(
        f"{layer.model}_c{layer.index}", batch, layer.in_channels, layer.out_channels,
        layer.height, layer.width, layer.kernel_size, layer.stride, layer.padding,
        layer.dilation, bias=layer.bias)
    if layer.pool is not None:
        kernel, stride, padding, ceil_mode = layer.pool
        candidates = [replace(base, name=f"{base.name}_b{batch}", pool_kernel=kernel,
                              pool_stride=stride, pool_padding=padding, ceil_mode=ceil_mode)]
    else:
        candidates = [replace(base, name=f"{base.name}_p{window}s{stride}_b{batch}",
                              pool_kernel=(window, window), pool_stride=(stride, stride))
                      for window, stride in ZOO_POOLS]
    return [case for case in candidates if case.is_valid()]


def geometry_key(case: ConvPoolCase) -> tuple:
    """Two cases with the same key are the same problem (names aside)."""
    return (case.batch, case.in_channels, case.out_channels, case.height, case.width,
            case.kernel_size, case.stride, case.padding, case.dilation, case.pool_kernel,
            case.effective_pool_stride, case.pool_padding, case.ceil_mode, case.bias)


def zoo_cases(models: Sequence[str] = DEFAULT_MODELS, batches: Iterable[int] = BATCHES,
              max_bytes: int = MAX_BYTES, fused_only: bool = False) -> list[ConvPoolCase]:
    """The zoo: every model's layers (fused_only: only those a pool follows in the model) at
    each batch whose float32 input and output fit `max_bytes`, deduplicated (the first model
    that has a geometry names it)."""
    seen, cases = set(), []
    for name in models:
        for layer in model_layers(name):
            if fused_only and layer.pool is None:
                continue
            for batch in batches:
                for case in layer_cases(layer, batch):
                    size = 4 * (case.input_elements() + case.output_elements())
                    key = geometry_key(case)
                    if size > max_bytes or key in seen:
                        continue
                    seen.add(key)
                    cases.append(case)
    return cases


def find_zoo_case(name: str) -> ConvPoolCase:
    """The zoo case called `name` (model_c<index>[_p<window>s<stride>]_b<batch>, as the zoo
    JSONs name their rows), rebuilt from that model's definition at that batch (any batch)."""
    match = re.fullmatch(r"(.+)_c\d+(?:_p\d+s\d+)?_b(\d+)", name)
    if match is not None:
        try:
            cases = zoo_cases([match.group(1)], [int(match.group(2))])
        except ValueError:  # torchvision has no such model
            cases = []
        for case in cases:
            if case.name == name:
                return case
    raise KeyError(f"no zoo case named {name!r} (names: model_c<index>[_p<window>s<stride>]"
                   f"_b<batch>, e.g. densenet121_c5_p2s2_b128)")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utils.zoo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                        help="torchvision model names (default: %(default)s)")
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES),
                        help="batch sizes (default: %(default)s)")
    parser.add_argument("--fused-only", action="store_true",
                        help="only the convolutions a max-pool follows in their model")
    args = parser.parse_args(argv)
    cases = zoo_cases(args.models, args.batches, fused_only=args.fused_only)
    for case in cases:
        print(f"{case.name:32s} {case.label():60s} {case.flops() / 1e9:9.3f} GFLOP")
    print(f"{len(cases)} layers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
