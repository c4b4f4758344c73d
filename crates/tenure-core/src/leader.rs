//! Who leads: what a backend's watch reports.

use crate::{CandidateId, FencingToken};

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
