//! `etcdctl elect` (Debian's etcd-client): a leader-only command line tool.
//! It prints the election key and proposal once elected, resigns on SIGINT,
//! and its session TTL is etcd's default, 60 s (etcdctl 3.4 has no flag for it).

use std::time::Duration;

use tokio::process::Command;

use crate::figures::Figure;
use crate::process::{LinePeer, Markers, Stop};

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
    resigning: "",
    settle: Duration::from_millis(500),
};

/// Hand-over (SIGINT → resign) or crash failover (SIGKILL; minus the 60 s TTL).
pub async fn measure(label: &str, endpoints: &[String], stop: Stop, trials: usize) -> Figure {
    let measure = stop.measure();
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
    let peer = LinePeer {
        name: NAME,
        markers: LINES,
        ttl: TTL,
        limit: TTL + Duration::from_secs(15),
        key_prefix: "etcdctl",
    };
    let note = match stop {
        Stop::Kill => "TTL 60 s (etcdctl's fixed session TTL)",
        Stop::Interrupt => "includes signal delivery and the process's own exit path",
    };
    let command = |name: &str| command(endpoints, name);
    peer.measure(label, stop, trials, command, note).await
}
