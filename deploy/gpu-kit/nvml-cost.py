"""CPU and wall time of each NVML call rankscope-agent makes per GPU per tick
(agent/src/sample/gpu/read.rs), on this node's real driver: which reads are
worth sampling less often (issue 38, goal 3). Uses nvidia-ml-py (pynvml),
whose per-call overhead (~1 us) is small against a driver call.

Usage: python3 nvml-cost.py [ITERATIONS]   (default 1000; GPU 0)
Prints one line per call: us of CPU (user + system) and of wall per call.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

import pynvml as N


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    t0 = time.perf_counter()
    N.nvmlInit()
    print(f"nvmlInit: {1e3 * (time.perf_counter() - t0):.1f} ms; driver {N.nvmlSystemGetDriverVersion()}")
    h = N.nvmlDeviceGetHandleByIndex(0)
    print(f"gpu 0: {N.nvmlDeviceGetName(h)}")
    calls: list[tuple[str, Callable[[], object]]] = [
        ("utilization_rates", lambda: N.nvmlDeviceGetUtilizationRates(h)),
        ("memory_info", lambda: N.nvmlDeviceGetMemoryInfo(h)),
        ("power_usage", lambda: N.nvmlDeviceGetPowerUsage(h)),
        ("enforced_power_limit", lambda: N.nvmlDeviceGetEnforcedPowerLimit(h)),
        ("temperature", lambda: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)),
        ("clock_info(SM)", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)),
        ("clock_info(MEM)", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)),
        ("current_throttle_reasons", lambda: N.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
        (
            "total_ecc_errors(corrected)",
            lambda: N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC),
        ),
        ("pcie_replay_counter", lambda: N.nvmlDeviceGetPcieReplayCounter(h)),
        ("running_compute_processes", lambda: N.nvmlDeviceGetComputeRunningProcesses(h)),
        ("pcie_throughput(TX)", lambda: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES)),
        (
            "field_values(nvlink tx, rx)",
            lambda: N.nvmlDeviceGetFieldValues(
                h, [N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
            ),
        ),
    ]
    try:
        sample = N.nvmlGpmSampleAlloc()
        calls.append(("gpm_sample", lambda: N.nvmlGpmSampleGet(h, sample)))
    except Exception as e:  # no GPM in this pynvml or on this GPU
        print(f"gpm_sample: unavailable ({e})")
    total_cpu = 0.0
    for name, f in calls:
        try:
            f()
        except Exception as e:
            print(f"{name:30s} error: {e}")
            continue
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            f()
        cpu = (time.process_time() - c0) / n * 1e6
        wall = (time.perf_counter() - w0) / n * 1e6
        total_cpu += cpu
        print(f"{name:30s} cpu {cpu:8.1f} us  wall {wall:8.1f} us")
    print(f"{'all of the above, per tick':30s} cpu {total_cpu:8.1f} us  ({n} calls each)")


if __name__ == "__main__":
    main()
