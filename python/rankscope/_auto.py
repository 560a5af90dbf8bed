"""Zero-code instrumentation, as `rankscope run` installs it: when this
process imports torch, :func:`rankscope.torch.instrument` runs with no
arguments (every optimizer, DataLoader, DDP / FSDP model and
torch.distributed collective of the process). Importing torch is not
delayed beyond the instrumentation itself; a failure is a warning, never an
exception in the training script."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any, Optional, Sequence

__all__ = ["install"]


def _instrument() -> None:
    try:
        from rankscope import torch as rs_torch

        rs_torch.instrument()
    except Exception as e:
        warnings.warn(f"rankscope: automatic instrumentation failed: {e}", stacklevel=2)


class _Loader(importlib.abc.Loader):
    """Runs torch's own loader, then instruments."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _instrument()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of the ``torch`` package once."""

    def __init__(self) -> None:
        self._busy = False

    def find_spec(self, name: str, path: Optional[Sequence[str]], target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if name != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Instrument now if torch is loaded, else when it is imported."""
    if "torch" in sys.modules:
        _instrument()
    else:
        sys.meta_path.insert(0, _Finder())
