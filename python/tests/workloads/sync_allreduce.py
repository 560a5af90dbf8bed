"""A plain training loop (gloo, CPU) whose gradients are averaged with
blocking ``dist.all_reduce`` calls and a ``dist.barrier`` per step, with no
rankscope code in it: the node clock test (testkit/tests/clocks_torch.rs)
estimates each node's clock from the ends of these calls.

Run by torchrun. Options (argv): --steps N.
"""

import argparse

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(a.steps):
        x, y = torch.randn(32, 64, generator=g), torch.randn(32, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)  # blocking: every rank leaves together
            param.grad /= world
        dist.barrier()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
