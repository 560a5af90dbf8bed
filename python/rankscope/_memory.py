"""Per-step CUDA memory peaks (the live memory view and the
``memory_headroom`` alert, issue 29).

At the end of each step, when torch's CUDA state is initialised in this
process, :func:`report_step_peak` reads the current device's
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` (the peaks
since the last reset), calls ``torch.cuda.reset_peak_memory_stats`` so the
next step starts afresh, and enqueues them with the device's total memory
(``get_device_properties(d).total_memory``, read once per device) as one
``MemoryPeak`` event. Nothing else runs on the training thread: these are
reads of the caching allocator's counters (no device synchronisation), and
the event goes into the client's bounded queue like any other.

A process that never initialised CUDA (a CPU rank) sends nothing here: the
agent's per-rank RSS samples stand for its memory.
"""

from __future__ import annotations

from typing import Any

import torch

#: device index -> total memory in bytes (a device's size does not change).
_totals: dict[int, int] = {}


def report_step_peak(client: Any, step: int) -> bool:
    """Enqueue step ``step``'s CUDA memory peaks of the current device on
    ``client`` (a ``rankscope._native.Client``) and reset them.

    Returns whether an event was queued: False when CUDA is not initialised
    in this process, or the queue refused it.
    """
    cuda = torch.cuda
    if not cuda.is_initialized():
        return False
    device = cuda.current_device()
    allocated = cuda.max_memory_allocated(device)
    reserved = cuda.max_memory_reserved(device)
    cuda.reset_peak_memory_stats(device)
    total = _totals.get(device)
    if total is None:
        total = _totals[device] = int(cuda.get_device_properties(device).total_memory)
    return bool(client.memory_peak(step, device, allocated, reserved, total))
