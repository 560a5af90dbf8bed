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


# The agent's GPM metrics (agent/src/sample/gpu/read.rs GPM_METRICS).
GPM_METRIC_IDS = (
    N.NVML_GPM_METRIC_SM_UTIL,
    N.NVML_GPM_METRIC_SM_OCCUPANCY,
    N.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    N.NVML_GPM_METRIC_DRAM_BW_UTIL,
    N.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    N.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    N.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
    N.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
)


def gpm_metrics(first: object, second: object) -> object:
    """nvmlGpmMetricsGet between two samples: what the agent computes each tick."""
    m = N.c_nvmlGpmMetricsGet_t()
    m.version = N.NVML_GPM_METRICS_GET_VERSION
    m.numMetrics = len(GPM_METRIC_IDS)
    m.sample1 = first
    m.sample2 = second
    for i, mid in enumerate(GPM_METRIC_IDS):
        m.metrics[i].metricId = mid
    return N.nvmlGpmMetricsGet(m)


def xid_wait(events: object) -> None:
    """One non-blocking wait for Xid events: the agent drains them each tick."""
    try:
        N.nvmlEventSetWait_v2(events, 0)
    except N.NVMLError as e:
        if e.value != N.NVML_ERROR_TIMEOUT:
            raise


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
        first, second = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
        N.nvmlGpmSampleGet(h, first)
        time.sleep(0.1)
        N.nvmlGpmSampleGet(h, second)
        calls.append(("gpm_metrics_get (8 metrics)", lambda: gpm_metrics(first, second)))
    except Exception as e:  # no GPM in this pynvml or on this GPU
        print(f"gpm_sample: unavailable ({e})")
    try:
        events = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, events)
        calls.append(("event_set_wait(0) (Xid, once a tick)", lambda: xid_wait(events)))
    except Exception as e:
        print(f"event_set_wait: unavailable ({e})")
    total_cpu = 0.0
    for name, f in calls:
        try:
            f()
        except Exception as e:
            print(f"{name:38s} error: {e}")
            continue
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            f()
        cpu = (time.process_time() - c0) / n * 1e6
        wall = (time.perf_counter() - w0) / n * 1e6
        total_cpu += cpu
        print(f"{name:38s} cpu {cpu:8.1f} us  wall {wall:8.1f} us")
    print(f"{'all of the above, per tick':38s} cpu {total_cpu:8.1f} us  ({n} calls each)")


if __name__ == "__main__":
    main()
