//! The line protocol between a [`RemoteBackend`](super::remote::RemoteBackend)
//! in a candidate process and a [`front`](super::front) in the test process:
//! one TCP connection per operation, one JSON object per line. Closing the
//! connection cancels the operation (a waiting acquire withdraws). Instants
//! travel as readings of the shared monotonic clock ([`super::clock`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tenure_core::{Capabilities, Error, KeyRule, LossReason};

/// What the remote client asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Call {
    /// A new client of the server: its id and capabilities.
    Hello,
    /// `acquire` for a candidacy.
    Acquire {
        /// The client.
        client: u64,
        /// The election key.
        key: String,
        /// The candidate.
        identity: String,
        /// The TTL.
        ttl_ns: u64,
        /// The drift margin.
        drift_ns: u64,
        /// Wait in line (else one attempt).
        wait: bool,
    },
    /// `renew` a grant.
    Renew {
        /// The client.
        client: u64,
        /// The grant, as the front numbered it.
        grant: u64,
    },
    /// `release` a grant.
    Release {
        /// The client.
        client: u64,
        /// The grant.
        grant: u64,
    },
    /// `watch` a key: events follow on the connection until it closes.
    Watch {
        /// The client.
        client: u64,
        /// The election key.
        key: String,
    },
}

impl Call {
    /// The client the call is made for (none for [`Call::Hello`]).
    pub fn client(&self) -> Option<u64> {
        match self {
            Call::Hello => None,
            Call::Acquire { client, .. }
            | Call::Renew { client, .. }
            | Call::Release { client, .. }
            | Call::Watch { client, .. } => Some(*client),
        }
    }
}

/// What the front answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    /// The new client.
    Hello {
        /// Its id, for every later call.
        client: u64,
        /// The server's capabilities.
        capabilities: WireCapabilities,
    },
    /// The lease is granted.
    Granted {
        /// The grant, for renew and release.
        grant: u64,
        /// The fencing token.
        token: Option<u64>,
        /// What the deadline counts from, on the shared clock.
        sent_at_ns: u64,
        /// The lease's expiry lead.
        expiry_lead_ns: u64,
    },
    /// Someone else holds the key.
    Held {
        /// The holder.
        identity: String,
        /// Its token.
        token: Option<u64>,
    },
    /// Renewed: the deadline counts from here on the shared clock.
    Renewed {
        /// The renewal's send time.
        sent_at_ns: u64,
    },
    /// Released.
    Released,
    /// A watch event: the holder and its token, or `None` for vacancy.
    Event {
        /// The leader, if any.
        leader: Option<(String, Option<u64>)>,
    },
    /// The operation failed.
    Error(WireError),
}

/// A tenure [`Error`] on the wire (the kinds a backend returns).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireError {
    /// [`Error::InvalidArgument`].
    InvalidArgument {
        /// The field.
        field: String,
        /// Why.
        reason: String,
    },
    /// [`Error::LeaseLost`].
    LeaseLost {
        /// The key.
        key: String,
        /// Why, spelled as [`LossReason::as_str`] (`revoked`, `taken_over`, ...).
        #[serde(with = "loss_reason")]
        reason: LossReason,
    },
    /// [`Error::Unavailable`] or [`Error::Timeout`]: retryable.
    Unavailable {
        /// What happened.
        detail: String,
    },
    /// Anything else: not retryable.
    Other {
        /// What happened.
        detail: String,
    },
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> Self {
        match e {
            Error::InvalidArgument { field, reason } => WireError::InvalidArgument {
                field: (*field).to_owned(),
                reason: reason.clone(),
            },
            Error::LeaseLost { key, reason } => WireError::LeaseLost {
                key: key.clone(),
                reason: *reason,
            },
            e if e.is_retryable() => WireError::Unavailable {
                detail: e.to_string(),
            },
            e => WireError::Other {
                detail: e.to_string(),
            },
        }
    }
}

/// A [`LossReason`] on the wire: its stable spelling, [`LossReason::as_str`].
mod loss_reason {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};
    use tenure_core::LossReason;

    pub fn serialize<S: Serializer>(reason: &LossReason, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(reason.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LossReason, D::Error> {
        let spelling = String::deserialize(d)?;
        spelling.parse().map_err(D::Error::custom)
    }
}

/// The fields an `InvalidArgument` names across tenure (the error keeps a
/// `&'static str`); any other comes back as `argument`.
const FIELDS: &[&str] = &[
    "key",
    "ttl",
    "identity",
    "lease",
    "drift_margin",
    "renew_interval",
    "url",
];

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        match e {
            WireError::InvalidArgument { field, reason } => Error::invalid(
                FIELDS
                    .iter()
                    .find(|f| **f == field)
                    .copied()
                    .unwrap_or("argument"),
                reason,
            ),
            WireError::LeaseLost { key, reason } => Error::lease_lost(key, reason),
            WireError::Unavailable { detail } => Error::unavailable(super::remote::NAME, detail),
            WireError::Other { detail } => Error::backend(super::remote::NAME, detail),
        }
    }
}

/// [`Capabilities`] on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCapabilities {
    fencing: bool,
    tokens_survive_state_loss: bool,
    herd_free_wait: bool,
    min_ttl_ns: u64,
    max_ttl_ns: Option<u64>,
    ttl_granularity_ns: u64,
    key_rule: String,
    max_key_len: usize,
    expiry_slack_ns: u64,
    expiry_judged_by_observer: bool,
    #[serde(default)]
    holder_watches_own_record: bool,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

impl From<&Capabilities> for WireCapabilities {
    fn from(c: &Capabilities) -> Self {
        WireCapabilities {
            fencing: c.fencing,
            tokens_survive_state_loss: c.tokens_survive_state_loss,
            herd_free_wait: c.herd_free_wait,
            min_ttl_ns: ns(c.min_ttl),
            max_ttl_ns: c.max_ttl.map(ns),
            ttl_granularity_ns: ns(c.ttl_granularity),
            key_rule: format!("{:?}", c.key_rule),
            max_key_len: c.max_key_len,
            expiry_slack_ns: ns(c.expiry_slack),
            expiry_judged_by_observer: c.expiry_judged_by_observer,
            holder_watches_own_record: c.holder_watches_own_record,
        }
    }
}

impl From<WireCapabilities> for Capabilities {
    fn from(w: WireCapabilities) -> Self {
        let mut c = Capabilities::new(w.fencing, w.herd_free_wait);
        c.tokens_survive_state_loss = w.tokens_survive_state_loss;
        c.min_ttl = Duration::from_nanos(w.min_ttl_ns);
        c.max_ttl = w.max_ttl_ns.map(Duration::from_nanos);
        c.ttl_granularity = Duration::from_nanos(w.ttl_granularity_ns);
        c.key_rule = match w.key_rule.as_str() {
            "PathSegments" => KeyRule::PathSegments,
            "Dns1123Subdomain" => KeyRule::Dns1123Subdomain,
            _ => KeyRule::Any,
        };
        c.max_key_len = w.max_key_len;
        c.expiry_slack = Duration::from_nanos(w.expiry_slack_ns);
        c.expiry_judged_by_observer = w.expiry_judged_by_observer;
        c.holder_watches_own_record = w.holder_watches_own_record;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_survive_the_wire() {
        let mut caps = Capabilities::new(true, false);
        caps.min_ttl = Duration::from_millis(100);
        caps.max_ttl = Some(Duration::from_secs(60));
        caps.ttl_granularity = Duration::from_millis(100);
        caps.key_rule = KeyRule::Dns1123Subdomain;
        caps.max_key_len = 63;
        caps.expiry_slack = Duration::from_millis(7);
        caps.expiry_judged_by_observer = true;
        caps.holder_watches_own_record = true;
        caps.tokens_survive_state_loss = false;
        let json = serde_json::to_string(&WireCapabilities::from(&caps)).unwrap();
        let back: WireCapabilities = serde_json::from_str(&json).unwrap();
        assert_eq!(Capabilities::from(back), caps);
    }

    #[test]
    fn a_loss_reason_travels_in_its_stable_spelling() {
        let lost = WireError::from(&Error::lease_lost("k", LossReason::TakenOver));
        let json = serde_json::to_string(&lost).unwrap();
        assert!(json.contains(r#""reason":"taken_over""#), "{json}");
        assert_eq!(serde_json::from_str::<WireError>(&json).unwrap(), lost);
        let unknown = json.replace("taken_over", "stolen");
        let refused = serde_json::from_str::<WireError>(&unknown).unwrap_err();
        assert!(refused.to_string().contains("stolen"), "{refused}");
    }

    #[test]
    fn errors_keep_their_kind_and_field() {
        let back = |e: Error| Error::from(WireError::from(&e));
        assert!(matches!(
            back(Error::invalid("ttl", "zero")),
            Error::InvalidArgument { field: "ttl", .. }
        ));
        for reason in LossReason::ALL {
            let lost = back(Error::lease_lost("k", reason));
            assert_eq!(lost.loss_reason(), Some(reason), "{lost}");
        }
        let unavailable = Error::unavailable("memory", "cut off");
        assert!(back(unavailable).is_retryable());
        assert!(!back(Error::Shutdown).is_retryable());
    }
}
