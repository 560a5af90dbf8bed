"""The GPU capture kit's training job: plain DDP, no rankscope code in it.

Run by torchrun (under `rankscope run`, with KINETO_USE_DAEMON=1). Compute on
CUDA when torch sees a GPU (every rank on the same device, cuda:<local_rank %
device_count>), else on CPU. Collectives (--backend):
  auto  CUDA: NCCL if it accepts this job's ranks (it refuses two ranks on one
        device: "Duplicate GPU detected"), else gloo on the CUDA tensors; CPU: gloo.
  nccl  NCCL or fail (the 1-rank NCCL job).
  gloo  gloo.
The script prints one line "collectives: <backend> (<why>)" from rank 0, and
rank 0 writes it with the device and versions as JSON to --info.

--await-trace DIR trains on after the last planned step until every rank's
on-demand Kineto trace is written under DIR (at most --await-trace-s; the
steps done are in --info). Kineto starts an iteration-based trace at a step
after its config arrives (it polls the agent every few seconds), so a short
job could end first and get an empty trace (seen on an H200: the 1-rank NCCL
job's 120 steps took ~3 s). And a process that exits while Kineto is still
writing its trace dies in Kineto's exit handlers (SIGSEGV or "malloc():
unsorted double linked list corrupted", seen with torch 2.x on CPU).

--slow-rank R plants a compute straggler: rank R runs its hidden layer
--slow-factor x 8 more times per forward (extra matmuls on its device).
Sizes (--width, --batch) default to what makes compute dominate on the device.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self, width: int, extra_passes: int) -> None:
        super().__init__()
        self.a = torch.nn.Linear(256, width)
        self.b = torch.nn.Linear(width, width)
        self.c = torch.nn.Linear(width, 16)
        self.extra_passes = extra_passes

    def forward(self, x):
        h = torch.relu(self.a(x))
        for _ in range(self.extra_passes):  # the planted slow rank's extra compute
            h = h + 0.0 * torch.relu(self.b(h))
        return self.c(torch.relu(self.b(h)))


def pick_backend(want: str, cuda: bool, device: torch.device):
    """The process group DDP uses, and why that backend."""
    if want == "gloo" or not cuda:
        return None, "gloo", "requested" if want == "gloo" else "no CUDA device"
    if want == "nccl":
        return None, "nccl", "requested"
    # auto: the default group is gloo; try an NCCL group and one all-reduce.
    ok, why = 1, "accepted every rank"
    try:
        g = dist.new_group(backend="nccl", timeout=datetime.timedelta(seconds=60))
        t = torch.ones(1, device=device)
        dist.all_reduce(t, group=g)
        torch.cuda.synchronize(device)
    except Exception as e:  # NCCL refuses two ranks on one device
        ok, why = 0, f"NCCL refused: {str(e).splitlines()[0][:200]}"
        g = None
    flag = torch.tensor([ok])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # every rank takes the same path
    if flag.item() == 1 and g is not None:
        return g, "nccl", why
    return None, "gloo", why if not ok else "NCCL failed on another rank"


def trace_file(trace_dir: str) -> str | None:
    """This process's finished trace file under trace_dir, if written yet."""
    pattern = os.path.join(trace_dir, "**", f"*-{os.getpid()}_*.json*")
    done = [p for p in glob.glob(pattern, recursive=True) if not p.endswith(".tmp")]
    return done[0] if done else None


def trace_written(trace_dir: str) -> bool:
    return trace_file(trace_dir) is not None


def await_trace(trace_dir: str, timeout_s: float) -> str:
    """Wait until this process's trace file (the agent names it ...-<pid>.json,
    Kineto writes ...-<pid>_<pid>.json.tmp and renames it; the agent may have
    gzipped it into a job folder already) exists under trace_dir."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = trace_file(trace_dir)
        if done:
            return f"written ({os.path.basename(done)})"
        if time.monotonic() >= deadline:
            return f"none after {timeout_s:.0f} s"
        time.sleep(0.2)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-factor", type=float, default=1.0)
    p.add_argument("--width", type=int, default=0, help="default: 4096 on CUDA, 1024 on CPU")
    p.add_argument("--batch", type=int, default=0, help="default: 2048 on CUDA, 64 on CPU")
    p.add_argument("--step-ms", type=float, default=20.0, help="input wait per step, every rank")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    p.add_argument("--info", default="")
    p.add_argument("--await-trace", default="", metavar="DIR")
    p.add_argument("--await-trace-s", type=float, default=90.0)
    a = p.parse_args()
    cuda = torch.cuda.is_available()
    # Big enough on a GPU that compute, not kernel launches, sets the step time.
    a.width = a.width or (4096 if cuda else 1024)
    a.batch = a.batch or (2048 if cuda else 64)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local % torch.cuda.device_count()}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if a.backend == "nccl" and cuda else "gloo")
    if a.backend == "nccl" and not cuda:
        raise SystemExit("--backend nccl needs a CUDA device")
    rank = dist.get_rank()
    group, backend, why = pick_backend(a.backend, cuda, device)
    if rank == 0:
        print(f"collectives: {backend} ({why})", flush=True)
    extra = int(a.slow_factor * 8) if rank == a.slow_rank else 0
    model = DDP(Net(a.width, extra).to(device), process_group=group, bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, 256, generator=g).to(device)
    y = torch.randn(a.batch, 16, generator=g).to(device)

    def step() -> None:
        time.sleep(a.step_ms / 1000)  # input wait (a data loader)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.steps):
        step()
    steps = a.steps
    if a.await_trace:
        # Kineto starts an iteration-based trace at a step after its config
        # arrives (it polls the daemon every few seconds): a job whose steps
        # are all done by then would get an empty trace. Train on until every
        # rank's trace is written (all ranks agree each step: DDP needs the
        # same number of steps everywhere), at most --await-trace-s.
        # The flag goes through the default group: NCCL's (1-rank job) takes
        # only CUDA tensors, gloo's either.
        flag_device = device if a.backend == "nccl" and cuda else torch.device("cpu")
        deadline = time.monotonic() + a.await_trace_s
        while True:
            done = torch.tensor([int(trace_written(a.await_trace))], device=flag_device)
            dist.all_reduce(done, op=dist.ReduceOp.MIN)
            if done.item() == 1 or time.monotonic() >= deadline:
                break
            step()
            steps += 1
    if cuda:
        torch.cuda.synchronize(device)
    if a.await_trace:
        print(f"trace: rank {rank} {await_trace(a.await_trace, 5.0)}", flush=True)
    if rank == 0 and a.info:
        info = {
            "collectives": backend,
            "why": why,
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "world_size": dist.get_world_size(),
            "steps": steps,
            "slow_rank": a.slow_rank,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        }
        with open(a.info, "w") as f:
            json.dump(info, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
