"""The layer zoo (utils/zoo.py) and the profiling tool's zoo and fuzz selections, on the CPU:
the layers read off torchvision's model definitions (meta device) are the ones the models
have, with the pools that follow them."""

import pytest

pytest.importorskip("torchvision")

from utils import profiling, zoo  # noqa: E402
from utils.suite import ConvPoolCase  # noqa: E402


def test_alexnet_layers_and_their_pools():
    layers = zoo.model_layers("alexnet")
    assert [(l.in_channels, l.out_channels, l.kernel_size, l.stride) for l in layers] == [
        (3, 64, (11, 11), (4, 4)), (64, 192, (5, 5), (1, 1)), (192, 384, (3, 3), (1, 1)),
        (384, 256, (3, 3), (1, 1)), (256, 256, (3, 3), (1, 1))]
    pool = ((3, 3), (2, 2), (0, 0), False)
    assert [l.pool for l in layers] == [pool, pool, None, None, pool]
    assert [(l.height, l.width) for l in layers] == [(224, 224), (27, 27), (13, 13), (13, 13),
                                                     (13, 13)]


def test_a_pool_is_found_through_batch_norm_and_functional_relu():
    """GoogLeNet's BasicConv2d is conv -> bn -> F.relu; its conv3 reaches maxpool2 (3x3 / 2,
    ceil mode) that way, and ResNet's stem reaches its padded max-pool through nn.ReLU."""
    googlenet = zoo.model_layers("googlenet")
    conv3 = googlenet[2]
    assert (conv3.in_channels, conv3.out_channels, conv3.kernel_size) == (64, 192, (3, 3))
    assert conv3.pool == ((3, 3), (2, 2), (0, 0), True)
    assert googlenet[1].pool is None  # conv2 (1x1) feeds conv3, not a pool
    stem = zoo.model_layers("resnet18")[0]
    assert stem.kernel_size == (7, 7) and stem.pool == ((3, 3), (2, 2), (1, 1), False)


def test_zoo_cases_are_valid_deduplicated_and_within_memory():
    cases = zoo.zoo_cases(["vgg16", "vgg19"], batches=(1, 32))
    keys = [zoo.geometry_key(case) for case in cases]
    assert len(keys) == len(set(keys))
    # One name a geometry: the batch is part of it (a layer appears at every batch that fits).
    assert len({case.name for case in cases}) == len(cases)
    assert all(case.name.endswith(f"_b{case.batch}") for case in cases)
    assert {case.batch for case in cases} == {1, 32}
    assert all(case.is_valid() for case in cases)
    assert all(4 * (case.input_elements() + case.output_elements()) <= zoo.MAX_BYTES
               for case in cases)
    # vgg19's layers all exist in vgg16 at these geometries but the 3 extra 3x3 convolutions
    # of its blocks 3-5, whose geometries vgg16 has too: nothing new.
    assert not any(case.name.startswith("vgg19") for case in cases)
    # Each convolution no pool follows appears under both zoo pools.
    unfused = [case for case in cases if "_p2s2" in case.name]
    assert unfused and all(case.pool_kernel == (2, 2) for case in unfused)
    assert len([c for c in cases if "_p3s2" in c.name]) == len(unfused)


def test_spread_picks_evenly_over_the_flop_range():
    cases = [ConvPoolCase(f"c{i}", 1, 8, 8, 8 + i, 8 + i, (3, 3)) for i in range(20)]
    picked = profiling.spread(cases, 5)
    flops = [case.flops() for case in picked]
    assert flops == sorted(flops) and len(picked) == 5
    assert picked[0] is min(cases, key=lambda c: c.flops())
    assert picked[-1] is max(cases, key=lambda c: c.flops())
    assert profiling.spread(cases, 50) == cases


def test_fuzz_cases_cover_every_dtype_and_layout_above_half_a_gflop(seed):
    drawn = profiling.fuzz_cases(24, seed)
    assert len(drawn) == 24
    assert {(dtype, layout) for _, dtype, layout in drawn} == {
        (d, l) for d in profiling.FUZZ_DTYPES for l in (False, True)}
    for case, _, _ in drawn:
        assert case.is_valid()
        assert profiling.FUZZ_MIN_FLOPS <= case.flops() <= profiling.FUZZ_MAX_FLOPS
    # The same seed, the same geometries.
    assert [c.label() for c, _, _ in profiling.fuzz_cases(24, seed)] == [
        c.label() for c, _, _ in drawn]


def test_zoo_and_fuzz_flags_select_their_cases():
    args = profiling.build_parser().parse_args(["--zoo", "--zoo-models", "alexnet",
                                                "--zoo-batches", "32", "--zoo-limit", "3"])
    cases = profiling.requested_cases(args)
    assert len(cases) == 3 and all(dtype is None and not layout for _, dtype, layout in cases)
    assert all(case.batch == 32 for case, _, _ in cases)
    args = profiling.build_parser().parse_args(["--fuzz", "6", "--fuzz-seed", "3"])
    assert [d for _, d, _ in profiling.requested_cases(args)] == list(profiling.FUZZ_DTYPES) * 2
    with pytest.raises(SystemExit):
        profiling.build_parser().parse_args(["--zoo", "--suite"])


def test_a_zoo_row_runs_again_by_its_name():
    """`python -m utils.profiling --case NAME` takes the zoo JSONs' row names too: the case is
    rebuilt from its model at its batch, with the geometry the zoo gave it; a name whose layer
    or pool the zoo does not have is refused with both lists' rules."""
    for name in ("densenet121_c5_p2s2_b128", "alexnet_c1_b32", "googlenet_c2_b1"):
        case = zoo.find_zoo_case(name)
        assert case.name == name
        model = name.rsplit("_c", 1)[0]
        batch = int(name.rsplit("_b", 1)[1])
        expected = next(c for c in zoo.zoo_cases([model], [batch]) if c.name == name)
        assert zoo.geometry_key(case) == zoo.geometry_key(expected) and case.batch == batch
    alexnet_c1 = zoo.find_zoo_case("alexnet_c1_b32")
    assert (alexnet_c1.in_channels, alexnet_c1.kernel_size, alexnet_c1.pool_kernel) == (
        64, (5, 5), (3, 3))
    args = profiling.build_parser().parse_args(["--case", "densenet121_c5_p2s2_b128",
                                                "--case", "default"])
    picked = [case for case, _, _ in profiling.requested_cases(args)]
    assert [case.name for case in picked] == ["densenet121_c5_p2s2_b128", "default"]
    # Any batch: the layer at that batch (the zoo's own are 1, 32 and 128).
    assert zoo.find_zoo_case("densenet121_c5_p2s2_b7").batch == 7
    for wrong in ("densenet121_c5_p7s7_b1", "nosuchnet_c1_b1", "densenet121_c9999_b1"):
        with pytest.raises(KeyError, match="no zoo case named"):
            profiling.find_any_case(wrong)
    with pytest.raises(KeyError, match="no case named 'nosuchcase'"):
        profiling.find_any_case("nosuchcase")
