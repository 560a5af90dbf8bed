"""Keep a rank alive until libkineto has written its on-demand trace.

libkineto finishes an on-demand (daemon-triggered) trace on its own thread
and writes it to ``<ACTIVITIES_LOG_FILE stem>_<pid>.json.tmp``, held open
from the moment the trace is configured until it is renamed to ``.json``. A
process that exits in between dies in libkineto's exit handlers (SIGSEGV, or
glibc's "malloc(): unsorted double linked list corrupted" from
``finalizeTrace``; torch 2.x, CPU build, seen here) and torchrun then
reports the whole job as failed. rankscope asks for such traces, so at exit
the SDK waits, bounded, until no such file is open in this process.

A trace of N iterations ends only after N optimizer steps: a job that stops
training before them would keep the file open forever (the wait ran out
after 60 s and the rank died as above). While it waits, the SDK therefore
steps libkineto's iteration count as an optimizer step does
(``KinetoStepTracker``), so such a trace ends with the iterations the job
ran plus empty ones, and the rank exits cleanly with it.
"""

import os
import sys
import time
from typing import Callable, Optional

_FD_DIR = "/proc/self/fd"


def open_trace_file(fd_dir: str = _FD_DIR) -> Optional[str]:
    """The path of a trace file libkineto is writing in this process, if any."""
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # not Linux, or no /proc
        return None
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.endswith(".json.tmp"):
            return target
    return None


def kineto_step() -> None:
    """Count one more iteration for libkineto, as an optimizer step does;
    nothing when this process never imported torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        torch.autograd.profiler.KinetoStepTracker.increment_step("rankscope-exit")
    except Exception:  # an older or trimmed torch: only the wait is left
        pass


def await_trace(
    timeout_s: float,
    writing: Callable[[], Optional[str]] = open_trace_file,
    poll_s: float = 0.1,
    step: Callable[[], None] = lambda: None,
) -> bool:
    """Wait up to ``timeout_s`` while a trace is being written, calling
    ``step`` at every poll; True when none is (any more), False when the
    bound ran out first."""
    path = writing()
    if path is None:
        return True
    sys.stderr.write(
        f"rankscope: waiting up to {timeout_s:g} s for libkineto to finish this process's trace "
        f"({path}); a process that exits mid-trace crashes in libkineto "
        "(RANKSCOPE_EXIT_TRACE_WAIT_S sets the bound)\n"
    )
    deadline = time.monotonic() + timeout_s
    while writing() is not None:
        if time.monotonic() >= deadline:
            sys.stderr.write("rankscope: the trace is still being written; exiting anyway\n")
            return False
        step()
        time.sleep(poll_s)
    return True


def await_trace_at_exit() -> None:
    await_trace(
        float(os.environ.get("RANKSCOPE_EXIT_TRACE_WAIT_S", "60")),
        poll_s=0.05,
        step=kineto_step,
    )
