//! What a backend promises, and the input checks that follow from it.

use std::time::Duration;

use crate::{Candidacy, ElectionKey, Error, Result};

/// Which keys a backend can store, beyond the rules of [`ElectionKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyRule {
    /// Any valid [`ElectionKey`].
    Any,
    /// `/`-separated segments, none empty, `.` or `..` (a ZooKeeper path below the base path).
    PathSegments,
    /// A DNS-1123 subdomain: lowercase letters, digits, `-` and `.`, starting and
    /// ending with a letter or digit, at most 253 bytes (a Kubernetes object name).
    Dns1123Subdomain,
}

impl KeyRule {
    /// Checks a key against this rule.
    pub fn check(self, key: &ElectionKey) -> Result<()> {
        let k = key.as_str();
        match self {
            KeyRule::Any => Ok(()),
            KeyRule::PathSegments => {
                if let Some(seg) = k
                    .split('/')
                    .find(|s| s.is_empty() || *s == "." || *s == "..")
                {
                    return Err(Error::invalid(
                        "key",
                        format!("{k:?} has the path segment {seg:?}; segments must be non-empty and not . or .."),
                    ));
                }
                Ok(())
            }
            KeyRule::Dns1123Subdomain => {
                let ok_char =
                    |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
                let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
                if k.len() > 253 {
                    return Err(Error::invalid(
                        "key",
                        format!("{k:?} is longer than 253 bytes (DNS-1123 subdomain)"),
                    ));
                }
                if let Some(c) = k.chars().find(|c| !ok_char(*c)) {
                    return Err(Error::invalid(
                        "key",
                        format!("{k:?} contains {c:?}; a DNS-1123 subdomain allows only lowercase letters, digits, '-' and '.'"),
                    ));
                }
                let first_last = [k.chars().next(), k.chars().last()];
                if first_last.iter().any(|c| !c.is_some_and(alnum)) {
                    return Err(Error::invalid(
                        "key",
                        format!("{k:?} must start and end with a lowercase letter or digit (DNS-1123 subdomain)"),
                    ));
                }
                if k.split('.').any(str::is_empty) {
                    return Err(Error::invalid(
                        "key",
                        format!("{k:?} has an empty label between dots"),
                    ));
                }
                Ok(())
            }
        }
    }
}

/// What a backend promises. The Elector and the conformance suite act on it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Tokens strictly increase across grants of a key and survive the backend's own failures.
    pub fencing: bool,
    /// Tokens keep increasing even when the election's state on the servers
    /// is deleted out of band (an operator deleting the Lease, the etcd keys
    /// or the znodes): the next grant's token is still greater than every
    /// earlier one. Meaningless without `fencing`.
    pub tokens_survive_state_loss: bool,
    /// A waiting acquire wakes only when it is next in line: O(1) backend writes per leadership change.
    pub herd_free_wait: bool,
    /// Smallest TTL the backend can honour.
    pub min_ttl: Duration,
    /// Largest TTL the backend can honour, if bounded.
    pub max_ttl: Option<Duration>,
    /// TTLs must be a whole multiple of this.
    pub ttl_granularity: Duration,
    /// Which keys the backend can store.
    pub key_rule: KeyRule,
    /// Longest key in bytes.
    pub max_key_len: usize,
    /// How much later than the TTL the backend may notice an expiry (timer ticks, sweeps).
    pub expiry_slack: Duration,
    /// Expiry is judged by each candidate's own clock from when it last saw
    /// the record change, not by the server (Kubernetes Leases, as client-go
    /// does): a candidate that was not watching a key when its holder stopped
    /// renewing treats it as held for up to one TTL from its first look.
    pub expiry_judged_by_observer: bool,
    /// A holder learns within a round trip, not at its next renewal, that
    /// its record was deleted out of band or taken by another candidate: the
    /// backend watches it and [fires](crate::LossSignal) its lease's loss
    /// signal. The conformance suite measures how soon.
    pub holder_watches_own_record: bool,
    /// Renewals of one client's leases that arrive within a millisecond or
    /// two go out as one request (one ZooKeeper `sync` and multi-read for
    /// every node of the session). An [`Elector`](crate::Elector) then
    /// renews on a grid shared by every elector of the process (its renewal
    /// interval apart, each renewal at the last grid point before it is
    /// due) rather than at a random spread, so that its terms of one TTL
    /// renew together.
    pub renewals_batched: bool,
}

impl Capabilities {
    /// Capabilities with the given fencing and herd-free promises and permissive limits
    /// (1 ms TTL granularity and minimum, any key); adjust the fields from there.
    pub fn new(fencing: bool, herd_free_wait: bool) -> Self {
        Capabilities {
            fencing,
            tokens_survive_state_loss: fencing,
            herd_free_wait,
            min_ttl: Duration::from_millis(1),
            max_ttl: None,
            ttl_granularity: Duration::from_millis(1),
            key_rule: KeyRule::Any,
            max_key_len: crate::MAX_KEY_LEN,
            expiry_slack: Duration::ZERO,
            expiry_judged_by_observer: false,
            holder_watches_own_record: false,
            renewals_batched: false,
        }
    }

    /// Checks a key against this backend's rules.
    pub fn check_key(&self, key: &ElectionKey) -> Result<()> {
        if key.as_str().len() > self.max_key_len {
            return Err(Error::invalid(
                "key",
                format!(
                    "is {} bytes long, this backend allows {}",
                    key.as_str().len(),
                    self.max_key_len
                ),
            ));
        }
        self.key_rule.check(key)
    }

    /// Checks a TTL against this backend's bounds and granularity.
    pub fn check_ttl(&self, ttl: Duration) -> Result<()> {
        if ttl.is_zero() {
            return Err(Error::invalid("ttl", "must be greater than zero"));
        }
        if ttl < self.min_ttl {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{ttl:?} is below this backend's minimum of {:?}",
                    self.min_ttl
                ),
            ));
        }
        if let Some(max) = self.max_ttl.filter(|max| ttl > *max) {
            return Err(Error::invalid(
                "ttl",
                format!("{ttl:?} is above this backend's maximum of {max:?}"),
            ));
        }
        let g = self.ttl_granularity.as_nanos();
        if g > 0 && !ttl.as_nanos().is_multiple_of(g) {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{ttl:?} is not a whole multiple of this backend's granularity {:?}",
                    self.ttl_granularity
                ),
            ));
        }
        Ok(())
    }

    /// Checks a whole candidacy; every backend calls this before sending anything.
    pub fn check(&self, candidacy: &Candidacy) -> Result<()> {
        self.check_key(candidacy.key())?;
        self.check_ttl(candidacy.ttl())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> ElectionKey {
        ElectionKey::new(s).unwrap()
    }

    #[test]
    fn dns1123_rule() {
        let r = KeyRule::Dns1123Subdomain;
        assert!(r.check(&key("billing-job.v1")).is_ok());
        for bad in ["Billing", "a_b", "-a", "a-", "a..b", &"a".repeat(254)] {
            assert!(
                matches!(
                    r.check(&key(bad)),
                    Err(Error::InvalidArgument { field: "key", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn path_segments_rule() {
        let r = KeyRule::PathSegments;
        assert!(r.check(&key("svc/billing")).is_ok());
        for bad in ["/a", "a/", "a//b", "a/../b", "."] {
            assert!(r.check(&key(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn ttl_bounds_and_granularity() {
        let mut c = Capabilities::new(true, true);
        c.min_ttl = Duration::from_secs(1);
        c.max_ttl = Some(Duration::from_secs(60));
        c.ttl_granularity = Duration::from_secs(1);
        assert!(c.check_ttl(Duration::from_secs(2)).is_ok());
        for bad in [0, 500, 1500, 61_000] {
            let err = c.check_ttl(Duration::from_millis(bad)).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { field: "ttl", .. }),
                "{bad}: {err}"
            );
        }
    }
}
