//! Running the suite as a test binary of its own (`harness = false`), with
//! [libtest-mimic]: one trial per case and deployment, a deployment started
//! once and shared by its cases, skips shown as `ignored` with their reason.
//!
//! ```no_run
//! // tests/mybackend.rs, with `[[test]] name = "mybackend" harness = false`
//! use std::sync::Arc;
//! use tenure_conformance::{BackendFactory, MemoryFactory, Target};
//!
//! fn main() -> std::process::ExitCode {
//!     tenure_conformance::run_targets(vec![Target::new("", || async {
//!         Arc::new(MemoryFactory::new()) as Arc<dyn BackendFactory>
//!     })
//!     .expect_skips(&["cluster_restart_tokens_keep_increasing"])])
//! }
//! ```
//!
//! A case that skips shows as `ignored` with why, and must be one the target
//! lists with [`Target::expect_skips`]: an unexpected skip fails, and so does
//! a listed case that runs. Cases that check `tenure-core` alone (the
//! Elector's own input checks) run only where the target asks for them
//! ([`Target::with_core_cases`]).
//!
//! [libtest-mimic]: https://docs.rs/libtest-mimic

use std::collections::HashSet;
use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
pub use libtest_mimic::Trial;
use libtest_mimic::{Arguments, Completion, Failed};
use tokio::sync::OnceCell;

use crate::factory::BackendFactory;
use crate::report::{CaseReport, Outcome};
use crate::suite::{Case, CASES};

type Start = Box<dyn Fn() -> BoxFuture<'static, Arc<dyn BackendFactory>> + Send + Sync>;

/// A test of a target's own, run on its shared deployment: see
/// [`Target::with_trial`]. It fails with the message it returns.
pub type TargetTrial = fn(Arc<dyn BackendFactory>) -> BoxFuture<'static, Result<(), String>>;

/// One deployment of a backend that the suite runs on (a 1-node cluster, a
/// 3-node one), and what to expect of it.
pub struct Target {
    group: String,
    start: Start,
    expected_skips: HashSet<&'static str>,
    broken: Vec<(&'static str, &'static str)>,
    trials: Vec<(&'static str, TargetTrial)>,
    unavailable: Option<String>,
    core_cases: bool,
    factory: OnceCell<Result<Arc<dyn BackendFactory>, String>>,
}

impl Target {
    /// A deployment whose trials are named `<group>::<case>` (just `<case>`
    /// for an empty group), started by `start` when its first case runs and
    /// shared by all its cases.
    pub fn new<F, Fut>(group: impl Into<String>, start: F) -> Target
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Arc<dyn BackendFactory>> + Send + 'static,
    {
        Target {
            group: group.into(),
            start: Box::new(move || start().boxed()),
            expected_skips: HashSet::new(),
            broken: Vec::new(),
            trials: Vec::new(),
            unavailable: None,
            core_cases: false,
            factory: OnceCell::new(),
        }
    }

    /// The cases this deployment cannot run (they skip, with their reason);
    /// any other skip fails.
    pub fn expect_skips(mut self, cases: &[&'static str]) -> Target {
        self.expected_skips.extend(cases.iter().copied());
        self
    }

    /// Cases the backend documents it may fail (`(case, why)`), such as
    /// Redlock's split brain when every master restarts without
    /// persistence while a lease is held (whether it shows depends on how
    /// long the restart takes against the TTL). Such a case still runs; its
    /// trial passes if the case passes, or fails only by two candidates
    /// leading at once or a stale write getting in (the documented way), and
    /// fails for any other failure.
    pub fn expect_broken(mut self, cases: &[(&'static str, &'static str)]) -> Target {
        self.broken.extend_from_slice(cases);
        self
    }

    /// A test of the target's own, `<group>::<name>`, run on this
    /// deployment (started once, shared with the suite's cases) on the
    /// suite's runtime, listed after the suite's cases. It should run its steps as [`run_case`](crate::suite::run_case)
    /// cases with [`Quiet::Backend`](crate::suite::Quiet) where it faults
    /// the servers, so that no other case of the deployment runs meanwhile.
    pub fn with_trial(mut self, name: &'static str, run: TargetTrial) -> Target {
        self.trials.push((name, run));
        self
    }

    /// Also runs, as trials of their own (`<group>::planted::<bug>`), the
    /// client-side `bugs` of [`planted`](crate::planted) over this
    /// deployment's clients ([`Planted::ALL`](crate::planted::Planted::ALL),
    /// less those that are no bug on these servers): each trial passes when
    /// the case written for its bug fails on it, as it must.
    pub fn with_planted_bugs(mut self, bugs: &[crate::planted::Planted]) -> Target {
        self.trials.extend(bugs.iter().map(|bug| bug.trial()));
        self
    }

    /// Skips every case of this deployment, with `why` (a deployment that
    /// cannot be had here); nothing is started.
    pub fn unavailable(mut self, why: impl Into<String>) -> Target {
        self.unavailable = Some(why.into());
        self
    }

    /// Also runs the cases that check `tenure-core` alone (the memory
    /// backend's target does; a backend's need not).
    pub fn with_core_cases(mut self) -> Target {
        self.core_cases = true;
        self
    }

    fn trial_name(&self, case: &str) -> String {
        if self.group.is_empty() {
            case.to_owned()
        } else {
            format!("{}::{case}", self.group)
        }
    }

    fn cases(&self) -> impl Iterator<Item = &'static Case> + '_ {
        CASES.iter().filter(|c| self.core_cases || !c.core_only)
    }

    async fn factory(&self) -> Result<Arc<dyn BackendFactory>, String> {
        self.factory
            .get_or_init(|| async {
                match tokio::spawn((self.start)()).await {
                    Ok(factory) => Ok(factory),
                    Err(e) => Err(format!("starting the deployment failed: {e}")),
                }
            })
            .await
            .clone()
    }

    /// How one case's report ends its trial.
    fn conclude(&self, report: &CaseReport) -> Result<Completion, Failed> {
        if let Some((_, why)) = self.broken.iter().find(|(c, _)| *c == report.case) {
            return match &report.outcome {
                Outcome::Skipped(skip) => Err(format!(
                    "{} is documented as unsafe ({why}) but skipped: {skip}",
                    report.case
                )
                .into()),
                Outcome::Fail(failure)
                    if failure.starts_with("exclusive") || failure.starts_with("fencing") =>
                {
                    println!("{}: fails as documented ({why}): {failure}", report.case);
                    Ok(Completion::Completed)
                }
                Outcome::Fail(failure) => Err(format!(
                    "{} failed otherwise than documented ({why}): {failure}",
                    report.case
                )
                .into()),
                Outcome::Pass | Outcome::Recorded => Ok(Completion::Completed),
            };
        }
        let expected = self.expected_skips.contains(report.case.as_str());
        match (&report.outcome, expected) {
            (Outcome::Skipped(why), true) => Ok(Completion::ignored_with(why)),
            (Outcome::Skipped(why), false) => Err(format!(
                "unexpected skip ({why}): the target does not list {} among its expected skips",
                report.case
            )
            .into()),
            (_, true) if report.ok() => Err(format!(
                "{} ran although the target lists it as an expected skip: remove it from the list",
                report.case
            )
            .into()),
            _ => match report.failure() {
                None => Ok(Completion::Completed),
                Some(failure) => Err(failure.into()),
            },
        }
    }
}

/// The variable that splits a suite binary's run in two:
/// `untimed` runs every trial but the cases timed alone on the machine,
/// `timed` only those. scripts/test runs the suites' untimed trials side by
/// side, then their timing cases one binary after another, so that no
/// timing case waits for other binaries' cases to drain (and holds up every
/// other case while it waits).
pub const PHASE_VAR: &str = "TENURE_SUITE_CASES";

/// Which trials a run takes: see [`PHASE_VAR`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    All,
    Untimed,
    Timed,
}

impl Phase {
    fn from_env() -> Result<Phase, String> {
        Phase::parse(std::env::var_os(PHASE_VAR).as_deref())
    }

    fn parse(value: Option<&std::ffi::OsStr>) -> Result<Phase, String> {
        match value.map(|v| v.to_str()) {
            None => Ok(Phase::All),
            Some(Some("")) => Ok(Phase::All),
            Some(Some("untimed")) => Ok(Phase::Untimed),
            Some(Some("timed")) => Ok(Phase::Timed),
            Some(_) => Err(format!(
                "{PHASE_VAR}={:?}: expected `untimed`, `timed`, or unset (every trial)",
                value.unwrap_or_default()
            )),
        }
    }

    /// Why a trial (a timing case or not) is left to the other phase, if it is.
    fn elsewhere(self, timed_alone: bool) -> Option<String> {
        match (self, timed_alone) {
            (Phase::Untimed, true) => Some(format!(
                "a timing case: run with {PHASE_VAR}=timed (scripts/test's last phase)"
            )),
            (Phase::Timed, false) => Some(format!(
                "not a timing case: run with {PHASE_VAR}=untimed (scripts/test's first phase)"
            )),
            _ => None,
        }
    }
}

/// Runs the suite on `targets` as libtest does with tests (filters, `--list`,
/// `--test-threads`, `--exact` ...), records every case under
/// `target/conformance/`, and returns the exit code. Each target's
/// deployment is started when its first case runs, and removed when all
/// are done.
pub fn run_targets(targets: Vec<Target>) -> ExitCode {
    run_targets_with(targets, Vec::new())
}

/// [`run_targets`], with further tests of the binary's own (see
/// [`async_trial`]) run beside the suite's cases.
pub fn run_targets_with(targets: Vec<Target>, tests: Vec<Trial>) -> ExitCode {
    let args = Arguments::from_args();
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime for the suite"),
    );
    let targets: Vec<Arc<Target>> = targets.into_iter().map(Arc::new).collect();
    let phase = match Phase::from_env() {
        Ok(phase) => phase,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut trials = Vec::new();
    // The timing cases that want the machine to themselves come last: by
    // then other test binaries run side by side (scripts/test's lanes) are
    // likely done, and waiting for them holds up no other case.
    let mut order: Vec<(&Arc<Target>, &'static Case)> = targets
        .iter()
        .flat_map(|t| t.cases().map(move |c| (t, c)))
        .collect();
    order.sort_by_key(|(_, case)| case.timed_alone);
    for (target, case) in order {
        let name = target.trial_name(case.name);
        let why = phase
            .elsewhere(case.timed_alone)
            .or_else(|| target.unavailable.clone());
        if let Some(why) = why {
            trials.push(Trial::ignorable_test(name, move || {
                Ok(Completion::ignored_with(why))
            }));
            continue;
        }
        let (target, runtime) = (target.clone(), runtime.clone());
        trials.push(Trial::ignorable_test(name, move || {
            runtime.block_on(async {
                let factory = target.factory().await.map_err(Failed::from)?;
                let report = (case.run)(factory).await;
                crate::suite::record(&report).await;
                target.conclude(&report)
            })
        }));
    }
    for target in &targets {
        for &(name, run) in &target.trials {
            let trial_name = target.trial_name(name);
            let why = phase
                .elsewhere(false)
                .or_else(|| target.unavailable.clone());
            if let Some(why) = why {
                trials.push(Trial::ignorable_test(trial_name, move || {
                    Ok(Completion::ignored_with(why))
                }));
                continue;
            }
            let (target, runtime) = (target.clone(), runtime.clone());
            trials.push(Trial::test(trial_name, move || {
                runtime.block_on(async {
                    let factory = target.factory().await.map_err(Failed::from)?;
                    run(factory).await.map_err(Failed::from)
                })
            }));
        }
    }
    match phase.elsewhere(false) {
        None => trials.extend(tests),
        Some(why) => trials.extend(tests.into_iter().map(|test| {
            let why = why.clone();
            Trial::ignorable_test(test.name().to_owned(), move || {
                Ok(Completion::ignored_with(why))
            })
        })),
    }
    let conclusion = libtest_mimic::run(&args, trials);
    // The deployments go now (their containers are removed on drop), in
    // the runtime's context for what their clients leave to it.
    let _context = runtime.enter();
    crate::suite::runner::forget_factories();
    drop(targets);
    conclusion.exit_code()
}

/// A test of the binary's own for [`run_targets_with`], as
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` would run
/// it: on a runtime of its own, failed by a panic.
pub fn async_trial(name: impl Into<String>, test: fn() -> BoxFuture<'static, ()>) -> Trial {
    Trial::test(name, move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Failed::from(format!("a tokio runtime for the test: {e}")))?;
        let ran =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(test())));
        ran.map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "the test panicked".to_owned());
            Failed::from(why)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Figures;

    fn report(case: &str, outcome: Outcome) -> CaseReport {
        CaseReport {
            backend: "b".into(),
            server: None,
            case: case.into(),
            contract: "9".into(),
            outcome,
            checks_passed: 0,
            violations: Vec::new(),
            figures: Figures::default(),
            notes: Vec::new(),
            elapsed_ms: 0,
            waited_ms: 0,
            finished_unix_ms: 0,
        }
    }

    #[test]
    fn the_phase_variable_names_one_half_or_none_and_anything_else_is_an_error() {
        use std::ffi::OsStr;
        assert_eq!(Phase::parse(None), Ok(Phase::All));
        assert_eq!(Phase::parse(Some(OsStr::new(""))), Ok(Phase::All));
        assert_eq!(
            Phase::parse(Some(OsStr::new("untimed"))),
            Ok(Phase::Untimed)
        );
        assert_eq!(Phase::parse(Some(OsStr::new("timed"))), Ok(Phase::Timed));
        let wrong = Phase::parse(Some(OsStr::new("Timed"))).unwrap_err();
        assert!(
            wrong.contains(PHASE_VAR) && wrong.contains("\"Timed\""),
            "{wrong}"
        );
        // Each half leaves the other's trials, saying where they run.
        assert!(Phase::Untimed
            .elsewhere(true)
            .is_some_and(|w| w.contains("=timed")));
        assert_eq!(Phase::Untimed.elsewhere(false), None);
        assert!(Phase::Timed
            .elsewhere(false)
            .is_some_and(|w| w.contains("=untimed")));
        assert_eq!(Phase::Timed.elsewhere(true), None);
        assert_eq!(Phase::All.elsewhere(true), None);
        assert_eq!(Phase::All.elsewhere(false), None);
    }

    fn target() -> Target {
        Target::new("t", || async {
            Arc::new(crate::MemoryFactory::new()) as Arc<dyn BackendFactory>
        })
        .expect_broken(&[("restart", "forgets leases")])
        .expect_skips(&["skipped"])
    }

    #[test]
    fn a_case_documented_as_broken_passes_its_trial_only_by_failing_the_documented_way() {
        let t = target();
        let fail = |why: &str| report("restart", Outcome::Fail(why.into()));
        assert!(t
            .conclude(&fail("exclusive: a still valid after b began"))
            .is_ok());
        assert!(t.conclude(&fail("fencing: a wrote after b")).is_ok());
        assert!(t.conclude(&report("restart", Outcome::Pass)).is_ok());
        assert!(t
            .conclude(&fail("b's grant after the restart: nothing after 2s"))
            .is_err());
        assert!(t
            .conclude(&report("restart", Outcome::Skipped("no servers".into())))
            .is_err());
        // Any other case fails by failing, as before.
        assert!(t
            .conclude(&report("other", Outcome::Fail("exclusive: overlap".into())))
            .is_err());
        assert!(t
            .conclude(&report("skipped", Outcome::Skipped("why".into())))
            .is_ok());
        assert!(t
            .conclude(&report("other", Outcome::Skipped("why".into())))
            .is_err());
    }
}
