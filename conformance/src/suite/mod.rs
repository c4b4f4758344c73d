//! The cases: one `pub async fn` per MUST of the contract, each named for
//! the behaviour it checks, each returning a [`CaseReport`].

pub mod acquire;
mod candidate;
mod checks;
pub mod contention;
mod context;
pub mod cutoff;
pub mod deadline;
pub mod dropped;
pub mod elector;
pub mod expiry;
mod faults;
pub mod handover;
pub mod herd;
pub mod history;
pub mod input;
mod machine_lock;
pub mod nested;
pub mod nodes;
pub mod observer;
pub mod outage;
pub mod paused;
pub mod process;
pub mod release;
pub mod renew;
pub mod restart;
pub(crate) mod runner;
mod safety;
pub mod servers;
pub mod shrunk;
pub mod shutdown;
pub mod tokens;
pub mod transient;
pub mod watch;
mod watcher;

use std::sync::Arc;

use futures::future::BoxFuture;

pub use candidate::{elector as elector_for, Holder, Leader, Standby};
pub use contention::{RACERS, STANDBYS};
#[doc(hidden)]
pub use context::{with_elector_hook, ElectorHook};
pub use context::{Context, Cx, Failure, Step};
pub use faults::RECOVERY;
pub use handover::{HANDOVERS, WARMUP};
pub use herd::HERD;
pub use observer::observed_within;
pub(crate) use runner::record;
pub use runner::{run_all, run_case, run_one, Meta, Quiet};
pub use safety::{FencedStore, SafetyRecorder, TermId, TermRecord, Write};
pub use watcher::Watcher;

use crate::factory::BackendFactory;
use crate::report::CaseReport;

/// A case of the suite, by name.
#[derive(Clone, Copy)]
pub struct Case {
    /// The case's function name (also the generated test's name).
    pub name: &'static str,
    /// Runs it.
    pub run: fn(Arc<dyn BackendFactory>) -> BoxFuture<'static, CaseReport>,
    /// It checks `tenure-core` alone (the Elector's and the types' own input
    /// checks), whatever the backend: worth running on one backend only.
    pub core_only: bool,
    /// It times latencies with nothing else running on the machine
    /// ([`Quiet::Machine`](runner::Quiet)): a target runs these after all
    /// its other cases.
    pub timed_alone: bool,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

macro_rules! case_table {
    (@core core) => { true };
    (@core) => { false };
    ($( $module:ident :: $case:ident : $quiet:ident $contract:literal $($core:ident)? ),* $(,)?) => {
        $(
            #[doc = concat!(
                "Runs the case [`", stringify!($module), "::", stringify!($case),
                "`] against the factory's backend (contract point(s) ", $contract, ")."
            )]
            pub async fn $case(factory: Arc<dyn BackendFactory>) -> CaseReport {
                run_case(factory, Meta::$quiet(stringify!($case), $contract), $module::$case).await
            }
        )*
        /// Every case, in report order.
        pub static CASES: &[Case] = &[ $( Case {
            name: stringify!($case),
            run: |f| Box::pin($case(f)),
            core_only: case_table!(@core $($core)?),
            timed_alone: matches!(Meta::$quiet("", "").quiet, Quiet::Machine),
        } ),* ];
        /// Every case's name, in report order.
        pub static CASE_NAMES: &[&str] = &[ $( stringify!($case) ),* ];
    };
}
crate::__cases!(case_table);
