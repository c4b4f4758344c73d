//! Answers a real apiserver gives that the server would not give on its
//! own, set by tests: a write committed to etcd but answered with an error
//! (kube-apiserver's 500 "etcdserver: request timed out" or "leader
//! changed" after etcd applied the write, a load balancer's 502/503/504 in
//! front of an apiserver that went on).

use std::sync::Mutex;

use axum::http::StatusCode;
use axum::response::Response;

use super::status;

/// The answers set for the next requests. Kept across restarts.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    after_commit: Mutex<Option<(StatusCode, String)>>,
}

impl Faults {
    /// The next write (create, update or delete) is committed, then
    /// answered with `code` and `message` instead of its result.
    pub(crate) fn answer_next_write_after_commit(&self, code: StatusCode, message: String) {
        *self.after_commit.lock().unwrap() = Some((code, message));
    }

    /// The answer for a write just committed, if one was set; taken.
    pub(crate) fn after_commit(&self) -> Option<Response> {
        let (code, message) = self.after_commit.lock().unwrap().take()?;
        Some(status::failure(
            code,
            status::reason_for(code),
            message,
            None,
            vec![],
        ))
    }
}
