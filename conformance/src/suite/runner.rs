//! Running cases: the context, the safety checks every case ends with,
//! the report, and the locks that keep counting and timing cases quiet.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::RwLock;

use super::context::{Cx, Failure, Step};
use super::CASES;
use crate::factory::BackendFactory;
use crate::report::{self, CaseReport, Outcome, Property};

/// How a case is run.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// The case's name.
    pub name: &'static str,
    /// The contract point(s) it checks.
    pub contract: &'static str,
    /// What else may run in this process meanwhile.
    pub quiet: Quiet,
}

impl Meta {
    /// A case that may run beside any other ([`Quiet::Shared`]).
    pub const fn shared(name: &'static str, contract: &'static str) -> Meta {
        Meta {
            name,
            contract,
            quiet: Quiet::Shared,
        }
    }

    /// A case that runs alone among its backend's ([`Quiet::Backend`]).
    pub const fn backend(name: &'static str, contract: &'static str) -> Meta {
        Meta {
            name,
            contract,
            quiet: Quiet::Backend,
        }
    }

    /// A case that runs alone on the machine ([`Quiet::Machine`]).
    pub const fn machine(name: &'static str, contract: &'static str) -> Meta {
        Meta {
            name,
            contract,
            quiet: Quiet::Machine,
        }
    }
}

/// What else may run while a case runs (cases of one test binary run in parallel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiet {
    /// Anything: the case checks behaviour, not counts or latencies.
    Shared,
    /// No other case of the same backend: the case counts server writes or
    /// faults the servers themselves.
    Backend,
    /// No other case at all, of any backend: the case times latencies that
    /// are reported as figures, and on a machine with two cores a fault case
    /// of another cluster running alongside would be measured too.
    Machine,
}

/// The lock every case takes first: shared, exclusively by [`Quiet::Machine`] cases.
fn machine_lock() -> &'static RwLock<()> {
    static LOCK: OnceLock<RwLock<()>> = OnceLock::new();
    LOCK.get_or_init(RwLock::default)
}

/// One lock per backend name: counting cases take it exclusively, others shared.
fn quiet_lock(backend: &str) -> Arc<RwLock<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<RwLock<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    locks.entry(backend.to_owned()).or_default().clone()
}

/// Every factory a case has run on in this process, by name.
fn factories() -> &'static Mutex<HashMap<String, Arc<dyn BackendFactory>>> {
    static FACTORIES: OnceLock<Mutex<HashMap<String, Arc<dyn BackendFactory>>>> = OnceLock::new();
    FACTORIES.get_or_init(Mutex::default)
}

/// Lets go of every factory [`run_case`] has seen, so that dropping a
/// binary's targets drops their deployments (and removes their containers).
pub(crate) fn forget_factories() {
    factories()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
}

/// [`BackendFactory::quiesce`] on `these`; a failure is logged, not fatal
/// (the case then runs on a busier machine).
async fn quiesce(these: Vec<Arc<dyn BackendFactory>>) {
    for factory in these {
        if let Err(error) = factory.quiesce().await {
            tracing::warn!(factory = factory.name(), %error, "could not quiesce");
        }
    }
}

/// Runs `body` as case `meta` on `factory`, then the safety checks every
/// case ends with (no overlapping terms, no stale write accepted).
pub async fn run_case<F, Fut>(factory: Arc<dyn BackendFactory>, meta: Meta, body: F) -> CaseReport
where
    F: FnOnce(Cx) -> Fut,
    Fut: Future<Output = Step>,
{
    let asked = std::time::Instant::now();
    // Always the machine lock first, then the backend's: no lock cycle.
    let (_machine_shared, _machine_alone) = match meta.quiet {
        Quiet::Machine => (None, Some(machine_lock().write().await)),
        _ => (Some(machine_lock().read().await), None),
    };
    // Then across processes: other test binaries may run side by side. An
    // in-process server's timing is not theirs to skew.
    let alone_across = meta.quiet == Quiet::Machine && !factory.timing().in_process;
    let _machine_across = super::machine_lock::MachineLock::take(alone_across).await;
    let lock = quiet_lock(factory.name());
    let (_shared, _alone) = match meta.quiet {
        Quiet::Backend => (None, Some(lock.write_owned().await)),
        Quiet::Shared => (Some(lock.read_owned().await), None),
        Quiet::Machine => (None, None),
    };
    let others: Vec<_> = {
        let mut known = factories().lock().unwrap_or_else(|e| e.into_inner());
        known
            .entry(factory.name().to_owned())
            .or_insert_with(|| factory.clone());
        known.values().cloned().collect()
    };
    match meta.quiet {
        Quiet::Machine => quiesce(others).await,
        Quiet::Backend => quiesce(vec![factory.clone()]).await,
        Quiet::Shared => {}
    }
    let started = std::time::Instant::now();
    let waited = started.duration_since(asked);
    let backend = factory.name().to_owned();
    let server = factory.server_version().await;
    let cx = Cx::new(factory, meta.name);
    let ended = match body(cx.clone()).await {
        Ok(()) => finish_safety(&cx),
        Err(e) => {
            let _ = finish_safety(&cx);
            Err(e)
        }
    };
    // A case that may have faulted the servers leaves them whole and steady
    // for the next (it still holds the backend's lock).
    let ended = match (meta.quiet, cx.factory().servers()) {
        (Quiet::Backend | Quiet::Machine, Some(servers)) => match servers.settle().await {
            Ok(()) => ended,
            Err(e) => ended.and(Err(Failure::Fail(format!(
                "the servers did not settle after the case: {e}"
            )))),
        },
        _ => ended,
    };
    let log = std::mem::take(&mut *cx.log());
    let broken = log.violations.iter().find(|v| v.promised);
    let outcome = match (ended, broken) {
        (Err(Failure::Fail(why)), _) => Outcome::Fail(why),
        (_, Some(v)) => Outcome::Fail(format!("{}: {}", v.property, v.detail)),
        (Err(Failure::Skip(why)), None) => Outcome::Skipped(why),
        (Ok(()), None) if !log.violations.is_empty() => Outcome::Recorded,
        (Ok(()), None) => Outcome::Pass,
    };
    CaseReport {
        backend,
        server,
        case: meta.name.to_owned(),
        contract: meta.contract.to_owned(),
        outcome,
        checks_passed: log.passed,
        violations: log.violations,
        figures: log.figures,
        notes: log.notes,
        elapsed_ms: started.elapsed().as_millis() as u64,
        waited_ms: waited.as_millis() as u64,
        finished_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64,
    }
}

/// The checks every case that recorded terms or writes ends with. Both
/// figures are taken before either check, so that a case that failed on an
/// overlap still reports its stale writes. Overlaps are those of the
/// recorded intervals and those the witness at each grant saw (a term
/// still claiming validity when another was granted).
fn finish_safety(cx: &Cx) -> Step {
    let overlaps = (cx.safety().len() >= 2).then(|| {
        let mut found = cx.safety().overlaps(cx.in_flight_allowance());
        found.extend(cx.safety().witnessed_overlaps());
        found
    });
    if let Some(overlaps) = &overlaps {
        cx.figures(|f| f.overlaps = Some(overlaps.len() as u64));
    }
    let (accepted, refused) = cx.store().counts();
    let (stale_accepted, fresh_refused) = cx.store().violations();
    if accepted + refused > 0 {
        cx.figures(|f| {
            f.stale_writes_refused = Some(refused);
            f.stale_writes_accepted = Some(stale_accepted.len() as u64);
        });
    }
    if let Some(overlaps) = overlaps {
        cx.check(Property::Exclusive, overlaps.is_empty(), || {
            overlaps.join("; ")
        })?;
    }
    if accepted + refused > 0 {
        cx.check(Property::Fencing, stale_accepted.is_empty(), || {
            stale_accepted.join("; ")
        })?;
        cx.check(Property::Fencing, fresh_refused.is_empty(), || {
            fresh_refused.join("; ")
        })?;
    }
    Ok(())
}

/// Records a case's report under `target/conformance/` (on a blocking thread).
pub(crate) async fn record(report: &CaseReport) {
    let owned = report.clone();
    match tokio::task::spawn_blocking(move || report::record(&owned)).await {
        Ok(Ok(path)) => println!("{}\n(report: {})", report::row(report), path.display()),
        Ok(Err(e)) => eprintln!("cannot write the conformance report: {e}"),
        Err(e) => eprintln!("cannot write the conformance report: {e}"),
    }
}

/// Runs one case on `factory`, records it, and panics if it failed: for a
/// single case in a `#[tokio::test]` of your own. A skip passes there (the
/// report says why); [`run_targets`](crate::run_targets) shows it as ignored.
pub async fn run_one<F, C, Fut>(factory: F, case: C)
where
    F: BackendFactory,
    C: FnOnce(Arc<dyn BackendFactory>) -> Fut,
    Fut: Future<Output = CaseReport>,
{
    let report = case(Arc::new(factory)).await;
    record(&report).await;
    report.assert_ok();
}

/// Runs every case one after another, records each, prints the table and
/// returns the reports (check them with [`CaseReport::ok`]).
pub async fn run_all(factory: Arc<dyn BackendFactory>) -> Vec<CaseReport> {
    let mut reports = Vec::new();
    for case in CASES {
        let report = (case.run)(factory.clone()).await;
        record(&report).await;
        reports.push(report);
    }
    println!("{}", report::markdown(factory.name(), &reports));
    reports
}
