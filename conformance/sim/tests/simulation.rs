//! The simulation's test target: ten thousand seeded fault schedules (or
//! `TENURE_SIM_SEEDS`), one replayed (`TENURE_SIM_SEED`), the same seed
//! twice, a server clock beyond the margin, and every planted Elector bug
//! caught. See the crate's doc for the world, the faults and the checks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tenure_core::ElectorBug;
use tenure_sim::{shrink, simulate, FaultKind, Options, Outcome, Plan, Planting, ServerClock};

/// Schedules per run without `TENURE_SIM_SEEDS`.
const SCHEDULES: u64 = 10_000;

/// Prints `line` past libtest's capture: the figures show in every run.
fn show(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// Runs `seeds` on every core, each seed once; the outcomes with a
/// violation, the faults by kind, and the events.
fn run_all(
    seeds: std::ops::Range<u64>,
    options: &Options,
) -> (Vec<Outcome>, BTreeMap<FaultKind, u64>, u64) {
    let next = AtomicU64::new(seeds.start);
    let found = Mutex::new((Vec::new(), BTreeMap::new(), 0u64));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= seeds.end {
                    return;
                }
                let outcome = simulate(seed, options);
                let mut found = found.lock().unwrap();
                for kind in &outcome.faults {
                    *found.1.entry(*kind).or_insert(0) += 1;
                }
                found.2 += outcome.events;
                if outcome.violation.is_some() {
                    found.0.push(outcome);
                }
            });
        }
    });
    let (mut violations, faults, events) = found.into_inner().unwrap();
    violations.sort_by_key(|o| o.seed);
    (violations, faults, events)
}

#[test]
fn every_schedule_keeps_every_promise() {
    let options = Options::default();
    if let Some(seed) = env_u64("TENURE_SIM_SEED") {
        let outcome = simulate(seed, &options);
        println!(
            "seed {seed}: {} events, trace hash {:016x}",
            outcome.events, outcome.trace_hash
        );
        println!("{}", outcome.tail.join("\n"));
        assert!(outcome.violation.is_none(), "{}", outcome.report());
        return;
    }
    let count = env_u64("TENURE_SIM_SEEDS").unwrap_or(SCHEDULES);
    let first = env_u64("TENURE_SIM_FIRST_SEED").unwrap_or(0);
    let started = Instant::now();
    let (violations, faults, events) = run_all(first..first + count, &options);
    let took = started.elapsed().as_secs_f64();
    let total: u64 = faults.values().sum();
    let by_kind: Vec<String> = FaultKind::ALL
        .iter()
        .map(|k| format!("{} {}", faults.get(k).copied().unwrap_or(0), k.name()))
        .collect();
    show(&format!(
        "simulation: {count} schedules, {total} faults, {} violations in {took:.1} s \
         ({:.0} schedules/s, {events} events; faults: {})",
        violations.len(),
        count as f64 / took,
        by_kind.join(", ")
    ));
    let mut checks: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for o in &violations {
        let check = o.violation.as_ref().map_or("", |v| v.check);
        checks.entry(check).or_default().push(o.seed);
    }
    if std::env::var("TENURE_SIM_LIST").is_ok() {
        for o in &violations {
            let v = o.violation.as_ref().unwrap();
            println!("seed {}: {}: {}", o.seed, v.check, v.detail);
        }
    }
    for (check, seeds) in &checks {
        println!(
            "check `{check}` broken by {} schedules, seeds {:?}",
            seeds.len(),
            &seeds[..seeds.len().min(10)]
        );
    }
    if let Some(first) = violations.first() {
        let plan = Plan::draw(first.seed, options.clock, options.suspends);
        let check = first.violation.as_ref().map_or("", |v| v.check);
        let shrunk = shrink(&plan, &options, check, 40);
        let needed: Vec<String> = shrunk
            .events
            .iter()
            .filter(|e| e.what.fault().is_some())
            .map(|e| format!("  {:.3}s {:?}", e.at.as_secs_f64(), e.what))
            .collect();
        let again = tenure_sim::run(&shrunk, &options);
        let detail = again.violation.map_or_else(String::new, |v| {
            format!("{:.3}s: {}", v.at.as_secs_f64(), v.detail)
        });
        panic!(
            "{} of {count} schedules broke a promise (seeds {:?}); the first:\n{}\n\
             seed {} without its faults but these {} of {} breaks `{check}` too ({detail}):\n{}",
            violations.len(),
            violations
                .iter()
                .map(|o| o.seed)
                .take(20)
                .collect::<Vec<_>>(),
            first.report(),
            first.seed,
            needed.len(),
            plan.faults(),
            needed.join("\n")
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let options = Options::default();
    let mut hashes = std::collections::BTreeSet::new();
    for seed in 0..30 {
        let (a, b) = (simulate(seed, &options), simulate(seed, &options));
        assert_eq!(
            (a.trace_hash, a.events),
            (b.trace_hash, b.events),
            "seed {seed} ran twice gave two traces; the first ends:\n{}\nthe second:\n{}",
            a.tail.join("\n"),
            b.tail.join("\n")
        );
        hashes.insert(a.trace_hash);
    }
    assert_eq!(hashes.len(), 30, "different seeds gave the same trace");
}

/// Runs seeds from 0 until one breaks a promise that the same seed keeps
/// without the change `options` make; how many seeds it took. The check
/// that catches it must be one of `checks`.
fn seeds_to_first_catch(name: &str, options: &Options, limit: u64, checks: &[&str]) -> u64 {
    let started = Instant::now();
    for seed in 0..limit {
        let outcome = simulate(seed, options);
        if let Some(v) = &outcome.violation {
            if simulate(seed, &Options::default()).violation.is_some() {
                continue; // broken without the change too: not its catch
            }
            show(&format!(
                "{name}: caught by seed {seed} ({} seeds, {:.2} s), check `{}`: {}",
                seed + 1,
                started.elapsed().as_secs_f64(),
                v.check,
                v.detail
            ));
            println!("{}", outcome.report());
            assert!(
                checks.contains(&v.check),
                "{name} was caught by check `{}`, not by {checks:?}",
                v.check
            );
            return seed + 1;
        }
    }
    panic!("{name}: not caught in {limit} seeds");
}

fn caught(name: &str, plant: Planting, checks: &[&str]) -> u64 {
    let options = Options {
        plant: Some(plant),
        ..Options::default()
    };
    seeds_to_first_catch(name, &options, 1_000, checks)
}

#[test]
fn a_server_clock_beyond_the_margin_breaks_the_promise() {
    let options = Options {
        clock: ServerClock::BeyondMargin,
        ..Options::default()
    };
    seeds_to_first_catch(
        "server clock 1 ms beyond the margin",
        &options,
        1_000,
        &["overlap", "deadline"],
    );
}

/// Host suspends (the clock stops too) are not a promise of tenure's: the
/// schedules with them are run apart, their broken promises counted, and
/// never taken as passes. Some must break one, or the simulation could not
/// tell.
#[test]
fn suspended_hosts_are_counted_apart() {
    let options = Options {
        suspends: true,
        ..Options::default()
    };
    let (broken, _, _) = run_all(0..1_000, &options);
    let by_suspend: Vec<&Outcome> = broken
        .iter()
        .filter(|o| simulate(o.seed, &Options::default()).violation.is_none())
        .collect();
    show(&format!(
        "suspends: 1000 schedules with suspended hosts, {} broke a promise that the same \
         schedule without them keeps (not guaranteed, not counted as passes); {} broke one anyway",
        by_suspend.len(),
        broken.len() - by_suspend.len()
    ));
    if let Some(first) = by_suspend.first() {
        println!("{}", first.report());
    }
    assert!(
        !by_suspend.is_empty(),
        "no suspend broke a promise: the simulation cannot see them"
    );
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn mutant_release_before_end() {
    caught(
        "ReleaseBeforeEnd",
        |_, _| ElectorBug::ReleaseBeforeEnd,
        &["overlap"],
    );
}

#[test]
fn mutant_lost_late_by_a_millisecond() {
    caught("LostLate(1 ms)", |_, _| ElectorBug::LostLate(MS), &["lost"]);
}

#[test]
fn mutant_run_not_cancelled() {
    caught(
        "RunNotCancelled",
        |_, _| ElectorBug::RunNotCancelled,
        &["work", "liveness"],
    );
}

#[test]
fn mutant_shutdown_early() {
    caught(
        "ShutdownEarly",
        |_, _| ElectorBug::ShutdownEarly,
        &["shutdown"],
    );
}

#[test]
fn mutant_renew_from_answer() {
    caught(
        "RenewFromAnswer",
        |_, _| ElectorBug::RenewFromAnswer,
        &["overlap", "deadline"],
    );
}

#[test]
fn mutant_deadline_late_by_a_millisecond() {
    caught(
        "DeadlineLate(1 ms)",
        |_, _| ElectorBug::DeadlineLate(MS),
        &["deadline", "overlap"],
    );
}

#[test]
fn mutant_work_dropped_a_millisecond_after_the_next_grant() {
    // Dropped 1 ms after the deadline: 1 ms after a grant that the term's
    // own release at the deadline brings about.
    caught(
        "WorkDroppedLate(1 ms)",
        |_, _| ElectorBug::WorkDroppedLate(MS),
        &["work"],
    );
}

#[test]
fn mutant_renewal_accepted_past_the_deadline() {
    caught(
        "RenewalAcceptedLate(1 ms)",
        |_, _| ElectorBug::RenewalAcceptedLate(MS),
        &["ended-once"],
    );
}

#[test]
fn mutant_backoff_without_jitter() {
    caught(
        "BackoffWithoutJitter",
        |_, _| ElectorBug::BackoffWithoutJitter,
        &["herd"],
    );
}
