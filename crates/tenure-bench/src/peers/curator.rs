//! Curator's LeaderLatch (Debian's libcurator-recipes-java, on the JDK): a
//! small Java candidate (`java/LatchCandidate.java`), compiled by the bench.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use crate::deploy::{ctx, BenchResult};
use crate::error::BenchError;
use crate::figures::Figure;
use crate::process::{LinePeer, Markers, Stop};

/// The peer's name in the tables.
pub const NAME: &str = "Curator LeaderLatch 5.4";
const SOURCE: &str = include_str!("../../java/LatchCandidate.java");
const JARS: [&str; 8] = [
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
];

/// The compiled candidate's classpath, or why there is none.
pub fn prepare(out: &Path) -> BenchResult<String> {
    let mut classpath = Vec::new();
    for jar in JARS {
        let path = PathBuf::from(format!("/usr/share/java/{jar}.jar"));
        if !path.exists() {
            return Err(format!(
                "not available: {} missing (apt-get install libcurator-recipes-java)",
                path.display()
            )
            .into());
        }
        classpath.push(path.display().to_string());
    }
    let dir = out.join("curator");
    ctx("creating its directory", std::fs::create_dir_all(&dir))?;
    let source = dir.join("LatchCandidate.java");
    ctx("writing the source", std::fs::write(&source, SOURCE))?;
    let compiled = std::process::Command::new("javac")
        .arg("-cp")
        .arg(classpath.join(":"))
        .arg("-d")
        .arg(&dir)
        .arg(&source)
        .output()
        .map_err(|e| BenchError::from(format!("not available: javac: {e} (a JDK is needed)")))?;
    if !compiled.status.success() {
        return Err(format!(
            "javac failed: {}",
            String::from_utf8_lossy(&compiled.stderr)
        )
        .into());
    }
    let dir = ctx("its directory", std::fs::canonicalize(&dir))?;
    classpath.push(dir.display().to_string());
    Ok(classpath.join(":"))
}

fn command(classpath: &str, endpoints: &[String], path: &str, ttl: Duration) -> Command {
    let mut c = Command::new("java");
    c.arg("-cp")
        .arg(classpath)
        .arg("LatchCandidate")
        .arg(endpoints.join(","))
        .arg(path)
        .arg(ttl.as_millis().to_string());
    c
}

/// What `LatchCandidate` prints (`leading` and `resigning` with its
/// `System.nanoTime()`); the JVM takes a while to start and queue, so the
/// standby is given longer to settle.
const MARKERS: Markers = Markers {
    ready: "ready",
    leading: "leading",
    resigning: "resigning",
    settle: Duration::from_millis(1500),
};

/// Hand-over (SIGINT: the shutdown hook closes the latch; timed from the
/// leader's stamp before `close()` to the standby's after `await()`) or
/// crash failover (SIGKILL; minus the session timeout `ttl`).
pub async fn measure(
    label: &str,
    classpath: &BenchResult<String>,
    endpoints: &[String],
    stop: Stop,
    ttl: Duration,
    trials: usize,
) -> Figure {
    let classpath = match classpath {
        Ok(cp) => cp,
        Err(e) => return Figure::missing(stop.measure(), label, NAME, e.to_string()),
    };
    let peer = LinePeer {
        name: NAME,
        markers: MARKERS,
        ttl,
        limit: ttl * 10,
        key_prefix: "curator",
    };
    let note = match stop {
        Stop::Kill => format!("session timeout {} s, SIGKILL", ttl.as_secs()),
        Stop::Interrupt => "the leader's close() → the standby's await() returns, \
                            stamped in each JVM (System.nanoTime, CLOCK_MONOTONIC)"
            .to_owned(),
    };
    let command = |key: &str| command(classpath, endpoints, &format!("/{key}"), ttl);
    peer.measure(label, stop, trials, command, &note).await
}
