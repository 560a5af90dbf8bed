-- Fleet view: each GPU's errors in a window, from the sparse gpu_error_samples of
-- migration 0016 (only samples that saw an error; never gpu_samples): critical Xid
-- events, ECC errors (corrected, uncorrected) and PCIe replays summed.
-- Binds: since_ns.
SELECT node, uuid,
       toUInt64(sum(xid_errors)) AS xid_errors,
       toUInt64(sum(ecc_corrected)) AS ecc_corrected_errors,
       toUInt64(sum(ecc_uncorrected)) AS ecc_uncorrected_errors,
       toUInt64(sum(pcie_replays)) AS pcie_replays
FROM gpu_error_samples
WHERE ts_ns >= ? AND uuid != ''
GROUP BY node, uuid
ORDER BY node, uuid
