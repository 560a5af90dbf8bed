#!/usr/bin/env python3
"""Time Holistic Trace Analysis (HTA) on a directory of per-rank Kineto traces.

Usage: python side_by_side.py <trace_dir> [--num-candidates N]

Does what an HTA user does to get three answers, timing each step with
time.monotonic():

  ta = TraceAnalysis(trace_dir=...)                # parses every trace
  ta.get_temporal_breakdown(visualize=False)
  ta.get_comm_comp_overlap(visualize=False)
  ta.get_potential_stragglers(num_candidates=N, visualize=False)

and prints ONE JSON object on stdout (timings plus the answers). HTA logs to
stdout by default; here everything HTA (and its forked parser workers) writes
goes to stderr, so stdout carries only the JSON.

HTA reads EVERY *.json / *.gz file of trace_dir as a rank trace and takes the
rank from the first match of the regex '"rank":\\s+(\\d+)' in each file (at
least one blank after the colon; no match means rank 0), so trace_dir must hold
only the trace files, one per distinct rank. An untimed pre-check with HTA's own
mapping fails clearly when two files map to one rank.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


class StageError(Exception):
    """An HTA step failed; the message names the step."""


def fail(message: str) -> NoReturn:
    print(f"side_by_side: error: {message}", file=sys.stderr)
    sys.exit(1)


def run_stage(name: str, fn: Callable[[], T]) -> tuple[T, float]:
    """Run one HTA step; return its result and its monotonic duration in seconds."""
    start = time.monotonic()
    try:
        result = fn()
    except Exception as exc:  # HTA raises bare ValueError/KeyError/AssertionError
        raise StageError(f"{name} failed: {type(exc).__name__}: {exc}") from exc
    return result, time.monotonic() - start


def jsonable(value: Any) -> Any:
    """numpy scalars -> Python scalars, NaN/inf -> null (keeps stdout strict JSON)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy.int64, numpy.float64, ...
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def trace_files(trace_dir: Path) -> list[Path]:
    """The files HTA will read as rank traces (same rule as hta.common.trace_file)."""
    return sorted(
        p for p in trace_dir.iterdir() if p.is_file() and p.name.endswith((".json", ".gz"))
    )


def route_hta_logging_to_stderr() -> None:
    """HTA's logging.config attaches StreamHandler(sys.stdout) to 'hta' and root."""
    for logger in (logging.getLogger("hta"), logging.getLogger()):
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(sys.stderr)
    logging.getLogger("hta").setLevel(logging.WARNING)


def check_rank_map(files: list[Path]) -> None:
    """Untimed pre-check with HTA's own file -> rank mapping: one distinct rank per file."""
    from hta.common.trace_file import create_rank_to_trace_dict

    seen: dict[int, list[str]] = {}
    for path in files:
        _, rank_map = create_rank_to_trace_dict([str(path)])
        for rank in rank_map:
            seen.setdefault(rank, []).append(path.name)
    clashes = {rank: names for rank, names in seen.items() if len(names) > 1}
    if clashes:
        raise StageError(
            f"HTA maps several *.json/*.gz files of the trace dir to one rank: {clashes}; "
            "HTA reads every *.json/*.gz there as a trace and takes its rank from the first "
            'match of the regex "rank":\\s+(\\d+) (e.g. distributedInfo {"rank": 3}), '
            "so keep only the traces there, each with its own rank"
        )


def analyse(trace_dir: Path, files: list[Path], num_candidates: int) -> dict[str, Any]:
    start = time.monotonic()
    try:
        import pandas as pd
        from hta.trace_analysis import TraceAnalysis
    except Exception as exc:
        raise StageError(f"import of HTA failed: {type(exc).__name__}: {exc}") from exc
    import_s = time.monotonic() - start
    route_hta_logging_to_stderr()
    check_rank_map(files)

    ta, load_s = run_stage(
        "TraceAnalysis(trace_dir=...) (trace parsing)",
        lambda: TraceAnalysis(trace_dir=str(trace_dir)),
    )
    ranks = sorted(ta.t.get_all_traces())
    temporal, temporal_s = run_stage(
        "get_temporal_breakdown", lambda: ta.get_temporal_breakdown(visualize=False)
    )
    overlap, overlap_s = run_stage(
        "get_comm_comp_overlap", lambda: ta.get_comm_comp_overlap(visualize=False)
    )
    stragglers, stragglers_s = run_stage(
        "get_potential_stragglers",
        lambda: ta.get_potential_stragglers(num_candidates=num_candidates, visualize=False),
    )

    return {
        "hta_version": version("HolisticTraceAnalysis"),
        "pandas_version": pd.__version__,
        "ranks": len(ranks),
        "rank_ids": ranks,
        "import_s": import_s,  # not part of total_s
        "load_s": load_s,
        "temporal_breakdown_s": temporal_s,
        "comm_comp_overlap_s": overlap_s,
        "stragglers_s": stragglers_s,
        "total_s": load_s + temporal_s + overlap_s + stragglers_s,
        # HTA's columns: rank, idle/compute/non_compute/kernel_time(us), *_pctg
        "temporal_breakdown": temporal.to_dict(orient="records"),
        # HTA's columns: rank, comp_comm_overlap_pctg
        "comm_comp_overlap": overlap.to_dict(orient="records"),
        "stragglers_num_candidates": num_candidates,
        "stragglers": [int(r) for r in stragglers],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dir", type=Path, help="directory with one Kineto trace per rank")
    parser.add_argument(
        "--num-candidates",
        type=int,
        default=2,
        help="ranks get_potential_stragglers may flag per step (HTA's default: 2)",
    )
    args = parser.parse_args()

    trace_dir: Path = args.trace_dir.resolve()
    if not trace_dir.is_dir():
        fail(f"trace_dir {trace_dir} is not a directory")
    files = trace_files(trace_dir)
    if not files:
        fail(f"no *.json or *.gz trace files in {trace_dir}")

    # Everything written to fd 1 from here on (HTA's handlers, its forked
    # parser workers, stray prints) lands on stderr; the JSON goes to the
    # saved real stdout.
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        result = analyse(trace_dir, files, args.num_candidates)
    except StageError as exc:
        fail(str(exc))
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)

    print(json.dumps(jsonable(result)))


if __name__ == "__main__":
    main()
