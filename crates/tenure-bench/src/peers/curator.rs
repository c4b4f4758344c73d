//! Curator's LeaderLatch (Debian's libcurator-recipes-java, on the JDK): a
//! small Java candidate (`java/LatchCandidate.java`), compiled by the bench.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use crate::deploy::{ctx, BenchResult};
use crate::error::BenchError;
use crate::figures::{Figure, Measure};
use crate::process::{trial, Markers, Stop};
use crate::tenure_measures::fresh_key;

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

/// What `LatchCandidate` prints; the JVM takes a while to start and queue,
/// so the standby is given longer to settle.
const MARKERS: Markers = Markers {
    ready: "ready",
    leading: "leading",
    settle: Duration::from_millis(1500),
};

/// Hand-over (SIGINT: the shutdown hook closes the latch) or crash failover
/// (SIGKILL; minus the session timeout `ttl`).
pub async fn measure(
    label: &str,
    classpath: &BenchResult<String>,
    endpoints: &[String],
    stop: Stop,
    ttl: Duration,
    trials: usize,
) -> Figure {
    let measure = match stop {
        Stop::Interrupt => Measure::Handover,
        Stop::Kill => Measure::Failover,
    };
    let classpath = match classpath {
        Ok(cp) => cp,
        Err(e) => return Figure::missing(measure, label, NAME, e.to_string()),
    };
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    for _ in 0..trials {
        let path = format!("/{}", fresh_key("curator"));
        match trial(
            || command(classpath, endpoints, &path, ttl),
            MARKERS,
            stop,
            ttl * 10,
        )
        .await
        {
            Ok(d) if stop == Stop::Kill => {
                samples.push((d.as_secs_f64() - ttl.as_secs_f64()) * 1000.0)
            }
            Ok(d) => samples.push(d.as_secs_f64() * 1000.0),
            Err(e) => errors.push(e),
        }
    }
    let mut f = Figure::new(measure, label, NAME);
    f.set_ms(&samples);
    if stop == Stop::Kill {
        f.ttl_ms = Some(ttl.as_secs_f64() * 1000.0);
        f = f.with_note(format!("session timeout {} s, SIGKILL", ttl.as_secs()));
    } else {
        f = f.with_note("SIGINT; includes the JVM's shutdown-hook path");
    }
    if let Some(e) = errors.first() {
        f = f.with_note(format!("{} trials failed: {e}", errors.len()));
    }
    f
}
