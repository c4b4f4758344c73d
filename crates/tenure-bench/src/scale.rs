//! Scale: many keys led by one process over one connection. The leading
//! runs in a child process (`tenure-bench scale-child URL KEYS SECS TTL_MS`)
//! so that the bench's own memory and threads do not count; the child
//! prints one JSON line: CPU % of one core over the window, peak RSS.

use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult};
use crate::error::BenchError;
use crate::figures::{Figure, Measure};

/// What the child reports.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScaleReport {
    /// Keys led.
    pub keys: usize,
    /// Seconds it took to lead them all.
    pub lead_secs: f64,
    /// CPU time (user + system) over the window, percent of one core.
    pub cpu_percent: f64,
    /// Peak resident set size (VmHWM), KiB.
    pub peak_rss_kib: u64,
    /// Leaderships that ended during the window.
    pub lost: usize,
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The child: leads `KEYS` keys on one client for `SECS` seconds.
pub async fn child(url: &str, keys: usize, secs: u64, ttl_ms: u64) -> BenchResult<()> {
    let window = Duration::from_secs(secs);
    let ttl = Duration::from_millis(ttl_ms);
    let backend = ctx("connect", tenure::connect(url).await)?;
    let start = Instant::now();
    let mut electors = Vec::with_capacity(keys);
    for i in 0..keys {
        let e = ctx(
            "elector",
            tenure::Elector::builder(backend.clone())
                .key(format!("bench-scale-{}-{i}", std::process::id()))
                .identity("scale")
                .ttl(ttl)
                .allow_unfenced()
                .build(),
        )?;
        electors.push(e);
    }
    let campaigns = electors.iter().map(|e| e.campaign());
    let leaderships: Vec<_> = futures::future::join_all(campaigns).await;
    let leaderships = leaderships
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BenchError::from(format!("campaign: {e}")))?;
    let lead_secs = start.elapsed().as_secs_f64();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let cpu = cpu_time() - cpu0;
    let wall = t0.elapsed();
    let lost = leaderships
        .iter()
        .filter(|l| l.term().ended().is_some())
        .count();
    let report = ScaleReport {
        keys,
        lead_secs,
        cpu_percent: cpu.as_secs_f64() / wall.as_secs_f64() * 100.0,
        peak_rss_kib: peak_rss_kib(),
        lost,
    };
    println!("{}", ctx("json", serde_json::to_string(&report))?);
    // Exit without resigning a thousand leases one by one: they expire.
    std::process::exit(0);
}

/// The parent: runs the child against `url` and turns its report into a row.
pub async fn run(
    label: &str,
    url: &str,
    keys: usize,
    window: Duration,
    ttl: Duration,
) -> BenchResult<Figure> {
    let exe = ctx("current_exe", std::env::current_exe())?;
    let child = tokio::process::Command::new(exe)
        .arg("scale-child")
        .arg(url)
        .arg(keys.to_string())
        .arg(window.as_secs().to_string())
        .arg(ttl.as_millis().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let child = ctx("spawning the scale child", child)?;
    let limit = window + Duration::from_secs(180);
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| BenchError::from(format!("the scale child ran past {limit:?}")))?;
    let out = ctx("the scale child", out)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(line) = stdout.lines().find(|l| l.starts_with('{')) else {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        return Err(format!("the scale child reported nothing ({}): {tail}", out.status).into());
    };
    let r: ScaleReport = ctx("the scale child's report", serde_json::from_str(line))?;
    let mut f = Figure::new(Measure::Scale, label, "tenure");
    f.keys = Some(r.keys);
    f.cpu_percent = Some(r.cpu_percent);
    f.rss_mib = Some(r.peak_rss_kib as f64 / 1024.0);
    f.samples = 1;
    f = f.with_note(format!(
        "{} s window at TTL {} s, all led in {:.1} s",
        window.as_secs(),
        ttl.as_secs(),
        r.lead_secs
    ));
    if r.lost > 0 {
        f = f.with_note(format!("{} leaderships lost during the window", r.lost));
    }
    Ok(f)
}
