#!/usr/bin/env python3
"""Writes `expected-hta-analyses.json` beside each vendored Kineto trace set
(cli/tests/fixtures/kineto/<set>/): the numbers Holistic Trace Analysis (HTA)
0.5.0 computes on the set's files, which testkit/tests/hta_views.rs holds
rankscope's views to.

Run (a venv of its own, not the project's):
    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install holistictraceanalysis==0.5.0 'pandas<3'
    /tmp/hta-venv/bin/python testkit/hta/expected_hta.py [SET ...]

HTA is called as a user comparing with rankscope would:
`TraceAnalysis(trace_files={rank: file}, include_last_profiler_step=True)`,
ranks from each file's `distributedInfo.rank`. The output is deterministic
for given versions (written into the file as `versions`)."""

import gzip
import json
import logging
import math
import os
import sys
import warnings
from importlib.metadata import version

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, "../../cli/tests/fixtures/kineto"))
SETS = [
    "gpukit_ddp_4rank_h200",
    "gpukit_nccl1_h200",
    "param_dlrm_8rank_v100",
    "hta_df_index_resolver_rank1_v100",
    "hta_trace_filter_2rank_sm80",
    "hta_nccl_parser_rank0_a100",
    "hta_negative_queue_rank0_a100",
    "tracelens_b200_eager_rank0",
    "tracelens_mi300_resnet_rank0",
]


def clean(v):
    """JSON-safe scalars: NaN -> None, numpy -> Python."""
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        return clean(v.item())
    return v


def records(df):
    return [{k: clean(v) for k, v in r.items()} for r in df.to_dict("records")]


def trace_files(folder):
    files = {}
    for name in sorted(os.listdir(folder)):
        if not (name.endswith(".json.gz") or name.endswith(".json")):
            continue
        if name.startswith("expected-"):
            continue
        path = os.path.join(folder, name)
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt") as f:
            rank = int(json.load(f)["distributedInfo"]["rank"])
        files[rank] = path
    return files


def analyse(set_name):
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import get_kernel_type

    folder = os.path.join(FIXTURES, set_name)
    files = trace_files(folder)
    ta = TraceAnalysis(trace_files=files, include_last_profiler_step=True)
    out = {}

    args = dict(visualize=False, duration_ratio=0.8, num_kernels=10,
                include_memory_kernels=True)
    type_df, kernel_df = ta.get_gpu_kernel_breakdown(**args)
    out["gpu_kernel_breakdown"] = {
        "call": "get_gpu_kernel_breakdown(visualize=False, duration_ratio=0.8, "
                "num_kernels=10, include_memory_kernels=True)",
        "meaning": "kernel_type_df: time per kernel type over all ranks, where overlapping "
                   "COMPUTATION/COMMUNICATION/MEMORY time is its own type (e.g. 'COMPUTATION "
                   "overlapping COMMUNICATION'); kernel_df: per rank and type, the kernels that "
                   "make up duration_ratio of that type's time (at most num_kernels each, the "
                   "rest summed as 'others'), with sum/max/min/mean/stddev of their durations",
        "args": args,
        "kernel_type_df": records(type_df),
        "kernel_df": records(kernel_df),
    }

    # The same kernel-type time, per rank (what get_gpu_kernel_breakdown sums
    # over the ranks), with HTA's own function.
    sym = ta.t.symbol_table.get_sym_table()
    per_rank = []
    for rank, df in sorted(ta.t.traces.items()):
        k = df[df["stream"].ne(-1)].copy()
        k["kernel_type"] = k["name"].apply(lambda n: get_kernel_type(sym[n]))
        t = BreakdownAnalysis._get_gpu_kernel_type_time(
            k, ["COMPUTATION", "COMMUNICATION", "MEMORY"])
        t["rank"] = rank
        per_rank.extend(records(t))
    out["kernel_type_exclusive_time_per_rank"] = {
        "meaning": "BreakdownAnalysis._get_gpu_kernel_type_time per rank "
                   "(kernel_type_df before the sum over ranks)",
        "rows": per_rank,
    }

    ranks = sorted(files)
    idle, stats = ta.get_idle_time_breakdown(
        ranks=ranks, visualize=False, show_idle_interval_stats=True,
        consecutive_kernel_delay=30)
    stats = stats.reset_index().rename(columns={"index": "idle_category"})
    out["idle_time_breakdown"] = {
        "call": "get_idle_time_breakdown(ranks=<all>, visualize=False, "
                "show_idle_interval_stats=True, consecutive_kernel_delay=30)",
        "meaning": "per rank and GPU stream, each gap before a kernel (its start minus the "
                   "previous kernel's end on that stream, kernels sorted by start) is host_wait "
                   "when the kernel's launch call started after the previous kernel ended; else "
                   "kernel_wait when the gap is below consecutive_kernel_delay us; else other. "
                   "idle_time = sum of gaps per category; idle_time_ratio = share of that "
                   "stream's idle time; idle_interval_stats_df = count/mean/std/quartiles of "
                   "the gaps per category",
        "args": {"ranks": ranks, "visualize": False,
                 "show_idle_interval_stats": True,
                 "consecutive_kernel_delay": 30},
        "idle_time_df": records(idle.reset_index()),
        "idle_interval_stats_df": records(stats),
    }

    q = ta.get_queue_length_summary(ranks=ranks)
    out["queue_length_summary"] = {
        "call": "get_queue_length_summary(ranks=<all>)",
        "meaning": "per rank and stream, statistics of the CUDA queue length (launched but "
                   "not yet started kernels/memcpys) sampled at every launch and start",
        "rows": [] if q is None else records(_flat(q.reset_index())),
    }

    temporal = ta.get_temporal_breakdown(visualize=False)
    out["temporal_breakdown"] = {
        "call": "get_temporal_breakdown(visualize=False)",
        "rows": records(temporal),
    }
    overlap = ta.get_comm_comp_overlap(visualize=False)
    out["comm_comp_overlap"] = {
        "call": "get_comm_comp_overlap(visualize=False)",
        "rows": records(overlap.reset_index(drop=True)),
    }

    launch = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    rows = []
    for rank, df in sorted(launch.items()):
        rows.append({
            "rank": rank,
            "launches": int(len(df)),
            "short_kernels": int(((df["cpu_duration"] <= 50)
                                  & (df["gpu_duration"] < df["cpu_duration"])).sum()),
            "runtime_outliers": int((df["cpu_duration"] > 50).sum()),
            "launch_delay_outliers": int((df["launch_delay"] > 100).sum()),
            "cpu_duration_sum": clean(df["cpu_duration"].sum()),
            "gpu_duration_sum": clean(df["gpu_duration"].sum()),
            "launch_delay_sum": clean(df["launch_delay"].sum()),
        })
    out["cuda_kernel_launch_stats"] = {
        "call": "get_cuda_kernel_launch_stats(ranks=<all>, runtime_cutoff=50, "
                "launch_delay_cutoff=100, include_memory_events=True, visualize=False)",
        "meaning": "per rank: the number of launch/GPU-event pairs, the counts of HTA's three "
                   "filters (short: cpu_duration <= 50 and gpu_duration < cpu_duration; runtime "
                   "outliers: cpu_duration > 50; launch-delay outliers: launch_delay > 100) "
                   "and the sums of the three columns",
        "rows": rows,
    }
    return out


def _flat(df):
    df.columns = [".".join(str(c) for c in col if str(c)) if isinstance(col, tuple) else col
                  for col in df.columns]
    return df


def main():
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    sets = sys.argv[1:] or SETS
    versions = {p: version(p) for p in ["holistictraceanalysis", "pandas", "numpy"]}
    for s in sets:
        out = {
            "source": "Holistic Trace Analysis 0.5.0 run on the trace files of this folder: "
                      "TraceAnalysis(trace_files={rank: file}, include_last_profiler_step=True), "
                      "written by testkit/hta/expected_hta.py",
            "versions": versions,
            "units": "microseconds, as HTA reports them (HTA rounds float ns-precision "
                     "timestamps inward to whole microseconds: ts = ceil(ts), "
                     "end = floor(ts + dur))",
            "analyses": analyse(s),
        }
        path = os.path.join(FIXTURES, s, "expected-hta-analyses.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=1, sort_keys=False)
            f.write("\n")
        print(f"{s}: {path}")


if __name__ == "__main__":
    main()
