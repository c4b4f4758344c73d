//! Validated names, fencing tokens and leader observations.

use std::fmt;
use std::sync::Arc;

use crate::{Error, Result};

/// Longest election key any backend accepts, in bytes; backends may allow less.
pub const MAX_KEY_LEN: usize = 512;
/// Longest candidate identity, in bytes.
pub const MAX_IDENTITY_LEN: usize = 256;

fn check_text(field: &'static str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(Error::invalid(
            field,
            format!("is {} bytes long, the limit is {max}", value.len()),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(
            field,
            format!("contains the control character {c:?}"),
        ));
    }
    if value.trim() != value {
        return Err(Error::invalid(
            field,
            "must not start or end with white space",
        ));
    }
    Ok(())
}

/// The name of an election: one leader per key.
///
/// Any non-empty text of at most [`MAX_KEY_LEN`] bytes without control
/// characters or surrounding white space; each backend narrows this further
/// (see [`crate::KeyRule`]), checked before any request is sent.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElectionKey(Arc<str>);

impl ElectionKey {
    /// Validates and wraps a key.
    pub fn new(key: impl AsRef<str>) -> Result<Self> {
        let key = key.as_ref();
        check_text("key", key, MAX_KEY_LEN)?;
        Ok(ElectionKey(key.into()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who a candidate is, as the other candidates and observers see it.
///
/// Non-empty, at most [`MAX_IDENTITY_LEN`] bytes, no control characters.
/// Use something unique per process (host name plus pid, pod name).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CandidateId(Arc<str>);

impl CandidateId {
    /// Validates and wraps an identity.
    pub fn new(identity: impl AsRef<str>) -> Result<Self> {
        let identity = identity.as_ref();
        check_text("identity", identity, MAX_IDENTITY_LEN)?;
        Ok(CandidateId(identity.into()))
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! text_impls {
    ($t:ty) => {
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl TryFrom<&str> for $t {
            type Error = Error;
            fn try_from(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }
        impl TryFrom<String> for $t {
            type Error = Error;
            fn try_from(s: String) -> Result<Self> {
                Self::new(s)
            }
        }
    };
}
text_impls!(ElectionKey);
text_impls!(CandidateId);

/// A fencing token: strictly greater for every new grant of a key.
///
/// Pass it with every write a leader makes downstream; the storage side keeps
/// the highest it has seen (see [`crate::Fence`]) and refuses lower ones, so a
/// deposed leader that still believes it leads can do no harm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token (etcd create revision, ZooKeeper czxid, one above the
    /// resourceVersion a Kubernetes Lease take-over compared against).
    pub const fn new(raw: u64) -> Self {
        FencingToken(raw)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Who holds an election key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaderInfo {
    /// The holder's identity.
    pub identity: CandidateId,
    /// The holder's fencing token, where the backend can fence.
    pub token: Option<FencingToken>,
}

/// One observation of an election key, as [`crate::LeaseBackend::watch`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LeaderEvent {
    /// Someone leads (a new token, or a new holder, means a new term).
    Elected(LeaderInfo),
    /// Nobody holds the key.
    Vacant,
}

impl LeaderEvent {
    /// The leader, if there is one.
    pub fn leader(&self) -> Option<&LeaderInfo> {
        match self {
            LeaderEvent::Elected(info) => Some(info),
            LeaderEvent::Vacant => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rejects_empty_long_control_and_padding() {
        for bad in ["", " a", "a\n", "a\0b", &"k".repeat(MAX_KEY_LEN + 1)] {
            match ElectionKey::new(bad) {
                Err(Error::InvalidArgument { field: "key", .. }) => {}
                other => panic!("{bad:?}: expected InvalidArgument(key), got {other:?}"),
            }
        }
        assert_eq!(
            ElectionKey::new("billing/job-7").unwrap().as_str(),
            "billing/job-7"
        );
    }

    #[test]
    fn identity_rejects_empty_and_control() {
        for bad in ["", "a\tb", &"i".repeat(MAX_IDENTITY_LEN + 1)] {
            assert!(matches!(
                CandidateId::new(bad),
                Err(Error::InvalidArgument {
                    field: "identity",
                    ..
                })
            ));
        }
    }

    #[test]
    fn tokens_are_totally_ordered() {
        assert!(FencingToken::new(3) > FencingToken::new(2));
        assert_eq!(FencingToken::new(7).get(), 7);
    }
}
