"""A plain DDP training script (gloo, CPU) with no rankscope code in it.

Run by torchrun. Options (argv): --steps N, --slow-rank R, --slow-kind
compute|input|none, --slow-factor F (compute: the slow rank runs its forward
F times, input: its batches take F x 20 ms to load), --info FILE (rank 0
writes DDP's gradient bucket sizes there, as DDP reports them), --big-rank R
--big-mb M (rank R holds an extra M MiB tensor for the whole run),
--end-mid-trace K (end the job while libkineto is still writing an on-demand
trace: all ranks stop K steps after the last of them opened its trace file).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    def __init__(self, n: int, slow_s: float) -> None:
        self.n, self.slow_s = n, slow_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.slow_s:
            time.sleep(self.slow_s)  # a slow input pipeline (remote storage, decoding)
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, 256, generator=g), torch.randn(64, 16, generator=g)


class Net(torch.nn.Module):
    def __init__(self, extra_passes: int) -> None:
        super().__init__()
        self.a = torch.nn.Linear(256, 1024)
        self.b = torch.nn.Linear(1024, 1024)
        self.c = torch.nn.Linear(1024, 16)
        self.extra_passes = extra_passes

    def forward(self, x):
        h = torch.relu(self.a(x))
        for _ in range(self.extra_passes):  # extra compute on the slow rank
            h = h + 0.0 * torch.relu(self.b(h))
        return self.c(torch.relu(self.b(h)))


def kineto_writing() -> bool:
    """Whether libkineto holds this process's trace file open (it writes
    ``<log file>_<pid>.json.tmp`` from configure until it renames it)."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".json.tmp"):
                return True
        except OSError:
            pass
    return False


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-kind", default="none")
    p.add_argument("--slow-factor", type=float, default=4.0)
    p.add_argument("--info", default="")
    p.add_argument("--progress", default="", help="rank 0 writes the number of finished steps here")
    p.add_argument("--step-ms", type=float, default=0.0, help="every rank sleeps this long per step")
    p.add_argument("--timing", default="", help="rank 0 writes each step's wall time (s) here, as JSON")
    p.add_argument("--big-rank", type=int, default=-1, help="this rank holds an extra --big-mb MiB tensor")
    p.add_argument("--big-mb", type=int, default=0)
    p.add_argument("--end-mid-trace", type=int, default=-1, metavar="K")
    p.add_argument(
        "--hold",
        action="append",
        default=[],
        metavar="N:PATH",
        help="every rank waits before step N until PATH exists (a test's gate, not a clock)",
    )
    a = p.parse_args()
    holds = sorted((int(n), path) for n, path in (h.split(":", 1) for h in a.hold))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = rank == a.slow_rank
    big = torch.ones(a.big_mb * 262144) if rank == a.big_rank else None  # float32: 4 bytes each
    extra = int(a.slow_factor * 8) if slow and a.slow_kind == "compute" else 0
    load_s = a.slow_factor * 0.02 if slow and a.slow_kind == "input" else 0.0
    model = DDP(Net(extra), bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Batches(a.steps, load_s), batch_size=None, shuffle=False)
    done = 0
    never = 10**9
    plan = never  # this rank's last step once its trace is open
    times = []
    t = time.perf_counter()
    for x, y in loader:
        while holds and holds[0][0] <= done:
            while not os.path.exists(holds[0][1]):
                time.sleep(0.01)
            holds.pop(0)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if a.step_ms:
            time.sleep(a.step_ms / 1000)
        now = time.perf_counter()
        times.append(now - t)
        t = now
        done += 1
        if a.end_mid_trace >= 0:
            if plan == never and kineto_writing():
                plan = done + a.end_mid_trace
            end = torch.tensor([plan])
            dist.all_reduce(end, op=dist.ReduceOp.MAX)  # every rank's trace is open
            if done >= end.item():
                print(f"rank {rank}: ending at step {done}, mid-trace", file=sys.stderr, flush=True)
                break
        if rank == 0 and a.progress:
            with open(a.progress + ".tmp", "w") as f:
                f.write(str(done))
            os.replace(a.progress + ".tmp", a.progress)
    if rank == 0 and a.info:
        # The gradient buckets DDP all-reduces every step (after its rebuild).
        buckets = [b.buffer().numel() * b.buffer().element_size() for b in model.reducer._get_zeros_like_grad_buckets()]
        grads = sum(p.numel() * p.element_size() for p in model.parameters())
        with open(a.info, "w") as f:
            json.dump({"bucket_bytes": sorted(buckets), "grad_bytes": grads}, f)
    if rank == 0 and a.timing:
        with open(a.timing, "w") as f:
            json.dump(times, f)
    del big
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
