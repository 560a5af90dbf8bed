"""PyTorch integration: steps, input time, forward / backward / optimizer
spans and every ``torch.distributed`` collective, with no change to the
training script.

:func:`instrument` installs (and :meth:`Instrumentation.remove` undoes):

* **steps** from the optimizer: torch's global optimizer step hooks. A step
  begins at the first instrumented activity after the previous step ended
  (usually fetching the next batch) and ends when ``optimizer.step()``
  returns. The first optimizer stepped drives the steps (or the one given).
  When the script marks steps itself (:func:`rankscope.step`), the hooks
  leave step boundaries alone.
* **input time**: the DataLoader iterator is wrapped; the time each
  ``next()`` takes is a ``dataloader`` span.
* **forward / backward / optimizer spans**: forward hooks on the model (the
  one given, else every module wrapped by DistributedDataParallel or
  FullyShardedDataParallel), ``torch.autograd.backward`` (what
  ``loss.backward()`` calls), the optimizer hooks.
* **collectives**: ``all_reduce``, ``all_gather(_into_tensor)``,
  ``reduce_scatter(_tensor)``, ``broadcast``, ``reduce``, ``all_to_all(_single)``,
  ``barrier``, ``send`` / ``recv``, ``isend`` / ``irecv`` and
  ``batch_isend_irecv`` are wrapped in ``torch.distributed`` and its
  ``distributed_c10d`` module, so DDP (through a comm hook equal to its
  built-in all-reduce, registered before the first backward unless the user
  registers one) and FSDP (which call these functions) are recorded too.
  Each call gets the process group's name and a per-group sequence number
  (point-to-point ops: a per-pair group ``<pg>:p2p:<lo>-<hi>`` with its own
  numbering), op, dtype, bytes as nccl-tests defines them, group size and
  ranks; async work is timed when it completes (its future's callback).

Time: host clock (``time.time_ns``). When CUDA is available and the tensors
or the model are on a GPU, spans and collectives are also timed with CUDA
events, resolved off the training thread, and sent as device spans /
device collectives. On a CPU-only job there are no GPU kernels; the
collector then uses the host spans as the rank's compute (see README "CPU-only
jobs").

The rank's identity is resolved at the first recorded activity: from
``rankscope.init()`` if called, else from torchrun / Slurm variables, else
from ``torch.distributed`` once the process group is initialized. Nothing
here raises into the training script: a failure to record is a warning once.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed as dist

import rankscope as _rs
from rankscope._memory import report_step_peak

__all__ = ["Instrumentation", "instrument"]

_now = time.time_ns

#: torch.distributed function -> (op, which argument holds the buffer, how
#: bytes are counted: "one" tensor, "sum" of a list).
_COLLECTIVES: dict[str, tuple[str, Optional[str], str]] = {
    "all_reduce": ("all_reduce", "tensor", "one"),
    "all_gather": ("all_gather", "tensor_list", "sum"),
    "all_gather_into_tensor": ("all_gather", "output_tensor", "one"),
    "reduce_scatter": ("reduce_scatter", "input_list", "sum"),
    "reduce_scatter_tensor": ("reduce_scatter", "input", "one"),
    "broadcast": ("broadcast", "tensor", "one"),
    "reduce": ("reduce", "tensor", "one"),
    "all_to_all": ("all_to_all", "input_tensor_list", "sum"),
    "all_to_all_single": ("all_to_all", "input", "one"),
    "barrier": ("barrier", None, "none"),
    "send": ("send", "tensor", "one"),
    "recv": ("recv", "tensor", "one"),
    "isend": ("send", "tensor", "one"),
    "irecv": ("recv", "tensor", "one"),
}
_P2P = frozenset({"send", "recv", "isend", "irecv"})
_ALWAYS_ASYNC = frozenset({"isend", "irecv"})


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class _Info:
    """What is known of one collective call before it runs."""

    __slots__ = ("op", "pg", "seq", "size", "ranks", "dtype", "count", "nbytes", "peer", "device")

    def __init__(self, op: str, pg: str, seq: int, size: int, ranks: Optional[list[int]],
                 dtype: str, count: int, nbytes: int, peer: int, device: int) -> None:
        self.op, self.pg, self.seq, self.size, self.ranks = op, pg, seq, size, ranks
        self.dtype, self.count, self.nbytes, self.peer, self.device = dtype, count, nbytes, peer, device


class Instrumentation:
    """The hooks and patches of one :func:`instrument` call."""

    def __init__(self, model: Optional[torch.nn.Module], optimizer: Optional[torch.optim.Optimizer],
                 dataloader: Optional[Any], collectives: bool) -> None:
        self._undo: list[Callable[[], None]] = []
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._step = 0
        self._open = False
        self._opt: Optional[weakref.ref[Any]] = weakref.ref(optimizer) if optimizer is not None else None
        self._opt_start = 0
        self._opt_steps = 0
        self._seqs: dict[str, int] = {}
        self._groups_described: set[str] = set()
        self._disabled = False
        self._removed = False
        self._cuda = _CudaTimer.create()
        self._memory_off = False
        self._dataloader = weakref.ref(dataloader) if dataloader is not None else None
        self._install_steps()
        self._install_dataloader()
        self._install_backward()
        if model is not None:
            self._hook_module(model)
        else:
            self._install_wrappers()
        if collectives and dist.is_available():
            self._install_collectives()
        _rs.exit_hooks.append(self._close_step)
        self._undo.append(lambda: _rs.exit_hooks.remove(self._close_step))
        _rs.user_step_hooks.append(self._yield_steps)
        self._undo.append(lambda: _rs.user_step_hooks.remove(self._yield_steps))
        _rs.step_end_hooks.append(self._step_memory)
        self._undo.append(lambda: _rs.step_end_hooks.remove(self._step_memory))

    # -- identity and steps ------------------------------------------------

    def _client(self) -> Optional[Any]:
        c = _rs.client()
        if c is not None or self._disabled or self._removed:
            return c
        if _rs._pid is not None or torch.utils.data.get_worker_info() is not None:
            return None  # a forked child (e.g. a DataLoader worker) is not the rank
        env = os.environ
        kwargs: dict[str, int] = {}
        if dist.is_available() and dist.is_initialized():
            kwargs = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
        elif not (("RANK" in env and "WORLD_SIZE" in env) or "SLURM_PROCID" in env):
            if self._opt_steps == 0:
                return None  # identity not known yet (process group not initialized)
            kwargs = {"rank": 0, "world_size": 1}  # a single-process job
        try:
            return _rs.init(**kwargs)
        except ValueError as e:
            self._disabled = True
            warnings.warn(f"rankscope: not recording this process: {e}", _rs.RankscopeWarning, stacklevel=4)
            return None

    def _activity(self, c: Any, ts: int) -> None:
        """Something of a step happened at ``ts``: open a step if none is."""
        if _rs.user_marks_steps or self._open:
            return
        _rs.call(c.step_begin, self._step, ts)
        self._open = True

    def _end_step(self, c: Any, ts: int) -> None:
        if _rs.user_marks_steps or not self._open:
            return
        _rs.call(c.step_end, self._step, ts)
        self._step_memory(c, self._step)
        self._step += 1
        self._open = False

    def _step_memory(self, c: Any, step: int) -> None:
        """The step's CUDA memory peaks (:mod:`rankscope._memory`); a
        failure is a warning once and stops these reads."""
        if self._memory_off:
            return
        try:
            report_step_peak(c, step)
        except Exception as e:  # never raise into the training script
            self._memory_off = True
            warnings.warn(f"rankscope: per-step CUDA memory peaks are off: {e}", _rs.RankscopeWarning,
                          stacklevel=2)

    def _close_step(self) -> None:
        c = _rs.client()
        if c is not None and self._open:
            self._end_step(c, _now())

    def _yield_steps(self) -> None:
        """The script marks steps from now on: end the step we opened."""
        c = _rs.client()
        if c is not None and self._open:
            _rs.call(c.step_end, self._step, _now())
            self._step += 1
            self._open = False

    def _tracked(self, optimizer: Any) -> bool:
        if self._opt is None:
            self._opt = weakref.ref(optimizer)
        return self._opt() is optimizer

    def _install_steps(self) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not self._tracked(optimizer):
                return
            c = self._client()
            if c is None:
                return
            t = _now()
            self._activity(c, t)
            self._opt_start = t
            self._cuda.mark(self._tls, "optimizer")

        def post(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not self._tracked(optimizer):
                return
            self._opt_steps += 1
            c = self._client()
            if c is None:
                return
            t = _now()
            if self._opt_start:
                _rs.call(c.span, "optimizer", "optimizer.step", self._opt_start, t)
                self._cuda.span(c, self._tls, "optimizer", "optimizer.step")
            self._opt_start = 0
            self._end_step(c, t)

        for h in (register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)):
            self._undo.append(h.remove)

    # -- input -------------------------------------------------------------

    def _install_dataloader(self) -> None:
        from torch.utils.data import DataLoader

        original = DataLoader.__iter__
        inst = self

        @functools.wraps(original)
        def __iter__(loader: Any) -> Any:
            it = original(loader)
            target = inst._dataloader() if inst._dataloader is not None else None
            if inst._removed or (inst._dataloader is not None and loader is not target):
                return it
            return _TimedIter(it, inst)

        DataLoader.__iter__ = __iter__  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(DataLoader, "__iter__", original))

    # -- forward / backward --------------------------------------------------

    def _hook_module(self, module: torch.nn.Module) -> None:
        if getattr(module, "_rankscope_hooked", False):
            return
        module._rankscope_hooked = True  # type: ignore[assignment]

        def pre(mod: Any, args: Any) -> None:
            depth = getattr(self._tls, "fwd_depth", 0)
            self._tls.fwd_depth = depth + 1
            if depth:
                return
            c = self._client()
            if c is None:
                return
            t = _now()
            self._activity(c, t)
            self._tls.fwd_start = t
            self._cuda.mark(self._tls, "forward")

        def post(mod: Any, args: Any, output: Any) -> None:
            depth = getattr(self._tls, "fwd_depth", 1) - 1
            self._tls.fwd_depth = depth
            start = getattr(self._tls, "fwd_start", 0)
            if depth or not start:
                return
            self._tls.fwd_start = 0
            c = _rs.client()
            if c is not None:
                _rs.call(c.span, "forward", "forward", start, _now())
                self._cuda.span(c, self._tls, "forward", "forward")

        for h in (module.register_forward_pre_hook(pre), module.register_forward_hook(post)):
            self._undo.append(h.remove)
        self._undo.append(lambda: delattr(module, "_rankscope_hooked"))

    def _install_backward(self) -> None:
        original = torch.autograd.backward
        inst = self

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if getattr(inst._tls, "in_backward", False) or inst._removed:
                return original(*args, **kwargs)
            c = inst._client()
            if c is None:
                return original(*args, **kwargs)
            t0 = _now()
            inst._activity(c, t0)
            inst._cuda.mark(inst._tls, "backward")
            inst._tls.in_backward = True
            try:
                return original(*args, **kwargs)
            finally:
                inst._tls.in_backward = False
                _rs.call(c.span, "backward", "backward", t0, _now())
                inst._cuda.span(c, inst._tls, "backward", "backward")

        torch.autograd.backward = backward  # type: ignore[assignment]
        self._undo.append(lambda: setattr(torch.autograd, "backward", original))

    def _install_wrappers(self) -> None:
        """Instrument every DDP / FSDP model built from now on."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        classes: list[type] = [DDP]
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            classes.append(FSDP)
        except ImportError:
            pass
        inst = self
        for cls in classes:
            original_init = cls.__init__

            def patched(module: Any, *args: Any, __orig: Any = original_init, **kwargs: Any) -> None:
                __orig(module, *args, **kwargs)
                if not inst._removed:
                    inst._hook_module(module)
                    if isinstance(module, DDP):
                        inst._ddp_comm_hook(module)

            functools.update_wrapper(patched, original_init)
            cls.__init__ = patched  # type: ignore[method-assign]
            self._undo.append(lambda cls=cls, o=original_init: setattr(cls, "__init__", o))
        for name in ("register_comm_hook", "_register_builtin_comm_hook"):
            original = getattr(DDP, name)

            def user_hook(module: Any, *args: Any, __orig: Any = original, **kwargs: Any) -> Any:
                module._rankscope_user_comm_hook = True
                return __orig(module, *args, **kwargs)

            functools.update_wrapper(user_hook, original)
            setattr(DDP, name, user_hook)
            self._undo.append(lambda name=name, o=original: setattr(DDP, name, o))

    def _ddp_comm_hook(self, ddp: Any) -> None:
        """Before the first forward, register DDP's own all-reduce hook in
        Python (same math as the built-in one) so its bucket all-reduces go
        through the wrapped ``all_reduce`` — unless the user registered a hook."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        handle: list[Any] = []

        def pre(mod: Any, args: Any) -> None:
            for h in handle:
                h.remove()
            if getattr(mod, "_rankscope_user_comm_hook", False) or self._removed:
                return
            try:
                mod.register_comm_hook(mod.process_group, default_hooks.allreduce_hook)
            except Exception as e:  # e.g. a hook was registered in C++
                warnings.warn(f"rankscope: DDP all-reduces not recorded: {e}", _rs.RankscopeWarning, stacklevel=2)

        handle.append(ddp.register_forward_pre_hook(pre))

    # -- collectives ---------------------------------------------------------

    def _install_collectives(self) -> None:
        import torch.distributed.distributed_c10d as c10d

        for name, spec in _COLLECTIVES.items():
            original = getattr(c10d, name, None)
            if original is None:
                continue
            wrapper = self._wrap(name, spec, original)
            for mod in (c10d, dist):
                if getattr(mod, name, None) is original:
                    setattr(mod, name, wrapper)
                    self._undo.append(lambda mod=mod, name=name, o=original: setattr(mod, name, o))
        original_batch = getattr(c10d, "batch_isend_irecv", None)
        if original_batch is not None:
            wrapper = self._wrap_batch(original_batch)
            for mod in (c10d, dist):
                if getattr(mod, "batch_isend_irecv", None) is original_batch:
                    setattr(mod, "batch_isend_irecv", wrapper)
                    self._undo.append(lambda mod=mod, o=original_batch: setattr(mod, "batch_isend_irecv", o))

    def _group(self, group: Any) -> tuple[Any, str, int]:
        import torch.distributed.distributed_c10d as c10d

        pg = group if group is not None else c10d._get_default_group()
        return pg, c10d._get_process_group_name(pg), pg.size()

    def _describe(self, name: str, spec: tuple[str, Optional[str], str], bound: inspect.BoundArguments) -> _Info:
        op, arg, counting = spec
        a = bound.arguments
        pg, pg_name, size = self._group(a.get("group"))
        nbytes = count = 0
        dtype, device = "", -1
        if arg is not None:
            buf = a.get(arg)
            tensors = list(buf) if counting == "sum" else [buf]
            if tensors and isinstance(tensors[0], torch.Tensor):
                nbytes = sum(t.numel() * t.element_size() for t in tensors)
                count = sum(t.numel() for t in tensors)
                dtype = _dtype_name(tensors[0])
                device = tensors[0].device.index if tensors[0].is_cuda else -1
        peer = 0
        ranks: Optional[list[int]] = None
        if name in _P2P:
            me = dist.get_rank()
            peer_arg = a.get("dst" if op == "send" else "src")
            group_peer = a.get("group_dst" if op == "send" else "group_src")
            if peer_arg is None and group_peer is not None:
                peer_arg = dist.get_global_rank(pg, group_peer)
            peer = int(peer_arg) if peer_arg is not None else -1
            lo, hi = sorted((me, peer))
            pg_name, size, ranks = f"{pg_name}:p2p:{lo}-{hi}", 2, [lo, hi] if peer >= 0 else None
        elif pg_name not in self._groups_described:
            self._groups_described.add(pg_name)
            ranks = dist.get_process_group_ranks(pg)
        with self._lock:
            seq = self._seqs.get(pg_name, 0)
            self._seqs[pg_name] = seq + 1
        return _Info(op, pg_name, seq, size, ranks, dtype, count, nbytes, max(peer, 0), device)

    def _record(self, c: Any, info: _Info, start: int, end: int) -> None:
        _rs.call(c.collective, info.op, info.pg, info.seq, info.size, info.dtype, info.count,
                 info.nbytes, start, end, info.peer, -1, 0, info.ranks, stacklevel=5)

    def _on_complete(self, work: Any, c: Any, info: _Info, start: int) -> None:
        def done(_fut: Any) -> None:
            try:
                self._record(c, info, start, _now())
            except Exception:
                pass  # never raise in torch's completion thread

        try:
            work.get_future().add_done_callback(done)
        except Exception:
            # A work without a future: time to the call's return instead.
            self._record(c, info, start, _now())

    def _wrap(self, name: str, spec: tuple[str, Optional[str], str], original: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(original)
        always_async = name in _ALWAYS_ASYNC
        inst = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tls = inst._tls
            if getattr(tls, "in_collective", False) or inst._removed:
                return original(*args, **kwargs)
            c = inst._client()
            if c is None:
                return original(*args, **kwargs)
            try:
                bound = sig.bind(*args, **kwargs)
                info = inst._describe(name, spec, bound)
            except Exception:
                return original(*args, **kwargs)  # let torch report bad arguments
            start = _now()
            cuda_start = inst._cuda.event(info.device)
            tls.in_collective = True
            try:
                result = original(*args, **kwargs)
            finally:
                tls.in_collective = False
            if always_async or bound.arguments.get("async_op"):
                if result is not None:
                    inst._on_complete(result, c, info, start)
            else:
                if name == "recv" and isinstance(result, int) and result >= 0 and info.peer == 0:
                    info.peer = result
                inst._record(c, info, start, _now())
                inst._cuda.collective(c, info, cuda_start)
            return result

        return wrapper

    def _wrap_batch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        import torch.distributed.distributed_c10d as c10d

        inst = self
        sigs = {n: inspect.signature(getattr(c10d, n)) for n in ("isend", "irecv")}

        @functools.wraps(original)
        def batch_isend_irecv(p2p_op_list: list[Any]) -> Any:
            if getattr(inst._tls, "in_collective", False) or inst._removed:
                return original(p2p_op_list)
            c = inst._client()
            infos: list[_Info] = []
            if c is not None:
                try:
                    for p in p2p_op_list:
                        name = "isend" if getattr(p.op, "__name__", "") == "isend" else "irecv"
                        bound = sigs[name].bind(p.tensor, p.peer, p.group, p.tag)
                        infos.append(inst._describe(name, _COLLECTIVES[name], bound))
                except Exception:
                    infos = []
            start = _now()
            inst._tls.in_collective = True
            try:
                works = original(p2p_op_list)
            finally:
                inst._tls.in_collective = False
            if c is not None and infos and works:
                for i, info in enumerate(infos):
                    inst._on_complete(works[min(i, len(works) - 1)], c, info, start)
            return works

        return batch_isend_irecv

    # -- lifecycle -----------------------------------------------------------

    def remove(self) -> None:
        """Undo every hook and patch (idempotent)."""
        if self._removed:
            return
        self._removed = True
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:
                pass
        global _active
        if _active is self:
            _active = None


class _TimedIter:
    """A DataLoader iterator whose ``next()`` is a ``dataloader`` span."""

    __slots__ = ("_it", "_inst")

    def __init__(self, it: Iterator[Any], inst: Instrumentation) -> None:
        self._it = it
        self._inst = inst

    def __iter__(self) -> "_TimedIter":
        return self

    def __next__(self) -> Any:
        inst = self._inst
        c = inst._client()
        if c is None:
            return next(self._it)
        t0 = _now()
        item = next(self._it)  # the end of the data opens no step
        inst._activity(c, t0)
        _rs.call(c.span, "dataloader", "dataloader", t0, _now())
        return item

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)


class _CudaTimer:
    """GPU time from CUDA events, resolved on a background thread.

    ``mark`` records a start event on the current stream; ``span`` records
    the end and hands the pair to the resolver, which waits for the end event
    without blocking the training thread and converts event times to the
    host clock through a reference event taken at start-up. A no-op
    without CUDA.
    """

    MAX_PENDING = 4096

    def __init__(self, available: bool) -> None:
        self.available = available
        self.enabled = False
        self._pending: list[tuple[Any, Any, Callable[[int, int], None]]] = []
        self._cv = threading.Condition()

    @classmethod
    def create(cls) -> "_CudaTimer":
        try:
            return cls(torch.cuda.is_available())
        except Exception:
            return cls(False)

    def _ready(self) -> bool:
        """True once the job itself initialized CUDA (we never do it first:
        that would create a context before the job picked its device)."""
        if self.enabled or not self.available:
            return self.enabled
        try:
            if not torch.cuda.is_initialized():
                return False
            torch.cuda.synchronize()
            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()
            torch.cuda.synchronize()
            self._ref_ns = _now()
            threading.Thread(target=self._run, name="rankscope-cuda", daemon=True).start()
            self.enabled = True
        except Exception:
            self.available = False
        return self.enabled

    def event(self, device: int) -> Optional[Any]:
        if device < 0 or not self._ready():
            return None
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def mark(self, tls: Any, what: str) -> None:
        if self._ready():
            setattr(tls, "cuda_" + what, self.event(torch.cuda.current_device()))

    def span(self, c: Any, tls: Any, category: str, name: str) -> None:
        start = getattr(tls, "cuda_" + category, None) if self.enabled else None
        if start is None:
            return
        setattr(tls, "cuda_" + category, None)
        device = torch.cuda.current_device()
        self._submit(start, lambda s, e: _rs.call(c.span, category, name, s, e, device, 0))

    def collective(self, c: Any, info: _Info, start: Optional[Any]) -> None:
        if start is None:
            return
        self._submit(start, lambda s, e: _rs.call(
            c.collective, info.op, info.pg, info.seq, info.size, info.dtype, info.count,
            info.nbytes, s, e, info.peer, info.device, 0, info.ranks))

    def _submit(self, start: Any, emit: Callable[[int, int], None]) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        with self._cv:
            if len(self._pending) < self.MAX_PENDING:
                self._pending.append((start, end, emit))
                self._cv.notify()

    def _to_host_ns(self, e: Any) -> int:
        return self._ref_ns + int(self._ref.elapsed_time(e) * 1e6)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                batch, self._pending = self._pending, []
            for start, end, emit in batch:
                try:
                    end.synchronize()  # this thread waits, never the training thread
                    emit(self._to_host_ns(start), self._to_host_ns(end))
                except Exception:
                    pass


_active: Optional[Instrumentation] = None


def instrument(model: Optional[torch.nn.Module] = None,
               optimizer: Optional[torch.optim.Optimizer] = None,
               dataloader: Optional[Any] = None,
               *, collectives: bool = True) -> Instrumentation:
    """Instrument this process's training (see the module docs); returns the
    handle whose ``remove()`` undoes it. Calling it again replaces the
    previous instrumentation."""
    global _active
    if _active is not None:
        _active.remove()
    _active = Instrumentation(model, optimizer, dataloader, collectives)
    return _active
