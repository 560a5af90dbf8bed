//! `rankscope run [--agent URL] [--job J] -- COMMAND...`: runs a training
//! command with every Python process it starts instrumented, with no change
//! to the script.
//!
//! In: the command line. Out: the command itself, `exec`'d in place of this
//! process (so signals, the terminal and the exit status are the
//! command's), with this environment added:
//! * `PYTHONPATH` starts with a directory holding rankscope's
//!   `sitecustomize.py` (embedded in this binary, written once per content
//!   under `$XDG_CACHE_HOME/rankscope` or `~/.cache/rankscope`, else the
//!   temp dir). Python runs it at start-up in every process — `torchrun`
//!   workers, `torch.multiprocessing.spawn` children — and it instruments
//!   the process when it imports torch (`rankscope.torch.instrument()`);
//!   it first runs any `sitecustomize` it shadows;
//! * `RANKSCOPE_AUTO=1`, `RANKSCOPE_AGENT` (from `--agent`, when given);
//! * `RANKSCOPE_JOB_ID` from `--job` (kept when already set): it always
//!   names the job;
//! * otherwise `RANKSCOPE_LAUNCH_ID=<script>-<unix seconds>-<pid>` (kept when
//!   already set). The job id is decided in each rank by
//!   `rankscope_proto::attribution::job_id`, from the environment the
//!   launcher (torchrun, Slurm, Kubernetes) gave it: torchrun's `--rdzv-id`
//!   exists only in the workers, and each node's `rankscope run` has its own
//!   pid and clock, so a launch id made here is shared by the ranks of this
//!   node only. It names the job when the whole world runs on this node.
//!
//! The Python interpreter the command runs must have the `rankscope`
//! package installed (`make py` builds it); otherwise its sitecustomize
//! says so on stderr and the command runs uninstrumented.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The sitecustomize every instrumented Python process runs.
pub const SITECUSTOMIZE: &str = include_str!("../../python/rankscope/_launch/sitecustomize.py");

/// What `rankscope run` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub agent: Option<String>,
    pub job: Option<String>,
    pub command: Vec<OsString>,
}

/// Why the command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no command given: rankscope run [--agent URL] [--job J] -- COMMAND [ARGS...]")]
    NoCommand,
    #[error(transparent)]
    Url(#[from] rankscope_sdk::connect::UrlError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run {program:?}: {source}")]
    Exec {
        program: OsString,
        source: std::io::Error,
    },
}

/// The environment `rankscope run` adds for `opts`, given the current
/// environment and the directory holding the sitecustomize.
pub fn environment(
    opts: &RunOptions,
    site_dir: &Path,
    env: impl Fn(&str) -> Option<OsString>,
    now_s: u64,
    pid: u32,
) -> Vec<(String, OsString)> {
    let mut out = Vec::new();
    let mut path = site_dir.as_os_str().to_owned();
    if let Some(old) = env("PYTHONPATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    out.push(("PYTHONPATH".to_owned(), path));
    out.push(("RANKSCOPE_AUTO".to_owned(), "1".into()));
    if let Some(agent) = &opts.agent {
        out.push(("RANKSCOPE_AGENT".to_owned(), agent.into()));
    }
    let named = |k: &str| env(k).is_some_and(|v| !v.is_empty());
    if let Some(job) = &opts.job {
        out.push(("RANKSCOPE_JOB_ID".to_owned(), job.into()));
    } else if !named("RANKSCOPE_JOB_ID") && !named("RANKSCOPE_LAUNCH_ID") {
        out.push((
            "RANKSCOPE_LAUNCH_ID".to_owned(),
            generated_job_id(&opts.command, now_s, pid).into(),
        ));
    }
    out
}

/// `<script stem>-<unix seconds>-<pid>`: the first `*.py` argument's stem,
/// else the program's file name.
pub fn generated_job_id(command: &[OsString], now_s: u64, pid: u32) -> String {
    let script = command
        .iter()
        .map(Path::new)
        .find(|p| p.extension().is_some_and(|e| e == "py"))
        .or_else(|| command.first().map(Path::new));
    let stem = script
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "job".to_owned());
    format!("{stem}-{now_s}-{pid}")
}

/// Writes the sitecustomize (once per content) and returns its directory.
pub fn site_dir() -> Result<PathBuf, LaunchError> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("rankscope");
    // Content-addressed: concurrent launches of the same version agree.
    let hash = SITECUSTOMIZE
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    let dir = base.join(format!("launch-{hash:016x}"));
    let file = dir.join("sitecustomize.py");
    if std::fs::read_to_string(&file).is_ok_and(|s| s == SITECUSTOMIZE) {
        return Ok(dir);
    }
    let write_err = |path: &Path| {
        let path = path.to_owned();
        move |source| LaunchError::Write { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(write_err(&dir))?;
    let tmp = dir.join(format!("sitecustomize.py.{}", std::process::id()));
    std::fs::write(&tmp, SITECUSTOMIZE).map_err(write_err(&tmp))?;
    std::fs::rename(&tmp, &file).map_err(write_err(&file))?;
    Ok(dir)
}

/// Replaces this process with the instrumented command; returns only on error.
pub fn exec(opts: &RunOptions) -> LaunchError {
    let Some((program, args)) = opts.command.split_first() else {
        return LaunchError::NoCommand;
    };
    if let Some(agent) = &opts.agent {
        if let Err(e) = rankscope_sdk::connect::Target::parse(agent) {
            return e.into();
        }
    }
    let dir = match site_dir() {
        Ok(d) => d,
        Err(e) => return e,
    };
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let vars = environment(
        opts,
        &dir,
        |k| std::env::var_os(k),
        now_s,
        std::process::id(),
    );
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    for (k, v) in &vars {
        cmd.env(k, v);
    }
    let var = |k: &str| {
        vars.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .or_else(|| std::env::var(k).ok())
            .filter(|v| !v.is_empty())
    };
    // What the ranks will decide, as far as this process can tell: torchrun
    // adds its run id and world only in its workers.
    let job = match rankscope_proto::attribution::job_id(var, &Default::default()) {
        Some((j, rankscope_proto::attribution::JobSource::Launch)) => {
            format!("{j} (unless the ranks' torchrun --rdzv-id, Slurm or Kubernetes name one)")
        }
        Some((j, _)) => j,
        None => "from the ranks' environment".to_owned(),
    };
    eprintln!(
        "rankscope: job {job}, agent {}",
        opts.agent
            .clone()
            .or_else(|| std::env::var("RANKSCOPE_AGENT").ok())
            .unwrap_or_else(|| format!(
                "unix:{}",
                rankscope_proto::default_agent_socket_path().display()
            ))
    );
    let source = cmd.exec();
    LaunchError::Exec {
        program: program.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn environment_prepends_the_site_dir_and_names_the_job() {
        let opts = RunOptions {
            agent: Some("unix:/run/a.sock".into()),
            job: None,
            command: os(&["torchrun", "--nproc-per-node", "4", "train.py"]),
        };
        let env = |k: &str| (k == "PYTHONPATH").then(|| OsString::from("/x"));
        let vars = environment(&opts, Path::new("/site"), env, 1700, 42);
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("PYTHONPATH").as_deref(), Some("/site:/x"));
        assert_eq!(get("RANKSCOPE_AUTO").as_deref(), Some("1"));
        assert_eq!(get("RANKSCOPE_AGENT").as_deref(), Some("unix:/run/a.sock"));
        assert_eq!(get("RANKSCOPE_LAUNCH_ID").as_deref(), Some("train-1700-42"));
        assert_eq!(get("RANKSCOPE_JOB_ID"), None, "the ranks decide the job");
    }

    #[test]
    fn an_explicit_job_or_an_outer_launch_id_is_kept() {
        let opts = RunOptions {
            command: os(&["python", "t.py"]),
            ..Default::default()
        };
        let outer = |k: &str| (k == "RANKSCOPE_LAUNCH_ID").then(|| OsString::from("o-1-2"));
        let vars = environment(&opts, Path::new("/s"), outer, 1, 1);
        assert!(!vars
            .iter()
            .any(|(k, _)| k.starts_with("RANKSCOPE_L") || k == "RANKSCOPE_JOB_ID"));
        let named = |k: &str| (k == "RANKSCOPE_JOB_ID").then(|| OsString::from("user"));
        let vars = environment(&opts, Path::new("/s"), named, 1, 1);
        assert!(!vars
            .iter()
            .any(|(k, _)| k.starts_with("RANKSCOPE_L") || k == "RANKSCOPE_JOB_ID"));
        let opts = RunOptions {
            job: Some("mine".into()),
            ..opts
        };
        let vars = environment(&opts, Path::new("/s"), outer, 1, 1);
        assert!(vars
            .iter()
            .any(|(k, v)| k == "RANKSCOPE_JOB_ID" && v == "mine"));
    }

    #[test]
    fn generated_ids_name_the_script_or_the_program() {
        assert_eq!(
            generated_job_id(&os(&["python", "-u", "x/ddp.py"]), 5, 9),
            "ddp-5-9"
        );
        assert_eq!(generated_job_id(&os(&["./trainer"]), 5, 9), "trainer-5-9");
    }

    #[test]
    fn no_command_or_a_bad_agent_url_is_an_error() {
        assert!(matches!(
            exec(&RunOptions::default()),
            LaunchError::NoCommand
        ));
        let e = exec(&RunOptions {
            agent: Some("ftp://x".into()),
            command: os(&["true"]),
            ..Default::default()
        });
        assert!(e.to_string().contains("ftp://x"), "{e}");
    }
}
