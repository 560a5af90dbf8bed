//! Who this process is: the rank identity from explicit arguments, else the
//! environment, by the same rules the agent uses for attribution
//! (`rankscope_proto::attribution`: torchrun's `RANK` / `WORLD_SIZE` /
//! `LOCAL_RANK`, Slurm's `SLURM_PROCID` / `SLURM_NTASKS` / `SLURM_LOCALID`,
//! job id by `attribution::job_id`: `RANKSCOPE_JOB_ID`, torchrun's run id,
//! `SLURM_JOB_ID`, Kubernetes, `rankscope run`'s launch id, the rendezvous).
//!
//! In: [`IdentityArgs`] and an environment lookup. Out: a complete
//! `RankIdentity`, or an [`IdentityError`] naming what is missing or wrong.

use rankscope_proto::attribution;
use rankscope_proto::v1 as proto;

/// What the caller said about itself; `None` = take it from the environment.
#[derive(Debug, Clone, Default)]
pub struct IdentityArgs {
    pub job_id: Option<String>,
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    pub local_rank: Option<u32>,
    pub run_id: Option<String>,
    pub labels: Vec<(String, String)>,
}

/// An identity that cannot be completed or is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("no job id: pass job_id, or run under `rankscope run`, torchrun with --rdzv-id, Slurm or Kubernetes (RANKSCOPE_JOB_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, JOBSET_NAME, ...)")]
    NoJobId,
    #[error("no rank / world size: pass rank and world_size, or run under torchrun (RANK, WORLD_SIZE) or Slurm (SLURM_PROCID, SLURM_NTASKS)")]
    NoRank,
    #[error("world_size is 0; it must be >= 1")]
    ZeroWorldSize,
    #[error("rank {rank} is out of range: it must be < world_size = {world_size}")]
    RankOutOfRange { rank: u32, world_size: u32 },
}

/// Completes `args` from `env` into an identity for process `pid`.
pub fn resolve(
    args: &IdentityArgs,
    env: impl Fn(&str) -> Option<String>,
    pid: u32,
) -> Result<proto::RankIdentity, IdentityError> {
    resolve_in_pod(args, env, None, pid)
}

/// [`resolve`] in a pod whose downward-API labels file holds `pod_labels`
/// (`attribution::POD_LABELS_PATH`): the same job id as the agent gives the
/// pod's daemon-mode traces (a JobSet or PyTorchJob named only by a label).
pub fn resolve_in_pod(
    args: &IdentityArgs,
    env: impl Fn(&str) -> Option<String>,
    pod_labels: Option<&str>,
    pid: u32,
) -> Result<proto::RankIdentity, IdentityError> {
    let a = attribution::from_env(&env, pod_labels);
    let job_id = args
        .job_id
        .clone()
        .filter(|j| !j.is_empty())
        .or(a.job_id.clone())
        .ok_or(IdentityError::NoJobId)?;
    let rank = args.rank.or(a.rank);
    let world_size = args.world_size.or(a.world_size);
    let (Some(rank), Some(world_size)) = (rank, world_size) else {
        return Err(IdentityError::NoRank);
    };
    if world_size == 0 {
        return Err(IdentityError::ZeroWorldSize);
    }
    if rank >= world_size {
        return Err(IdentityError::RankOutOfRange { rank, world_size });
    }
    let mut labels = a.labels;
    labels.extend(args.labels.iter().cloned());
    Ok(proto::RankIdentity {
        job_id,
        rank,
        world_size,
        local_rank: args.local_rank.or(a.local_rank).unwrap_or(0),
        node: String::new(),
        pid,
        run_id: args.run_id.clone().or(a.run_id).unwrap_or_default(),
        labels: labels.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn torchrun_environment_gives_the_identity() {
        let e = [
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ];
        let id = resolve(&IdentityArgs::default(), env(&e), 42).unwrap();
        assert_eq!(
            (id.job_id.as_str(), id.rank, id.world_size, id.local_rank),
            ("abc", 3, 4, 1)
        );
        assert_eq!((id.pid, id.run_id.as_str()), (42, "abc"));
    }

    #[test]
    fn explicit_values_and_rankscope_job_id_win() {
        let e = [
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("RANKSCOPE_JOB_ID", "launcher-job"),
            ("SLURM_JOB_ID", "77"),
        ];
        let id = resolve(&IdentityArgs::default(), env(&e), 1).unwrap();
        assert_eq!(id.job_id, "launcher-job");
        let args = IdentityArgs {
            job_id: Some("mine".into()),
            rank: Some(0),
            ..Default::default()
        };
        let id = resolve(&args, env(&e), 1).unwrap();
        assert_eq!((id.job_id.as_str(), id.rank), ("mine", 0));
    }

    #[test]
    fn a_pod_named_only_by_its_jobset_label_gets_the_agents_job_id() {
        let e = [
            ("RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
        ];
        let labels = "jobset.sigs.k8s.io/jobset-name=\"llm-7b\"\napp=\"trainer\"\n";
        let id = resolve_in_pod(&IdentityArgs::default(), env(&e), Some(labels), 1).unwrap();
        assert_eq!(id.job_id, "llm-7b");
        assert_eq!(
            resolve(&IdentityArgs::default(), env(&e), 1),
            Err(IdentityError::NoJobId)
        );
    }

    #[test]
    fn missing_or_inconsistent_values_are_named() {
        let none: [(&str, &str); 0] = [];
        assert_eq!(
            resolve(&IdentityArgs::default(), env(&none), 1),
            Err(IdentityError::NoJobId)
        );
        let job = [("RANKSCOPE_JOB_ID", "j")];
        assert_eq!(
            resolve(&IdentityArgs::default(), env(&job), 1),
            Err(IdentityError::NoRank)
        );
        let args = IdentityArgs {
            rank: Some(4),
            world_size: Some(4),
            ..Default::default()
        };
        let err = resolve(&args, env(&job), 1).unwrap_err();
        assert_eq!(
            err,
            IdentityError::RankOutOfRange {
                rank: 4,
                world_size: 4
            }
        );
        assert!(err.to_string().contains("rank 4"), "{err}");
    }
}
