"""rankscope.torch and the launcher's sitecustomize with real torch (CPU),
against a real agent process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import rankscope
import rankscope.torch as rt
from conftest import Agent, binary


def test_instrument_patches_and_remove_restores_everything() -> None:
    before = (dist.all_reduce, dist.isend, DataLoader.__iter__, torch.autograd.backward,
              torch.nn.parallel.DistributedDataParallel.__init__)
    h = rt.instrument()
    after = (dist.all_reduce, dist.isend, DataLoader.__iter__, torch.autograd.backward,
             torch.nn.parallel.DistributedDataParallel.__init__)
    assert all(a is not b for a, b in zip(after, before))
    import torch.distributed.distributed_c10d as c10d

    assert c10d.isend is dist.isend  # P2POp compares against c10d's
    h.remove()
    restored = (dist.all_reduce, dist.isend, DataLoader.__iter__, torch.autograd.backward,
                torch.nn.parallel.DistributedDataParallel.__init__)
    assert all(a is b for a, b in zip(restored, before))


def _train(steps: int, mark_steps: bool = False) -> None:
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 8), torch.randn(4, 2)) for _ in range(steps)]
    loader = DataLoader(data, batch_size=None)
    rt.instrument(model=model)
    for n, (x, y) in enumerate(loader):
        if mark_steps:
            with rankscope.step(100 + n):
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        else:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()


def test_a_training_loop_streams_steps_input_and_phases(agent: Agent) -> None:
    rankscope.init(agent=agent.url, job_id="loop", rank=0, world_size=1)
    _train(3)
    assert rankscope.flush(10.0)
    # Per step: begin, dataloader, forward, backward, optimizer, end.
    assert rankscope.stats()["sent"] == 3 * 6
    assert rt._active is not None and rt._active._step == 3 and not rt._active._open


def test_steps_the_user_marks_win_over_the_optimizer_hooks(agent: Agent) -> None:
    rankscope.init(agent=agent.url, job_id="marked", rank=0, world_size=1)
    _train(2, mark_steps=True)
    assert rankscope.flush(10.0)
    # The first batch was fetched before the script's first step: that
    # automatic step (begin, dataloader, end) ends when the script starts
    # marking; then the script's steps (begin, forward, backward, optimizer,
    # end) and the second fetch outside any step.
    assert rankscope.stats()["sent"] == 3 + 5 + 1 + 5
    assert rankscope.stats()["invalid_calls"] == 0
    assert rt._active is not None and rt._active._step == 1


def test_rankscope_run_instruments_at_torch_import_and_keeps_the_users_sitecustomize(
        agent: Agent, tmp_path: Path) -> None:
    user_site = tmp_path / "user_site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import os, torch, torch.distributed as dist
        import rankscope
        assert os.environ.get("USER_SITE_RAN") == "1", "the shadowed sitecustomize did not run"
        assert hasattr(dist.all_reduce, "__wrapped__"), "torch.distributed is not instrumented"
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
        assert rankscope.flush(10.0)
        print("SENT", rankscope.stats()["sent"], rankscope.client().identity()["job_id"])
    """))
    env = dict(os.environ, PYTHONPATH=str(user_site), XDG_CACHE_HOME=str(tmp_path / "cache"),
               RANK="0", WORLD_SIZE="1")
    out = subprocess.run(
        [str(binary("rankscope")), "run", "--agent", agent.url, "--", sys.executable, str(script)],
        env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "rankscope: job train-" in out.stderr
    # 2 steps x (begin, backward, optimizer, end); no DDP model, so no forward spans.
    sent, job = out.stdout.split()[1:]
    assert sent == "8" and job.startswith("train-")


def test_rankscope_run_without_the_package_warns_and_runs_the_command(tmp_path: Path) -> None:
    # Python without site-packages access to rankscope: -I ignores PYTHONPATH
    # and user site, so use a bare interpreter through -S and an empty path.
    env = {"PATH": os.environ["PATH"], "XDG_CACHE_HOME": str(tmp_path / "cache"), "RANKSCOPE_JOB_ID": "x"}
    out = subprocess.run(
        [str(binary("rankscope")), "run", "--", "/usr/bin/env", "python3", "-c", "print('ran')"],
        env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ran", out.stderr
