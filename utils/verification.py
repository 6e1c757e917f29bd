"""Check ModelNew (the fused CUDA op) against Model (PyTorch) at atol = rtol = 1e-2.

    python -m utils.verification              # full run: default problem, robustness, sweep
    python -m utils.verification --quick      # the default problem only
    python -m utils.verification --seed 123   # reproduce a run (every run prints its seed)
    python -m utils.verification --fp32       # everything with TF32 off (fp32-accurate path)

What it checks, one printed line each, stopping with a one-line reason at the first failure:
  * fresh random inputs (and weights) of the default problem, a new seed each;
  * the op on a non-default stream, inside a CUDA graph (capture, then replay on new data),
    and twice on one input with bitwise-equal results;
  * special values: NaN and +-inf in the input, all-negative pre-activations (every output
    0), large magnitudes (1e4): same NaN/inf positions and values as PyTorch;
  * a sweep: the public suite, the GPU test grid, and a few random valid configurations
    (drawn from the printed seed), with TF32 on (PyTorch's default) and, for a few cases,
    off (torch.backends.cudnn.allow_tf32 = False, which asks the op for an fp32-accurate path).

Every ModelNew call is made
  * on NaN-poisoned memory: the caching allocator's free blocks are filled with NaN just
    before, so an output element the kernel never writes shows up as a mismatch instead of
    a stale correct value left by an earlier call;
  * under a TorchFunctionMode that rejects any torch compute op (torch.*, Tensor methods,
    torch.nn.functional) inside ModelNew.forward. Allowed: tensor creation, metadata
    (shape, device, dtype, stride, ...) and the extension's own ops (pybind functions never
    reach the mode; torch.library ops are allowed under ALLOWED_OP_NAMESPACE).

Each line reports the errors against Model (what is asserted) and against a float64 copy of
Model on the same input (relative L2 error of the op and, for scale, of PyTorch itself).
Exit status: 0 all passed, 1 a check failed, 2 no GPU or no built extension.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import math
import random
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from utils.suite import DEFAULT, GRID, SUITE, ConvPoolCase, find_case, random_cases
from utils.setup_checks import SetupError, require_gpu_and_extension

ATOL = 1e-2
RTOL = 1e-2
# torch.library namespace of the extension's ops (torch.ops.fused_conv.*), allowed in forward.
ALLOWED_OP_NAMESPACE = "fused_conv"
# Stop poisoning after this many output-sized blocks (the free cache is then mostly covered).
MAX_POISON_BLOCKS = 4096
# Budget for the float64 reference's intermediates; larger batches are split into chunks.
FLOAT64_CHUNK_BYTES = 4 << 30
DEFAULT_RANDOM_INPUTS = 3
DEFAULT_RANDOM_CASES = 6
# Cases that the full run also checks with TF32 off, and on which it runs the robustness checks.
FP32_CASE_NAMES = ("default", "vgg_b5", "default_small", "k136_channel_tail",
                   "rect_kernel_3x5_rect_input", "c132_long_reduction", "pool3_stride2_pad1",
                   "ceil_mode_odd", "large_spatial_200x300")
ROBUSTNESS_CASE_NAMES = ("default", "ceil_mode_pool3_s2_pad1", "k136_channel_tail")
SPECIAL_VALUE_CASE_NAMES = ("default", "default_small", "pool3_stride2_pad1",
                            "ceil_mode_pool3_s2_pad1", "alexnet_like_11x11_s4")

# ---- the torch-op guard ----------------------------------------------------------------

# Functions that only create tensors (or new empty ones like an existing tensor).
ALLOWED_CREATION = frozenset({
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like",
    "torch.ones", "torch.ones_like", "torch.full", "torch.full_like", "torch.tensor",
    "torch.as_tensor", "torch.arange",
    "Tensor.new_empty", "Tensor.new_empty_strided", "Tensor.new_zeros", "Tensor.new_ones",
    "Tensor.new_full", "Tensor.new_tensor",
})
# Tensor attributes and methods that read metadata only (no kernel, no data access).
ALLOWED_METADATA = frozenset({
    "Tensor.shape", "Tensor.device", "Tensor.dtype", "Tensor.ndim", "Tensor.layout",
    "Tensor.is_cuda", "Tensor.is_cpu", "Tensor.is_meta", "Tensor.requires_grad",
    "Tensor.is_leaf", "Tensor.itemsize", "Tensor.nbytes", "Tensor.names",
    "Tensor.size", "Tensor.stride", "Tensor.dim", "Tensor.ndimension", "Tensor.numel",
    "Tensor.nelement", "Tensor.is_contiguous", "Tensor.data_ptr", "Tensor.element_size",
    "Tensor.get_device", "Tensor.storage_offset", "Tensor.is_floating_point",
    "Tensor.is_complex", "Tensor.__len__",
})


class ForbiddenTorchOp(RuntimeError):
    """ModelNew.forward called a torch compute op."""


def torch_op_name(func: Callable) -> str:
    """A readable name for what __torch_function__ received: torch.relu, Tensor.clamp,
    Tensor.shape (attribute read), torch.nn.functional.relu, torch.ops.aten.relu, ..."""
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        qualified = (func._qualified_op_name if isinstance(func, torch._ops.OpOverloadPacket)
                     else func.name())
        return "torch.ops." + qualified.replace("::", ".")
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", "") == "__get__" and hasattr(owner, "__objclass__"):
        return f"Tensor.{owner.__name__}"  # property read, e.g. x.shape
    name = getattr(func, "__name__", repr(func))
    if getattr(func, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor):
        return f"Tensor.{name}"
    qualname = getattr(func, "__qualname__", "")
    module = getattr(func, "__module__", None)
    if qualname.startswith("_VariableFunctionsClass.") or module == "torch":
        return f"torch.{name}"
    if qualname.startswith(("Tensor.", "TensorBase.")):
        return f"Tensor.{name}"
    return f"{module or '?'}.{name}"


def is_allowed_torch_op(func: Callable) -> bool:
    """True for tensor creation, metadata reads and the extension's torch.library ops."""
    if isinstance(func, torch._ops.OpOverload):
        return func.namespace == ALLOWED_OP_NAMESPACE
    if isinstance(func, torch._ops.OpOverloadPacket):
        return func._qualified_op_name.split("::")[0] == ALLOWED_OP_NAMESPACE
    name = torch_op_name(func)
    return name in ALLOWED_CREATION or name in ALLOWED_METADATA


class TorchOpGuard(TorchFunctionMode):
    """Raises ForbiddenTorchOp, naming the op, for any torch compute op run inside it.

    Calls into the pybind extension (cuda_extension.*) never reach a TorchFunctionMode, so
    they pass; so do nn.Module attribute reads such as self.conv.weight.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not is_allowed_torch_op(func):
            raise ForbiddenTorchOp(
                f"ModelNew.forward called the torch op {torch_op_name(func)}; only tensor "
                "creation, metadata and the extension's ops are allowed")
        return func(*args, **(kwargs or {}))


# ---- NaN poisoning ---------------------------------------------------------------------

def poison_free_memory(output_bytes: int, device: torch.device) -> None:
    """Fill the caching allocator's free blocks (on the current stream) with NaN.

    The next allocation of `output_bytes` - the op's output - then lands on NaN instead of a
    stale, possibly correct, earlier result. After emptying the cache, only fragments inside
    live segments stay free; output-sized blocks are allocated (and filled) until the
    allocator has to reserve a new segment, which covers every free block the output could
    take, plus the fresh segment it would otherwise come from. All are then released.
    """
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    elements = max(1, output_bytes // 4)
    reserved = torch.cuda.memory_reserved(device)
    blocks = []
    for _ in range(MAX_POISON_BLOCKS):
        blocks.append(torch.full((elements,), math.nan, device=device))
        if torch.cuda.memory_reserved(device) > reserved:
            break
    del blocks


# ---- comparison ------------------------------------------------------------------------

class CheckFailed(AssertionError):
    """A verification check failed; the message is the one-line reason."""


@dataclass
class Errors:
    """Errors of the op against Model (asserted) and against the float64 reference."""
    max_abs: float          # |op - Model|
    max_rel: float          # |op - Model| / max(|Model|, atol): zeros after ReLU don't dominate
    max_abs_64: float       # |op - float64|
    rel_l2_64: float        # ||op - float64|| / ||float64||
    torch_rel_l2_64: float  # ||Model - float64|| / ||float64||, PyTorch's own error for scale

    def describe(self) -> str:
        return (f"vs Model: abs {self.max_abs:.1e} rel {self.max_rel:.1e} | vs float64: "
                f"abs {self.max_abs_64:.1e} rel_l2 {self.rel_l2_64:.1e} "
                f"(torch {self.torch_rel_l2_64:.1e})")


def finite_errors(out: torch.Tensor, ref: torch.Tensor, ref64: torch.Tensor) -> Errors:
    """Errors over the elements where both references are finite."""
    finite = torch.isfinite(ref) & torch.isfinite(ref64)
    out64, ref_32_64, ref64 = out[finite].double(), ref[finite].double(), ref64[finite]
    if out64.numel() == 0:
        return Errors(0.0, 0.0, 0.0, 0.0, 0.0)
    diff = (out64 - ref_32_64).abs()
    norm64 = ref64.norm().item() or 1.0
    return Errors(
        max_abs=diff.max().item(),
        max_rel=(diff / ref_32_64.abs().clamp(min=ATOL)).max().item(),
        max_abs_64=(out64 - ref64).abs().max().item(),
        rel_l2_64=(out64 - ref64).norm().item() / norm64,
        torch_rel_l2_64=(ref_32_64 - ref64).norm().item() / norm64,
    )


def assert_matches(out: torch.Tensor, ref: torch.Tensor, what: str, equal_nan: bool = False,
                   scale: float = 1.0) -> None:
    """torch.testing.assert_close at ATOL/RTOL (after dividing both by `scale`), as CheckFailed
    with a one-line reason."""
    if out.shape != ref.shape:
        raise CheckFailed(f"{what}: output shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype or out.device != ref.device:
        raise CheckFailed(f"{what}: output {out.dtype} on {out.device}, expected {ref.dtype} "
                          f"on {ref.device}")
    try:
        torch.testing.assert_close(out / scale, ref / scale, atol=ATOL, rtol=RTOL,
                                   equal_nan=equal_nan)
    except AssertionError as error:
        bad = ~torch.isclose(out / scale, ref / scale, atol=ATOL, rtol=RTOL, equal_nan=equal_nan)
        first = tuple(int(i) for i in bad.nonzero()[0]) if bad.any() else None
        unwritten = int((torch.isnan(out) & ~torch.isnan(ref)).sum())
        detail = " ".join(line.strip() for line in str(error).splitlines()[1:4]).strip()
        hint = f"; {unwritten} NaN where Model has a number (unwritten?)" if unwritten else ""
        where = (f"; first at {first}: got {out[first].item():.6g}, "
                 f"expected {ref[first].item():.6g}" if first else "")
        raise CheckFailed(f"{what}: mismatch vs Model: {detail}{where}{hint}") from None


@contextlib.contextmanager
def cudnn_tf32(enabled: bool) -> Iterator[None]:
    """torch.backends.cudnn.allow_tf32 set to `enabled` inside, restored after."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


# ---- building and running the models ---------------------------------------------------

@dataclass
class Problem:
    """Model, ModelNew with Model's state dict, and Model's float64 copy for one case."""
    case: ConvPoolCase
    model: nn.Module
    model_new: nn.Module
    model64: nn.Module


def build_problem(case: ConvPoolCase, seed: int, new_class: type,
                  device: torch.device) -> Problem:
    from model import Model
    torch.manual_seed(seed)
    model = Model(**case.model_kwargs()).to(device).eval()
    model_new = new_class(**case.model_kwargs()).to(device).eval()
    model_new.load_state_dict(model.state_dict())
    return Problem(case, model, model_new, copy.deepcopy(model).double())


def random_input(case: ConvPoolCase, seed: int, device: torch.device) -> torch.Tensor:
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(case.input_shape(), device=device, generator=generator)


def run_new_poisoned(problem: Problem, x: torch.Tensor) -> torch.Tensor:
    """ModelNew on `x`, with poisoning sized for exactly this case's output."""
    poison_free_memory(4 * problem.case.output_elements() * x.shape[0] // problem.case.batch,
                       x.device)
    with torch.no_grad(), TorchOpGuard():
        out = problem.model_new(x)
    torch.cuda.synchronize(x.device)
    return out


def float64_reference(model64: nn.Module, x: torch.Tensor, case: ConvPoolCase) -> torch.Tensor:
    """Model in float64 on `x`, in batch chunks that keep the conv output under a budget."""
    conv_h, conv_w = case.conv_out()
    per_sample = 8 * case.out_channels * conv_h * conv_w * 2  # conv output + ReLU output
    chunk = max(1, FLOAT64_CHUNK_BYTES // max(per_sample, 1))
    with torch.no_grad():
        return torch.cat([model64(part.double()) for part in x.split(chunk)])


def variant_of(problem: Problem, x: torch.Tensor) -> str:
    """Name of the kernel variant the op picks here, or '?' when ModelNew cannot say."""
    import cuda_extension
    new, case = problem.model_new, problem.case
    try:
        return cuda_extension.conv2d_relu_maxpool_choose(
            x, new.conv.weight, new.conv.bias, *case.op_args(), getattr(new, "config", -1))
    except Exception:  # noqa: BLE001 - only a label for the report
        return "?"


def check_against_model(case: ConvPoolCase, seed: int, new_class: Optional[type] = None,
                        device: Optional[torch.device] = None, tf32: bool = True,
                        config: Optional[int] = None) -> str:
    """Fresh weights and input from `seed`; ModelNew vs Model. Returns the report line,
    raises CheckFailed. `new_class` (default: model_new.ModelNew) lets tests plant a fake."""
    if new_class is None:
        from model_new import ModelNew as new_class
    device = device or torch.device("cuda")
    problem = build_problem(case, seed, new_class, device)
    if config is not None:
        problem.model_new.config = config
    x = random_input(case, seed, device)
    with cudnn_tf32(tf32), torch.no_grad():
        ref = problem.model(x)
        ref64 = float64_reference(problem.model64, x, case)
        out = run_new_poisoned(problem, x)
        variant = variant_of(problem, x)
    assert_matches(out, ref, f"{case.name} [{variant}]")
    return f"[{variant}] " + finite_errors(out, ref, ref64).describe()


# ---- robustness: streams, graphs, determinism -------------------------------------------

def check_side_stream(case: ConvPoolCase, seed: int, device: torch.device) -> str:
    """The op on a non-default stream that is still busy writing the op's input.

    If the op launched on any stream other than the current one, it would race with that
    write and read the zeros that were there before.
    """
    from model_new import ModelNew
    problem = build_problem(case, seed, ModelNew, device)
    x = random_input(case, seed, device)
    with torch.no_grad():
        ref = problem.model(x)
    staged = torch.zeros_like(x)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        poison_free_memory(4 * case.output_elements(), device)
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time before the input is ready
        staged.copy_(x)
        with torch.no_grad(), TorchOpGuard():
            out = problem.model_new(staged)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    assert_matches(out, ref, f"{case.name} on a side stream")
    return "matches Model while the stream was still writing its input"


def check_cuda_graph(case: ConvPoolCase, seed: int, device: torch.device) -> str:
    """Capture the op in a CUDA graph, then replay it on new data copied into the input."""
    from model_new import ModelNew
    problem = build_problem(case, seed, ModelNew, device)
    static_x = random_input(case, seed, device)
    warmup = torch.cuda.Stream(device)
    warmup.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(warmup), torch.no_grad():
        for _ in range(2):
            problem.model_new(static_x)
    torch.cuda.current_stream(device).wait_stream(warmup)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.no_grad(), torch.cuda.graph(graph), TorchOpGuard():
            static_out = problem.model_new(static_x)
    except ForbiddenTorchOp:
        raise
    except Exception as error:  # noqa: BLE001 - report why capture failed, in one line
        raise CheckFailed(f"{case.name}: CUDA graph capture failed: "
                          f"{type(error).__name__}: {str(error).splitlines()[0]}") from None
    for replay in range(2):
        x = random_input(case, seed + 1 + replay, device)
        static_x.copy_(x)
        static_out.fill_(math.nan)  # an element the replay doesn't write stays NaN
        graph.replay()
        torch.cuda.synchronize(device)
        with torch.no_grad():
            ref = problem.model(x)
        assert_matches(static_out, ref, f"{case.name} CUDA graph replay {replay + 1}")
    return "captured once, 2 replays on new data match Model"


def check_deterministic(case: ConvPoolCase, seed: int, device: torch.device,
                        allow_nondeterministic: bool) -> str:
    """Two calls on one input give bitwise-equal outputs (or the line says how they differ)."""
    from model_new import ModelNew
    problem = build_problem(case, seed, ModelNew, device)
    x = random_input(case, seed, device)
    first = run_new_poisoned(problem, x).clone()
    second = run_new_poisoned(problem, x)
    if torch.equal(first, second):
        return "two calls bitwise equal"
    differ = first != second
    both_nan = torch.isnan(first) & torch.isnan(second)
    count = int((differ & ~both_nan).sum())
    if count == 0:
        return "two calls bitwise equal (NaN payloads aside)"
    largest = (first - second).abs().nan_to_num(math.inf)[differ & ~both_nan].max().item()
    message = (f"{case.name}: two calls on one input differ in {count} of {first.numel()} "
               f"elements (largest difference {largest:.3g}): the kernel's reduction order "
               "depends on scheduling (atomics or split reductions?)")
    if allow_nondeterministic:
        return "NOT bitwise deterministic (allowed by --allow-nondeterministic): " + message
    raise CheckFailed(message)


# ---- special values ------------------------------------------------------------------

def check_nan_inf(case: ConvPoolCase, seed: int, device: torch.device) -> str:
    """NaN, +inf and -inf planted in the input: the op has NaN and +-inf where PyTorch has."""
    from model_new import ModelNew
    problem = build_problem(case, seed, ModelNew, device)
    x = random_input(case, seed, device)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    count = max(1, x.numel() // 50_000)
    flat = x.view(-1)
    for value in (math.nan, math.inf, -math.inf):
        flat[torch.randint(0, x.numel(), (count,), generator=generator).to(device)] = value
    with torch.no_grad():
        ref = problem.model(x)
    out = run_new_poisoned(problem, x)
    specials = f"{int(torch.isnan(ref).sum())} NaN, {int(torch.isinf(ref).sum())} inf in Model"
    try:
        assert_special_positions(out, ref, case.name)
        assert_matches(out, ref, f"{case.name} with NaN/inf input", equal_nan=True)
        return f"{count} each of NaN/+inf/-inf planted: {specials}; same positions and values"
    except CheckFailed as error_vs_model:
        # cuDNN may pick an algorithm (Winograd, FFT) that spreads NaN beyond the receptive
        # field; then float64 (direct) is the better judge of where specials belong.
        ref64 = float64_reference(problem.model64, x, case)
        try:
            assert_special_positions(out, ref64.float(), case.name)
            assert_matches(out, ref64.float(), f"{case.name} with NaN/inf input", equal_nan=True)
        except CheckFailed:
            raise error_vs_model from None
        return (f"{specials}; matches the float64 reference, not PyTorch's fp32 result "
                f"({error_vs_model})")


def assert_special_positions(out: torch.Tensor, ref: torch.Tensor, name: str) -> None:
    for what, test in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        mismatch = test(out) != test(ref)
        if mismatch.any():
            first = tuple(int(i) for i in mismatch.nonzero()[0])
            raise CheckFailed(f"{name}: {what} positions differ from Model in "
                              f"{int(mismatch.sum())} elements; first at {first}: got "
                              f"{out[first].item()}, expected {ref[first].item()}")


def check_all_negative(case: ConvPoolCase, seed: int, device: torch.device) -> str:
    """Positive input, negative weights and bias: every pre-activation < 0, every output 0."""
    from model_new import ModelNew
    problem = build_problem(case, seed, ModelNew, device)
    with torch.no_grad():
        weight = -problem.model.conv.weight.abs()
        bias = None if problem.model.conv.bias is None else -problem.model.conv.bias.abs() - 0.1
        for model in (problem.model, problem.model_new):
            model.conv.weight.copy_(weight)
            if bias is not None:
                model.conv.bias.copy_(bias)
        x = random_input(case, seed, device).abs()
        ref = problem.model(x)
    out = run_new_poisoned(problem, x)
    nonzero = int((out != 0).sum())
    if nonzero:
        raise CheckFailed(f"{case.name}: all pre-activations are negative but {nonzero} outputs "
                          f"are not 0 (e.g. {out[out != 0][0].item():.6g})")
    assert_matches(out, ref, f"{case.name} all-negative")
    return "every output exactly 0"


def check_large_magnitude(case: ConvPoolCase, seed: int, device: torch.device,
                          scale: float = 1e4) -> str:
    """Input scaled by 1e4; compared after dividing by the scale (atol scales with the data)."""
    from model_new import ModelNew
    problem = build_problem(case, seed, ModelNew, device)
    x = random_input(case, seed, device) * scale
    with torch.no_grad():
        ref = problem.model(x)
        ref64 = float64_reference(problem.model64, x, case)
    out = run_new_poisoned(problem, x)
    if not torch.isfinite(out).all():
        raise CheckFailed(f"{case.name} x{scale:g}: {int((~torch.isfinite(out)).sum())} "
                          "non-finite outputs where Model has none")
    assert_matches(out, ref, f"{case.name} x{scale:g}", scale=scale)
    errors = finite_errors(out / scale, ref / scale, ref64 / scale)
    return f"max |out| {out.abs().max().item():.3g}; (scaled) " + errors.describe()


# ---- the run -------------------------------------------------------------------------



@dataclass
class Check:
    name: str
    run: Callable[[], str]


def plan_checks(args: argparse.Namespace, seed: int, device: torch.device) -> list[Check]:
    """Every check of this run, in order: cheap and central first."""
    tf32 = not args.fp32
    precision = "fp32" if args.fp32 else "tf32"
    checks = []
    for i in range(args.inputs):
        checks.append(Check(f"default {precision} input {i + 1} (seed {seed + i})",
                            lambda s=seed + i: check_against_model(DEFAULT, s, device=device,
                                                                   tf32=tf32)))
    if not args.fp32:
        checks.append(Check("default fp32 (TF32 off)",
                            lambda: check_against_model(DEFAULT, seed, device=device, tf32=False)))
    robustness = [DEFAULT] if args.quick else [find_case(n) for n in ROBUSTNESS_CASE_NAMES]
    specials = [DEFAULT] if args.quick else [find_case(n) for n in SPECIAL_VALUE_CASE_NAMES]
    for case in robustness:
        checks += [
            Check(f"{case.name} side stream", lambda c=case: check_side_stream(c, seed, device)),
            Check(f"{case.name} CUDA graph", lambda c=case: check_cuda_graph(c, seed, device)),
            Check(f"{case.name} determinism", lambda c=case: check_deterministic(
                c, seed, device, args.allow_nondeterministic)),
        ]
    for case in specials:
        checks += [
            Check(f"{case.name} NaN/inf input", lambda c=case: check_nan_inf(c, seed, device)),
            Check(f"{case.name} all-negative", lambda c=case: check_all_negative(c, seed, device)),
            Check(f"{case.name} magnitude 1e4",
                  lambda c=case: check_large_magnitude(c, seed, device)),
        ]
    if args.quick:
        return checks

    sweep = ([("suite", c) for c in SUITE if c is not DEFAULT] + [("grid", c) for c in GRID]
             + [("random", c) for c in random_cases(random.Random(seed), args.random_cases)])
    for i, (group, case) in enumerate(sweep):
        case_seed = seed + 100 + i
        checks.append(Check(f"{group}/{case.name} {precision} ({case.label()})",
                            lambda c=case, s=case_seed: check_against_model(
                                c, s, device=device, tf32=tf32)))
        if not args.fp32 and case.name in FP32_CASE_NAMES:
            checks.append(Check(f"{group}/{case.name} fp32 (TF32 off)",
                                lambda c=case, s=case_seed: check_against_model(
                                    c, s, device=device, tf32=False)))
        if args.all_variants and group == "grid":
            checks += variant_checks(case, case_seed, device, tf32, precision)
    return checks


def variant_checks(case: ConvPoolCase, seed: int, device: torch.device, tf32: bool,
                   precision: str) -> list[Check]:
    """One check per kernel variant (config id); variants that can't run the shape skip."""
    import cuda_extension

    def run_variant(config: int) -> str:
        try:
            return check_against_model(case, seed, device=device, tf32=tf32, config=config)
        except RuntimeError as error:
            if "cannot run this shape" in str(error):
                return "skipped: " + str(error).splitlines()[0]
            raise

    return [Check(f"grid/{case.name} {precision} config {config} ({name})",
                  lambda v=config: run_variant(v))
            for name, config in sorted(cuda_extension.conv2d_relu_maxpool_variants().items(),
                                       key=lambda item: item[1])]


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    reason = text[0] if text else ""
    if isinstance(error, (CheckFailed, ForbiddenTorchOp)):
        return reason
    return f"{type(error).__name__}: {reason}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m utils.verification",
        description="Check ModelNew against Model (atol = rtol = 1e-2): random inputs, "
                    "streams, CUDA graphs, determinism, special values and a sweep of shapes.")
    parser.add_argument("--quick", action="store_true",
                        help="only the default problem (random inputs, robustness, special "
                             "values); skips the sweep of other shapes")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for inputs, weights and random configurations; a run "
                             "prints its seed, and passing it back reproduces that run")
    parser.add_argument("--fp32", action="store_true",
                        help="run every check with torch.backends.cudnn.allow_tf32 = False "
                             "(the op must then use an fp32-accurate path)")
    parser.add_argument("--inputs", type=int, default=DEFAULT_RANDOM_INPUTS,
                        help="fresh random inputs of the default problem (default: "
                             f"{DEFAULT_RANDOM_INPUTS})")
    parser.add_argument("--random-cases", type=int, default=DEFAULT_RANDOM_CASES,
                        help="random valid configurations in the sweep (default: "
                             f"{DEFAULT_RANDOM_CASES})")
    parser.add_argument("--all-variants", action="store_true",
                        help="also run every kernel variant (config id) on each grid case")
    parser.add_argument("--allow-nondeterministic", action="store_true",
                        help="report, instead of failing, outputs that differ bitwise between "
                             "two calls on the same input")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        require_gpu_and_extension()
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31 - 1000)
    device = torch.device("cuda")
    print(f"seed {seed} (rerun with --seed {seed}); {torch.cuda.get_device_name(device)}, "
          f"torch {torch.__version__}, cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}",
          flush=True)
    checks = plan_checks(args, seed, device)
    started = time.perf_counter()
    for number, check in enumerate(checks, 1):
        try:
            line = check.run()
        except Exception as error:  # noqa: BLE001 - any error is a failure, in one line
            print(f"FAIL [{number}/{len(checks)}] {check.name}: {one_line(error)}", flush=True)
            print(f"verdict: FAIL at check {number} of {len(checks)} (seed {seed}): "
                  f"{check.name}", flush=True)
            return 1
        print(f"ok   [{number}/{len(checks)}] {check.name}: {line}", flush=True)
    print(f"verdict: PASS, {len(checks)} checks in {time.perf_counter() - started:.1f} s "
          f"(seed {seed})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
