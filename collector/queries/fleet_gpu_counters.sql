-- Fleet view: each GPU's error counters over the window's UTC days, from the daily
-- rollup of migration 0016 (gpu_counter_days; one row per GPU and day, never the
-- samples): critical Xid events summed; the ECC and PCIe replay totals (NVML's
-- volatile counters) as their increase, largest minus smallest value seen (a
-- counter reset inside the window, a driver reload, undercounts). Only GPUs with a
-- figure above 0. Binds: the window's first day (YYYYMMDD).
SELECT node, uuid, xid AS xid_errors, ecc_c AS ecc_corrected_errors,
       ecc_u AS ecc_uncorrected_errors, replays AS pcie_replays
FROM
(
    SELECT node, uuid,
           toUInt64(sumMerge(xid_errors)) AS xid,
           toUInt64(maxIfMerge(ecc_corrected_max) - minIfMerge(ecc_corrected_min)) AS ecc_c,
           toUInt64(maxIfMerge(ecc_uncorrected_max) - minIfMerge(ecc_uncorrected_min)) AS ecc_u,
           toUInt64(maxIfMerge(pcie_replays_max) - minIfMerge(pcie_replays_min)) AS replays
    FROM gpu_counter_days
    WHERE day >= ? AND uuid != ''
    GROUP BY node, uuid
)
WHERE xid > 0 OR ecc_c > 0 OR ecc_u > 0 OR replays > 0
ORDER BY node, uuid
