//! The cases: one `pub async fn` per MUST of the contract, each named for
//! the behaviour it checks, each returning a [`CaseReport`].

mod acquire;
mod candidate;
mod contention;
mod context;
mod cutoff;
mod deadline;
mod dropped;
mod elector;
mod expiry;
mod faults;
mod handover;
mod herd;
mod history;
mod input;
mod machine_lock;
mod nested;
mod nodes;
mod observer;
mod paused;
mod process;
mod release;
mod renew;
mod restart;
pub(crate) mod runner;
mod safety;
mod servers;
mod shrunk;
mod shutdown;
mod tokens;
mod transient;
mod watch;
mod watcher;

use std::sync::Arc;

use futures::future::BoxFuture;

pub use acquire::{
    acquire_uncontended, acquire_when_held_reports_holder,
    dropped_waiting_acquire_leaves_no_queue_entry,
};
pub use candidate::{elector as elector_for, Holder, Leader, Standby};
pub use contention::{
    racing_single_attempts_grant_exactly_one, racing_standbys_after_expiry_grant_one_at_a_time,
    RACERS, STANDBYS,
};
#[doc(hidden)]
pub use context::{with_elector_hook, ElectorHook};
pub use context::{Context, Cx, Failure, Step};
pub use cutoff::standby_sees_failover_when_its_node_is_cut_off;
pub use deadline::deadline_counts_from_send_under_delayed_answers;
pub use dropped::dropped_acquire_leaves_nothing;
pub use elector::{
    crashed_leader_taken_over_after_ttl, partitioned_leader_steps_down_before_anyone_else_leads,
    resign_hands_over_at_once,
};
pub use expiry::deadline_ends_before_the_servers_expiry;
pub use faults::RECOVERY;
pub use handover::{handover_p50_over_repeated_resignations, HANDOVERS, WARMUP};
pub use herd::{herd_writes_per_leadership_change, HERD};
pub use history::standby_waits_through_history_compaction;
pub use input::ttl_above_backend_maximum_is_invalid_argument;
pub use input::{
    elector_rejects_renew_interval_not_below_ttl, empty_identity_is_invalid_argument,
    empty_key_is_invalid_argument, key_breaking_backend_rule_is_invalid_argument,
    key_over_backend_max_len_is_invalid_argument, ttl_below_backend_minimum_is_invalid_argument,
    ttl_off_granularity_is_invalid_argument, ttl_zero_is_invalid_argument,
};
pub use nested::nested_keys_are_independent;
pub use nodes::server_node_killed_leader_survives_or_fails_over;
pub use observer::{observed_within, observer_sees_failover_when_its_node_is_cut_off};
pub use paused::{
    holders_server_node_paused_longer_than_ttl, servers_leader_paused_longer_than_ttl,
};
pub use process::{
    killed_candidate_taken_over_within_ttl_plus_1s, paused_candidate_loses_and_its_write_is_refused,
};
pub use release::{
    release_after_cancelled_renew_frees_at_once, release_lets_waiting_standby_lead_at_once,
    stale_release_leaves_new_holder_in_place,
};
pub use renew::{expiry_after_ttl_not_before, renew_after_expiry_is_lease_lost, renew_extends};
pub use restart::cluster_restart_tokens_keep_increasing;
pub(crate) use runner::record;
pub use runner::{run_all, run_case, run_one, Meta, Quiet};
pub use safety::{FencedStore, SafetyRecorder, TermId, TermRecord, Write};
pub use servers::servers_paused_longer_than_ttl_leader_steps_down;
pub use shrunk::session_shrunk_on_reconnect_holder_stops_first;
pub use shutdown::shutdown_releases_before_returning;
pub use tokens::{token_increases_after_state_wiped, tokens_strictly_increase};
pub use transient::{dropped_answer_leaves_no_ghost_grant, transient_errors_are_not_a_lost_lease};
pub use watch::{watch_reports_changes_in_order_and_vacancy, watch_starts_with_current_state};
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

/// The cases that check `tenure-core` alone.
pub const CORE_ONLY: &[&str] = &[
    "empty_key_is_invalid_argument",
    "ttl_zero_is_invalid_argument",
    "empty_identity_is_invalid_argument",
    "elector_rejects_renew_interval_not_below_ttl",
];

/// The cases that run with the machine to themselves ([`Quiet::Machine`](runner::Quiet)).
pub const TIMED_ALONE: &[&str] = &[
    "herd_writes_per_leadership_change",
    "handover_p50_over_repeated_resignations",
    "resign_hands_over_at_once",
    "release_lets_waiting_standby_lead_at_once",
    "dropped_answer_leaves_no_ghost_grant",
];

const fn listed(list: &[&str], name: &str) -> bool {
    let mut i = 0;
    while i < list.len() {
        if const_eq(list[i], name) {
            return true;
        }
        i += 1;
    }
    false
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

macro_rules! case_table {
    (() [ $($case:ident),* $(,)? ]) => {
        /// Every case, in report order.
        pub static CASES: &[Case] = &[ $( Case { name: stringify!($case), run: |f| Box::pin($case(f)), core_only: listed(CORE_ONLY, stringify!($case)), timed_alone: listed(TIMED_ALONE, stringify!($case)) } ),* ];
        /// Every case's name, in report order.
        pub static CASE_NAMES: &[&str] = &[ $( stringify!($case) ),* ];
    };
}
crate::__cases!(case_table());
