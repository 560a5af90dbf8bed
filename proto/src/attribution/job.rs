//! The job id of a rank process: one rule, shared by the SDK's identity
//! (`rankscope.init()`, `rankscope run`), the agent's completion of stream
//! identities and its attribution of daemon-mode (libkineto) processes.
//!
//! In: an environment lookup and the pod's labels (downward API). Out: the
//! job id and which [`JobSource`] named it. Every rank of one launch must get
//! the same id on every node, and two launches must never share one, so only
//! values that are identical across nodes and unique per launch qualify.
//! First match wins:
//!
//! 1. `RANKSCOPE_JOB_ID` (`rankscope run --job`, or the user): always wins.
//! 2. torchrun's `TORCHELASTIC_RUN_ID` unless it is `none`. It is the
//!    `--rdzv-id` given to every node. torchrun's default is `none` (the
//!    `--rdzv-id` argument of `torch/distributed/run.py`), the same for every
//!    launch, so it names nothing. torchrun replaces it by a fresh
//!    `uuid.uuid4()` itself only for `--standalone` and for a static
//!    rendezvous without endpoint or master port whose `--nnodes` max is 1
//!    (`run()` in the same file, torch 2.15): both are single-node, so that
//!    random id is the same for all ranks of the launch and new per launch.
//! 3. Slurm's `SLURM_JOB_ID`.
//! 4. Kubernetes, where each pod is a node of the job:
//!    * JobSet (kubernetes-sigs/jobset, also Kubeflow Trainer v2's
//!      TrainJob): the pod label / annotation `jobset.sigs.k8s.io/jobset-name`,
//!      or `JOBSET_NAME`, the name JobSet's own examples give it through the
//!      downward API (`fieldRef: metadata.annotations['jobset.sigs.k8s.io/jobset-name']`);
//!      Trainer v2 sets `PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>`;
//!    * Kubeflow Training Operator (PyTorchJob) and MPI Operator (MPIJob):
//!      the pod label `training.kubeflow.org/job-name`; without the labels
//!      file, PyTorchJob's `PET_MASTER_ADDR` / `MASTER_ADDR`, which it sets to
//!      `<job>-master-0` (`replicaName(job.Name, Master, 0)` in the training
//!      operator's `pytorch/master.go`), and for the MPI Operator (which sets
//!      `OMPI_MCA_orte_default_hostfile` for mpirun) the pod's host name,
//!      `<job>-launcher[-<suffix>]` or `<job>-worker-<i>`;
//!    * a plain Kubernetes Job: the pod label `job-name`.
//! 5. `RANKSCOPE_LAUNCH_ID` (`rankscope run`'s `<script>-<unix s>-<pid>`),
//!    when the whole world runs on this node (`WORLD_SIZE` unset or 1, or equal to
//!    `LOCAL_WORLD_SIZE`, or torchrun's `GROUP_WORLD_SIZE` is 1): one
//!    launcher started every rank, so it is shared and new per launch.
//!    Without `rankscope run` (a bare `rankscope.init()` under a single-node
//!    torchrun that gave no `--rdzv-id`), torchrun's own per-launch log
//!    directory names the launch: every worker's `TORCHELASTIC_ERROR_FILE`
//!    is `<log dir>/<run id>_<random>/attempt_<n>/<local rank>/error.json`,
//!    the `<run id>_<random>` directory made once per launch by
//!    `tempfile.mkdtemp(prefix=f"{run_id}_")` (torch
//!    `distributed/elastic/multiprocessing/api.py`, `_make_log_dir`), so
//!    the job is `torchrun-<run id>_<random>` (the random part may hold
//!    `_` itself, so the directory's whole name is kept): shared by the launch's workers (and
//!    its restarts), new per launch. A multi-node world never uses it: each
//!    node's launcher makes its own directory.
//! 6. Last resort for a multi-node world with none of the above:
//!    `rdzv-<MASTER_ADDR>-<MASTER_PORT>`. What all nodes of such a launch
//!    share is the rendezvous: torchrun hands every worker the same master
//!    address and port (with c10d the rendezvous store's endpoint, with the
//!    static backend `--master-addr`/`--master-port`). No start time is
//!    shared in the environment (each node's launcher has only its own
//!    clock, and rounding it splits launches that straddle a boundary), so
//!    the limit is: a later launch that reuses the same master endpoint gets
//!    the same id. Name such launches with `--rdzv-id` or `--job`.
//! 7. `RANKSCOPE_LAUNCH_ID` of a multi-node world without a master address
//!    (one job per node), else the pod name `POD_NAME`.

use std::collections::BTreeMap;

/// What named a job; in precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobSource {
    /// `RANKSCOPE_JOB_ID`.
    Explicit,
    /// torchrun's `TORCHELASTIC_RUN_ID`.
    Torchrun,
    /// `SLURM_JOB_ID`.
    Slurm,
    /// A JobSet (or Kubeflow Trainer v2 TrainJob) name.
    JobSet,
    /// A Kubeflow PyTorchJob or MPIJob name.
    Kubeflow,
    /// A Kubernetes Job's name (pod label `job-name`).
    KubernetesJob,
    /// `rankscope run`'s per-launch id, or torchrun's per-launch log
    /// directory on a single node.
    Launch,
    /// The rendezvous endpoint `MASTER_ADDR:MASTER_PORT`.
    Rendezvous,
    /// The pod name.
    Pod,
}

/// torchrun's default `--rdzv-id`, shared by every launch that gives none.
pub const TORCHRUN_DEFAULT_RUN_ID: &str = "none";

/// The job id of the process whose environment is `get` (empty values count
/// as unset) and whose pod carries `pod` labels; see the module docs.
pub fn job_id(
    get: impl Fn(&str) -> Option<String>,
    pod: &BTreeMap<String, String>,
) -> Option<(String, JobSource)> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u32>().ok());
    let label = |k: &str| pod.get(k).filter(|v| !v.is_empty()).cloned();
    let with = |s: JobSource| move |j: String| (j, s);
    if let Some(j) = get("RANKSCOPE_JOB_ID") {
        return Some((j, JobSource::Explicit));
    }
    if let Some(j) = get("TORCHELASTIC_RUN_ID").filter(|r| r != TORCHRUN_DEFAULT_RUN_ID) {
        return Some((j, JobSource::Torchrun));
    }
    if let Some(j) = get("SLURM_JOB_ID") {
        return Some((j, JobSource::Slurm));
    }
    let kubernetes = label("jobset.sigs.k8s.io/jobset-name")
        .or_else(|| get("JOBSET_NAME"))
        .or_else(|| get("PET_MASTER_ADDR").and_then(|a| trainer_v2_job(&a)))
        .map(with(JobSource::JobSet))
        .or_else(|| {
            label("training.kubeflow.org/job-name")
                .or_else(|| get("PET_MASTER_ADDR").and_then(|a| pytorchjob_master(&a)))
                .or_else(|| get("MASTER_ADDR").and_then(|a| pytorchjob_master(&a)))
                .or_else(|| {
                    get("OMPI_MCA_orte_default_hostfile")?;
                    get("HOSTNAME")
                        .or_else(|| get("POD_NAME"))
                        .and_then(|h| mpijob_host(&h))
                })
                .map(with(JobSource::Kubeflow))
        })
        .or_else(|| label("job-name").map(with(JobSource::KubernetesJob)));
    if kubernetes.is_some() {
        return kubernetes;
    }
    let launch = get("RANKSCOPE_LAUNCH_ID").map(with(JobSource::Launch));
    let world = num("WORLD_SIZE");
    let one_node = world.is_none()
        || world == Some(1)
        || world == num("LOCAL_WORLD_SIZE")
        || num("GROUP_WORLD_SIZE") == Some(1);
    if one_node && launch.is_some() {
        return launch;
    }
    if one_node {
        if let Some(j) = get("TORCHELASTIC_ERROR_FILE").and_then(|f| torchrun_log_dir_id(&f)) {
            return Some((j, JobSource::Launch));
        }
    }
    if let (Some(addr), Some(port)) = (get("MASTER_ADDR"), get("MASTER_PORT")) {
        if !one_node {
            return Some((
                format!("rdzv-{}-{}", addr.trim(), port.trim()),
                JobSource::Rendezvous,
            ));
        }
    }
    launch.or_else(|| get("POD_NAME").map(with(JobSource::Pod)))
}

/// `<log dir>/<run id>_<random>/attempt_<n>/<local rank>/error.json`
/// (torchrun's worker error file) -> `torchrun-<run id>_<random>`.
fn torchrun_log_dir_id(error_file: &str) -> Option<String> {
    let mut parts = error_file.trim().rsplit('/');
    let (file, _local, attempt, launch) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if file != "error.json" || !attempt.starts_with("attempt_") {
        return None;
    }
    launch.contains('_').then(|| format!("torchrun-{launch}"))
}

/// The first DNS label of a host name.
fn host_label(addr: &str) -> &str {
    addr.trim().split('.').next().unwrap_or("")
}

/// `<job>-master-0` (PyTorchJob's master replica) -> `<job>`.
fn pytorchjob_master(addr: &str) -> Option<String> {
    host_label(addr)
        .strip_suffix("-master-0")
        .filter(|j| !j.is_empty())
        .map(str::to_owned)
}

/// `<job>-node-0-0.<job>` (Kubeflow Trainer v2's first node, a JobSet pod
/// behind the headless service named after the TrainJob) -> `<job>`.
fn trainer_v2_job(addr: &str) -> Option<String> {
    let mut labels = addr.trim().split('.');
    let (first, service) = (labels.next()?, labels.next()?);
    (first.strip_suffix("-node-0-0")? == service && !service.is_empty()).then(|| service.to_owned())
}

/// `<job>-worker-<i>` or `<job>-launcher[-<suffix>]` (MPI Operator pods) -> `<job>`.
fn mpijob_host(host: &str) -> Option<String> {
    let host = host_label(host);
    let worker = host.rsplit_once("-worker-").and_then(|(job, i)| {
        (!i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())).then_some(job)
    });
    let launcher = || {
        host.strip_suffix("-launcher").or_else(|| {
            let (job, suffix) = host.rsplit_once("-launcher-")?;
            (!suffix.contains('-')).then_some(job)
        })
    };
    worker
        .or_else(launcher)
        .filter(|j| !j.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
