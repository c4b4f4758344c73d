//! The protocol between the driver and a candidate process: one JSON
//! object per line each way. Commands carry an `id` echoed by their reply;
//! events (`ready`, `elected`, `lost`) come unasked. Instants travel as
//! readings of the shared monotonic clock ([`super::clock`]).

use serde::{Deserialize, Serialize};

/// What the driver asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Start campaigning (replies at once; `elected` follows when it leads).
    Campaign,
    /// Resign the current leadership (replies when the release is answered).
    Resign,
    /// The candidate's view: leader or not, token, validity.
    Status,
    /// The token the candidate would write with now, valid or not (a zombie
    /// writes with whatever it last had); the driver makes the write.
    Write,
    /// Exit cleanly.
    Exit,
}

/// One command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Echoed by the reply.
    pub id: u64,
    /// The command.
    pub op: Command,
}

/// The candidate's view of its leadership.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Whether it has a term that has not ended.
    pub leader: bool,
    /// Whether that term is valid now.
    pub valid: bool,
    /// The token of its latest term.
    pub token: Option<u64>,
    /// The latest term's deadline on the shared clock.
    pub valid_until_ns: Option<u64>,
}

/// What the candidate says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Message {
    /// Started and connected.
    Ready {
        /// Its process id.
        pid: u32,
    },
    /// The answer to request `id`.
    Reply {
        /// The request's id.
        id: u64,
        /// Why it failed, if it did.
        error: Option<String>,
        /// The candidate's view after the command.
        status: Status,
    },
    /// It leads.
    Elected {
        /// The term's token.
        token: Option<u64>,
        /// When `campaign` returned, on the shared clock.
        at_ns: u64,
        /// The term's deadline then.
        valid_until_ns: u64,
    },
    /// Its term ended.
    Lost {
        /// Why, as `LossReason` prints it in debug form (`Expired`, `Revoked`, `TakenOver`, ...).
        reason: String,
        /// When it saw the end, on the shared clock.
        at_ns: u64,
        /// The term's last deadline.
        valid_until_ns: u64,
    },
}
