"""Host (CPU) cost of one call of the fused op and of its peers, on layers whose kernels take
a few microseconds: where the time between two calls is the host's, not the GPU's.

For each layer and each way of calling, three numbers:
  enqueue  host microseconds per call while the GPU is kept busy (a torch.cuda._sleep
           kernel ahead of the calls): what the Python, dispatcher and launch path costs;
  latency  wall microseconds per call with a synchronize after each (GPU idle in between);
  event    utils.profiling's time_calls median (CUDA events, L2 flushed between calls), the
           suite's measure, in which a host slower than the flush shows up as GPU time.
Then a torch.profiler table of the host time of the pybind function's calls (CUDA runtime
calls included). Under a profiler ModelNew itself takes the op path (model_new.py), so the
table is of the function both paths end in.

    python tools/bench_host.py [LAYERS [CALLS [TARGETS]]]   e.g. lenet_c1,batch1 400 pybind,eager

LAYERS: suite or grid case names, `tiny`, or the zoo's row names (googlenet_c34_p2s2_b1: needs
torchvision).

Targets: pybind, torch.ops, ModelNew, ModelNew+grad, ModelNew+compile (torch.compile of
ModelNew: the op called from a compiled graph), eager, compile (default: all). For an
A/B run against another build, put its tree first on PYTHONPATH (its model_new and module win).
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[1]))
import cuda_extension as ext  # noqa: E402
from model import Model  # noqa: E402
from model_new import ModelNew  # noqa: E402
from utils.profiling import L2_FLUSH_BYTES, find_any_case, time_calls  # noqa: E402
from utils.suite import ConvPoolCase  # noqa: E402

TINY = ConvPoolCase("tiny", 1, 3, 8, 16, 16, (3, 3), padding=(1, 1))


def layer(name: str) -> ConvPoolCase:
    return TINY if name == TINY.name else find_any_case(name)


def enqueue_us(fn, x: torch.Tensor, calls: int) -> float:
    """Host microseconds per call with the GPU busy, so no call waits for the device."""
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        torch.cuda._sleep(int(2e9 * calls * 150e-6))  # ~150 us of GPU time per call, ample
        started = time.perf_counter()
        for _ in range(calls):
            fn(x)
        samples.append((time.perf_counter() - started) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def latency_us(fn, x: torch.Tensor, calls: int) -> float:
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn(x)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def targets(case: ConvPoolCase, wanted: list[str]):
    torch.manual_seed(0)
    model = Model(*case.init_args()).cuda().eval()
    fused = ModelNew(*case.init_args()).cuda().eval()
    fused.load_state_dict(model.state_dict())
    weight, bias = fused.conv.weight, fused.conv.bias
    args = case.op_args()
    op = torch.ops.fused_conv.conv2d_relu_maxpool
    compiled = torch.compile(model) if "compile" in wanted else None
    compiled_fused = torch.compile(fused) if "ModelNew+compile" in wanted else None
    every = {
        "pybind": (lambda x: ext.conv2d_relu_maxpool_forward(x, weight, bias, *args), False),
        "torch.ops": (lambda x: op(x, weight, bias, *args), False),
        "ModelNew": (fused, False),
        "ModelNew+grad": (fused, True),
        "ModelNew+compile": (compiled_fused, False),
        "eager": (model, False),
        "compile": (compiled, False),
    }
    return {name: every[name] for name in wanted}


def main() -> int:
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else ["lenet_c1", "batch1", "tiny"]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    wanted = (sys.argv[3].split(",") if len(sys.argv) > 3 else
              ["pybind", "torch.ops", "ModelNew", "ModelNew+grad", "ModelNew+compile", "eager",
               "compile"])
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    print(f"{'layer':10s} {'target':14s} {'enqueue':>8s} {'latency':>8s} {'event':>8s}  (us)")
    for name in names:
        case = layer(name)
        xs = [torch.randn(case.input_shape(), device="cuda") for _ in range(4)]
        calls_of = targets(case, wanted + ["pybind"] * ("pybind" not in wanted))
        for target in wanted:
            fn, grad = calls_of[target]
            with torch.set_grad_enabled(grad):
                host = enqueue_us(fn, xs[0], calls)
                wall = latency_us(fn, xs[0], calls)
                event = statistics.median(time_calls(fn, xs, 200, 10, flush))
            print(f"{name:10s} {target:14s} {host:8.1f} {wall:8.1f} {event:8.1f}", flush=True)
        pybind = calls_of["pybind"][0]
        with torch.no_grad():
            pybind(xs[0])
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(50):
                    pybind(xs[0])
                torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
        torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
