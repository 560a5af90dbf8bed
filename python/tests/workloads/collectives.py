"""Plain torch.distributed (gloo, CPU), no rankscope code: one of each
collective and point-to-point op, a few times. Rank 0 writes what it ran
(op, bytes as nccl-tests counts them, group size) to --out as JSON lines.
"""

import argparse
import json

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ran = []

    def did(op: str, nbytes: int, size: int = world) -> None:
        ran.append({"op": op, "bytes": nbytes, "group_size": size})

    for r in range(a.rounds):
        t = torch.full((1000 + r,), float(rank))
        nb = t.numel() * 4
        dist.all_reduce(t)
        did("all_reduce", nb)
        outs = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(outs, t)
        did("all_gather", nb * world)
        big = torch.empty(world * t.numel())
        dist.all_gather_into_tensor(big, t)
        did("all_gather", nb * world)
        dist.broadcast(t, src=0)
        did("broadcast", nb)
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        did("all_reduce", nb)
        dist.reduce(t, dst=0)
        did("reduce", nb)
        ins = [torch.full((256,), float(rank)) for _ in range(world)]
        outs = [torch.empty(256) for _ in range(world)]
        dist.all_to_all(outs, ins)
        did("all_to_all", 256 * 4 * world)
        try:
            rs_out = torch.empty(t.numel())
            dist.reduce_scatter_tensor(rs_out, torch.ones(world * t.numel()))
            did("reduce_scatter", nb * world)
        except RuntimeError as e:  # not every backend has it
            ran.append({"unsupported": "reduce_scatter", "why": str(e)[:200]})
        dist.barrier()
        did("barrier", 0)
        # A ring of point-to-point messages.
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        msg = torch.full((500,), float(rank))
        got = torch.empty(500)
        reqs = [dist.isend(msg, nxt), dist.irecv(got, prv)]
        for q in reqs:
            q.wait()
        ran.append({"op": "send", "bytes": 2000, "group_size": 2, "peer": nxt})
        ran.append({"op": "recv", "bytes": 2000, "group_size": 2, "peer": prv})
    if rank == 0:
        with open(a.out, "w") as f:
            for r in ran:
                f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
