//! Fencing tokens.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

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
