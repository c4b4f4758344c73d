//! What an elector reports about itself: [`Elector::health`](super::Elector::health)
//! and metrics through the [`metrics`] facade.
//!
//! The metrics, each labelled with `key` and `identity`:
//!
//! | name | kind | what |
//! |---|---|---|
//! | `tenure_is_leader` | gauge | 1 while a term of this elector lasts, else 0 |
//! | `tenure_terms_total` | counter | terms begun |
//! | `tenure_terms_ended_total` | counter | terms ended, by `reason` (`expired`, `revoked`, `resigned`) |
//! | `tenure_renew_duration_seconds` | histogram | each renewal's round trip, by `outcome` (`ok`, `error`) |
//! | `tenure_last_renewal_timestamp_seconds` | gauge | Unix time at which the last successful renewal (or the grant) was sent; its age is `time() - value` |
//! | `tenure_backend_errors_total` | counter | errors a backend call of this elector returned, by `operation` |
//!
//! Nothing is recorded unless the application installs a `metrics`
//! recorder (a Prometheus exporter, for example).

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::LossReason;
use crate::{Candidacy, Error};

/// An elector's health, from [`Elector::health`](super::Elector::health).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The last error a backend call of this elector returned (campaign,
    /// renewal or release), and how long ago.
    pub last_error: Option<(String, Duration)>,
    /// How long ago the last successful renewal, or the last grant, was sent.
    pub since_last_renewal: Option<Duration>,
    /// Why the last term ended, and how long ago.
    pub last_loss: Option<(LossReason, Duration)>,
}

#[derive(Debug, Default)]
struct State {
    last_error: Option<(String, Instant)>,
    last_renewal: Option<Instant>,
    last_loss: Option<(LossReason, Instant)>,
}

/// Records what [`Health`] and the metrics report, for one elector.
#[derive(Debug)]
pub(crate) struct Reporter {
    labels: [(&'static str, String); 2],
    state: Mutex<State>,
}

fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "expired",
        LossReason::Revoked => "revoked",
        LossReason::Resigned => "resigned",
    }
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
            ("reason", reason_label(reason).to_owned()),
        ];
        metrics::counter!("tenure_terms_ended_total", &labels).increment(1);
        self.state().last_loss = Some((reason, Instant::now()));
    }

    /// A renewal was answered after `took`.
    pub fn renewal(&self, took: Duration, outcome: Result<Instant, &Error>) {
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
    pub fn error(&self, operation: &'static str, error: &Error) {
        let labels = [
            self.labels[0].clone(),
            self.labels[1].clone(),
            ("operation", operation.to_owned()),
        ];
        metrics::counter!("tenure_backend_errors_total", &labels).increment(1);
        self.state().last_error = Some((error.to_string(), Instant::now()));
    }

    pub fn health(&self) -> Health {
        let now = Instant::now();
        let state = self.state();
        Health {
            last_error: state
                .last_error
                .as_ref()
                .map(|(message, at)| (message.clone(), now.saturating_duration_since(*at))),
            since_last_renewal: state
                .last_renewal
                .map(|at| now.saturating_duration_since(at)),
            last_loss: state
                .last_loss
                .map(|(reason, at)| (reason, now.saturating_duration_since(at))),
        }
    }
}
