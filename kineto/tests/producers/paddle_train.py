"""One rank of a small PaddlePaddle training loop (CPU) under paddle.profiler
with profile_memory=True: writes the Chrome-trace JSON that
`paddle.profiler.export_chrome_tracing` writes (worker name `rank{R}`) and,
beside it, `rank{R}.summary.json`: the Operator Summary numbers of Paddle's
own `Profiler.summary` for the same run (per operator: calls and CPU Total,
ns), read from `paddle.profiler.profiler_statistic.StatisticData`, the
object `summary()` prints its tables from.

Usage: paddle_train.py OUT_DIR RANK STEPS
"""
import json
import os
import sys

import paddle
import paddle.profiler as profiler
from paddle.profiler.profiler_statistic import StatisticData

out, rank, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
paddle.seed(rank)
paddle.set_device("cpu")
model = paddle.nn.Sequential(
    paddle.nn.Linear(32, 64), paddle.nn.ReLU(), paddle.nn.Linear(64, 4)
)
opt = paddle.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())
x = paddle.randn([16, 32])
y = paddle.randint(0, 4, [16])

prof = profiler.Profiler(
    targets=[profiler.ProfilerTarget.CPU],
    on_trace_ready=profiler.export_chrome_tracing(out, worker_name=f"rank{rank}"),
    profile_memory=True,
)
prof.start()
for _ in range(steps):
    loss = paddle.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()
    prof.step()
prof.stop()

stats = StatisticData(
    prof.profiler_result.get_data(), prof.profiler_result.get_extra_info()
)
ops = {
    name: {"calls": int(item.call), "cpu_total_ns": int(item.cpu_time)}
    for name, item in stats.event_summary.items.items()
}
with open(os.path.join(out, f"rank{rank}.summary.json"), "w") as f:
    json.dump({"paddle": paddle.__version__, "operators": ops}, f, indent=1)
