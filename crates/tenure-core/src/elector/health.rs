//! What an elector reports about itself: [`Elector::health`](super::Elector::health)
//! and metrics through the [`metrics`] facade.
//!
//! The metrics, each labelled with `key` and `identity`:
//!
//! | name | kind | what |
//! |---|---|---|
//! | `tenure_is_leader` | gauge | 1 while a term of this elector lasts, else 0 |
//! | `tenure_terms_total` | counter | terms begun |
//! | `tenure_terms_ended_total` | counter | terms ended, by `reason` ([`LossReason::as_str`]: `expired`, `revoked`, `deleted`, `taken_over`, `resigned`, `shutdown`) |
//! | `tenure_renew_duration_seconds` | histogram | each renewal's round trip, by `outcome` (`ok`, `error`) |
//! | `tenure_last_renewal_timestamp_seconds` | gauge | Unix time at which the last successful renewal (or the grant) was sent; its age is `time() - value` |
//! | `tenure_backend_errors_total` | counter | errors a backend call of this elector returned, by `operation` |
//! | `tenure_backend_warnings_total` | counter | trouble a backend worked around for this elector ([`Warning`]), by `operation` |
//!
//! Nothing is recorded unless the application installs a `metrics`
//! recorder (a Prometheus exporter, for example).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::{Candidacy, Error, LossReason, Warning};

/// An elector's health, from [`Elector::health`](super::Elector::health):
/// figures taken at the moment of the call, and a verdict,
/// [`check`](Self::check), for a liveness probe.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Health {
    /// Whether the elector led a term when the figures were taken
    /// ([`ElectorState::Leader`](super::ElectorState::Leader)).
    pub is_leader: bool,
    /// The last error a backend call of this elector returned (campaign,
    /// renewal or release), and how long ago. The error itself, shared:
    /// match on it, ask [`Error::is_retryable`] or
    /// [`Error::loss_reason`]. (Where the same error also went back to the
    /// caller, as a failed campaign's or resign's, this is a copy of the
    /// same kind and fields whose source keeps only its message.)
    pub last_error: Option<(Arc<Error>, Duration)>,
    /// How long ago the last successful renewal, or the last grant, was sent.
    pub since_last_renewal: Option<Duration>,
    /// Why the last term ended, and how long ago.
    pub last_loss: Option<(LossReason, Duration)>,
    /// How many times the backend worked around trouble for this elector
    /// (a Redis master that had lost the key and was taken back, a watch
    /// the server kept refusing…): nothing failed, but someone should look.
    pub warnings: u64,
    /// The last of those [`Warning`]s, and how long ago.
    pub last_warning: Option<(Warning, Duration)>,
}

impl Health {
    /// A liveness verdict, as client-go's `HealthzAdaptor` gives one: a
    /// follower is healthy; a leader is healthy while its last successful
    /// renewal (or its grant) was sent at most `max_renewal_age` ago.
    ///
    /// client-go's `LeaderElector.Check(maxTolerableExpiredLease)` (what its
    /// `HealthzAdaptor` serves) is also healthy for a non-leader, and fails a
    /// leader whose last observed renewal is older than the lease duration
    /// *plus* that tolerance, so that a replica whose renew loop deadlocked
    /// while it still believes it leads (kubernetes#70819) gets restarted by
    /// its liveness probe. Here the bound is the whole allowed age (pass
    /// `ttl + tolerance` for client-go's figure), counted from when the last
    /// successful renewal was sent. A term ends by itself at its local deadline, whatever
    /// the backend does, so a bound of the TTL or more flags only a wedged
    /// heartbeat (the renewer's thread cannot end the term either); a bound
    /// below the TTL (say two renew intervals) also flags a leader whose
    /// renewals keep failing, before it gives the lease up.
    pub fn check(&self, max_renewal_age: Duration) -> Result<(), Unhealthy> {
        if !self.is_leader {
            return Ok(());
        }
        match self.since_last_renewal {
            Some(age) if age <= max_renewal_age => Ok(()),
            since_last_renewal => Err(Unhealthy {
                since_last_renewal,
                max_renewal_age,
            }),
        }
    }
}

/// [`Health::check`]'s verdict on a leader whose renewals are too old.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct Unhealthy {
    /// How long ago the last successful renewal (or the grant) was sent;
    /// `None` if none was recorded.
    pub since_last_renewal: Option<Duration>,
    /// The bound given to [`Health::check`].
    pub max_renewal_age: Duration,
}

impl fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.since_last_renewal {
            Some(age) => write!(
                f,
                "leading, but the last successful renewal was sent {age:?} ago, more than the {:?} allowed",
                self.max_renewal_age
            ),
            None => write!(
                f,
                "leading, but no successful renewal is recorded (allowed age {:?})",
                self.max_renewal_age
            ),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    last_error: Option<(Arc<Error>, Instant)>,
    last_renewal: Option<Instant>,
    last_loss: Option<(LossReason, Instant)>,
    warnings: u64,
    last_warning: Option<(Warning, Instant)>,
}

/// Records what [`Health`] and the metrics report, for one elector.
#[derive(Debug)]
pub(crate) struct Reporter {
    labels: [(&'static str, String); 2],
    state: Mutex<State>,
}

impl Reporter {
    pub fn new(candidacy: &Candidacy) -> Reporter {
        Reporter {
            labels: [
                ("key", candidacy.key().as_str().to_owned()),
                ("identity", candidacy.identity().as_str().to_owned()),
            ],
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A term begins; its grant was sent at `sent_at`.
    pub fn term_began(&self, sent_at: Instant) {
        metrics::gauge!("tenure_is_leader", &self.labels).set(1.0);
        metrics::counter!("tenure_terms_total", &self.labels).increment(1);
        self.renewal_sent(sent_at);
    }

    /// A term ended; `current` says whether no newer term of this elector
    /// has begun meanwhile.
    pub fn term_ended(&self, reason: LossReason, current: bool) {
        if current {
            metrics::gauge!("tenure_is_leader", &self.labels).set(0.0);
        }
        let labels = [
            self.labels[0].clone(),
            self.labels[1].clone(),
            ("reason", reason.as_str().to_owned()),
        ];
        metrics::counter!("tenure_terms_ended_total", &labels).increment(1);
        self.state().last_loss = Some((reason, Instant::now()));
    }

    /// A renewal was answered after `took`.
    pub fn renewal(&self, took: Duration, outcome: Result<Instant, Arc<Error>>) {
        let labels = [
            self.labels[0].clone(),
            self.labels[1].clone(),
            (
                "outcome",
                if outcome.is_ok() { "ok" } else { "error" }.to_owned(),
            ),
        ];
        metrics::histogram!("tenure_renew_duration_seconds", &labels).record(took.as_secs_f64());
        match outcome {
            Ok(sent_at) => self.renewal_sent(sent_at),
            Err(error) => self.error("renew", error),
        }
    }

    fn renewal_sent(&self, sent_at: Instant) {
        let ago = Instant::now().saturating_duration_since(sent_at);
        let unix = SystemTime::now()
            .checked_sub(ago)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        metrics::gauge!("tenure_last_renewal_timestamp_seconds", &self.labels).set(unix);
        self.state().last_renewal = Some(sent_at);
    }

    /// A backend call of `operation` failed.
    pub fn error(&self, operation: &'static str, error: Arc<Error>) {
        let labels = [
            self.labels[0].clone(),
            self.labels[1].clone(),
            ("operation", operation.to_owned()),
        ];
        metrics::counter!("tenure_backend_errors_total", &labels).increment(1);
        self.state().last_error = Some((error, Instant::now()));
    }

    /// The backend worked around trouble (see [`Warning`]).
    pub fn warning(&self, warning: Warning) {
        let labels = [
            self.labels[0].clone(),
            self.labels[1].clone(),
            ("operation", warning.operation.to_owned()),
        ];
        metrics::counter!("tenure_backend_warnings_total", &labels).increment(1);
        let mut state = self.state();
        state.warnings += 1;
        state.last_warning = Some((warning, Instant::now()));
    }

    pub fn health(&self, is_leader: bool) -> Health {
        let now = Instant::now();
        let state = self.state();
        Health {
            is_leader,
            last_error: state
                .last_error
                .as_ref()
                .map(|(error, at)| (error.clone(), now.saturating_duration_since(*at))),
            since_last_renewal: state
                .last_renewal
                .map(|at| now.saturating_duration_since(at)),
            last_loss: state
                .last_loss
                .map(|(reason, at)| (reason, now.saturating_duration_since(at))),
            warnings: state.warnings,
            last_warning: state
                .last_warning
                .as_ref()
                .map(|(warning, at)| (warning.clone(), now.saturating_duration_since(*at))),
        }
    }
}
