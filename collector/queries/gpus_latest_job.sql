-- The latest sample of every GPU a job's ranks were mapped to (the last one taken
-- while the job ran there), optionally of one node.
-- Columns: every column of gpu_samples in table order (read as its write row,
-- store::GpuSampleRow). Binds, in order: job_id, node ('' = every node), node.
SELECT
    node, agent_id, agent_session, batch_seq, ts_ns, period_ns, gpu_index, uuid, name,
    pci_bus_id, state, error, gpu_util_pct, mem_util_pct, sm_active_pct, sm_occupancy_pct,
    tensor_active_pct, dram_active_pct, mem_used_bytes, mem_total_bytes, power_w,
    power_limit_w, temp_c, sm_clock_mhz, sm_clock_max_mhz, mem_clock_mhz, mem_clock_max_mhz,
    throttle_mask, throttle_reasons, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s,
    nvlink_tx_bytes_per_s, nvlink_rx_bytes_per_s, ecc_corrected_total,
    ecc_uncorrected_total, xid_errors, last_xid, process_pids, process_mem_bytes,
    rank_jobs, rank_ids
FROM gpu_samples
WHERE (node, gpu_index, ts_ns) IN (
    SELECT node, gpu_index, max(ts_ns)
    FROM rank_gpu_samples
    WHERE job_id = ?
    GROUP BY node, gpu_index
) AND (? = '' OR node = ?)
ORDER BY node, gpu_index, ts_ns DESC
LIMIT 1 BY node, gpu_index
