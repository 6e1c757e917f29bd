"""ModelNew is a drop-in for Model: constructor, state dict, argument normalisation, moves.

CPU only, except the .cuda() test. model.py is the task's specification, so its constants and
input generators are pinned here too.
"""
import inspect

import pytest
import torch

import model
from model import Model

# (args, kwargs) for Model / ModelNew: the task's configuration and its variations.
CONSTRUCTIONS = [
    pytest.param((64, 128, 3, 2), {}, id="task"),
    pytest.param((3, 8, 3, 2), {"bias": False}, id="no_bias"),
    pytest.param((4, 6, (3, 5), (2, 3)), {"stride": (1, 2), "padding": (1, 2), "dilation": 2,
                                          "pool_stride": 1, "pool_padding": 1,
                                          "ceil_mode": True}, id="every_argument"),
    pytest.param((2, 5, 1, 1), {"stride": 2, "bias": True}, id="pointwise"),
]


@pytest.fixture(scope="module")
def ModelNew(extension):
    """model_new imports cuda_extension: a missing build fails here, with the fixture's message."""
    from model_new import ModelNew
    return ModelNew


def test_constructor_signatures_are_identical(ModelNew):
    def parameters(cls):
        signature = inspect.signature(cls.__init__)
        return [(p.name, p.kind, p.default) for p in signature.parameters.values()]
    assert parameters(ModelNew) == parameters(Model)


@pytest.mark.parametrize("args,kwargs", CONSTRUCTIONS)
def test_model_state_dict_loads_into_model_new_with_identical_keys(ModelNew, args, kwargs):
    reference, fused = Model(*args, **kwargs), ModelNew(*args, **kwargs)
    assert list(fused.state_dict()) == list(reference.state_dict())
    assert {name: p.shape for name, p in fused.state_dict().items()} == \
           {name: p.shape for name, p in reference.state_dict().items()}
    fused.load_state_dict(reference.state_dict())  # strict: no missing or unexpected keys
    for name, tensor in reference.state_dict().items():
        assert torch.equal(fused.state_dict()[name], tensor), name


def test_model_without_bias_has_no_bias_parameter(ModelNew):
    fused = ModelNew(3, 8, 3, 2, bias=False)
    assert fused.conv.bias is None
    assert list(fused.state_dict()) == ["conv.weight"]


def test_task_constants_are_the_specified_problem():
    assert (model.batch_size, model.in_channels, model.out_channels) == (128, 64, 128)
    assert (model.height, model.width) == (128, 128)
    assert (model.kernel_size, model.pool_kernel_size) == (3, 2)


def test_get_init_inputs_are_the_constructor_arguments():
    assert model.get_init_inputs() == [64, 128, 3, 2]
    Model(*model.get_init_inputs())  # constructible as given


def test_get_inputs_is_one_float32_batch_of_the_task_shape():
    inputs = model.get_inputs()  # 512 MiB: drawn once
    assert len(inputs) == 1
    x = inputs[0]
    assert x.shape == (128, 64, 128, 128)
    assert x.dtype == torch.float32 and x.device.type == "cpu"


def test_model_new_normalises_int_arguments_into_pairs(ModelNew):
    fused = ModelNew(3, 8, 3, 3, stride=2, padding=1, dilation=2, pool_padding=1)
    assert fused.stride == (2, 2)
    assert fused.padding == (1, 1)
    assert fused.dilation == (2, 2)
    assert fused.pool_kernel == (3, 3)
    assert fused.pool_padding == (1, 1)
    assert fused.ceil_mode is False


def test_model_new_keeps_tuple_arguments(ModelNew):
    fused = ModelNew(3, 8, (3, 5), (2, 3), stride=(1, 2), padding=(0, 1), dilation=(2, 1),
                     pool_stride=(1, 2), pool_padding=(1, 0), ceil_mode=True)
    assert fused.stride == (1, 2)
    assert fused.padding == (0, 1)
    assert fused.dilation == (2, 1)
    assert fused.pool_kernel == (2, 3)
    assert fused.pool_stride == (1, 2)
    assert fused.pool_padding == (1, 0)
    assert fused.ceil_mode is True


@pytest.mark.parametrize("pool_kernel,expected", [(2, (2, 2)), ((3, 2), (3, 2))])
def test_pool_stride_none_means_the_pool_kernel(ModelNew, pool_kernel, expected):
    fused = ModelNew(3, 8, 3, pool_kernel)
    assert fused.pool_stride == expected
    # As in nn.MaxPool2d, whose stride defaults to its kernel size.
    assert Model(3, 8, 3, pool_kernel).pool.stride == pool_kernel


def test_string_padding_is_refused_with_a_clear_error(ModelNew):
    with pytest.raises(ValueError, match="string padding"):
        ModelNew(3, 8, 3, 2, padding="same")


@pytest.mark.parametrize("target", [torch.float64, "cpu"])
def test_to_keeps_parameter_names(ModelNew, target):
    fused = ModelNew(3, 8, 3, 2)
    names = [name for name, _ in fused.named_parameters()]
    moved = fused.to(target)
    assert [name for name, _ in moved.named_parameters()] == names
    if target is torch.float64:
        assert all(p.dtype == torch.float64 for p in moved.parameters())


def test_forward_on_cpu_tensor_raises_must_be_cuda(ModelNew):
    fused = ModelNew(3, 8, 3, 2)
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
        fused(torch.randn(2, 3, 16, 16))


def test_forward_after_a_float64_move_names_the_weight_dtype(ModelNew):
    fused = ModelNew(3, 8, 3, 2).to(torch.float64)
    with pytest.raises(RuntimeError, match="weight must be float32 like x, got Double"):
        fused(torch.randn(2, 3, 16, 16))


def test_float64_input_is_refused_with_its_dtype(ModelNew):
    fused = ModelNew(3, 8, 3, 2).to(torch.float64)
    with pytest.raises(RuntimeError, match="x must be float32, float16 or bfloat16, got Double"):
        fused(torch.randn(2, 3, 16, 16, dtype=torch.float64))


@pytest.mark.parametrize("move", ["half", "bfloat16"])
def test_16_bit_model_passes_the_dtype_checks(ModelNew, move):
    fused = getattr(ModelNew(3, 8, 3, 2), move)()
    x = torch.randn(2, 3, 16, 16).to(fused.conv.weight.dtype)
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):  # the last check
        fused(x)


def test_half_model_with_a_float32_input_names_the_mismatch(ModelNew):
    fused = ModelNew(3, 8, 3, 2).half()
    with pytest.raises(RuntimeError, match="weight must be float32 like x, got Half"):
        fused(torch.randn(2, 3, 16, 16))


@pytest.mark.requires_cuda
def test_cuda_moves_parameters_and_runs_like_model(ModelNew, seed):
    reference = Model(3, 8, 3, 2)
    fused = ModelNew(3, 8, 3, 2)
    fused.load_state_dict(reference.state_dict())
    names = [name for name, _ in fused.named_parameters()]
    fused, reference = fused.cuda(), reference.cuda()
    assert [name for name, _ in fused.named_parameters()] == names
    assert all(p.is_cuda for p in fused.parameters())
    generator = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(2, 3, 16, 16, device="cuda", generator=generator)
    out = fused(x)
    assert out.is_cuda
    # TF32 on both sides (cuDNN's default): errors of a few 1e-3 on values of order 1.
    torch.testing.assert_close(out, reference(x), atol=2e-2, rtol=2e-2)
