"""ModelNew under torch.distributed: one process per GPU (NCCL), each against Model.

    python tools/check_distributed.py                  # 2 processes on cuda:0 and cuda:1
    python tools/check_distributed.py --world-size 4

Every rank builds Model and ModelNew from the same seed (so the same weights everywhere),
runs both on its own GPU on an input drawn from seed + rank, and checks that ModelNew's
output lies on that GPU and matches Model at atol = rtol = 1e-2. The ranks then all_reduce
their largest error (MAX) and a failure count (SUM) over NCCL, so every rank sees whether
all passed; rank 0 prints one line per rank and the verdict. Exit status: 0 all ranks passed,
1 a rank failed, 2 fewer GPUs than --world-size.

NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are set (unless already set): the
lent multi-GPU machines do not support NVLink multicast.
"""
import argparse
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ATOL = RTOL = 1e-2
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_rank(rank: int, world_size: int, port: int, case_name: str, seed: int) -> None:
    """One process: Model vs ModelNew on cuda:<rank>; raises on failure (spawn reports it)."""
    for name, value in MULTICAST_OFF.items():
        os.environ.setdefault(name, value)
    sys.path.insert(0, str(REPO))
    from model import Model
    from model_new import ModelNew
    from utils.suite import find_case

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    try:
        case = find_case(case_name)
        torch.manual_seed(seed)  # same weights on every rank
        reference = Model(**case.model_kwargs()).to(device).eval()
        fused = ModelNew(**case.model_kwargs()).to(device).eval()
        fused.load_state_dict(reference.state_dict())
        generator = torch.Generator(device=device).manual_seed(seed + rank)
        x = torch.randn(case.input_shape(), device=device, generator=generator)
        with torch.no_grad():
            out = fused(x)
            expected = reference(x)
        on_its_gpu = out.device == device
        close = on_its_gpu and torch.allclose(out, expected, atol=ATOL, rtol=RTOL)
        error = (out - expected).abs().max() if on_its_gpu else torch.tensor(float("inf"))
        # Errors and verdicts of every rank, gathered through NCCL on this rank's GPU.
        max_error = error.reshape(1).to(device=device, dtype=torch.float32)
        failures = torch.tensor([0.0 if close else 1.0], device=device)
        per_rank = [torch.zeros(2, device=device) for _ in range(world_size)]
        dist.all_gather(per_rank, torch.cat([max_error, failures]))
        dist.all_reduce(max_error, op=dist.ReduceOp.MAX)
        dist.all_reduce(failures, op=dist.ReduceOp.SUM)
        if rank == 0:
            for other, values in enumerate(per_rank):
                verdict = "ok" if values[1].item() == 0 else "MISMATCH"
                print(f"rank {other} on cuda:{other}: max |ModelNew - Model| = "
                      f"{values[0].item():.2e} {verdict}", flush=True)
            print(f"{'PASS' if failures.item() == 0 else 'FAIL'}: {world_size} NCCL ranks, "
                  f"case {case.name}, largest error {max_error.item():.2e} "
                  f"(atol = rtol = {ATOL})", flush=True)
        if failures.item() != 0:
            raise RuntimeError(f"rank {rank}: {int(failures.item())} rank(s) did not match "
                               "Model")
    finally:
        dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2,
                        help="processes, one per GPU (default: 2)")
    parser.add_argument("--case", default="default_small",
                        help="utils.suite case each rank runs (default: default_small)")
    parser.add_argument("--seed", type=int, default=1234,
                        help="weights seed, shared by all ranks (inputs use seed + rank)")
    args = parser.parse_args()
    if torch.cuda.device_count() < args.world_size:
        print(f"error: needs {args.world_size} CUDA GPUs, {torch.cuda.device_count()} visible",
              file=sys.stderr)
        return 2
    for name, value in MULTICAST_OFF.items():
        os.environ.setdefault(name, value)  # inherited by the spawned processes
    try:
        mp.spawn(run_rank, args=(args.world_size, free_port(), args.case, args.seed),
                 nprocs=args.world_size, join=True)
    except mp.ProcessRaisedException as error:
        print(f"FAIL: {str(error).strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    except mp.ProcessExitedException as error:
        print(f"FAIL: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
