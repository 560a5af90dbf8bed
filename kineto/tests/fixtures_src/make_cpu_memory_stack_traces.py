"""Produce the CPU-only gloo Kineto traces in
cli/tests/fixtures/kineto/cpu_memory_stack_2rank/: two ranks
(torch.multiprocessing.spawn), gloo, a small DDP model trained for 4 steps
under torch.profiler with profile_memory=True and with_stack=True
(schedule wait=1, warmup=1, active=2: ProfilerStep#2 and #3). Rank 1 also
holds an extra 4 MiB tensor from step 2 on, so its peak is higher.

Usage: python make_cpu_memory_stack_traces.py OUT_DIR
Writes OUT_DIR/rank{0,1}.pt.trace.json.gz.
"""

import gzip
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 4


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def work(rank, world, out_dir, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    extra = []

    def on_trace_ready(prof):
        prof.export_chrome_trace(os.path.join(out_dir, f"rank{rank}.pt.trace.json"))

    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=on_trace_ready,
        profile_memory=True,
        with_stack=True,
    ) as prof:
        for step in range(STEPS):
            if rank == 1 and step == 2:
                extra.append(torch.ones(1024 * 1024, dtype=torch.float32))
            x = torch.randn(32, 64)
            y = torch.randn(32, 8)
            train_step(model, opt, x, y)
            prof.step()
    dist.destroy_process_group()


def main():
    out_dir = os.path.abspath(sys.argv[1])
    os.makedirs(out_dir, exist_ok=True)
    port = 29500 + os.getpid() % 1000
    mp.spawn(work, args=(2, out_dir, port), nprocs=2, join=True)
    for rank in range(2):
        src = os.path.join(out_dir, f"rank{rank}.pt.trace.json")
        with open(src, "rb") as f, gzip.open(src + ".gz", "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
        os.remove(src)
    print("torch", torch.__version__)


if __name__ == "__main__":
    main()
