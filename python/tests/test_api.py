"""The Python API against a real agent process: delivery, counters, bad
input (errors and warnings at the call, never a crash), no agent at all."""

from __future__ import annotations

import time
import warnings

import pytest

import rankscope
from conftest import Agent, wait_for


def test_steps_and_spans_reach_the_agent(agent: Agent) -> None:
    c = rankscope.init(agent=agent.url, job_id="py-job", rank=1, world_size=2)
    assert c.identity()["rank"] == 1 and c.identity()["job_id"] == "py-job"
    for n in range(5):
        with rankscope.step(n):
            with rankscope.span("dataloader"):
                pass
            with rankscope.span("forward"):
                pass
            with rankscope.span("my-phase", category="compute"):
                pass
    assert rankscope.flush(10.0)
    s = rankscope.stats()
    assert s["initialized"] and s["connected"]
    assert (s["sent"], s["dropped"], s["rejected"], s["invalid_calls"]) == (25, 0, 0, 0)
    assert agent.metric("rankscope_agent_accepted_events_total") == 25
    rankscope.shutdown()
    wait_for("the agent to see the stream end", lambda: agent.metric("rankscope_agent_streams_active") == 0)


def test_init_is_idempotent_and_names_bad_identities() -> None:
    with pytest.raises(ValueError, match="rank 4 is out of range"):
        rankscope.init(agent="unix:/nonexistent", job_id="j", rank=4, world_size=4)
    with pytest.raises(ValueError, match="no job id"):
        rankscope.init(agent="unix:/nonexistent", rank=0, world_size=4)
    with pytest.raises(ValueError, match="ftp://x"):
        rankscope.init(agent="ftp://x", job_id="j", rank=0, world_size=1)
    c = rankscope.init(agent="unix:/nonexistent", job_id="j", rank=0, world_size=1)
    assert rankscope.init(job_id="other") is c


def test_identity_from_the_torchrun_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run-abc")
    monkeypatch.setenv("RANKSCOPE_AGENT", "unix:/nonexistent")
    ident = rankscope.init().identity()
    assert (ident["job_id"], ident["rank"], ident["world_size"], ident["local_rank"]) == ("run-abc", 3, 8, 1)


def test_wrong_types_raise_type_errors_at_the_call() -> None:
    c = rankscope.init(agent="unix:/nonexistent", job_id="j", rank=0, world_size=1)
    with pytest.raises(TypeError):
        with rankscope.step("7"):  # type: ignore[arg-type]
            pass
    with pytest.raises(TypeError):
        with rankscope.span(3):  # type: ignore[arg-type]
            pass
    with pytest.raises(TypeError):
        c.step_begin("x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown category"):
        with rankscope.span("x", category="fwd"):
            pass
    with pytest.raises(ValueError, match="all_reduce"):
        c.collective("allreduce", "0", 0, 2, "float32", 1, 4, 1, 2)


def test_calls_out_of_order_warn_and_are_counted() -> None:
    c = rankscope.init(agent="unix:/nonexistent", job_id="j", rank=0, world_size=1)
    with pytest.warns(rankscope.RankscopeWarning, match=r"step_end\(3\) without step_begin\(3\)"):
        rankscope.call(c.step_end, 3)
    with pytest.warns(rankscope.RankscopeWarning, match="still open"):
        with rankscope.step(1):
            with rankscope.step(2):
                pass
    with pytest.warns(rankscope.RankscopeWarning, match="must increase"):
        with rankscope.step(0):
            pass
    with pytest.warns(rankscope.RankscopeWarning, match="before start_ns"):
        rankscope.call(c.span, "forward", "f", 10, 5)
    assert rankscope.stats()["invalid_calls"] >= 4


def test_without_init_calls_warn_and_do_nothing() -> None:
    with pytest.warns(rankscope.RankscopeWarning, match="init"):
        with rankscope.step(0):
            pass
    s = rankscope.stats()
    assert not s["initialized"] and s["sent"] == 0
    assert rankscope.flush(0.1) is False


def test_without_an_agent_training_is_not_slowed_and_drops_are_counted(tmp_path) -> None:
    rankscope.init(agent=f"unix:{tmp_path / 'nobody.sock'}", job_id="j", rank=0, world_size=1, queue_events=32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a drop is not a warning, let alone an error
        for n in range(500):
            with rankscope.step(n):
                with rankscope.span("forward"):
                    pass
    s = rankscope.stats()
    assert s["dropped"] == s["dropped_queue_full"] == 3 * 500 - 32, s
    assert s["sent"] == 0 and not s["connected"]
    wait_for("the failed connection to be reported", lambda: rankscope.stats()["last_error"] is not None)
    t = time.monotonic()
    assert rankscope.flush(10.0) is False
    assert time.monotonic() - t < 10.0  # answered without waiting for the timeout


def test_a_restarted_agent_gets_the_stream_back(tmp_path) -> None:
    first = Agent(tmp_path)
    rankscope.init(agent=first.url, job_id="j", rank=0, world_size=1)
    with rankscope.step(0):
        pass
    assert rankscope.flush(10.0)
    first.stop()
    wait_for("the client to notice", lambda: not rankscope.stats()["connected"])
    second = Agent(tmp_path)
    try:
        wait_for("the reconnect", lambda: rankscope.stats()["connected"])
        with rankscope.step(1):
            pass
        assert rankscope.flush(10.0)
        s = rankscope.stats()
        assert s["reconnects"] >= 1 and s["sent"] == 4, s
        assert second.metric("rankscope_agent_accepted_events_total") == 2
    finally:
        second.stop()
