"""Written by `rankscope run`: instruments this Python process for rankscope
when it imports torch. Runs the sitecustomize it shadows first, if any.
Never raises: a problem is one line on stderr and the program goes on."""

import os
import sys


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _install() -> None:
    if os.environ.get("RANKSCOPE_AUTO") != "1":
        return
    try:
        from rankscope import _auto
    except Exception as e:  # rankscope not installed in this interpreter
        sys.stderr.write(f"rankscope: not instrumenting {sys.executable}: cannot import rankscope ({e})\n")
        return
    _auto.install()


try:
    _chain()
except Exception as e:
    sys.stderr.write(f"rankscope: the shadowed sitecustomize failed: {e}\n")
try:
    _install()
except Exception as e:
    sys.stderr.write(f"rankscope: not instrumenting: {e}\n")
