"""fuse_conv_relu_maxpool on real networks and on patterns in forward code, on the CPU.

The op's CPU kernel is swapped for a PyTorch reference (the reference_cpu_kernel fixture), so a
fused model computes on the CPU and is compared with the model it came from: torchvision's
classification networks (random weights, eval mode) with their BatchNorm2d folded, functional
and method ReLUs, the runs fx sees across modules, and what must stay unfused: training-mode
BatchNorm2d, functional max-pools, modules called twice, models fx cannot trace.
"""
import copy
import inspect
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

torchvision = pytest.importorskip("torchvision")


@pytest.fixture(scope="module")
def model_new(extension):
    import model_new
    return model_new


# The networks of issue 32 and the convolutions fuse_conv_relu_maxpool fuses in each: where a
# max-pool follows a convolution (through a BatchNorm2d and a ReLU) in the model's dataflow.
NETWORKS = {
    "alexnet": ["features.0", "features.3", "features.10"],
    "vgg11": ["features.0", "features.3", "features.8", "features.13", "features.18"],
    "vgg16": ["features.2", "features.7", "features.14", "features.21", "features.28"],
    "vgg19": ["features.2", "features.7", "features.16", "features.25", "features.34"],
    "vgg11_bn": ["features.0", "features.4", "features.11", "features.18", "features.25"],
    "vgg16_bn": ["features.3", "features.10", "features.20", "features.30", "features.40"],
    "vgg19_bn": ["features.3", "features.10", "features.23", "features.36", "features.49"],
    "resnet18": ["conv1"],
    "resnet50": ["conv1"],
    "googlenet": ["conv1.conv", "conv3.conv"],
    "densenet121": ["features.conv0"],
    "squeezenet1_1": ["features.0"],
    "inception_v3": ["Conv2d_2b_3x3.conv", "Conv2d_4a_3x3.conv"],
}


def build(name: str) -> nn.Module:
    kwargs = {"aux_logits": False, "init_weights": False} if name in (
        "googlenet", "inception_v3") else {}
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, **kwargs).eval()
    # Running statistics away from (0, 1), so that folding them is not a no-op.
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.2, 0.2)
    return model


@pytest.mark.parametrize("name", list(NETWORKS))
def test_networks_fuse_their_runs_and_compute_what_they_did(model_new, reference_cpu_kernel,
                                                           name):
    model = build(name)
    fused, report = model_new.fuse_conv_relu_maxpool(copy.deepcopy(model), report=True)
    assert fused is not model and [entry.conv for entry in report.fused()] == NETWORKS[name]
    for entry in report.fused():
        assert isinstance(fused.get_submodule(entry.conv), model_new.ModelNew)
        folded = entry.batch_norm is not None
        assert entry.why == ("fused, BatchNorm2d folded" if folded else "fused")
        if folded:  # an inference copy of the weights
            assert not fused.get_submodule(entry.conv).conv.weight.requires_grad
    size = 96 if name == "inception_v3" else 64
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(fused(x), expected, rtol=1e-4,
                                   atol=1e-4 * expected.abs().max().item())


def test_batch_norm_folding_is_exact_in_float64(model_new, seed):
    torch.manual_seed(seed)
    for bias, affine in ((True, True), (False, True), (True, False)):
        conv = nn.Conv2d(5, 7, 3, stride=2, padding=1, bias=bias).double()
        batch_norm = nn.BatchNorm2d(7, eps=1e-3, affine=affine).double().eval()
        batch_norm.running_mean.normal_()
        batch_norm.running_var.uniform_(0.1, 3.0)
        if affine:
            batch_norm.weight.data.normal_()
            batch_norm.bias.data.normal_()
        folded = model_new.folded_conv(conv, batch_norm)
        x = torch.randn(3, 5, 11, 13, dtype=torch.float64)
        with torch.no_grad():
            torch.testing.assert_close(folded(x), batch_norm(conv(x)), rtol=1e-12, atol=1e-12)
        assert folded.weight.dtype == torch.float64 and not folded.weight.requires_grad


def test_folding_keeps_a_16_bit_dtype(model_new):
    conv = nn.Conv2d(3, 4, 3).half()
    batch_norm = nn.BatchNorm2d(4).half().eval()
    folded = model_new.folded_conv(conv, batch_norm)
    assert folded.weight.dtype == torch.float16 and folded.bias.dtype == torch.float16


def test_training_mode_batch_norm_is_never_folded(model_new):
    network = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
    before = list(network)
    _, report = model_new.fuse_conv_relu_maxpool(network, report=True)  # training mode
    assert list(network) == before
    (entry,) = report
    assert not entry.fused and "training mode" in entry.why and entry.batch_norm == "1"


class FunctionalBlock(nn.Module):
    def __init__(self, relu: str, pool: str = "module"):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, padding=1, ceil_mode=True)
        self.relu_kind, self.pool_kind = relu, pool

    def forward(self, x):
        x = self.bn(self.conv(x))
        if self.relu_kind == "F.relu":
            x = F.relu(x, inplace=True)
        elif self.relu_kind == "torch.relu":
            x = torch.relu(x)
        else:
            x = x.relu()
        if self.pool_kind == "functional":
            return F.max_pool2d(x, 2)
        return self.pool(x) * 2.0


@pytest.mark.parametrize("relu", ["F.relu", "torch.relu", "Tensor.relu"])
def test_functional_and_method_relus_are_fused_through_forward(model_new, reference_cpu_kernel,
                                                               relu):
    model = FunctionalBlock(relu).eval()
    model.bn.running_mean.uniform_(-1, 1)
    fused, report = model_new.fuse_conv_relu_maxpool(copy.deepcopy(model), report=True)
    (entry,) = report
    assert entry.fused and entry.relu == relu and entry.pool == "pool"
    assert isinstance(fused.conv, model_new.ModelNew)
    assert isinstance(fused.bn, nn.Identity) and isinstance(fused.pool, nn.Identity)
    x = torch.randn(2, 3, 21, 17)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_functional_max_pool_is_left_alone_with_the_reason(model_new):
    model = FunctionalBlock("F.relu", pool="functional").eval()
    _, report = model_new.fuse_conv_relu_maxpool(model, report=True)
    (entry,) = report
    assert not entry.fused and entry.pool == "F.max_pool2d" and "F.max_pool2d" in entry.why
    assert type(model.conv) is nn.Conv2d


def test_a_module_called_twice_is_not_replaced(model_new, reference_cpu_kernel):
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2)

        def forward(self, x):
            return self.pool(self.relu(self.conv(x))) + self.pool(x)

    model = Shared().eval()
    _, report = model_new.fuse_conv_relu_maxpool(model, report=True)
    (entry,) = report
    assert not entry.fused and "pool is called more than once" in entry.why
    assert type(model.conv) is nn.Conv2d and type(model.pool) is nn.MaxPool2d

    # A shared nn.ReLU (ResNet's blocks) does not stop the run: it stays, on the fused output.
    class SharedRelu(Shared):
        def forward(self, x):
            return self.pool(self.relu(self.conv(x))) + self.relu(x)[:, :, ::2, ::2]

    torch.manual_seed(0)
    model = SharedRelu().eval()
    fused, report = model_new.fuse_conv_relu_maxpool(copy.deepcopy(model), report=True)
    (entry,) = report
    assert entry.fused and type(fused.relu) is nn.ReLU and type(fused.pool) is nn.Identity
    x = torch.randn(2, 3, 12, 14)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x))


def test_a_model_fx_cannot_trace_keeps_the_sequential_pass(model_new):
    class DataDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2))
            self.conv = nn.Conv2d(4, 4, 1)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2)

        def forward(self, x):
            x = self.body(x)
            if x.sum() > 0:  # data-dependent control flow: symbolic tracing fails
                x = x * 2
            return self.pool(self.relu(self.conv(x)))

    model = DataDependent().eval()
    _, report = model_new.fuse_conv_relu_maxpool(model, report=True)
    assert isinstance(model.body[0], model_new.ModelNew)
    assert type(model.conv) is nn.Conv2d  # only fx would have seen this run
    assert [entry.conv for entry in report.fused()] == ["body.0"]
    unfused = [entry for entry in report if not entry.fused]
    assert [entry.conv for entry in unfused] == ["conv"]
    assert "torch.fx could not trace" in unfused[0].why


@pytest.mark.parametrize("name,layer", [("vgg11", "features.3"), ("googlenet", "conv3.conv")])
def test_a_refused_input_names_the_fused_layer_that_refused_it(model_new, name, layer):
    """Sequential pass (vgg11) and fx pass (googlenet): a CPU input to the fused network is
    refused by its first fused layer, by name; a later one is reached with a bad dtype."""
    model = model_new.fuse_conv_relu_maxpool(build(name))
    fused = dict(model.named_modules())[layer]
    assert fused.fused_name == layer
    with pytest.raises(RuntimeError, match=rf"^ModelNew {re.escape(layer)} \(\d+ -> "
                       rf"{fused.conv.out_channels}, kernel 3x3\): x must be a CUDA tensor"):
        fused(torch.randn(1, fused.conv.in_channels, 16, 16))


def test_the_report_names_every_convolution_and_prints(model_new):
    model = build("resnet18")
    _, report = model_new.fuse_conv_relu_maxpool(model, report=True)
    convs = [name for name, m in build("resnet18").named_modules() if type(m) is nn.Conv2d]
    assert sorted(entry.conv for entry in report) == sorted(convs)
    text = str(report)
    assert text.startswith(f"1 of {len(convs)} convolutions fused")
    assert "conv1 -> bn1 -> relu -> maxpool: fused, BatchNorm2d folded" in text


def test_a_fused_model_fuses_nothing_more(model_new):
    model = build("vgg16_bn")
    model_new.fuse_conv_relu_maxpool(model)
    before = [type(m) for m in model.modules()]
    _, report = model_new.fuse_conv_relu_maxpool(model, report=True)
    assert [type(m) for m in model.modules()] == before and not report.fused()


# With conv_relu=True, also every Conv2d -> [BatchNorm2d] -> ReLU with no pool whose
# convolution is 3 x 3 / 1 / dilation 1 over at least 8 channels: VGG's inner layers (not the
# first, 3 channels), ResNet-18's first convolution of each stride-1 basic block.
CONV_RELU_NETWORKS = {
    "vgg16": ["features.2", "features.5", "features.7", "features.10", "features.12",
              "features.14", "features.17", "features.19", "features.21", "features.24",
              "features.26", "features.28"],
    "vgg16_bn": ["features.3", "features.7", "features.10", "features.14", "features.17",
                 "features.20", "features.24", "features.27", "features.30", "features.34",
                 "features.37", "features.40"],
    "resnet18": ["conv1", "layer1.0.conv1", "layer1.1.conv1", "layer2.1.conv1",
                 "layer3.1.conv1", "layer4.1.conv1"],
}


@pytest.mark.parametrize("name", list(CONV_RELU_NETWORKS))
def test_conv_relu_fuses_the_unpooled_3x3_layers_too(model_new, reference_cpu_kernel, name):
    model = build(name)
    fused, report = model_new.fuse_conv_relu_maxpool(copy.deepcopy(model), report=True,
                                                     conv_relu=True)
    assert [entry.conv for entry in report.fused()] == CONV_RELU_NETWORKS[name]
    pooled = set(NETWORKS[name])
    for entry in report.fused():
        module = fused.get_submodule(entry.conv)
        assert isinstance(module, model_new.ModelNew)
        assert (entry.pool is not None) == (entry.conv in pooled), entry
        assert entry.why.endswith("(no pool)") == (entry.conv not in pooled), entry
        if entry.conv not in pooled:
            assert module.pool_kernel == (1, 1) and module.pool_stride == (1, 1)
            assert module.conv.kernel_size == (3, 3) and module.conv.stride == (1, 1)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(fused(x), expected, rtol=1e-4,
                                   atol=1e-4 * expected.abs().max().item())
    # Off by default: the pooled runs only.
    _, default = model_new.fuse_conv_relu_maxpool(copy.deepcopy(model), report=True)
    assert [entry.conv for entry in default.fused()] == NETWORKS[name]


def test_conv_relu_leaves_other_geometries_and_a_functional_relu_keeps_working(
        model_new, reference_cpu_kernel, seed):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.few = nn.Conv2d(4, 8, 3, padding=1)        # 4 input channels: left
            self.inner = nn.Conv2d(8, 16, 3, padding=1)     # fused, F.relu after it
            self.strided = nn.Conv2d(16, 16, 3, stride=2)   # stride 2: left
            self.wide = nn.Conv2d(16, 16, 5, padding=2)     # 5 x 5: left

        def forward(self, x):
            x = F.relu(self.few(x))
            x = F.relu(self.inner(x))
            y = x + 1  # the ReLU's output has a second user
            return F.relu(self.wide(F.relu(self.strided(x)))).sum() + y.sum()

    torch.manual_seed(seed)
    model = Net().eval()
    fused, report = model_new.fuse_conv_relu_maxpool(copy.deepcopy(model), report=True,
                                                     conv_relu=True)
    assert [entry.conv for entry in report.fused()] == ["inner"]
    assert report.fused()[0].relu == "F.relu" and report.fused()[0].pool is None
    x = torch.randn(2, 4, 20, 22)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x), rtol=1e-4, atol=1e-3)


# ---- the Inductor pass (enable_inductor_fusion) --------------------------------------------

def aten_graph(groups: int = 1):
    """make_fx's ATen graph of conv -> relu -> max_pool2d_with_indices[0], on fake tensors."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def layer(x, weight, bias):
        conv = torch.ops.aten.convolution(x, weight, bias, [1, 1], [1, 1], [1, 1], False,
                                          [0, 0], groups)
        return torch.ops.aten.max_pool2d_with_indices(torch.ops.aten.relu(conv), [3, 3],
                                                      [2, 2], [1, 1])[0]

    args = (torch.randn(2, 4, 17, 19), torch.randn(6, 4 // groups, 3, 3), torch.randn(6))
    return make_fx(layer, tracing_mode="fake")(*args), layer


def targets(graph_module) -> list:
    return [node.target for node in graph_module.graph.nodes if node.op == "call_function"]


def test_the_inductor_pass_rewrites_conv_relu_pool_into_the_op(model_new, reference_cpu_kernel,
                                                               seed):
    graph_module, layer = aten_graph()
    fusion = model_new.InductorFusionPass(devices=("cpu",))
    fusion(graph_module.graph)
    graph_module.recompile()
    assert fusion.rewritten == 1
    assert targets(graph_module) == [torch.ops.fused_conv.conv2d_relu_maxpool.default]
    torch.manual_seed(seed)
    args = (torch.randn(2, 4, 17, 19), torch.randn(6, 4, 3, 3), torch.randn(6))
    torch.testing.assert_close(graph_module(*args), layer(*args))


def test_the_inductor_pass_with_conv_relu_rewrites_unpooled_3x3_convs(model_new,
                                                                     reference_cpu_kernel,
                                                                     seed):
    """conv_relu=True: conv -> relu with no pool becomes the op with a 1 x 1 / stride 1 pool
    where the convolution is 3 x 3 / 1 over at least 8 channels; a stride-2 one and one of 4
    channels stay; off by default."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def layers(x, w1, b1, w2, w3):
        a = torch.ops.aten.relu(torch.ops.aten.convolution(
            x, w1, b1, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
        b = torch.ops.aten.relu(torch.ops.aten.convolution(
            a, w2, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1))
        c = torch.ops.aten.relu(torch.ops.aten.convolution(
            x[:, :4], w3, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
        return a.sum() + b.sum() + c.sum()

    torch.manual_seed(seed)
    args = (torch.randn(2, 8, 13, 15), torch.randn(16, 8, 3, 3), torch.randn(16),
            torch.randn(8, 16, 3, 3), torch.randn(8, 4, 3, 3))
    for conv_relu, expected in ((False, 0), (True, 1)):
        graph_module = make_fx(layers, tracing_mode="fake")(*args)
        fusion = model_new.InductorFusionPass(devices=("cpu",), conv_relu=conv_relu)
        fusion(graph_module.graph)
        graph_module.recompile()
        assert fusion.rewritten == expected
        ops = targets(graph_module)
        assert ops.count(torch.ops.fused_conv.conv2d_relu_maxpool.default) == expected
        assert ops.count(torch.ops.aten.convolution.default) == 3 - expected
        torch.testing.assert_close(graph_module(*args), layers(*args), rtol=1e-4, atol=1e-3)


def test_the_inductor_pass_leaves_a_grouped_conv_and_other_devices_alone(model_new):
    for groups, devices in ((2, ("cpu",)), (1, ("cuda",))):
        graph_module, _ = aten_graph(groups)
        before = targets(graph_module)
        fusion = model_new.InductorFusionPass(devices=devices)
        fusion(graph_module.graph)
        assert fusion.rewritten == 0 and targets(graph_module) == before


def test_torch_compile_with_the_pass_calls_the_op_and_matches_eager(model_new, seed):
    """End to end on the CPU: Inductor compiles a model with the pass installed (for CPU
    tensors here), fullgraph; the op's CPU kernel, standing in for the CUDA one, is called
    once and the result matches eager. A grouped convolution beside it stays Inductor's. (The
    op's fake refuses CPU tensors, as its binding does; for this test a fake that judges meta
    copies and answers on the CPU stands in.)"""
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from conftest import reference_conv_relu_maxpool
    calls = []

    def counting(*args):
        calls.append(args[3:10])
        return reference_conv_relu_maxpool(*args)

    def cpu_fake(x, weight, bias, *settings):
        meta = [None if t is None else torch.empty_like(t, device="meta")
                for t in (x, weight, bias)]
        return x.new_empty(model_new._conv2d_relu_maxpool_fake(*meta, *settings).shape)

    # Both stand-ins live in `scope`; closing it puts back the op's own fake and CPU kernel.
    # A fake stands in for a registered one from torch 2.14 on (register_fake's
    # allow_override); older versions refuse ("already has an fake impl registered").
    if "allow_override" not in inspect.signature(torch.library.register_fake).parameters:
        pytest.skip(f"torch {torch.__version__}: register_fake cannot stand a fake in for the "
                    "op's own")
    scope = torch.library.Library(model_new.OP_NAMESPACE, "FRAGMENT")
    torch.library.register_fake(model_new.OP_QUALNAME, cpu_fake, lib=scope, allow_override=True)
    torch.library.register_kernel(model_new.OP_QUALNAME, "cpu", counting, lib=scope)
    previous = inductor_config.post_grad_custom_post_pass
    inductor_config.post_grad_custom_post_pass = model_new.inductor_fusion_pass(("cpu",))
    try:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
                              nn.MaxPool2d(3, 2, padding=1, ceil_mode=True),
                              nn.Conv2d(8, 8, 3, groups=2), nn.ReLU(), nn.MaxPool2d(2)).eval()
        x = torch.randn(2, 3, 30, 26)
        torch._dynamo.reset()
        with torch.no_grad():
            compiled = torch.compile(model, fullgraph=True)
            out = compiled(x)
            expected = model(x)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
        assert calls == [([1, 1], [1, 1], [1, 1], [3, 3], [2, 2], [1, 1], True)]
    finally:
        inductor_config.post_grad_custom_post_pass = previous
        scope._destroy()
        torch._dynamo.reset()


def test_enable_inductor_fusion_installs_the_pass_and_disable_restores_stock(model_new):
    import torch._inductor.config as inductor_config
    assert inductor_config.post_grad_custom_post_pass is None
    fusion = model_new.enable_inductor_fusion()
    try:
        assert inductor_config.post_grad_custom_post_pass is fusion
        assert fusion.devices == ("cuda",) and fusion.uuid()
        from torch._inductor.custom_graph_pass import CustomGraphPass
        assert isinstance(fusion, CustomGraphPass)
    finally:
        model_new.enable_inductor_fusion(False)
    assert inductor_config.post_grad_custom_post_pass is None
