//! Validated names, fencing tokens and leader observations.

use std::fmt;
use std::str::FromStr;
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
///
/// With the `serde` feature it is a string, checked on the way in as
/// [`new`](Self::new) checks it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "String", into = "String")
)]
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
///
/// With the `serde` feature it is a string, checked on the way in as
/// [`new`](Self::new) checks it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "String", into = "String")
)]
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
        impl From<$t> for String {
            fn from(value: $t) -> String {
                value.0.as_ref().to_owned()
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
///
/// It prints as the plain decimal number (`Display`) and parses back from
/// exactly that (`FromStr`), so it passes through an HTTP header or the
/// `TENURE_FENCING_TOKEN` variable the `tenure` command exports:
///
/// ```
/// use tenure_core::FencingToken;
///
/// let token = FencingToken::new(4096);
/// let header = token.to_string();
/// assert_eq!(header, "4096");
/// assert_eq!(header.parse::<FencingToken>()?, token);
/// assert!(" 4096".parse::<FencingToken>().is_err());
/// # Ok::<(), tenure_core::Error>(())
/// ```
///
/// With the `serde` feature it is a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
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
    /// The plain decimal number, which [`FromStr`] parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for FencingToken {
    type Err = Error;

    /// Parses what `Display` prints: decimal digits only, no sign, no white
    /// space, no leading zeros, at most `u64::MAX`. Anything else is
    /// [`Error::InvalidArgument`] naming the field `token`.
    fn from_str(s: &str) -> Result<Self> {
        let refuse = |why: &str| Error::invalid("token", format!("{s:?} {why}"));
        if s.is_empty() {
            return Err(Error::invalid("token", "must not be empty"));
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refuse(
                "is not a decimal number (digits only, no sign or white space)",
            ));
        }
        if s.len() > 1 && s.starts_with('0') {
            return Err(refuse("has leading zeros"));
        }
        s.parse::<u64>()
            .map(FencingToken)
            .map_err(|_| refuse("is above the largest token, 18446744073709551615"))
    }
}

/// Who holds an election key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LeaderInfo {
    /// The holder's identity.
    pub identity: CandidateId,
    /// The holder's fencing token, where the backend can fence.
    pub token: Option<FencingToken>,
}

/// One observation of an election key, as [`crate::LeaseBackend::watch`] reports it.
///
/// With the `serde` feature: `{"elected":{"identity":..,"token":..}}` or `"vacant"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
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
    fn every_edge_token_prints_and_parses_back() {
        let mut edges = vec![0, 1, 9, 10, 99, 100, u64::MAX - 1, u64::MAX];
        edges.extend((0..64).map(|bit| 1u64 << bit));
        edges.extend((1..64).map(|bit| (1u64 << bit) - 1));
        edges.extend((0..20).map(|digits| 10u64.pow(digits)));
        for raw in edges {
            let token = FencingToken::new(raw);
            let text = token.to_string();
            assert_eq!(text, raw.to_string());
            assert_eq!(text.parse::<FencingToken>().unwrap(), token, "{text}");
        }
    }

    #[test]
    fn junk_tokens_are_refused_naming_the_field() {
        for bad in [
            "",
            " ",
            "1 ",
            " 1",
            "\t7",
            "7\n",
            "-1",
            "+1",
            "0x10",
            "1e3",
            "1_000",
            "1.0",
            "abc",
            "007",
            "18446744073709551616",
            "99999999999999999999999",
            "٣",
        ] {
            match bad.parse::<FencingToken>() {
                Err(Error::InvalidArgument {
                    field: "token",
                    reason,
                }) => {
                    assert!(!reason.is_empty());
                }
                other => panic!("{bad:?}: expected InvalidArgument(token), got {other:?}"),
            }
        }
    }

    #[test]
    fn tokens_are_totally_ordered() {
        assert!(FencingToken::new(3) > FencingToken::new(2));
        assert_eq!(FencingToken::new(7).get(), 7);
    }
}
