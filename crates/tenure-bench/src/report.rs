//! BENCHMARKS.md, the JSON and the chart from the figures.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::deploy::{ctx, BenchResult};
use crate::figures::{Figure, Measure, FLOOR};
use crate::peers::etcd_election;
use crate::plan::{HERD_TTL, SCALE_TTL, TTL};

/// What the report says about the run besides the figures.
#[derive(Debug, Serialize, Deserialize)]
pub struct Context {
    /// `--quick`.
    pub quick: bool,
    /// The command as run.
    pub command: String,
    /// Server versions by deployment.
    pub versions: Vec<(String, String)>,
    /// How long the run took, seconds.
    pub took_secs: f64,
    /// When it ran.
    pub date: String,
    /// Where.
    pub machine: String,
    /// etcdctl's version, if installed.
    pub etcdctl: Option<String>,
}

/// The chart's file name, beside the report.
pub const CHART: &str = "BENCHMARKS.svg";
/// Notes written by hand, included verbatim (why targets are missed), read
/// at run time so that `render` picks up edits.
const NOTES: &str = "crates/tenure-bench/NOTES.md";

/// The JSON file: the context and every figure.
#[derive(Debug, Serialize, Deserialize)]
pub struct Results {
    /// About the run.
    pub context: Context,
    /// What was measured.
    pub figures: Vec<Figure>,
}

/// `tenure-bench render [--quick] [RESULTS] [REPORT]`: writes the report and
/// chart again from a run's JSON (after editing NOTES.md).
pub fn render(quick: bool, results: Option<PathBuf>, report: Option<PathBuf>) -> BenchResult<()> {
    let results = results.unwrap_or_else(|| PathBuf::from("target/bench/results.json"));
    let report = report.unwrap_or_else(|| {
        PathBuf::from(if quick {
            "target/bench/BENCHMARKS-quick.md"
        } else {
            "BENCHMARKS.md"
        })
    });
    let text = ctx("reading the results", std::fs::read_to_string(&results))?;
    let r: Results = ctx("parsing the results", serde_json::from_str(&text))?;
    let out = results.parent().unwrap_or(Path::new("."));
    write(&r.figures, &r.context, &report, out)
}

/// Writes the report to `report`, the chart beside it, and JSON and a
/// copy of the chart under `out`.
pub fn write(figures: &[Figure], context: &Context, report: &Path, out: &Path) -> BenchResult<()> {
    ctx(
        "creating the output directory",
        std::fs::create_dir_all(out),
    )?;
    let json = serde_json::json!({ "context": context, "figures": figures });
    let json = ctx("json", serde_json::to_string_pretty(&json))?;
    ctx(
        "writing the JSON",
        std::fs::write(out.join("results.json"), json),
    )?;
    let svg = crate::chart::render(figures)?;
    ctx("writing the chart", std::fs::write(out.join(CHART), &svg))?;
    let dir = report
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    ctx(
        "creating the report directory",
        std::fs::create_dir_all(dir),
    )?;
    // Beside the report, except at the workspace root, where it goes with
    // the bench's crate (the root holds only BENCHMARKS.md).
    let link = if dir == Path::new(".") || dir.join("crates/tenure-bench").is_dir() {
        format!("crates/tenure-bench/{CHART}")
    } else {
        CHART.to_owned()
    };
    ctx("writing the chart", std::fs::write(dir.join(&link), &svg))?;
    ctx(
        "writing the report",
        std::fs::write(report, markdown(figures, context, &link)),
    )?;
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v.abs() < 10.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.0}"),
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.1}"))
}

/// Whether `f` is a peer's row: neither tenure's nor the protocol's floor.
fn is_peer(f: &Figure) -> bool {
    f.system != "tenure" && f.system != FLOOR
}

/// The floor's hand-over p50 on `server`, if measured.
fn floor_p50(server: &str, all: &[Figure]) -> Option<f64> {
    all.iter()
        .find(|f| f.measure == Some(Measure::Handover) && f.server == server && f.system == FLOOR)
        .and_then(|f| f.p50_ms)
        .filter(|p50| *p50 > 0.0)
}

/// A hand-over row's p50 over its server's floor (`×1.62`); empty for the
/// floor itself, and where there is no floor or no figure.
fn over_floor(f: &Figure, all: &[Figure]) -> String {
    match (f.system != FLOOR).then_some(f.p50_ms).flatten() {
        Some(p50) => {
            floor_p50(&f.server, all).map_or(String::new(), |floor| format!("×{:.2}", p50 / floor))
        }
        None => String::new(),
    }
}

/// tenure's p50 and p99 over the best peer's on the same server.
fn ratio(f: &Figure, all: &[Figure]) -> String {
    if f.system != "tenure" {
        return String::new();
    }
    let peers: Vec<&Figure> = all
        .iter()
        .filter(|p| {
            p.measure == f.measure
                && p.server == f.server
                && is_peer(p)
                && p.p50_ms.is_some()
                // Failover only against a peer at the same TTL.
                && p.ttl_ms == f.ttl_ms
        })
        .collect();
    let best = |pick: fn(&Figure) -> Option<f64>| {
        peers
            .iter()
            .filter_map(|p| pick(p).map(|v| (v, p.system.as_str())))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    };
    let (Some(p50), Some((best50, who))) = (f.p50_ms, best(|p| p.p50_ms)) else {
        return if peers.is_empty() {
            "no peer measured".into()
        } else {
            String::new()
        };
    };
    // A ratio where both are positive; else (failover − TTL can be
    // negative) the difference.
    let r = |a: f64, b: f64| {
        if a > 0.0 && b > 0.0 {
            format!("×{:.2}", a / b)
        } else {
            format!("{:+.0} ms", a - b)
        }
    };
    let p99 = match (f.p99_ms, best(|p| p.p99_ms)) {
        (Some(a), Some((b, _))) => r(a, b),
        _ => "–".into(),
    };
    format!("{} p50, {} p99 (vs {who})", r(p50, best50), p99)
}

/// A table of p50, p99 and ratios; the hand-over's has a `p50 × floor`
/// column (each row's p50 over its server's floor).
fn latency_table(out: &mut String, figures: &[Figure], measure: Measure) {
    let floor = measure == Measure::Handover;
    let (head, rule) = if floor {
        ("| p50 × floor ", "--:|")
    } else {
        ("", "")
    };
    let _ = writeln!(
        out,
        "| Server | System | p50 ms | p99 ms | n {head}| tenure ÷ best peer | Note |"
    );
    let _ = writeln!(out, "|---|---|--:|--:|--:|{rule}---|---|");
    for f in figures.iter().filter(|f| f.measure == Some(measure)) {
        let over = if floor {
            format!(" {} |", over_floor(f, figures))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |{over} {} | {} |",
            f.server,
            f.system,
            ms(f.p50_ms),
            ms(f.p99_ms),
            f.samples,
            ratio(f, figures),
            f.note
        );
    }
    out.push('\n');
}

fn markdown(figures: &[Figure], c: &Context, chart: &str) -> String {
    let mut out = String::new();
    out.push_str("# Benchmarks\n\n");
    out.push_str("Generated by `crates/tenure-bench` (do not edit by hand: edit `crates/tenure-bench/NOTES.md` and rerun). ");
    out.push_str("Every figure below comes from one run on one machine: the servers in containers (the conformance harness's image), tenure and its peers against the same servers.\n\n");
    out.push_str("Run from the workspace root. The build is the workspace's `measure` profile, the conformance suite's test build (dependencies and tenure's crates at opt-level 1).\n\n");
    out.push_str("Full run (writes this file, the chart `crates/tenure-bench/BENCHMARKS.svg`, and `target/bench/results.json`; about 36 minutes on 2 cores, needs Docker and the harness image):\n\n");
    out.push_str(
        "```sh\ncargo build --workspace --all-features --profile measure && target/measure/tenure-bench\n```\n\n",
    );
    out.push_str("Quick check (1-node servers only, fewer samples, herds of 10 only, scale at 100 keys, under 5 minutes; writes `target/bench/BENCHMARKS-quick.md`, the chart and JSON there):\n\n");
    out.push_str("```sh\ncargo build --workspace --all-features --profile measure && target/measure/tenure-bench --quick\n```\n\n");
    let _ = writeln!(out, "## This run\n");
    let _ = writeln!(
        out,
        "- Command: `{}`{}",
        c.command,
        if c.quick { " (quick mode)" } else { "" }
    );
    let _ = writeln!(out, "- Date: {}; the run took {:.0} s", c.date, c.took_secs);
    let _ = writeln!(out, "- Machine: {}", c.machine);
    let _ = writeln!(
        out,
        "- etcdctl: {}",
        c.etcdctl.as_deref().unwrap_or("not installed")
    );
    out.push_str("- Servers:\n");
    for (label, version) in &c.versions {
        let _ = writeln!(out, "  - {label}: {version}");
    }
    let _ = writeln!(
        out,
        "- TTL {} s for acquire, renew, hand-over and failover; herd TTL {} s (ZooKeeper: its session timeout, {} s); scale at tenure's default TTL {} s.",
        TTL.as_secs(),
        HERD_TTL.as_secs(),
        TTL.as_secs(),
        SCALE_TTL.as_secs()
    );
    out.push_str("- Latencies are measured in the bench process on the same machine as the servers (loopback); p50 and p99 are nearest-rank percentiles.\n\n");
    let _ = writeln!(
        out,
        "![hand-over and crash failover per backend and peer]({chart})\n"
    );

    out.push_str("## Targets\n\n");
    out.push_str(&targets(figures));
    out.push('\n');
    let notes = std::fs::read_to_string(NOTES).unwrap_or_else(|e| format!("({NOTES}: {e})"));
    out.push_str(notes.trim());
    out.push_str("\n\n");

    out.push_str("## Uncontended acquire\n\nOne attempt on a free key (released, untimed); the first five of each client left out as warm-up.\n\n");
    latency_table(&mut out, figures, Measure::Acquire);
    out.push_str("## Renew\n\nOne renewal of a held lease.\n\n");
    latency_table(&mut out, figures, Measure::Renew);
    out.push_str("## Graceful hand-over\n\nThe leader resigns → the standby's waiting `campaign()` (or the peer's equivalent) returns; the standby queued 100 ms (processes: 500 ms) before.\n\n");
    latency_table(&mut out, figures, Measure::Handover);
    out.push_str("## Crash failover − TTL\n\nThe leader's process is SIGKILLed → the standby process prints that it leads; the TTL is subtracted, so a figure below 0 means the standby led less than one TTL after the kill: the lease's TTL runs from its last renewal (every TTL/3), which came before the kill. The worst case is about the figure plus TTL/3. Includes the standby's pipe to the bench (well under 1 ms).\n\n");
    latency_table(&mut out, figures, Measure::Failover);

    out.push_str("## Herd cost\n\nA holder and N waiting candidates, each on its own client; the lease handed down the line 5 times; server counters before and after. Writes: etcd Raft proposals committed, ZooKeeper zxid, Lease API server writes to etcd, Redis data-set changes. Requests: etcd gRPC messages received plus watch events sent (keep-alives left out), ZooKeeper requests and watch notifications counted at the clients' proxies (pings left out), Lease API requests and watch events, Redis commands processed.\n\n");
    out.push_str("| Server | System | Waiters | Writes / change | Requests / change | Note |\n|---|---|--:|--:|--:|---|\n");
    for f in figures.iter().filter(|f| f.measure == Some(Measure::Herd)) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            f.server,
            f.system,
            f.waiters.map_or("–".into(), |w| w.to_string()),
            num(f.writes_per_change),
            num(f.requests_per_change),
            f.note
        );
    }
    out.push('\n');

    out.push_str("## Scale\n\nKeys led by one process over one connection (a child process of the bench, so only its own CPU and memory count): CPU time over the window as % of one core (getrusage), peak RSS (VmHWM).\n\n");
    out.push_str(
        "| Server | Keys | CPU % of one core | Peak RSS MiB | Note |\n|---|--:|--:|--:|---|\n",
    );
    for f in figures.iter().filter(|f| f.measure == Some(Measure::Scale)) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            f.server,
            f.keys.map_or("–".into(), |k| k.to_string()),
            num(f.cpu_percent),
            num(f.rss_mib),
            f.note
        );
    }
    out.push('\n');
    out
}

/// `met` if `value` is at most `target`, else by how much it missed
/// (`decimals` places, then `unit`).
fn verdict(value: f64, target: f64, decimals: usize, unit: &str) -> String {
    if value <= target {
        "met".to_owned()
    } else {
        format!("missed by {:.*}{unit}", decimals, value - target)
    }
}

/// The issue's targets, each met or missed by how much.
fn targets(figures: &[Figure]) -> String {
    let mut out = String::new();
    let tenure = |m: Measure| {
        figures
            .iter()
            .filter(move |f| f.measure == Some(m) && f.system == "tenure")
    };
    let kinds = ["etcd", "ZooKeeper", "Kubernetes"];
    for f in tenure(Measure::Handover).filter(|f| kinds.iter().any(|k| f.server.starts_with(k))) {
        let Some(p50) = f.p50_ms else { continue };
        let met = verdict(p50, 5.0, 2, " ms");
        let _ = write!(
            out,
            "- Hand-over p50 ≤ 5 ms, {}: {:.2} ms, {met}",
            f.server, p50
        );
        if f.server.starts_with("etcd") {
            // On etcd, the goal is set by its own election API: ≤ 0.9× its p50.
            let api = figures
                .iter()
                .find(|p| {
                    p.measure == f.measure
                        && p.server == f.server
                        && p.system == etcd_election::NAME
                })
                .and_then(|p| p.p50_ms)
                .filter(|b| *b > 0.0);
            match api {
                Some(b) => {
                    let r = p50 / b;
                    let _ = writeln!(
                        out,
                        "; ≤ 0.9× etcd's election API ({b:.2} ms): {r:.2}×, {}",
                        verdict(p50, 0.9 * b, 2, " ms")
                    );
                }
                None => out.push_str("; etcd's election API not measured\n"),
            }
            continue;
        }
        let best = figures
            .iter()
            .filter(|p| p.measure == f.measure && p.server == f.server && is_peer(p))
            .filter_map(|p| p.p50_ms.map(|v| (v, &p.system)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match best {
            Some((b, who)) if p50 <= b => {
                let _ = writeln!(
                    out,
                    "; no slower than the best peer ({who}, {b:.2} ms): met"
                );
            }
            Some((b, who)) => {
                let _ = writeln!(
                    out,
                    "; slower than the best peer ({who}, {b:.2} ms) by {:.2} ms: missed",
                    p50 - b
                );
            }
            None => out.push_str("; no peer measured on this server\n"),
        }
    }
    for f in tenure(Measure::Handover) {
        let (Some(p50), Some(floor)) = (f.p50_ms, floor_p50(&f.server, figures)) else {
            continue;
        };
        let r = p50 / floor;
        let _ = writeln!(
            out,
            "- Hand-over p50 ≤ 1.25× the protocol's floor, {}: {p50:.2} ms = {r:.2}× floor ({floor:.2} ms), {}",
            f.server,
            verdict(p50, 1.25 * floor, 2, " ms")
        );
    }
    for f in tenure(Measure::Failover) {
        let Some(p99) = f.p99_ms else { continue };
        let verdict = verdict(p99, 1000.0, 0, " ms");
        let _ = writeln!(
            out,
            "- Crash failover − TTL p99 ≤ 1 s, {}: {p99:.0} ms, {verdict}",
            f.server
        );
    }
    for f in tenure(Measure::Herd).filter(|f| f.waiters == Some(100)) {
        // Herd-free: etcd and ZooKeeper queue their waiters, so a change
        // wakes one; the Lease API cannot, so its waiters wait in line on
        // labels and a sibling Lease, and the requests allowed include the
        // watch events of the two named waiters.
        let max_requests = if f.server.starts_with("etcd") || f.server.starts_with("ZooKeeper") {
            10.0
        } else if f.server.starts_with("Kubernetes") {
            20.0
        } else {
            continue;
        };
        let (Some(w), Some(r)) = (f.writes_per_change, f.requests_per_change) else {
            continue;
        };
        let _ = writeln!(
            out,
            "- ≤ 3 server writes and ≤ {max_requests:.0} requests per leadership change with 100 waiting, {}: {w:.1} writes ({}), {r:.1} requests ({})",
            f.server,
            verdict(w, 3.0, 1, ""),
            verdict(r, max_requests, 1, "")
        );
    }
    for f in tenure(Measure::Scale) {
        let (Some(cpu), Some(rss), Some(keys)) = (f.cpu_percent, f.rss_mib, f.keys) else {
            continue;
        };
        // etcd and ZooKeeper share what one client renews (a lease, a
        // session): 2 %; Kubernetes and Redis renew each key on its own: 5 %.
        let goal = if f.server.starts_with("etcd") || f.server.starts_with("ZooKeeper") {
            2.0
        } else {
            5.0
        };
        let c = verdict(cpu, goal, 1, " points");
        let r = verdict(rss, 64.0, 1, " MiB");
        let scope = if keys == 1000 {
            String::new()
        } else {
            format!(" (measured at {keys} keys, not 1,000)")
        };
        let _ = writeln!(
            out,
            "- 1,000 leaderships ≤ {goal:.0} % of one core and ≤ 64 MiB RSS, {}{scope}: {cpu:.1} % ({c}), {rss:.1} MiB ({r})",
            f.server
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn herd(server: &str, waiters: usize, writes: f64, requests: f64) -> Figure {
        let mut f = Figure::new(Measure::Herd, server, "tenure");
        f.waiters = Some(waiters);
        (f.writes_per_change, f.requests_per_change) = (Some(writes), Some(requests));
        f
    }

    #[test]
    fn herd_targets_bound_writes_and_requests_per_server_kind_at_100_waiting() {
        let figures = [
            herd("etcd 1-node", 100, 2.0, 10.5),
            herd(
                "Kubernetes (Lease test server, etcd 1-node)",
                100,
                2.4,
                19.0,
            ),
            herd("Kubernetes (Lease test server, etcd 3-node)", 100, 3.2, 9.0),
            herd("ZooKeeper 1-node", 10, 9.0, 99.0),
            herd("Redis 1-master", 100, 9.0, 99.0),
        ];
        let out = targets(&figures);
        let herd: Vec<&str> = out.lines().filter(|l| l.contains("waiting")).collect();
        assert_eq!(
            herd,
            [
                "- ≤ 3 server writes and ≤ 10 requests per leadership change with 100 waiting, etcd 1-node: 2.0 writes (met), 10.5 requests (missed by 0.5)",
                "- ≤ 3 server writes and ≤ 20 requests per leadership change with 100 waiting, Kubernetes (Lease test server, etcd 1-node): 2.4 writes (met), 19.0 requests (met)",
                "- ≤ 3 server writes and ≤ 20 requests per leadership change with 100 waiting, Kubernetes (Lease test server, etcd 3-node): 3.2 writes (missed by 0.2), 9.0 requests (met)",
            ],
            "{out}"
        );
    }

    fn handover(server: &str, system: &str, p50: f64) -> Figure {
        let mut f = Figure::new(Measure::Handover, server, system);
        (f.p50_ms, f.p99_ms, f.samples) = (Some(p50), Some(p50 * 2.0), 50);
        f
    }

    #[test]
    fn hand_over_targets_state_the_floor_and_election_api_ratios() {
        let figures = [
            handover("etcd 1-node", "tenure", 3.0),
            handover("etcd 1-node", FLOOR, 2.0),
            handover("etcd 1-node", etcd_election::NAME, 2.5),
            handover("ZooKeeper 1-node", "tenure", 2.0),
            handover("ZooKeeper 1-node", FLOOR, 1.0),
        ];
        let targets = targets(&figures);
        assert!(
            targets.contains(
                "etcd 1-node: 3.00 ms, met; ≤ 0.9× etcd's election API (2.50 ms): 1.20×, missed by 0.75 ms"
            ),
            "{targets}"
        );
        assert!(
            targets.contains(
                "≤ 1.25× the protocol's floor, etcd 1-node: 3.00 ms = 1.50× floor (2.00 ms), missed by 0.50 ms"
            ),
            "{targets}"
        );
        // The floor is no peer.
        assert!(
            targets.contains("ZooKeeper 1-node: 2.00 ms, met; no peer measured"),
            "{targets}"
        );
        let mut table = String::new();
        latency_table(&mut table, &figures, Measure::Handover);
        assert!(
            table.contains("| etcd 1-node | tenure | 3.00 | 6.00 | 50 | ×1.50 |"),
            "{table}"
        );
        assert!(
            table.contains("| etcd 1-node | floor | 2.00 | 4.00 | 50 |  |"),
            "{table}"
        );
    }
}
