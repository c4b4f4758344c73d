//! The bench run: every deployment in the plan, tenure and its peers on
//! each, then the report.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use crate::deploy::{BenchResult, Deployment, Server};
use crate::error::BenchError;
use crate::figures::{Figure, Measure};
use crate::peers::{curator, etcd_election, etcdctl, rslock, unavailable};
use crate::plan::{Plan, HERD_TTL, SCALE_TTL, TTL};
use crate::process::{candidate_trial, Stop};
use crate::tenure_measures::{fresh_key, handover, herd, latency};
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

fn push(figures: &mut Vec<Figure>, what: (Measure, &str, &str), got: BenchResult<Figure>) {
    let (measure, label, system) = what;
    let f = got.unwrap_or_else(|e| Figure::missing(measure, label, system, format!("failed: {e}")));
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
    figures.push(f);
}

fn push_pair(figures: &mut Vec<Figure>, label: &str, system: &str, got: BenchResult<[Figure; 2]>) {
    match got {
        Ok(pair) => {
            for f in pair {
                push(figures, (Measure::Acquire, label, system), Ok(f));
            }
        }
        Err(e) => {
            for m in [Measure::Acquire, Measure::Renew] {
                push(figures, (m, label, system), Err(e.to_string().into()));
            }
        }
    }
}

/// Crash failover through candidate processes, minus the TTL: `kind` is
/// the URL prefix that picks a peer (`etcd-election+`, `rslock+`; empty
/// for tenure), see `tenure-bench-candidate`.
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
        let took = candidate_trial(&format!("{kind}{url}"), &key, TTL, TTL * 10).await?;
        samples.push((took.as_secs_f64() - TTL.as_secs_f64()) * 1000.0);
    }
    let mut f = Figure::new(Measure::Failover, label, system);
    f.set_ms(&samples);
    f.ttl_ms = Some(TTL.as_secs_f64() * 1000.0);
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
    let endpoints = d.endpoints();
    let n = plan.latency_samples;

    push_pair(figures, label, "tenure", latency(d, TTL, n).await);
    match d.server {
        Server::Etcd(_) => push_pair(
            figures,
            label,
            etcd_election::NAME,
            etcd_election::latency(label, &endpoints, TTL, n).await,
        ),
        Server::Redis(_) => push_pair(
            figures,
            label,
            rslock::NAME,
            rslock::latency(label, &endpoints, TTL, n).await,
        ),
        _ => {}
    }

    let h = plan.handover_trials;
    push(
        figures,
        (Measure::Handover, label, "tenure"),
        handover(d, TTL, h).await,
    );
    match d.server {
        Server::Etcd(_) => {
            let system = etcd_election::NAME;
            push(
                figures,
                (Measure::Handover, label, system),
                etcd_election::handover(label, &endpoints, h).await,
            );
            let f = etcdctl::measure(label, &endpoints, Stop::Interrupt, h.min(20)).await;
            push(figures, (Measure::Handover, label, etcdctl::NAME), Ok(f));
        }
        Server::ZooKeeper(_) => {
            let f =
                curator::measure(label, curator, &endpoints, Stop::Interrupt, TTL, h.min(20)).await;
            push(figures, (Measure::Handover, label, curator::NAME), Ok(f));
        }
        Server::Redis(_) => {
            let f = rslock::handover(label, &endpoints, TTL, h).await;
            push(figures, (Measure::Handover, label, rslock::NAME), f);
        }
        _ => {}
    }

    let f = plan.failover_trials;
    match d.url(TTL) {
        None => figures.push(Figure::missing(
            Measure::Failover,
            label,
            "tenure",
            "not applicable: the memory backend lives in one process",
        )),
        Some(url) => {
            push(
                figures,
                (Measure::Failover, label, "tenure"),
                failover(&url, "", label, "tenure", f).await,
            );
            match d.server {
                Server::Etcd(_) => {
                    let system = etcd_election::NAME;
                    push(
                        figures,
                        (Measure::Failover, label, system),
                        failover(&url, "etcd-election+", label, system, f).await,
                    );
                    let e = etcdctl::measure(
                        label,
                        &endpoints,
                        Stop::Kill,
                        plan.etcdctl_failover_trials,
                    )
                    .await;
                    push(figures, (Measure::Failover, label, etcdctl::NAME), Ok(e));
                }
                Server::ZooKeeper(_) => {
                    let c = curator::measure(label, curator, &endpoints, Stop::Kill, TTL, f).await;
                    push(figures, (Measure::Failover, label, curator::NAME), Ok(c));
                }
                Server::Redis(_) => {
                    let system = rslock::NAME;
                    push(
                        figures,
                        (Measure::Failover, label, system),
                        failover(&url, "rslock+", label, system, f).await,
                    );
                }
                _ => {}
            }
        }
    }
    if let Server::Kube(_) = d.server {
        figures.extend(unavailable::rows(label));
    }

    for &waiters in &plan.herds {
        let got = herd(d, herd_ttl(d), waiters).await;
        let got = got.map_err(|e| BenchError::from(format!("{waiters} waiters: {e}")));
        push(figures, (Measure::Herd, label, "tenure"), got);
    }

    let url = d.url(SCALE_TTL).unwrap_or_else(|| "memory://".into());
    let s = scale::run(label, &url, plan.scale_keys, plan.scale_window, SCALE_TTL).await;
    push(figures, (Measure::Scale, label, "tenure"), s);
}

/// The herd's TTL: ZooKeeper's is its session timeout, pinged by the
/// client, so the short one does; the others' holders are not renewed.
fn herd_ttl(d: &Deployment) -> Duration {
    match d.server {
        Server::ZooKeeper(_) => TTL,
        _ => HERD_TTL,
    }
}
