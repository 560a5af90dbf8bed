"""rankscope: stream a training rank's steps, spans and collectives to the
node's rankscope agent, live.

Three lines in a training script::

    import rankscope
    rankscope.init()                      # identity from torchrun / Slurm / arguments
    for n, batch in enumerate(loader):
        with rankscope.step(n):
            with rankscope.span("forward"):
                ...

or none at all: ``rankscope run -- torchrun ... train.py`` instruments every
Python rank it starts (see :mod:`rankscope.torch`).

Every call only enqueues into a bounded queue that a Rust thread sends to
the agent; when the agent is away the queue fills and further events are
dropped and counted (:func:`stats`). Nothing here blocks a training step or
raises because of the agent. Calls out of order (a step ended that was not
begun, ...) give a :class:`RankscopeWarning` at the call and are counted;
wrong argument types raise ``TypeError`` at the call.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Mapping, Optional

from . import _kineto_exit, _native

__all__ = [
    "RankscopeWarning",
    "client",
    "flush",
    "init",
    "is_initialized",
    "shutdown",
    "span",
    "stats",
    "step",
]

__version__: str = _native.__version__

#: Span names that are also categories; any other name is category "other"
#: unless ``category=`` says otherwise.
CATEGORIES = frozenset(
    {"forward", "backward", "optimizer", "dataloader", "compute", "communication", "memcpy", "other"}
)


class RankscopeWarning(UserWarning):
    """A rankscope call was ignored (out of order, bad value, not initialized)."""


_lock = threading.Lock()
_client: Optional[_native.Client] = None
_pid: Optional[int] = None
#: True once the user marked a step with :func:`step`; the torch
#: integration then leaves step boundaries to the user.
user_marks_steps = False
#: Called as ``hook(client, n)`` after each step the user marks ends (the
#: torch integration reads the step's CUDA memory peaks there).
step_end_hooks: list[Callable[[Any, int], None]] = []


def _warn(message: str, stacklevel: int = 3) -> None:
    warnings.warn(message, RankscopeWarning, stacklevel=stacklevel)


def init(
    *,
    agent: Optional[str] = None,
    job_id: Optional[str] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    local_rank: Optional[int] = None,
    run_id: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    queue_events: Optional[int] = None,
) -> _native.Client:
    """Start this process's client (idempotent).

    Unset values come from the environment: ``RANKSCOPE_AGENT`` (else the
    agent's default Unix socket), ``RANKSCOPE_QUEUE_EVENTS`` (default 65536),
    the job id by the agent's rule (``RANKSCOPE_JOB_ID``, torchrun's
    ``TORCHELASTIC_RUN_ID`` unless ``none``, ``SLURM_JOB_ID``, Kubernetes,
    ``rankscope run``'s launch id; see the README), ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` or
    Slurm's ``SLURM_PROCID`` / ``SLURM_NTASKS``. Raises ``ValueError`` naming
    what is missing or inconsistent (e.g. a rank >= world size). A missing
    agent is not an error: the client connects in the background.
    """
    global _client, _pid
    with _lock:
        if _client is not None and _pid == os.getpid():
            return _client
        pairs = sorted((str(k), str(v)) for k, v in (labels or {}).items())
        _client = _native.Client(
            agent=agent,
            job_id=job_id,
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            run_id=run_id,
            labels=pairs,
            queue_events=queue_events if queue_events is not None else int(os.environ.get("RANKSCOPE_QUEUE_EVENTS", "65536")),
        )
        _pid = os.getpid()
        atexit.register(_at_exit)
        return _client


def client() -> Optional[_native.Client]:
    """This process's client, or None before :func:`init` (or in a forked child)."""
    c = _client
    return c if c is not None and _pid == os.getpid() else None


def is_initialized() -> bool:
    return client() is not None


def call(fn: Callable[..., bool], *args: Any, stacklevel: int = 4) -> bool:
    """Run a native recording call; a refused call becomes a warning."""
    try:
        return fn(*args)
    except ValueError as e:
        _warn(str(e), stacklevel)
        return False


@contextlib.contextmanager
def step(n: int) -> Iterator[None]:
    """Mark training step ``n`` (its begin and end on this rank)."""
    global user_marks_steps
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"rankscope.step(n): n must be an int, got {type(n).__name__}")
    if not user_marks_steps:
        user_marks_steps = True
        for hook in list(user_step_hooks):
            hook()  # the torch integration ends a step it opened itself
    c = client()
    if c is None:
        _warn("rankscope.step: rankscope.init() was not called; the step is not recorded")
        yield
        return
    call(c.step_begin, n, stacklevel=5)
    try:
        yield
    finally:
        call(c.step_end, n, stacklevel=5)
        for hook in list(step_end_hooks):
            hook(c, n)


class span:
    """Time a phase of the step on this thread (host time)::

        with rankscope.span("dataloader"):
            batch = next(it)

    ``category`` is one of :data:`CATEGORIES`; by default the name when it
    is one (``span("dataloader")``), else ``"other"``. A plain class rather
    than a generator context manager: it costs about a third as much.
    """

    __slots__ = ("_name", "_category", "_client", "_start")

    def __init__(self, name: str, category: Optional[str] = None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"rankscope.span(name): name must be a str, got {type(name).__name__}")
        cat = category if category is not None else (name if name in CATEGORIES else "other")
        if cat not in CATEGORIES:
            raise ValueError(f"rankscope.span: unknown category {cat!r}; expected one of {sorted(CATEGORIES)}")
        self._name = name
        self._category = cat
        self._client = client()
        self._start = 0

    def __enter__(self) -> "span":
        self._start = time.time_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        c = self._client
        if c is not None:
            call(c.span, self._category, self._name, self._start, time.time_ns(), stacklevel=4)


_EMPTY_STATS = {
    "sent": 0,
    "dropped": 0,
    "dropped_queue_full": 0,
    "dropped_by_agent": 0,
    "dropped_disconnected": 0,
    "dropped_unpaired": 0,
    "rejected": 0,
    "last_rejection": None,
    "invalid_calls": 0,
    "names_dropped": 0,
    "connected": False,
    "reconnects": 0,
    "last_error": None,
}


def stats() -> dict[str, Any]:
    """Counters: ``sent`` (accepted by the agent), ``dropped`` (with
    ``dropped_queue_full``, ``dropped_by_agent``, ``dropped_disconnected``,
    ``dropped_unpaired``),
    ``rejected`` (+ ``last_rejection``), ``invalid_calls``, ``connected``,
    ``reconnects``, ``last_error``, and ``initialized``."""
    c = client()
    out = dict(c.stats()) if c is not None else dict(_EMPTY_STATS)
    out["initialized"] = c is not None
    return out


def flush(timeout_s: float = 5.0) -> bool:
    """Wait until the agent acknowledged everything recorded so far."""
    c = client()
    return c.flush(int(timeout_s * 1000)) if c is not None else False


def shutdown(timeout_s: float = 2.0) -> None:
    """Flush, close the stream (the agent records that this rank ended)."""
    c = client()
    if c is not None:
        c.shutdown(int(timeout_s * 1000))


def _at_exit() -> None:
    try:
        # Let the torch integration close an open step first.
        for hook in list(exit_hooks):
            hook()
        _kineto_exit.await_trace_at_exit()
        shutdown(float(os.environ.get("RANKSCOPE_EXIT_FLUSH_S", "5")))
        _write_stats_file()
    except Exception:  # never raise at interpreter exit
        pass


def _write_stats_file() -> None:
    """``RANKSCOPE_STATS_FILE`` (``{rank}`` and ``{pid}`` are replaced): this
    process's final :func:`stats` and identity as JSON, for checking a run
    launched by ``rankscope run`` without touching its script."""
    pattern = os.environ.get("RANKSCOPE_STATS_FILE")
    c = client()
    if not pattern or c is None:
        return
    import json

    ident = c.identity()
    path = pattern.replace("{rank}", str(ident["rank"])).replace("{pid}", str(os.getpid()))
    with open(path + ".tmp", "w") as f:
        json.dump({"stats": stats(), "identity": dict(ident)}, f)
    os.replace(path + ".tmp", path)


#: Called (in order) at exit before the client shuts down.
exit_hooks: list[Callable[[], None]] = []
#: Called once when the script first marks a step itself.
user_step_hooks: list[Callable[[], None]] = []
