"""The job id a bare ``rankscope.init()`` finds under a real torchrun (no
``rankscope run``, no ``--rdzv-id``, so torchrun's run id is its default
``none``): every worker of one launch shares it, two launches never do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import Agent, free_port

SCRIPT = """
import json, os, sys
import rankscope
c = rankscope.init(agent=sys.argv[1])
with open(os.path.join(sys.argv[2], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(c.identity(), f)
rankscope.shutdown()
"""


def launch(tmp: Path, name: str, agent: Agent) -> list[dict[str, object]]:
    out = tmp / name
    out.mkdir()
    script = tmp / "init_only.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKSCOPE_", "TORCHELASTIC_", "SLURM_"))}
    torchrun = Path(sys.executable).parent / "torchrun"
    done = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", "--master-port", str(free_port()),
         str(script), agent.url, str(out)],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads((out / f"{r}.json").read_text()) for r in range(2)]


def test_a_bare_init_under_torchrun_without_a_rdzv_id_names_one_job_per_launch(
        tmp_path: Path, agent: Agent) -> None:
    first = launch(tmp_path, "a", agent)
    second = launch(tmp_path, "b", agent)
    assert [i["rank"] for i in first] == [0, 1]
    assert first[0]["job_id"] == first[1]["job_id"], first
    assert str(first[0]["job_id"]).startswith("torchrun-none_"), first
    assert second[0]["job_id"] == second[1]["job_id"], second
    assert first[0]["job_id"] != second[0]["job_id"]
