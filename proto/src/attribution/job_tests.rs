//! Table tests of the job id order over environment maps.

use super::*;
use JobSource::*;

fn run(env: &[(&str, &str)], labels: &[(&str, &str)]) -> Option<(String, JobSource)> {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    job_id(|k| env.get(k).cloned(), &labels)
}

/// A torchrun worker of node `node_rank` of a 2-node, 2-process launch.
const TORCHRUN_2X2: &[(&str, &str)] = &[
    ("RANK", "2"),
    ("LOCAL_RANK", "0"),
    ("WORLD_SIZE", "4"),
    ("LOCAL_WORLD_SIZE", "2"),
    ("GROUP_WORLD_SIZE", "2"),
    ("MASTER_ADDR", "node0.cluster"),
    ("MASTER_PORT", "29400"),
];

fn with(
    base: &[(&'static str, &'static str)],
    more: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<_> = base
        .iter()
        .filter(|(k, _)| !more.iter().any(|(m, _)| m == k))
        .copied()
        .collect();
    v.extend_from_slice(more);
    v
}

/// Name, environment, pod labels, expected job id and source.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<(&'static str, &'static str)>,
    Option<(&'static str, JobSource)>,
);

#[test]
fn the_order_of_sources() {
    let launch = ("RANKSCOPE_LAUNCH_ID", "ddp-1700-42");
    let cases: Vec<Case> = vec![
        (
            "explicit beats everything",
            with(
                TORCHRUN_2X2,
                &[
                    ("RANKSCOPE_JOB_ID", "mine"),
                    ("TORCHELASTIC_RUN_ID", "r"),
                    ("SLURM_JOB_ID", "7"),
                    launch,
                ],
            ),
            vec![("job-name", "k")],
            Some(("mine", Explicit)),
        ),
        (
            "an empty RANKSCOPE_JOB_ID is unset",
            with(
                TORCHRUN_2X2,
                &[("RANKSCOPE_JOB_ID", ""), ("TORCHELASTIC_RUN_ID", "r")],
            ),
            vec![],
            Some(("r", Torchrun)),
        ),
        (
            "the rdzv id names a multi-node launch on every node",
            with(TORCHRUN_2X2, &[("TORCHELASTIC_RUN_ID", "mn-77"), launch]),
            vec![],
            Some(("mn-77", Torchrun)),
        ),
        (
            "torchrun's run id beats Slurm's job id",
            with(
                TORCHRUN_2X2,
                &[("TORCHELASTIC_RUN_ID", "mn-77"), ("SLURM_JOB_ID", "4242")],
            ),
            vec![],
            Some(("mn-77", Torchrun)),
        ),
        (
            "torchrun's default run id names nothing: Slurm",
            with(
                TORCHRUN_2X2,
                &[
                    ("TORCHELASTIC_RUN_ID", "none"),
                    ("SLURM_JOB_ID", "4242"),
                    launch,
                ],
            ),
            vec![],
            Some(("4242", Slurm)),
        ),
        (
            "single-node torchrun without --rdzv-id: its generated uuid",
            vec![
                (
                    "TORCHELASTIC_RUN_ID",
                    "1b4e28ba-2fa1-41d2-883f-0016d3cca427",
                ),
                ("WORLD_SIZE", "2"),
                ("LOCAL_WORLD_SIZE", "2"),
                launch,
            ],
            vec![],
            Some(("1b4e28ba-2fa1-41d2-883f-0016d3cca427", Torchrun)),
        ),
        (
            "single node, run id none (static, --master-port given): the launch id",
            vec![
                ("TORCHELASTIC_RUN_ID", "none"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29500"),
                launch,
            ],
            vec![],
            Some(("ddp-1700-42", Launch)),
        ),
        (
            "multi-node, run id none: the rendezvous endpoint, not the per-node launch id",
            with(TORCHRUN_2X2, &[("TORCHELASTIC_RUN_ID", "none"), launch]),
            vec![],
            Some(("rdzv-node0.cluster-29400", Rendezvous)),
        ),
        (
            "no world size (spawn, plain python): the launch id",
            vec![
                launch,
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29500"),
            ],
            vec![],
            Some(("ddp-1700-42", Launch)),
        ),
        (
            "GROUP_WORLD_SIZE 1 is one node",
            vec![
                ("WORLD_SIZE", "4"),
                ("GROUP_WORLD_SIZE", "1"),
                ("MASTER_ADDR", "a"),
                ("MASTER_PORT", "1"),
                launch,
            ],
            vec![],
            Some(("ddp-1700-42", Launch)),
        ),
        (
            "multi-node without a master address: the per-node launch id",
            vec![("WORLD_SIZE", "4"), ("LOCAL_WORLD_SIZE", "2"), launch],
            vec![],
            Some(("ddp-1700-42", Launch)),
        ),
        (
            "JobSet label",
            with(TORCHRUN_2X2, &[("TORCHELASTIC_RUN_ID", "none"), launch]),
            vec![
                ("jobset.sigs.k8s.io/jobset-name", "llama-js"),
                ("job-name", "llama-js-workers-0"),
            ],
            Some(("llama-js", JobSet)),
        ),
        (
            "JobSet name from the downward API env",
            with(TORCHRUN_2X2, &[("JOBSET_NAME", "llama-js"), launch]),
            vec![],
            Some(("llama-js", JobSet)),
        ),
        (
            "Kubeflow Trainer v2 TrainJob's master address",
            with(
                TORCHRUN_2X2,
                &[("PET_MASTER_ADDR", "tj-1-node-0-0.tj-1"), launch],
            ),
            vec![],
            Some(("tj-1", JobSet)),
        ),
        (
            "PyTorchJob label",
            with(TORCHRUN_2X2, &[launch]),
            vec![
                ("training.kubeflow.org/job-name", "bert"),
                ("job-name", "x"),
            ],
            Some(("bert", Kubeflow)),
        ),
        (
            "PyTorchJob master address (torchrun replaced MASTER_ADDR)",
            with(
                TORCHRUN_2X2,
                &[("PET_MASTER_ADDR", "bert-master-0"), launch],
            ),
            vec![],
            Some(("bert", Kubeflow)),
        ),
        (
            "PyTorchJob without torchrun: MASTER_ADDR",
            vec![
                ("RANK", "3"),
                ("WORLD_SIZE", "8"),
                ("MASTER_ADDR", "bert-master-0"),
                ("MASTER_PORT", "23456"),
            ],
            vec![],
            Some(("bert", Kubeflow)),
        ),
        (
            "MPI Operator worker",
            vec![
                ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
                ("HOSTNAME", "resnet-worker-3"),
            ],
            vec![],
            Some(("resnet", Kubeflow)),
        ),
        (
            "MPI Operator launcher pod",
            vec![
                ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
                ("HOSTNAME", "resnet-launcher-x7k2p"),
            ],
            vec![],
            Some(("resnet", Kubeflow)),
        ),
        (
            "a worker-like host name without the MPI hostfile is no MPIJob",
            vec![("HOSTNAME", "resnet-worker-3"), launch],
            vec![],
            Some(("ddp-1700-42", Launch)),
        ),
        (
            "a Kubernetes Job",
            vec![("POD_NAME", "train-abc")],
            vec![("job-name", "train")],
            Some(("train", KubernetesJob)),
        ),
        (
            "the pod name last",
            vec![("POD_NAME", "train-abc")],
            vec![],
            Some(("train-abc", Pod)),
        ),
        (
            "a bare init() under a single-node torchrun without --rdzv-id: its log directory",
            vec![
                ("TORCHELASTIC_RUN_ID", "none"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29611"),
                (
                    "TORCHELASTIC_ERROR_FILE",
                    "/tmp/torchelastic_da9yspuo/none_j4a5_j82/attempt_0/1/error.json",
                ),
            ],
            vec![],
            Some(("torchrun-none_j4a5_j82", Launch)),
        ),
        (
            "rankscope run's launch id beats torchrun's log directory",
            vec![
                ("TORCHELASTIC_RUN_ID", "none"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_WORLD_SIZE", "2"),
                launch,
                (
                    "TORCHELASTIC_ERROR_FILE",
                    "/tmp/torchelastic_da9yspuo/none_j4a5_j82/attempt_0/1/error.json",
                ),
            ],
            vec![],
            Some(("ddp-1700-42", Launch)),
        ),
        (
            "a multi-node world never takes a node's log directory",
            with(
                TORCHRUN_2X2,
                &[(
                    "TORCHELASTIC_ERROR_FILE",
                    "/tmp/torchelastic_x/none_ab12/attempt_0/0/error.json",
                )],
            ),
            vec![],
            Some(("rdzv-node0.cluster-29400", Rendezvous)),
        ),
        (
            "an error file of another shape names nothing",
            vec![
                ("WORLD_SIZE", "1"),
                ("TORCHELASTIC_ERROR_FILE", "/var/log/my-error.json"),
            ],
            vec![],
            None,
        ),
        ("nothing", vec![("RANK", "0")], vec![], None),
    ];
    for (name, env, labels, want) in cases {
        let got = run(&env, &labels);
        assert_eq!(got.as_ref().map(|(j, s)| (j.as_str(), *s)), want, "{name}");
    }
}

#[test]
fn the_nodes_of_one_launch_agree_and_two_launches_differ() {
    // Node 0 and node 1 of one torchrun launch with --rdzv-id, each under
    // its own `rankscope run` (so different launch ids).
    let node = |launch: &'static str, rank: &'static str| {
        with(
            TORCHRUN_2X2,
            &[
                ("TORCHELASTIC_RUN_ID", "mn-1"),
                ("RANKSCOPE_LAUNCH_ID", launch),
                ("RANK", rank),
            ],
        )
    };
    assert_eq!(
        run(&node("a-1-10", "0"), &[]),
        run(&node("a-1-20", "3"), &[])
    );
    // Two single-node launches without --rdzv-id: torchrun's uuids differ,
    // and so do the launch ids where torchrun gave `none`.
    let single = |run_id: &'static str, launch: &'static str| {
        vec![
            ("TORCHELASTIC_RUN_ID", run_id),
            ("WORLD_SIZE", "2"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("RANKSCOPE_LAUNCH_ID", launch),
        ]
    };
    assert_ne!(
        run(&single("u-1", "t-5-1"), &[]),
        run(&single("u-2", "t-6-2"), &[])
    );
    assert_ne!(
        run(&single("none", "t-5-1"), &[]),
        run(&single("none", "t-6-2"), &[])
    );
}

#[test]
fn host_name_parsers() {
    assert_eq!(pytorchjob_master("j-master-0.ns.svc").as_deref(), Some("j"));
    assert_eq!(pytorchjob_master("-master-0"), None);
    assert_eq!(pytorchjob_master("j-master-1"), None);
    assert_eq!(trainer_v2_job("t-node-0-0.t.ns.svc").as_deref(), Some("t"));
    assert_eq!(trainer_v2_job("t-node-0-0.other"), None);
    assert_eq!(
        mpijob_host("m-worker-12.m-worker.ns.svc").as_deref(),
        Some("m")
    );
    assert_eq!(mpijob_host("m-launcher").as_deref(), Some("m"));
    assert_eq!(mpijob_host("m-worker-x"), None);
    assert_eq!(mpijob_host("m-launcher-a-b"), None);
}
