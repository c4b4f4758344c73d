//! What one run found: a [`CaseReport`] per case, as a table, JSON and markdown.

mod files;
mod table;

use serde::{Deserialize, Serialize};

pub use files::{conformance_dir, record};
pub use table::{markdown, row};

/// A property a case checks; backends can document gaps per property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Property {
    /// The contract point the case is named for.
    Contract,
    /// No two candidates' validity intervals overlap.
    Exclusive,
    /// Tokens strictly increase across grants; a stale holder's write is refused.
    Fencing,
    /// A leadership change costs O(1) server writes, whatever the number of waiters.
    HerdFree,
    /// A leadership change costs O(1) server requests and notifications of
    /// any kind (heartbeats left out), whatever the number of waiters.
    HerdRequests,
    /// Hand-over, failover and expiry happen within their bounds.
    Timing,
}

impl std::fmt::Display for Property {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Property::Contract => "contract",
            Property::Exclusive => "exclusive",
            Property::Fencing => "fencing",
            Property::HerdFree => "herd-free",
            Property::HerdRequests => "herd-requests",
            Property::Timing => "timing",
        })
    }
}

/// What the suite expects of a backend for one property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The backend promises it: a violation fails the case.
    Must,
    /// The backend documents it does not keep it (with why): a violation is
    /// recorded in the report and the case still passes.
    NotPromised(String),
}

/// One observed breach of a property.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Which property.
    pub property: Property,
    /// Whether the backend promised it (then the case failed).
    pub promised: bool,
    /// What was observed.
    pub detail: String,
}

/// How a case ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", content = "reason", rename_all = "snake_case")]
pub enum Outcome {
    /// Every check held.
    Pass,
    /// Only properties the backend does not promise were violated; see `violations`.
    Recorded,
    /// A promised property was violated, or the case could not run to the end.
    Fail(String),
    /// The case does not apply to this backend or factory (with why).
    Skipped(String),
}

/// Numbers a case measured; `None` where the case does not measure it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// From the holder stepping down to the standby leading.
    pub handover_ms: Option<f64>,
    /// From the holder crashing or being cut off to the standby leading.
    pub failover_ms: Option<f64>,
    /// From the grant's request to the expiry the server reported.
    pub expiry_ms: Option<f64>,
    /// Pairs of overlapping validity intervals.
    pub overlaps: Option<u64>,
    /// Writes with a stale token that the fenced store refused.
    pub stale_writes_refused: Option<u64>,
    /// Writes from a superseded holder that the fenced store accepted.
    pub stale_writes_accepted: Option<u64>,
    /// Server writes per leadership change.
    pub writes_per_change: Option<f64>,
    /// Server requests and notifications of any kind per leadership change
    /// (heartbeats excluded; see `BackendFactory::server_requests`).
    #[serde(default)]
    pub requests_per_change: Option<f64>,
    /// From an out-of-band delete of the holder's record to its lease
    /// ending (backends whose holders watch their own records).
    #[serde(default)]
    pub deletion_noticed_ms: Option<f64>,
}

/// The result of one case on one backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseReport {
    /// The backend's name.
    pub backend: String,
    /// The servers' name and version, where the factory tells.
    #[serde(default)]
    pub server: Option<String>,
    /// The case (the suite function's name).
    pub case: String,
    /// The contract point(s) it checks, e.g. `3, 8`.
    pub contract: String,
    /// Pass, recorded, fail or skipped.
    pub outcome: Outcome,
    /// How many checks held.
    pub checks_passed: u32,
    /// Every breach observed, promised or not.
    pub violations: Vec<Violation>,
    /// What was measured.
    pub figures: Figures,
    /// Free-form observations.
    pub notes: Vec<String>,
    /// How long the case ran.
    pub elapsed_ms: u64,
    /// How long it waited for the locks that keep it apart from other
    /// cases (in this process and, for timing cases, across processes)
    /// before it started.
    #[serde(default)]
    pub waited_ms: u64,
    /// When it finished (Unix time, ms).
    pub finished_unix_ms: u64,
}

impl CaseReport {
    /// Whether the backend kept its promises in this case (pass, recorded or skipped).
    pub fn ok(&self) -> bool {
        !matches!(self.outcome, Outcome::Fail(_))
    }

    /// The case's findings, if it failed: why, each violation, the notes.
    pub fn failure(&self) -> Option<String> {
        let Outcome::Fail(reason) = &self.outcome else {
            return None;
        };
        let violations: Vec<String> = self
            .violations
            .iter()
            .map(|v| {
                format!(
                    "  [{}{}] {}",
                    v.property,
                    if v.promised { "" } else { ", not promised" },
                    v.detail
                )
            })
            .collect();
        Some(format!(
            "{} on {} failed: {reason}\n{}\nnotes: {:?}",
            self.case,
            self.backend,
            violations.join("\n"),
            self.notes
        ))
    }

    /// Panics with the case's findings if it failed.
    #[track_caller]
    pub fn assert_ok(&self) {
        if let Some(failure) = self.failure() {
            panic!("{failure}");
        }
    }
}
