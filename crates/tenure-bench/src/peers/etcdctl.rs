//! `etcdctl elect` (Debian's etcd-client): a leader-only command line tool.
//! It prints the election key and proposal once elected, resigns on SIGINT,
//! and its session TTL is etcd's default, 60 s (etcdctl 3.4 has no flag for it).

use std::time::Duration;

use tokio::process::Command;

use crate::figures::{Figure, Measure};
use crate::process::{trial, Markers, Stop};
use crate::tenure_measures::fresh_key;

/// The peer's name in the tables.
pub const NAME: &str = "etcdctl elect";
/// etcdctl's session TTL (concurrency.NewSession's default).
pub const TTL: Duration = Duration::from_secs(60);

/// The installed etcdctl's version, `None` if it is not installed.
pub fn version() -> Option<String> {
    let out = std::process::Command::new("etcdctl")
        .arg("version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().map(|l| l.trim().to_owned())
}

fn command(endpoints: &[String], name: &str) -> Command {
    let mut c = Command::new("etcdctl");
    c.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .arg("elect")
        .arg(name)
        .arg(format!("p{}", std::process::id()));
    c
}

const LINES: Markers = Markers {
    ready: "",
    leading: "",
    settle: Duration::from_millis(500),
};

/// Hand-over (SIGINT → resign) or crash failover (SIGKILL; minus the 60 s TTL).
pub async fn measure(label: &str, endpoints: &[String], stop: Stop, trials: usize) -> Figure {
    let measure = match stop {
        Stop::Interrupt => Measure::Handover,
        Stop::Kill => Measure::Failover,
    };
    if version().is_none() {
        return Figure::missing(measure, label, NAME, "not available: etcdctl not installed");
    }
    if trials == 0 {
        return Figure::missing(
            measure,
            label,
            NAME,
            "not run in this mode: its session TTL is fixed at 60 s, a trial takes over a minute",
        );
    }
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    for _ in 0..trials {
        let name = fresh_key("etcdctl");
        let limit = TTL + Duration::from_secs(15);
        match trial(|| command(endpoints, &name), LINES, stop, limit).await {
            Ok(d) if stop == Stop::Kill => {
                samples.push((d.as_secs_f64() - TTL.as_secs_f64()) * 1000.0)
            }
            Ok(d) => samples.push(d.as_secs_f64() * 1000.0),
            Err(e) => errors.push(e),
        }
    }
    let mut f = Figure::new(measure, label, NAME);
    f.set_ms(&samples);
    if stop == Stop::Kill {
        f.ttl_ms = Some(TTL.as_secs_f64() * 1000.0);
        f = f.with_note("TTL 60 s (etcdctl's fixed session TTL)");
    } else {
        f = f.with_note("includes signal delivery and the process's own exit path");
    }
    if let Some(e) = errors.first() {
        f = f.with_note(format!("{} trials failed: {e}", errors.len()));
    }
    f
}
