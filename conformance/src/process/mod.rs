//! Candidates as separate OS processes, so a pause is a real SIGSTOP and a
//! crash a real SIGKILL: the line-based JSON protocol, the candidate's side
//! (the `tenure-candidate` binary), the driver's side, and the hook that
//! turns a URL into a backend inside the candidate.

pub mod candidate;
pub mod clock;
pub mod connect;
pub mod driver;
pub mod protocol;

pub use driver::CandidateProcess;
pub use protocol::{Command, Message, Status};
