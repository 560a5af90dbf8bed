//! Processes and the machine, seen through `/proc` and `wait4`.
//!
//! In: pids of running processes, commands to spawn. Out: CPU seconds
//! (user + system), peak and current RSS, exit status with the rusage of a
//! reaped child, free ports, and [`Machine`] facts for RESULTS.md.
//!
//! Invariants: children are spawned with `PR_SET_PDEATHSIG(SIGKILL)` (they die
//! with the benchmark); a child reaped by [`try_reap`] must not be waited on
//! again through `std::process::Child`.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::BenchError;

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// User + system CPU seconds a live process has used so far.
pub fn cpu_s(pid: u32) -> Result<f64, BenchError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(BenchError::io(format!("read {path}")))?;
    // The command name may hold spaces; fields resume after the last ')'.
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| BenchError::parse(&path, "no ')'"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let field = |i: usize| -> Result<f64, BenchError> {
        fields
            .get(i)
            .and_then(|s| s.parse::<u64>().ok())
            .map(|v| v as f64)
            .ok_or_else(|| BenchError::parse(&path, format!("field {}", i + 3)))
    };
    Ok((field(11)? + field(12)?) / ticks_per_s())
}

/// CPU seconds the live threads of a process have run, from
/// `/proc/<pid>/task/*/schedstat` (nanosecond resolution; threads that
/// already exited are not counted, so use it for windows over stable
/// threads, e.g. an idle daemon).
pub fn cpu_s_precise(pid: u32) -> Result<f64, BenchError> {
    let dir = format!("/proc/{pid}/task");
    let mut ns: u64 = 0;
    for entry in std::fs::read_dir(&dir).map_err(BenchError::io(format!("read {dir}")))? {
        let path = entry
            .map_err(BenchError::io("task entry"))?
            .path()
            .join("schedstat");
        // A thread may exit between listing and reading.
        if let Ok(text) = std::fs::read_to_string(&path) {
            ns += text
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(ns as f64 / 1e9)
}

/// A `kB` line of `/proc/<pid>/status` (`VmHWM`, `VmRSS`), in MiB.
pub fn status_mib(pid: u32, key: &str) -> Result<f64, BenchError> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(BenchError::io(format!("read {path}")))?;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix(key).and_then(|r| r.strip_prefix(':')) {
            let kib: f64 = v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .map_err(|e| BenchError::parse(format!("{path} {key}"), e))?;
            return Ok(kib / 1024.0);
        }
    }
    Err(BenchError::parse(&path, format!("no {key} line")))
}

/// Peak resident set size of a live process, MiB.
pub fn peak_rss_mib(pid: u32) -> Result<f64, BenchError> {
    status_mib(pid, "VmHWM")
}

/// Spawns `cmd` so that the child is killed when this process dies.
pub fn spawn(cmd: &mut Command) -> Result<Child, BenchError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    // SAFETY: prctl is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(BenchError::io(format!("spawn {program}")))
}

/// How a reaped child ended and what it cost.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    pub status: ExitStatus,
    /// User + system CPU seconds of the child (and its reaped children).
    pub cpu_s: f64,
    /// Its peak RSS, MiB.
    pub max_rss_mib: f64,
}

/// Reaps `pid` if it has exited (`WNOHANG`), with its rusage.
pub fn try_reap(pid: u32) -> Result<Option<Reaped>, BenchError> {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals; pid is our child.
    let rc = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut usage) };
    if rc < 0 {
        return Err(BenchError::io(format!("wait4 {pid}"))(
            std::io::Error::last_os_error(),
        ));
    }
    if rc == 0 {
        return Ok(None);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Some(Reaped {
        status: ExitStatus::from_raw(status),
        cpu_s: tv(usage.ru_utime) + tv(usage.ru_stime),
        max_rss_mib: usage.ru_maxrss as f64 / 1024.0,
    }))
}

/// Waits (polling every `poll`) until `pid` exits, at most `limit`.
pub fn reap_blocking(pid: u32, limit: Duration, what: &str) -> Result<Reaped, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(r) = try_reap(pid)? {
            return Ok(r);
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: what.to_owned(),
                secs: limit.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends `signal` to `pid`.
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill has no memory preconditions; a stale pid only fails.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// SIGTERM, then SIGKILL after `grace`; waits for the exit.
pub fn terminate(child: &mut Child, grace: Duration) -> Result<ExitStatus, BenchError> {
    signal(child.id(), libc::SIGTERM);
    let deadline = Instant::now() + grace;
    loop {
        if let Some(st) = child
            .try_wait()
            .map_err(BenchError::io("wait for a child"))?
        {
            return Ok(st);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            return child.wait().map_err(BenchError::io("wait for a child"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A loopback TCP port that was free a moment ago.
pub fn free_port() -> Result<u16, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(BenchError::io("bind :0"))?;
    Ok(l.local_addr().map_err(BenchError::io("local_addr"))?.port())
}

/// Jiffies of all CPUs from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default)]
pub struct MachineCpu {
    pub total: u64,
    pub idle: u64,
    pub iowait: u64,
}

impl MachineCpu {
    /// Busy share of all CPU time since `earlier`, %.
    pub fn busy_pct_since(&self, earlier: &MachineCpu) -> f64 {
        let total = self.total.saturating_sub(earlier.total) as f64;
        let idle = (self.idle + self.iowait).saturating_sub(earlier.idle + earlier.iowait) as f64;
        100.0 * (total - idle) / total.max(1.0)
    }

    /// I/O-wait share of all CPU time since `earlier`, %.
    pub fn iowait_pct_since(&self, earlier: &MachineCpu) -> f64 {
        let total = self.total.saturating_sub(earlier.total) as f64;
        100.0 * self.iowait.saturating_sub(earlier.iowait) as f64 / total.max(1.0)
    }
}

/// The machine-wide CPU counters now.
pub fn machine_cpu() -> Result<MachineCpu, BenchError> {
    let text = std::fs::read_to_string("/proc/stat").map_err(BenchError::io("read /proc/stat"))?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| BenchError::parse("/proc/stat", "no cpu line"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return Err(BenchError::parse("/proc/stat", "short cpu line"));
    }
    // user nice system idle iowait irq softirq steal (guest is inside user).
    Ok(MachineCpu {
        total: v.iter().take(8).sum(),
        idle: v[3],
        iowait: v[4],
    })
}

/// The machine the figures were taken on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub cpu_model: String,
    pub kernel: String,
    pub clickhouse_version: String,
}

impl Machine {
    /// Reads `/proc`; `clickhouse_version` is filled in by the caller.
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|r| r.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        Machine {
            cores,
            memory_gib,
            cpu_model,
            kernel,
            clickhouse_version: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_has_cpu_and_rss() {
        let pid = std::process::id();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(cpu_s(pid).unwrap() >= 0.0);
        assert!(cpu_s_precise(pid).unwrap() > 0.0);
        let rss = status_mib(pid, "VmRSS").unwrap();
        assert!(rss > 0.1, "{rss}");
        assert!(peak_rss_mib(pid).unwrap() >= rss);
    }

    #[test]
    #[allow(clippy::zombie_processes)] // reaped with wait4 by reap_blocking
    fn reaped_child_reports_its_status() {
        let child = spawn(Command::new("sh").args(["-c", "exit 3"])).unwrap();
        let r = reap_blocking(child.id(), Duration::from_secs(10), "sh").unwrap();
        assert_eq!(r.status.code(), Some(3));
        assert!(r.cpu_s >= 0.0);
    }
}
