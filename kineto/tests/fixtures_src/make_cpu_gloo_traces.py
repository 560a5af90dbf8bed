"""Produce the CPU-only gloo Kineto traces in cli/tests/fixtures/kineto/cpu_gloo_2rank/.

Two ranks (torch.multiprocessing.spawn), gloo backend, no GPU. Each profiled
step (ProfilerStep#N) issues, in this order, on the default process group:

  all_reduce    float32, 1024 elements  (4096 bytes)
  all_gather    float32, 256 elements per rank (output 512 elements: 2048 bytes)
  broadcast     int64, 128 elements, src 0 (1024 bytes)
  barrier

and one all_reduce of float32, 64 elements (256 bytes) on a second process
group `sub` created with new_group(ranks=[0, 1]).

Schedule: wait=1, warmup=1, active=3 -> profiled steps 2, 3, 4.

Usage: python make_cpu_gloo_traces.py OUT_DIR
Writes OUT_DIR/rank{0,1}.pt.trace.json.gz.
"""

import gzip
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS = 5


def work(rank, world, out_dir, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sub = dist.new_group(ranks=[0, 1], backend="gloo")
    torch.manual_seed(rank)
    model = torch.nn.Linear(32, 32)

    def on_trace_ready(prof):
        path = os.path.join(out_dir, f"rank{rank}.pt.trace.json")
        prof.export_chrome_trace(path)

    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
    ) as prof:
        for _ in range(STEPS):
            x = torch.randn(8, 32)
            loss = model(x).sum()
            loss.backward()
            t = torch.ones(1024, dtype=torch.float32) * (rank + 1)
            dist.all_reduce(t)
            parts = [torch.empty(256) for _ in range(world)]
            dist.all_gather(parts, torch.full((256,), float(rank)))
            b = torch.arange(128, dtype=torch.int64)
            dist.broadcast(b, src=0)
            dist.barrier()
            s = torch.ones(64)
            dist.all_reduce(s, group=sub)
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
