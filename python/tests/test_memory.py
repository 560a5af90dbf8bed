"""Per-step CUDA memory peaks (rankscope._memory) with real torch, against
a real agent process.

This machine has no GPU: the CUDA branch of ``report_step_peak`` (reading
``max_memory_allocated`` / ``max_memory_reserved``, resetting the peaks)
cannot run here. What runs: a CPU process never initialises CUDA, so
nothing is read or sent; the native ``memory_peak`` call that branch makes
reaches the agent, and a bad device is refused with a warning.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import rankscope
from conftest import Agent
from rankscope._memory import report_step_peak
from test_torch import _train


def test_a_cpu_rank_reads_and_sends_no_cuda_peaks(agent: Agent) -> None:
    rankscope.init(agent=agent.url, job_id="cpu-mem", rank=0, world_size=1)
    _train(3, mark_steps=True)
    assert not torch.cuda.is_initialized()
    assert report_step_peak(rankscope.client(), 7) is False
    assert rankscope.flush(10.0)
    # The same count as without the memory hook: automatic step (3), the
    # script's steps (5 each), the second and third fetches outside steps.
    assert rankscope.stats()["sent"] == 3 + 5 + 1 + 5 + 1 + 5
    assert rankscope.stats()["invalid_calls"] == 0


def test_the_native_peak_call_reaches_the_agent_and_refuses_a_cpu_device(agent: Agent) -> None:
    c = rankscope.init(agent=agent.url, job_id="gpu-mem", rank=0, world_size=1)
    with rankscope.step(0):
        pass
    gib = 1 << 30
    assert c.memory_peak(0, 0, 3 * gib, 4 * gib, 80 * gib) is True
    assert rankscope.flush(10.0)
    assert rankscope.stats()["sent"] == 3
    with pytest.raises(ValueError, match="device must be a CUDA device index"):
        c.memory_peak(1, -1, 1, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Through rankscope.call a refusal is a warning, never an exception.
        with pytest.raises(rankscope.RankscopeWarning):
            rankscope.call(c.memory_peak, 1, -1, 1, 1, 1)
