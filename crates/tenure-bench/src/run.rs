//! The bench run: every deployment in the plan, tenure and its peers on
//! each, then the report.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use crate::deploy::{BenchResult, Deployment, Server};
use crate::error::BenchError;
use crate::figures::{Figure, Measure, FLOOR};
use crate::floor;
use crate::peers::{
    curator, etcd_election, etcdctl, kube_coordinate, kube_lease_manager, rslock, unavailable,
};
use crate::plan::{Plan, HERD_TTL, SCALE_TTL, TTL};
use crate::process::{candidate_trial, Stop};
use crate::sampling::fresh_key;
use crate::tenure_measures::{handover, herd, latency};
use crate::{report, scale, RunArgs};

/// Options from the command line.
struct Options {
    plan: Plan,
    report: PathBuf,
    out: PathBuf,
}

fn options(args: RunArgs) -> Options {
    let mut plan = Plan::new(args.quick);
    if !args.only.is_empty() {
        plan.only(&args.only);
    }
    // A quick run does not overwrite the committed full results.
    let report = args.report.unwrap_or_else(|| {
        if args.quick {
            args.out.join("BENCHMARKS-quick.md")
        } else {
            PathBuf::from("BENCHMARKS.md")
        }
    });
    Options {
        plan,
        report,
        out: args.out,
    }
}

/// Runs the bench.
pub async fn main(args: RunArgs) -> BenchResult<()> {
    let options = options(args);
    // A shell starts background jobs with SIGINT ignored, and children
    // inherit that: the JVM would then ignore the SIGINT a hand-over sends.
    // SAFETY: restoring the default disposition of one signal.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    let started = Instant::now();
    let mut figures = Vec::new();
    let curator = if options
        .plan
        .servers
        .iter()
        .any(|s| matches!(s, Server::ZooKeeper(_)))
    {
        curator::prepare(&options.out)
    } else {
        Err("not run".into())
    };
    let mut versions = Vec::new();
    for &server in &options.plan.servers {
        let label = server.label();
        eprintln!("== {label}");
        let t = Instant::now();
        match Deployment::start(server).await {
            Ok(d) => {
                versions.push((label.clone(), d.version.clone()));
                bench_one(&d, &options.plan, &curator, &mut figures).await;
            }
            Err(e) => {
                eprintln!("   could not start: {e}");
                versions.push((label.clone(), format!("not started: {e}")));
            }
        }
        eprintln!("   {:.0} s", t.elapsed().as_secs_f64());
    }
    let took = started.elapsed();
    let context = report::Context {
        quick: options.plan.quick,
        command: std::iter::once("target/measure/tenure-bench".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        versions,
        took_secs: took.as_secs_f64(),
        date: crate::machine::now_utc(),
        machine: crate::machine::describe(),
        etcdctl: etcdctl::version(),
    };
    report::write(&figures, &context, &options.report, &options.out)?;
    eprintln!(
        "wrote {} and {}/ in {:.0} s",
        options.report.display(),
        options.out.display(),
        took.as_secs_f64()
    );
    Ok(())
}

/// The rows of one deployment, logged as they are added.
struct Rows<'a> {
    figures: &'a mut Vec<Figure>,
    /// The deployment's label.
    server: &'a str,
}

impl Rows<'_> {
    /// Adds `f`.
    fn push(&mut self, f: Figure) {
        eprintln!(
            "   {:?} {}: p50 {:?} p99 {:?} w {:?} r {:?} cpu {:?} rss {:?} {}",
            f.measure,
            f.system,
            f.p50_ms,
            f.p99_ms,
            f.writes_per_change,
            f.requests_per_change,
            f.cpu_percent,
            f.rss_mib,
            f.note
        );
        self.figures.push(f);
    }

    /// Adds `system`'s row for `measure`, or one that says why it failed.
    fn add(&mut self, measure: Measure, system: &str, got: BenchResult<Figure>) {
        let f = got.unwrap_or_else(|e| {
            Figure::missing(measure, self.server, system, format!("failed: {e}"))
        });
        self.push(f);
    }

    /// Adds `system`'s acquire and renew rows.
    fn add_latency(&mut self, system: &str, got: BenchResult<[Figure; 2]>) {
        match got {
            Ok(pair) => pair.into_iter().for_each(|f| self.push(f)),
            Err(e) => {
                for m in [Measure::Acquire, Measure::Renew] {
                    self.add(m, system, Err(e.to_string().into()));
                }
            }
        }
    }
}

/// Crash failover through candidate processes, minus the TTL: `kind` is
/// the URL prefix that picks a peer (`etcd-election+`, `rslock+`,
/// `kube-lease-manager+`, `kube-coordinate+`; empty for tenure), see
/// `tenure-bench-candidate`.
async fn failover(
    url: &str,
    kind: &str,
    label: &str,
    system: &str,
    trials: usize,
) -> BenchResult<Figure> {
    let mut samples = Vec::with_capacity(trials);
    for _ in 0..trials {
        let key = fresh_key("failover");
        samples.push(candidate_trial(&format!("{kind}{url}"), &key, TTL, TTL * 10).await?);
    }
    let f = Figure::failover(label, system, &samples, TTL);
    Ok(f.with_note(format!("TTL {} s, SIGKILL", TTL.as_secs())))
}

async fn bench_one(
    d: &Deployment,
    plan: &Plan,
    curator: &BenchResult<String>,
    figures: &mut Vec<Figure>,
) {
    let label = d.server.label();
    let label = label.as_str();
    let mut rows = Rows {
        figures,
        server: label,
    };
    let endpoints = d.endpoints();
    let n = plan.latency_samples;

    rows.add_latency("tenure", latency(d, TTL, n).await);
    match d.server {
        Server::Etcd(_) => {
            rows.add_latency(etcd_election::NAME, etcd_election::latency(d, TTL, n).await)
        }
        Server::Redis(_) => rows.add_latency(rslock::NAME, rslock::latency(d, TTL, n).await),
        Server::Kube(_) => {
            let klm = kube_lease_manager::latency(d, TTL, n).await;
            rows.add_latency(kube_lease_manager::NAME, klm);
            let kc = kube_coordinate::latency(d, TTL, n).await;
            rows.add_latency(kube_coordinate::NAME, kc);
        }
        _ => {}
    }

    let h = plan.handover_trials;
    rows.add(Measure::Handover, "tenure", handover(d, TTL, h).await);
    if matches!(
        d.server,
        Server::Etcd(_) | Server::ZooKeeper(_) | Server::Kube(_)
    ) {
        rows.add(Measure::Handover, FLOOR, floor::handover(d, h).await);
    }
    match d.server {
        Server::Etcd(_) => {
            let f = etcd_election::handover(d, h).await;
            rows.add(Measure::Handover, etcd_election::NAME, f);
            rows.push(etcdctl::measure(label, &endpoints, Stop::Interrupt, h.min(20)).await);
        }
        Server::ZooKeeper(_) => rows.push(
            curator::measure(label, curator, &endpoints, Stop::Interrupt, TTL, h.min(20)).await,
        ),
        Server::Redis(_) => {
            let f = rslock::handover(d, TTL, h).await;
            rows.add(Measure::Handover, rslock::NAME, f);
        }
        Server::Kube(_) => {
            let h = plan.lease_bound_handover_trials;
            let f = kube_lease_manager::handover(d, TTL, h).await;
            rows.add(Measure::Handover, kube_lease_manager::NAME, f);
            let f = kube_coordinate::handover(d, TTL, h).await;
            rows.add(Measure::Handover, kube_coordinate::NAME, f);
        }
        _ => {}
    }

    let f = plan.failover_trials;
    match d.url(TTL) {
        None => rows.push(Figure::missing(
            Measure::Failover,
            label,
            "tenure",
            "not applicable: the memory backend lives in one process",
        )),
        Some(url) => {
            // tenure, and the peers the bench drives through its own candidate.
            let peers = match d.server {
                Server::Etcd(_) => vec![("", "tenure"), ("etcd-election+", etcd_election::NAME)],
                Server::Redis(_) => vec![("", "tenure"), ("rslock+", rslock::NAME)],
                Server::Kube(_) => vec![
                    ("", "tenure"),
                    ("kube-lease-manager+", kube_lease_manager::NAME),
                    ("kube-coordinate+", kube_coordinate::NAME),
                ],
                _ => vec![("", "tenure")],
            };
            for (kind, system) in peers {
                // The Kubernetes peers' standbys wait out the lease and more.
                let (trials, note) = match kind {
                    "kube-lease-manager+" => (
                        plan.lease_bound_failover_trials,
                        Some(kube_lease_manager::FAILOVER),
                    ),
                    "kube-coordinate+" => (
                        plan.lease_bound_failover_trials,
                        Some(kube_coordinate::FAILOVER),
                    ),
                    _ => (f, None),
                };
                let got = failover(&url, kind, label, system, trials).await;
                let got = got.map(|f| match note {
                    Some(note) => f.with_note(note),
                    None => f,
                });
                rows.add(Measure::Failover, system, got);
            }
            match d.server {
                Server::Etcd(_) => {
                    let trials = plan.etcdctl_failover_trials;
                    rows.push(etcdctl::measure(label, &endpoints, Stop::Kill, trials).await);
                }
                Server::ZooKeeper(_) => rows
                    .push(curator::measure(label, curator, &endpoints, Stop::Kill, TTL, f).await),
                _ => {}
            }
        }
    }
    if let Server::Kube(_) = d.server {
        rows.figures.extend(unavailable::rows(label));
    }

    for &waiters in &plan.herds {
        let got = herd(d, herd_ttl(d), waiters).await;
        let got = got.map_err(|e| BenchError::from(format!("{waiters} waiters: {e}")));
        rows.add(Measure::Herd, "tenure", got);
    }
    if let Server::Kube(_) = d.server {
        // The peers' holders renew themselves: their herds run at the TTL.
        let changes = plan.lease_bound_herd_changes;
        for &waiters in &plan.herds {
            let with = |e: BenchError| BenchError::from(format!("{waiters} waiters: {e}"));
            let got = kube_lease_manager::herd(d, TTL, waiters, changes).await;
            rows.add(Measure::Herd, kube_lease_manager::NAME, got.map_err(with));
            let got = kube_coordinate::herd(d, TTL, waiters, changes).await;
            rows.add(Measure::Herd, kube_coordinate::NAME, got.map_err(with));
        }
    }

    let url = d.url(SCALE_TTL).unwrap_or_else(|| "memory://".into());
    let s = scale::run(label, &url, plan.scale_keys, plan.scale_window, SCALE_TTL).await;
    rows.add(Measure::Scale, "tenure", s);
}

/// The herd's TTL: ZooKeeper's is its session timeout, pinged by the
/// client, so the short one does; the others' holders are not renewed.
fn herd_ttl(d: &Deployment) -> Duration {
    match d.server {
        Server::ZooKeeper(_) => TTL,
        _ => HERD_TTL,
    }
}
