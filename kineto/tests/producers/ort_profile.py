"""An ONNX Runtime profile of a small model exported from torch.

`export MODEL`: run with a Python that has torch: exports a small MLP + conv
model to ONNX (TorchScript exporter). `run MODEL OUT_DIR RUNS`: run with a
Python that has onnxruntime: runs the model RUNS times on the CPU execution
provider with `SessionOptions.enable_profiling`, and writes beside the
profile `ort_totals.json`: the profile's own per-op-type totals (Σ dur of
the `Node` events `*_kernel_time`, by `args.op_name`, µs as written) and
the number of `model_run` events.
"""
import json
import os
import sys


def export(path):
    import torch

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 14 * 14, 10), torch.nn.Softmax(dim=1),
    ).eval()
    torch.onnx.export(model, torch.randn(2, 3, 16, 16), path, dynamo=False)


def run(model, out, runs):
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(out, "ort_profile")
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16), dtype=np.float32)
    for _ in range(runs):
        sess.run(None, {name: x})
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    totals, runs_seen = {}, 0
    for e in events:
        if e.get("cat") == "Session" and e.get("name") == "model_run":
            runs_seen += 1
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            t = totals.setdefault(e["args"]["op_name"], {"calls": 0, "dur_us": 0})
            t["calls"] += 1
            t["dur_us"] += e["dur"]
    with open(os.path.join(out, "ort_totals.json"), "w") as f:
        json.dump({"onnxruntime": ort.__version__, "profile": os.path.basename(path),
                   "model_runs": runs_seen, "op_types": totals}, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]))
