//! Retention: dropping whole day partitions once all their data is older than
//! `retention_days`.
//!
//! In: the retention in days and the current time. Out: the partitions dropped, as
//! `table/YYYYMMDD`.
//! Invariants: every table is partitioned by `toYYYYMMDD` of its event time in UTC, so a
//! partition id is the UTC day as eight digits; ids are parsed as numbers before they go
//! into SQL, anything else is skipped with a warning. Day D is dropped when
//! `D + 1 day <= now - retention_days`, i.e. when none of its rows is younger than the
//! retention, AND its last write (the newest part's `modification_time`) is older than
//! the retention too: an imported trace of last year is kept for `retention_days`
//! after its import, not dropped at once. `retention_days = 0` keeps everything.
//!
//! Cluster mode: the partitions live in the `*_local` tables of every shard; they are
//! listed through `cluster(<cluster>, system, parts)` and dropped with
//! `ALTER TABLE <db>.<t>_local ON CLUSTER <cluster> DROP PARTITION` (a shard without
//! the partition does nothing). Results still name the table as `t/YYYYMMDD`.

use clickhouse::sql::Identifier;
use clickhouse::Row;
use serde::Deserialize;

use super::cluster::local_name;
use super::sql::{query_file, QueryFile};
use super::{Store, StoreError, Table};

const EXPIRED_PARTITIONS_SQL: QueryFile = query_file!("expired_partitions");
const DROP_PARTITION_SQL: QueryFile = query_file!("drop_partition");
const EXPIRED_PARTITIONS_CLUSTER_SQL: QueryFile = query_file!("expired_partitions_cluster");
const DROP_PARTITION_CLUSTER_SQL: QueryFile = query_file!("drop_partition_cluster");

const NS_PER_DAY: u64 = 86_400 * 1_000_000_000;

/// Derived tables outside [`Table::ALL`] (the writer never writes them),
/// partitioned by a `YYYYMMDD` too: `fleet_unit_jobs` by its month's last day,
/// so a month goes once all of it is past the retention.
const ROLLUPS: &[&str] = &["fleet_unit_jobs"];

#[derive(Debug, Row, Deserialize)]
struct PartRow {
    table: String,
    partition_id: String,
    /// Unix seconds of the partition's newest part.
    written_s: u64,
}

impl Store {
    /// Drops the day partitions of our tables whose rows are all older than
    /// `retention_days` at `now_ns`; returns them as `table/YYYYMMDD`.
    pub async fn drop_expired_partitions(
        &self,
        retention_days: u32,
        now_ns: u64,
    ) -> Result<Vec<String>, StoreError> {
        if retention_days == 0 {
            return Ok(Vec::new());
        }
        let cutoff =
            yyyymmdd(now_ns.saturating_sub(u64::from(retention_days) * NS_PER_DAY) / NS_PER_DAY);
        // The tables that hold the partitions: ours, or their local tables on a cluster.
        let physical = |t: Table| match self.cluster() {
            None => t.name().to_string(),
            Some(_) => local_name(t.name()),
        };
        let mut tables: Vec<String> = Table::ALL.iter().map(|t| physical(*t)).collect();
        tables.extend(ROLLUPS.iter().map(|t| match self.cluster() {
            None => (*t).to_string(),
            Some(_) => local_name(t),
        }));
        let query = match self.cluster() {
            None => self.read(EXPIRED_PARTITIONS_SQL),
            Some(cluster) => self.read(EXPIRED_PARTITIONS_CLUSTER_SQL).bind(cluster),
        };
        let parts: Vec<PartRow> = query
            .bind(self.database())
            .bind(&tables)
            .fetch_all()
            .await
            .map_err(StoreError::query("list partitions"))?;
        let mut dropped = Vec::new();
        for part in parts {
            let Some(table) = Table::ALL
                .iter()
                .map(|t| t.name())
                .chain(ROLLUPS.iter().copied())
                .find(|t| part.table == *t || part.table == local_name(t))
            else {
                continue;
            };
            let Some(day) = parse_day(&part.partition_id) else {
                tracing::warn!(table = %part.table, partition = %part.partition_id, "skipping partition that is not a YYYYMMDD day");
                continue;
            };
            let retention_ns = u64::from(retention_days) * NS_PER_DAY;
            let written_ns = part.written_s.saturating_mul(1_000_000_000);
            if day >= cutoff || written_ns.saturating_add(retention_ns) > now_ns {
                continue;
            }
            let drop = match self.cluster() {
                None => self.read(DROP_PARTITION_SQL).bind(Identifier(table)),
                Some(cluster) => self
                    .read(DROP_PARTITION_CLUSTER_SQL)
                    .bind(Identifier(self.database()))
                    .bind(Identifier(&local_name(table)))
                    .bind(Identifier(cluster))
                    .with_setting("wait_end_of_query", "1"),
            };
            drop.bind(day)
                .execute()
                .await
                .map_err(StoreError::query("drop partition"))?;
            dropped.push(format!("{table}/{day}"));
        }
        Ok(dropped)
    }
}

/// An eight-digit `YYYYMMDD` partition id as a number.
fn parse_day(id: &str) -> Option<u32> {
    if id.len() == 8 && id.bytes().all(|b| b.is_ascii_digit()) {
        id.parse().ok()
    } else {
        None
    }
}

/// `YYYYMMDD` of the UTC day `days` days after 1970-01-01.
fn yyyymmdd(days: u64) -> u32 {
    let (year, month, day) = crate::civil::civil_from_days(days as i64);
    u32::try_from(year * 10_000 + month * 100 + day).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(yyyymmdd(0), 19700101);
        assert_eq!(yyyymmdd(59), 19700301);
        assert_eq!(yyyymmdd(11_016), 20000229);
        assert_eq!(yyyymmdd(11_017), 20000301);
        assert_eq!(yyyymmdd(1_700_000_000 / 86_400), 20231114);
        assert_eq!(yyyymmdd(20_454), 20260101);
    }

    #[test]
    fn partition_ids_must_be_days() {
        assert_eq!(parse_day("20231114"), Some(20231114));
        for bad in ["", "2023111", "202311140", "2023-11-", "1; DROP", "tuple()"] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
    }
}
