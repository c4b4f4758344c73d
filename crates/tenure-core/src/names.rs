//! Validated names: election keys and candidate identities.

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
}
