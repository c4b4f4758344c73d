//! What happened, in order: hashed whole (the same seed gives the same
//! hash), the last events kept to print with a violation.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use crate::plan::{Action, LinkState};

/// One event of a schedule's trace.
#[derive(Clone, Debug, Hash)]
pub enum Event {
    /// A member's link turned to a state.
    Link(usize, LinkState),
    /// A member's connections were reset.
    ResetLink(usize),
    /// Every link was reset at once.
    ServerRestart,
    /// Every link was delayed at once.
    SlowServer(Duration),
    /// A key's record was deleted on the server.
    Wiped(String),
    /// A member froze.
    Paused(usize),
    /// A member's host was suspended (its clock stopped).
    Suspended(usize),
    /// A member thawed.
    Resumed(usize),
    /// A member died.
    Crashed(usize),
    /// A member started again.
    Restarted(usize),
    /// Every fault healed.
    Healed,
    /// The application acted on a member's elector for a key.
    App(usize, String, Action),
    /// A member's call went out (`op` on `key`).
    Call(usize, String, &'static str),
    /// Its answer came back, or its error.
    Answer(usize, String, &'static str, Result<(), String>),
    /// The server granted `key` to a member with a token.
    Granted(String, usize, u64),
    /// A member's term began (its `Leadership` reached the application).
    Leading(usize, String, u64),
    /// A term's `lost()` resolved, with the reason.
    Lost(usize, String, u64, &'static str),
    /// A holder resigned; the backend's answer.
    Resigned(usize, String, u64, bool),
    /// A leader's work wrote through the key's fence: accepted or refused.
    Wrote(usize, String, u64, bool),
    /// `observe()` reported a leader (member, token) or a vacancy.
    Observed(usize, String, Option<(usize, u64)>),
    /// `shutdown()` returned.
    ShutDown(usize, String),
    /// The liveness check: who leads each key after the heal.
    Leaders(Vec<Option<u64>>),
}

/// The trace of one schedule.
#[derive(Debug)]
pub struct Trace {
    hasher: DefaultHasher,
    count: u64,
    last: VecDeque<(Duration, Event)>,
}

/// How many of the last events a violation prints.
pub const KEPT: usize = 60;

impl Default for Trace {
    fn default() -> Self {
        Trace {
            hasher: DefaultHasher::new(),
            count: 0,
            last: VecDeque::with_capacity(KEPT),
        }
    }
}

impl Trace {
    /// Appends `event`, at `at` from the start.
    pub fn push(&mut self, at: Duration, event: Event) {
        at.hash(&mut self.hasher);
        event.hash(&mut self.hasher);
        self.count += 1;
        if self.last.len() == KEPT {
            self.last.pop_front();
        }
        self.last.push_back((at, event));
    }

    /// The hash of every event so far.
    pub fn hash(&self) -> u64 {
        self.hasher.finish()
    }

    /// How many events so far.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// The last events, one a line: `12.345s  event`.
    pub fn tail(&self) -> Vec<String> {
        self.last
            .iter()
            .map(|(at, e)| format!("{:>9.3}s  {e:?}", at.as_secs_f64()))
            .collect()
    }
}
