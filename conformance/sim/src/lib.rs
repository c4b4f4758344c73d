//! A deterministic simulation of tenure's Elector over the memory backend.
//!
//! The conformance suite runs real candidates against real servers on a
//! loaded machine, and judges the central promise (the holder stops
//! believing it leads *before* anyone else can be granted the lease) when
//! the successor *learns* of its grant, to tens of milliseconds. The drift
//! margin that promise rests on is TTL/50. This crate judges the same
//! promise at the exact instant of every grant, on simulated time, for
//! thousands of seeded fault schedules a second, and replays any failure
//! from its seed.
//!
//! # The world
//!
//! A seed draws a [`Plan`]: 2 to 9 members (processes), 1 to 3 election
//! keys, each member with an elector on one or several of them (identity
//! `m<member>`, the same on every key), one TTL for all (0.5 to 3 s, drift
//! margin TTL/50), a memory server that declares batched renewals in some
//! worlds (its electors then renew on the shared grid), and for each
//! member a clock rate of the server's against the member's: the same,
//! anywhere within the margin, or at its edge ([`ServerClock`]). Everything runs on one current-thread tokio runtime
//! whose clock is paused: time jumps to the next timer when every task
//! waits, so a schedule of tens of simulated seconds takes about a
//! millisecond, and every instant is exact. Electors renew on that runtime
//! ([`RenewOn::CurrentRuntime`](tenure_core::RenewOn)); core's hooks
//! (`tenure_core::simulation`, a hidden feature) seed its back-off and
//! renewal jitter, poll its `select!`s in a fixed order and hand the
//! simulation the renewers it spawns, so the same seed gives the same
//! trace, bit for bit.
//!
//! # The faults
//!
//! Each member has its own client of the server, with its own fault knobs
//! ([`Faults`](tenure_core::memory::Faults)), which the plan sets at random
//! instants ([`LinkState`]): delayed requests and answers (mostly short,
//! sometimes most of a TTL), a partition both ways, answers lost after the
//! server applied the request (an acquire, renewal or release that took
//! without the client knowing), calls refused; resets of a member's
//! connections; and a partition that heals within 2 ms of the deadline of
//! the member's first term to end (a renewal it held is answered just
//! before, at or just after the deadline). Members pause (their tasks,
//! renewers included, freeze while the monotonic clock runs on) and crash
//! (their tasks are dropped without releasing anything) and restart with
//! the same identity. The server restarts (every connection reset at once),
//! answers slowly (every link delayed for a while), and has a key's record
//! deleted by an operator (the holder is told; the next waiter is granted at
//! once, so the wiped terms are not judged at that grant). With
//! [`Options::suspends`], members' hosts are suspended too (tasks frozen,
//! clock stopped while the server's runs on): tenure does not promise
//! safety across that, so those schedules are run apart and never count as
//! passes. The application acts at
//! random instants ([`Action`]): campaign and hold the leadership, resign,
//! drop a `Leadership`, `run` with work, `shutdown()`, `observe()`. Every
//! leader's work checks `is_valid()` before each step and writes through
//! the key's [`Fence`](tenure_core::Fence) with its token. At the plan's
//! heal instant every fault ends, and every key gets a candidate that
//! campaigns for good.
//!
//! # The checks
//!
//! Each runs at the instant its subject happens, and the first failure ends
//! the schedule as a [`Violation`] named by its check:
//!
//! - at every grant of a key (a hook in the memory server, under its lock),
//!   for every other term of that key the application was given:
//!   `overlap`: it is not `is_valid()`; `deadline`: unless its elector
//!   ended it (resigned, shut down, told by the server), its deadline
//!   passed strictly before the grant; `lost`: its `lost()` resolves at
//!   once; `cancelled`: its cancellation token is cancelled; `work`: `run`'s
//!   work for it has been dropped (the last two not for a member paused
//!   now: its tasks cannot run, and its work checks `is_valid()` when it
//!   resumes);
//! - `tokens`: tokens strictly increase per key, as the server grants
//!   them and as the application is given its terms;
//! - `fence`: the fence never accepts a token below one it accepted;
//! - `ended-once`: after every poll of a member's task, none of its terms
//!   that was seen not valid is valid again;
//! - `step-down`: a term ends by itself (expired, revoked, taken over) only
//!   if something disturbed its member during the term;
//! - `shutdown`: when `shutdown()` returns, every term of that elector has
//!   settled (released, or given up after its release failed);
//! - `observe`: `observe()` never reports a leader after the server
//!   granted the key to another, if the observer's link was clean (a round
//!   trip of no time) from the reported leader's grant on;
//! - `hand-over`: a holder that resigns a valid term on a calm link while
//!   candidates wait sees one of them granted by the time its release is
//!   answered;
//! - `herd`: candidates of a key that failed together at a server restart
//!   (four or more) do not all retry at the same instant;
//! - `liveness`: TTL + 2 ms (two round trips on the healed links, which
//!   take no time, at tokio's 1 ms resolution) after the heal, every key
//!   has a holder on the server whose term is valid.
//!
//! # What it does not model (yet)
//!
//! - A member's clock rate is the server's rate against that member's
//!   leases (one tokio clock runs every member); members' clocks do not
//!   differ from each other otherwise.
//! - A paused member's requests already on the wire wait with it (they are
//!   driven by its tasks), where a real network would deliver them.
//! - The server losing all its state without telling the holders
//!   (`MemoryBackend::wipe_all`), and the memory backend's planted bugs of
//!   the conformance suite (they live in its test target, not a library).
//! - Time moves in tokio's 1 ms timer ticks: a bug smaller than a
//!   millisecond, or one that needs two events a fraction of a millisecond
//!   apart, is out of reach.
//! - `observe()` reporting a vacancy the server does not have is not judged
//!   (the server's releases and expiries are not hooked, only its grants).
//!
//! # Replaying
//!
//! [`simulate`] runs one seed; a failing [`Outcome`]'s
//! [`report`](Outcome::report) names the seed, the check, the last events of
//! the trace and the command that replays exactly that schedule:
//! `TENURE_SIM_SEED=<seed> cargo test --workspace --all-features --test simulation`.
//! [`shrink`] drops the faults a failure does not need.

mod executor;
mod gate;
mod judge;
mod link;
mod plan;
mod trace;
mod world;

pub use judge::Violation;
pub use plan::{Action, FaultKind, Happening, LinkState, Plan, Scheduled, ServerClock};
pub use trace::Event;
pub use world::Planting;

use std::sync::Arc;

use judge::Judge;
use tokio::time::Instant;

/// How to run schedules.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The server's clock.
    pub clock: ServerClock,
    /// A bug planted in every elector (to prove the checks catch it).
    pub plant: Option<Planting>,
    /// Suspend members' hosts too (their clocks stop): not a promise of
    /// tenure's, so never part of a run that must pass.
    pub suspends: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            clock: ServerClock::WithinMargin,
            plant: None,
            suspends: false,
        }
    }
}

/// How one schedule went.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Its seed.
    pub seed: u64,
    /// Its faults, by kind.
    pub faults: Vec<FaultKind>,
    /// The first broken promise, if any.
    pub violation: Option<Violation>,
    /// The hash of its whole trace.
    pub trace_hash: u64,
    /// How many events its trace holds.
    pub events: u64,
    /// Its last events, one a line.
    pub tail: Vec<String>,
}

impl Outcome {
    /// What to print for a violation: seed, check, the last events, and
    /// the command that replays it.
    pub fn report(&self) -> String {
        let Some(v) = &self.violation else {
            return format!("seed {}: no violation", self.seed);
        };
        format!(
            "simulation: seed {} broke check `{}` at {:.3}s: {}\n\
             the last {} events of its trace:\n{}\n\
             replay: TENURE_SIM_SEED={} cargo test --workspace --all-features --test simulation",
            self.seed,
            v.check,
            v.at.as_secs_f64(),
            v.detail,
            self.tail.len(),
            self.tail.join("\n"),
            self.seed
        )
    }
}

/// Draws and runs the schedule of `seed`.
pub fn simulate(seed: u64, options: &Options) -> Outcome {
    run(&Plan::draw(seed, options.clock, options.suspends), options)
}

/// Runs `plan` on a runtime of its own, on this thread.
pub fn run(plan: &Plan, options: &Options) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let start = runtime.block_on(async { Instant::now() });
    let judge = Arc::new(Judge::new(start, plan));
    let spawner = judge.clone();
    let world = tenure_core::simulation::install(tenure_core::simulation::World {
        // Core's draws differ from the plan's.
        seed: plan.seed ^ 0x7e57_c0de,
        grid_epoch: start,
        spawner: Box::new(move |task| gate::spawn_for_current(&spawner, task)),
    });
    let world_judge = judge.clone();
    let (plan_owned, plant) = (plan.clone(), options.plant);
    runtime.block_on(executor::run(
        executor::task(async move {
            world::World::new(&plan_owned, plant, world_judge)
                .drive()
                .await
        }),
        plan.seed ^ 0x04de7,
    ));
    judge.close();
    drop(runtime);
    drop(world);
    let (violation, trace_hash, events, tail) = judge.outcome();
    Outcome {
        seed: plan.seed,
        faults: plan.events.iter().filter_map(|e| e.what.fault()).collect(),
        violation,
        trace_hash,
        events,
        tail,
    }
}

/// The plan without every fault that `plan`'s violation of `check` does
/// not need: each fault is dropped in turn, and kept out if the schedule
/// still breaks the same check (at most `tries` runs).
pub fn shrink(plan: &Plan, options: &Options, check: &str, tries: usize) -> Plan {
    let mut plan = plan.clone();
    let mut i = 0;
    let mut runs = 0;
    while i < plan.events.len() && runs < tries {
        if plan.events[i].what.fault().is_none() {
            i += 1;
            continue;
        }
        let mut fewer = plan.clone();
        fewer.events.remove(i);
        runs += 1;
        let broken = run(&fewer, options)
            .violation
            .is_some_and(|v| v.check == check);
        if broken {
            plan = fewer;
        } else {
            i += 1;
        }
    }
    plan
}
