"""The exit wait for a libkineto trace still being written (_kineto_exit)."""

import os
from pathlib import Path
from typing import List, Optional

from rankscope import _kineto_exit


def test_an_open_kineto_temp_file_is_found_and_a_closed_one_is_not(tmp_path: Path) -> None:
    assert _kineto_exit.open_trace_file() is None
    path = tmp_path / f"t1-r0-{os.getpid()}_{os.getpid()}.json.tmp"
    with open(path, "w"):
        assert _kineto_exit.open_trace_file() == str(path)
    assert _kineto_exit.open_trace_file() is None
    assert _kineto_exit.open_trace_file(str(tmp_path / "no-such-dir")) is None


def test_the_wait_ends_when_the_file_is_closed_or_the_bound_runs_out(capsys) -> None:  # type: ignore[no-untyped-def]
    polls: List[Optional[str]] = ["/t/a_1.json.tmp", "/t/a_1.json.tmp", None]
    assert _kineto_exit.await_trace(30.0, lambda: polls.pop(0), poll_s=0.0)
    assert polls == []
    assert "waiting up to 30 s" in capsys.readouterr().err

    assert not _kineto_exit.await_trace(0.0, lambda: "/t/b_1.json.tmp", poll_s=0.0)
    assert "exiting anyway" in capsys.readouterr().err

    assert _kineto_exit.await_trace(30.0, lambda: None)
    assert capsys.readouterr().err == ""


def test_each_poll_of_the_wait_steps_libkinetos_iteration_count() -> None:
    polls: List[Optional[str]] = ["/t/c_1.json.tmp"] * 3 + [None]
    steps: List[int] = []
    assert _kineto_exit.await_trace(
        30.0, lambda: polls.pop(0), poll_s=0.0, step=lambda: steps.append(1)
    )
    # The first look decides to wait; each later one that still sees the
    # file open steps once before sleeping.
    assert len(steps) == 2

    steps.clear()
    assert _kineto_exit.await_trace(30.0, lambda: None, step=lambda: steps.append(1))
    assert steps == []  # nothing open: no step


def test_the_exit_step_advances_torchs_step_tracker() -> None:
    import torch  # the venv of `make py` has it

    tracker = torch.autograd.profiler.KinetoStepTracker
    before = tracker.current_step()
    _kineto_exit.kineto_step()
    _kineto_exit.kineto_step()
    assert tracker.current_step() == before + 2
