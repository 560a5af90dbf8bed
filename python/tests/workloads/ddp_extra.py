"""A plain DDP training script (gloo, CPU) with no rankscope code in it, where
one rank does extra tensor work between ``loss.backward()`` and
``optimizer.step()`` every step: the shape of gradient clipping, metric
computation, an EMA update or logging done on one rank.

Run by torchrun. Options (argv): --steps N, --extra-rank R, --extra-ms M
(rank R does M ms of wall time of tensor work each step, after backward and
before the optimizer step, see `extra_work`; 0: none).
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randn(1024, 256, generator=g), torch.randn(1024, 16, generator=g)


def extra_work(ms: float, a: torch.Tensor) -> float:
    """`ms` of wall time of tensor work the host waits on, as for a metric
    read back from a GPU (`.item()`): a small product, then the wait for
    "the device" (a sleep stands in for it: this runs on CPUs, 4 ranks on as
    few as 2 cores, where host-bound extra work would also slow the other
    ranks by taking their CPU time, which a real job's GPUs do not do)."""
    total = 0.0
    end = time.perf_counter() + ms / 1000
    while True:
        total += float((a @ a).norm())
        left = end - time.perf_counter()
        if left <= 0:
            return total
        time.sleep(min(left, 0.005))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--extra-rank", type=int, default=-1)
    p.add_argument("--extra-ms", type=float, default=0.0)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    extra_ms = a.extra_ms if rank == a.extra_rank else 0.0
    # A small model (0.5 MB of gradients: short all-reduces) on large
    # batches (compute well above the host's scheduling noise).
    net = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 16)
    )
    model = DDP(net, bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Batches(a.steps), batch_size=None, shuffle=False)
    m = torch.randn(128, 128)
    for x, y in loader:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if extra_ms:
            extra_work(extra_ms, m)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
