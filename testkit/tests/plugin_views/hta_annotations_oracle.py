#!/usr/bin/env python3
"""Expected `annotations` (issue 29): HTA 0.5.0's get_gpu_user_annotation_breakdown.

Writes `expected-hta-annotations.json` beside each vendored set that has
`gpu_user_annotation` ranges. Versions (pinned):
    V/bin/pip install --no-deps holistictraceanalysis==0.5.0
    V/bin/pip install pandas numpy plotly networkx pydot psutil pyyaml
    V/bin/python testkit/tests/plugin_views/hta_annotations_oracle.py
HTA is run as the HTA parity files beside the sets were
(`include_last_profiler_step=True`), each file as the rank its
distributedInfo names.
"""
import gzip
import json
import os

import pandas
from hta.trace_analysis import TraceAnalysis

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../cli/tests/fixtures/kineto")
SETS = {
    "hta_nccl_parser_rank0_a100": "nccl_data.json.gz",
    "tracelens_b200_eager_rank0": "eager_trace.json.gz",
    "tracelens_mi300_resnet_rank0": "resnet_act_checkpoint.json.gz",
}


def main():
    for s, f in SETS.items():
        path = os.path.join(ROOT, s, f)
        with gzip.open(path, "rt") as fh:
            rank = json.load(fh).get("distributedInfo", {}).get("rank", 0)
        try:
            ta = TraceAnalysis(trace_files={rank: path}, include_last_profiler_step=True)
            df = ta.get_gpu_user_annotation_breakdown(visualize=False)
        except Exception as e:  # HTA 0.5.0 fails to load some traces under pandas 3
            print(s, "skipped: HTA failed:", repr(e)[:200])
            continue
        rows = [] if df is None else json.loads(df.to_json(orient="records"))
        out = {"tool": "holistictraceanalysis 0.5.0", "pandas": pandas.__version__,
               "file": f, "rank": rank, "breakdown": rows}
        with open(os.path.join(ROOT, s, "expected-hta-annotations.json"), "w") as fh:
            json.dump(out, fh, indent=1, sort_keys=True)
            fh.write("\n")
        print(s, len(rows), "rows")


if __name__ == "__main__":
    main()
