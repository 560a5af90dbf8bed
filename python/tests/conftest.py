"""Fixtures: a real rankscope-agent process (the binary `cargo build` made;
RANKSCOPE_BIN_DIR or target/debug) on a private Unix socket, with no
collector behind it (it acknowledges ranks all the same)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("RANKSCOPE_BIN_DIR", REPO / "target" / "debug"))
WAIT_S = 20.0


def binary(name: str) -> Path:
    path = BIN_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `cargo build --bins` first (make test does)")
    return path


def wait_for(what: str, cond) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    def __init__(self, tmp: Path) -> None:
        self.socket = tmp / "agent.sock"
        self.metrics_port = free_port()
        config = tmp / "agent.toml"
        config.write_text(
            f'listen_addr = "127.0.0.1:0"\n'
            f'metrics_listen_addr = "127.0.0.1:{self.metrics_port}"\n'
            f'unix_socket_path = "{self.socket}"\n'
            f'collector_url = "http://127.0.0.1:9"\n'
            f'shutdown_flush_timeout_ms = 100\n'
        )
        self.proc = subprocess.Popen(
            [str(binary("rankscope-agent")), "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_for("the agent's socket", lambda: self._accepts() or self.proc.poll() is not None)
        if self.proc.poll() is not None:
            pytest.fail(f"the agent exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")

    def _accepts(self) -> bool:
        """The socket file appears at bind(), a moment before listen()."""
        if not self.socket.exists():
            return False
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(self.socket))
            return True
        except OSError:
            return False
        finally:
            s.close()

    @property
    def url(self) -> str:
        return f"unix:{self.socket}"

    def metric(self, name: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return int(float(line.split()[1]))
        raise KeyError(name)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=WAIT_S)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path)
    yield a
    a.stop()


@pytest.fixture(autouse=True)
def fresh_rankscope(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts without a client and without instrumentation."""
    import rankscope
    import rankscope.torch as rt

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS",
                "TORCHELASTIC_RUN_ID", "RANKSCOPE_JOB_ID", "RANKSCOPE_LAUNCH_ID", "RANKSCOPE_AGENT", "RANKSCOPE_QUEUE_EVENTS"):
        monkeypatch.delenv(var, raising=False)
    yield
    if rt._active is not None:
        rt._active.remove()
    c = rankscope.client()
    if c is not None:
        c.shutdown(100)
    rankscope._client = None
    rankscope._pid = None
    rankscope.user_marks_steps = False
