//! Job attribution from the scheduler's environment: which job, run and rank
//! a training process belongs to when it does not say so itself.
//!
//! In: an environment (a lookup function, e.g. over `/proc/<pid>/environ` of
//! the rank process, or the current process), and optionally the Kubernetes
//! downward-API labels file. Out: an [`Attribution`], and [`fill_identity`]
//! which completes a `RankIdentity` without overriding what the rank set.
//!
//! Sources and precedence:
//! * job id: [`job::job_id`], one rule for every rank of a launch on every
//!   node: `RANKSCOPE_JOB_ID`, torchrun's run id (unless its default
//!   `none`), `SLURM_JOB_ID`, Kubernetes (JobSet, PyTorchJob, MPIJob, Job),
//!   `rankscope run`'s launch id on a single node, the rendezvous endpoint;
//! * run id: `TORCHELASTIC_RUN_ID` (unless `none`), else
//!   `SLURM_RESTART_COUNT` as `restart-N`;
//! * rank / world size / local rank: torchrun's `RANK`, `WORLD_SIZE`,
//!   `LOCAL_RANK` (the global ranks when torchrun runs under Slurm), else
//!   Slurm's `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`;
//! * labels: `slurm_job_id`, `slurm_node_id`, `slurm_job_name`,
//!   `torchelastic_run_id`, `k8s_pod`, `k8s_namespace` (downward-API env
//!   `POD_NAME`, `POD_NAMESPACE`) and `k8s_label_<key>` for each pod label.

use std::collections::BTreeMap;

use crate::v1 as proto;

pub mod job;
pub use job::{job_id, JobSource, TORCHRUN_DEFAULT_RUN_ID};

/// Where a pod's labels are when the pod spec mounts them through the
/// downward API (a `downwardAPI` volume at `/etc/podinfo`, item `labels`), as
/// deploy/ shows; the agent reads it under `/proc/<pid>/root` of a rank.
pub const POD_LABELS_PATH: &str = "/etc/podinfo/labels";

/// What the environment says about a rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    pub job_id: Option<String>,
    /// What named `job_id`.
    pub job_source: Option<JobSource>,
    pub run_id: Option<String>,
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    pub local_rank: Option<u32>,
    pub labels: BTreeMap<String, String>,
}

/// Reads the attribution from `env` (and the pod labels, `key="value"` lines
/// as the downward API writes them, when given).
pub fn from_env(env: impl Fn(&str) -> Option<String>, pod_labels: Option<&str>) -> Attribution {
    let get = |k: &str| env(k).filter(|v| !v.is_empty());
    let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u32>().ok());
    let mut a = Attribution::default();
    let mut label = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            a.labels.insert(k.to_owned(), v);
        }
    };
    label("slurm_job_id", get("SLURM_JOB_ID"));
    label("slurm_node_id", get("SLURM_NODEID"));
    label("slurm_job_name", get("SLURM_JOB_NAME"));
    let run_id = get("TORCHELASTIC_RUN_ID").filter(|r| r != TORCHRUN_DEFAULT_RUN_ID);
    label("torchelastic_run_id", run_id.clone());
    label("k8s_pod", get("POD_NAME"));
    label("k8s_namespace", get("POD_NAMESPACE"));
    let mut pod: BTreeMap<String, String> = BTreeMap::new();
    for line in pod_labels.unwrap_or("").lines() {
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().trim_matches('"');
            pod.insert(k.trim().to_owned(), v.to_owned());
        }
    }
    for (k, v) in &pod {
        a.labels.insert(format!("k8s_label_{k}"), v.clone());
    }
    if let Some((job, source)) = job_id(&env, &pod) {
        a.job_id = Some(job);
        a.job_source = Some(source);
    }
    a.run_id = run_id.or_else(|| get("SLURM_RESTART_COUNT").map(|n| format!("restart-{n}")));
    a.rank = num("RANK").or_else(|| num("SLURM_PROCID"));
    a.world_size = num("WORLD_SIZE").or_else(|| num("SLURM_NTASKS"));
    a.local_rank = num("LOCAL_RANK").or_else(|| num("SLURM_LOCALID"));
    a
}

/// Parses a `/proc/<pid>/environ` blob (NUL-separated `KEY=value`).
pub fn parse_environ(blob: &[u8]) -> BTreeMap<String, String> {
    blob.split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// Completes `id` from `a`: fills an empty job id / run id, a zero world
/// size (with the rank and local rank that come with it), and adds labels the
/// rank did not set. Never overrides what the rank sent.
pub fn fill_identity(id: &mut proto::RankIdentity, a: &Attribution) {
    if id.job_id.is_empty() {
        if let Some(j) = &a.job_id {
            id.job_id.clone_from(j);
        }
    }
    if id.run_id.is_empty() {
        if let Some(r) = &a.run_id {
            id.run_id.clone_from(r);
        }
    }
    if id.world_size == 0 {
        if let (Some(w), Some(r)) = (a.world_size, a.rank) {
            id.world_size = w;
            id.rank = r;
            id.local_rank = a.local_rank.unwrap_or(id.local_rank);
        }
    }
    for (k, v) in &a.labels {
        id.labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn slurm() {
        let a = from_env(
            env(&[
                ("SLURM_JOB_ID", "4242"),
                ("SLURM_PROCID", "13"),
                ("SLURM_NTASKS", "64"),
                ("SLURM_LOCALID", "5"),
                ("SLURM_NODEID", "1"),
                ("SLURM_RESTART_COUNT", "2"),
            ]),
            None,
        );
        assert_eq!(a.job_id.as_deref(), Some("4242"));
        assert_eq!(a.run_id.as_deref(), Some("restart-2"));
        assert_eq!(
            (a.rank, a.world_size, a.local_rank),
            (Some(13), Some(64), Some(5))
        );
        assert_eq!(a.labels["slurm_node_id"], "1");
    }

    #[test]
    fn torchrun_under_slurm_uses_the_global_rank() {
        let a = from_env(
            env(&[
                ("SLURM_JOB_ID", "77"),
                ("SLURM_PROCID", "1"),
                ("TORCHELASTIC_RUN_ID", "llm-run-9"),
                ("RANK", "9"),
                ("LOCAL_RANK", "1"),
                ("WORLD_SIZE", "16"),
            ]),
            None,
        );
        assert_eq!(
            (a.job_id.as_deref(), a.job_source),
            (Some("llm-run-9"), Some(JobSource::Torchrun)),
            "torchrun's --rdzv-id names the job before Slurm's id"
        );
        assert_eq!(a.labels["slurm_job_id"], "77");
        assert_eq!(a.run_id.as_deref(), Some("llm-run-9"));
        assert_eq!(
            (a.rank, a.world_size, a.local_rank),
            (Some(9), Some(16), Some(1))
        );
        let t = from_env(
            env(&[
                ("TORCHELASTIC_RUN_ID", "r1"),
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
            ]),
            None,
        );
        assert_eq!(
            t.job_id.as_deref(),
            Some("r1"),
            "torchrun alone: the run id names the job"
        );
    }

    #[test]
    fn kubernetes_downward_api() {
        let labels = "app=\"trainer\"\njob-name=\"bert-pretrain\"\n";
        let a = from_env(
            env(&[("POD_NAME", "bert-pretrain-0-x7"), ("POD_NAMESPACE", "ml")]),
            Some(labels),
        );
        assert_eq!(a.job_id.as_deref(), Some("bert-pretrain"));
        assert_eq!(a.labels["k8s_pod"], "bert-pretrain-0-x7");
        assert_eq!(a.labels["k8s_namespace"], "ml");
        assert_eq!(a.labels["k8s_label_app"], "trainer");
        let no_job = from_env(env(&[("POD_NAME", "p-1")]), None);
        assert_eq!(no_job.job_id.as_deref(), Some("p-1"));
    }

    #[test]
    fn fill_never_overrides_the_rank() {
        let a = from_env(
            env(&[
                ("SLURM_JOB_ID", "1"),
                ("SLURM_PROCID", "3"),
                ("SLURM_NTASKS", "8"),
            ]),
            None,
        );
        let mut empty = proto::RankIdentity::default();
        fill_identity(&mut empty, &a);
        assert_eq!(
            (empty.job_id.as_str(), empty.rank, empty.world_size),
            ("1", 3, 8)
        );
        assert_eq!(empty.labels["slurm_job_id"], "1");
        let mut set = proto::RankIdentity {
            job_id: "mine".into(),
            rank: 1,
            world_size: 2,
            labels: [("slurm_job_id".to_string(), "x".to_string())].into(),
            ..Default::default()
        };
        fill_identity(&mut set, &a);
        assert_eq!(
            (set.job_id.as_str(), set.rank, set.world_size),
            ("mine", 1, 2)
        );
        assert_eq!(set.labels["slurm_job_id"], "x");
    }

    #[test]
    fn environ_blob() {
        let m = parse_environ(b"A=1\0B=x=y\0\0BROKEN\0");
        assert_eq!(m["A"], "1");
        assert_eq!(m["B"], "x=y");
        assert_eq!(m.len(), 2);
    }
}
