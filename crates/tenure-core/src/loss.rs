//! Why a leadership term ended, or why a backend says a lease is lost: [`LossReason`].

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Why a leadership term ended ([`Term::lost`](crate::Term::lost)), and why a
/// backend reports a lease lost ([`Error::LeaseLost`]).
///
/// When a renewal fails with [`Error::LeaseLost`], the term ends with the
/// reason the backend gave. A renewal that fails any other way is retried
/// until the local deadline, so it ends the term as [`Expired`](Self::Expired)
/// if no retry succeeds; no path ends a term on a backend error alone.
///
/// [`as_str`](Self::as_str) is a stable spelling (`expired`, `revoked`,
/// `deleted`, `taken_over`, `resigned`, `shutdown`) for metrics labels,
/// logs and wire formats, which [`FromStr`] parses back; the same spelling
/// is used by the `serde` feature. `Display` is a sentence for people.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum LossReason {
    /// The local deadline (`valid_until`) passed without a successful
    /// renewal: we gave up locally, whatever the backend may say later.
    Expired,
    /// The backend ended the lease (it expired or was revoked there)
    /// without saying more.
    Revoked,
    /// Our record on the backend (etcd key, ZooKeeper node, Kubernetes
    /// Lease) vanished out of band, e.g. an operator deleted it.
    Deleted,
    /// Another candidate holds the lease now.
    TakenOver,
    /// We stepped down: [`Leadership::resign`](crate::Leadership::resign)
    /// or dropping the [`Leadership`](crate::Leadership).
    Resigned,
    /// The elector was shut down ([`Elector::shutdown`](crate::Elector::shutdown)).
    Shutdown,
}

impl LossReason {
    /// Every reason, in declaration order.
    pub const ALL: [LossReason; 6] = [
        LossReason::Expired,
        LossReason::Revoked,
        LossReason::Deleted,
        LossReason::TakenOver,
        LossReason::Resigned,
        LossReason::Shutdown,
    ];

    /// The stable spelling: `expired`, `revoked`, `deleted`, `taken_over`,
    /// `resigned` or `shutdown`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::Revoked => "revoked",
            LossReason::Deleted => "deleted",
            LossReason::TakenOver => "taken_over",
            LossReason::Resigned => "resigned",
            LossReason::Shutdown => "shutdown",
        }
    }

    /// Whether we ended the term ourselves ([`Resigned`](Self::Resigned) or
    /// [`Shutdown`](Self::Shutdown)) rather than losing it.
    pub const fn is_voluntary(self) -> bool {
        matches!(self, LossReason::Resigned | LossReason::Shutdown)
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "renewals failed until the local deadline",
            LossReason::Revoked => "the backend revoked the lease",
            LossReason::Deleted => "the lease's record was deleted on the backend",
            LossReason::TakenOver => "another candidate holds the lease",
            LossReason::Resigned => "resigned",
            LossReason::Shutdown => "the elector shut down",
        })
    }
}

impl FromStr for LossReason {
    type Err = Error;

    /// Parses the spelling [`as_str`](LossReason::as_str) gives.
    fn from_str(s: &str) -> Result<Self, Error> {
        LossReason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "reason",
                    format!(
                        "{s:?} is not one of expired, revoked, deleted, taken_over, resigned, shutdown"
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_parses_back_from_its_spelling() {
        for reason in LossReason::ALL {
            assert_eq!(reason.as_str().parse::<LossReason>().unwrap(), reason);
        }
    }

    #[test]
    fn an_unknown_spelling_is_refused_naming_the_field() {
        for bad in ["", "Expired", "taken over", "lost"] {
            match bad.parse::<LossReason>() {
                Err(Error::InvalidArgument {
                    field: "reason", ..
                }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
