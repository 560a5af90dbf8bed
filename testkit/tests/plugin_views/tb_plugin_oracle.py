#!/usr/bin/env python3
"""Expected numbers of the issue-29 views from the reference tools' own code.

Writes `expected-tbp.json` beside each vendored trace set
(cli/tests/fixtures/kineto/<set>/): per trace file, torch-tb-profiler 0.4.3's
GPU summary (GPU Utilization, Est. SM Efficiency, Est. Achieved Occupancy,
unrounded, from `RunProfileData.gpu_metrics_parser`), its kernel view
(`RunProfileData.kernel_stat`: calls, total, mean, max, min, Mean Blocks Per
SM, Mean Est. Achieved Occupancy, Tensor Cores Used; unrounded),
`tc_used_ratio`, the "all steps" span, the step-time breakdown
(`avg_costs`) and the recommendations.

Versions (pinned; testkit/tests/plugin_views.rs names them too):
    python3 -m venv V && V/bin/pip install torch-tb-profiler==0.4.3 pandas numpy
    V/bin/python testkit/tests/plugin_views/tb_plugin_oracle.py
The traces are read unmodified: 0.4.3 reads no `cuda_runtime` events (every
vendored trace writes its runtime calls so), so no step is device-adjusted.
"""
import json
import math
import os
import sys
import tempfile

import numpy
import pandas
import torch_tb_profiler
from torch_tb_profiler.profiler.data import RunProfileData

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../cli/tests/fixtures/kineto")
SETS = [
    "param_dlrm_8rank_v100",
    "hta_trace_filter_2rank_sm80",
    "hta_nccl_parser_rank0_a100",
    "hta_df_index_resolver_rank1_v100",
    "hta_negative_queue_rank0_a100",
    "tracelens_b200_eager_rank0",
    "tracelens_mi300_resnet_rank0",
    "gpukit_ddp_4rank_h200",
    "gpukit_nccl1_h200",
]


def num(v):
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def one(path, cache):
    d = RunProfileData.parse("worker0", 1, path, cache)
    if isinstance(d, tuple):
        d = d[0]
    g = d.gpu_metrics_parser
    gpus = {}
    for gpu in sorted(g.gpu_ids):
        gpus[str(gpu)] = {
            "gpu_util": num(g.gpu_utilization[gpu]),
            "sm_efficiency": num(g.avg_approximated_sm_efficiency_per_device[gpu]),
            "achieved_occupancy": num(g.avg_occupancy_per_device[gpu]),
        }
    kernels = []
    if d.kernel_stat is not None:
        for name, r in d.kernel_stat.iterrows():
            kernels.append({
                "name": name,
                "tensor_cores_used": bool(r["tc_used"]),
                "calls": int(r["count"]),
                "total_us": num(r["sum"]),
                "mean_us": num(r["mean"]),
                "max_us": num(r["max"]),
                "min_us": num(r["min"]),
                "mean_blocks_per_sm": num(r["blocks_per_sm"]),
                "mean_est_achieved_occupancy": num(r["occupancy"]),
            })
    c = d.avg_costs
    return {
        "gpus": gpus,
        "tc_used_ratio": num(d.tc_used_ratio),
        "steps": len(d.steps_names),
        "avg_costs_us": {
            "kernel": num(c.costs[0]), "memcpy": num(c.costs[1]), "memset": num(c.costs[2]),
            "communication": num(c.costs[3]), "runtime": num(c.costs[4]),
            "dataloader": num(c.costs[5]), "cpu_exec": num(c.costs[6]), "other": num(c.costs[7]),
            "total": num(c.costs[8]),
        },
        "kernels": kernels,
        "recommendations": d.recommendations,
    }


def main():
    sets = sys.argv[1:] or SETS
    with tempfile.TemporaryDirectory() as cache:
        for s in sets:
            folder = os.path.join(ROOT, s)
            out = {
                "tool": f"torch-tb-profiler {torch_tb_profiler.__version__}",
                "pandas": pandas.__version__,
                "numpy": numpy.__version__,
                "files": {},
            }
            for f in sorted(os.listdir(folder)):
                if f.endswith(".json.gz") and not f.startswith("expected"):
                    out["files"][f] = one(os.path.join(folder, f), cache)
            with open(os.path.join(folder, "expected-tbp.json"), "w") as fh:
                json.dump(out, fh, indent=1, sort_keys=True)
                fh.write("\n")
            print(s, len(out["files"]), "file(s)")


if __name__ == "__main__":
    main()
