//! Candidates as separate OS processes, so a pause is a real SIGSTOP and a
//! crash a real SIGKILL: the line-based JSON protocol, the candidate's side
//! (the `tenure-candidate` binary), the driver's side, the hook that
//! turns a URL into a backend inside the candidate, and a TCP front through
//! which a candidate is a client of the test process's own server.

pub mod candidate;
pub mod clock;
pub mod connect;
pub mod driver;
pub mod front;
pub mod protocol;
pub mod remote;
pub mod wire;

pub use driver::CandidateProcess;
pub use protocol::{Command, Message, Status};
