//! Answers a real apiserver gives that the server would not give on its
//! own, set by tests: a write committed to etcd but answered with an error
//! (kube-apiserver's 500 "etcdserver: request timed out" or "leader
//! changed" after etcd applied the write, a load balancer's 502/503/504 in
//! front of an apiserver that went on), and reads refused (RBAC without a
//! verb, API Priority and Fairness shedding load with a `Retry-After`; also
//! updates and patches, and only the next few if asked), and
//! every PATCH refused as a server that serves no patch type refuses it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;

use super::status;

/// Which requests [`LeaseServer::refuse`](super::LeaseServer::refuse) answers
/// with an error: each is one RBAC verb on `leases`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Requests {
    /// `get` of one Lease.
    Get,
    /// `list` (a GET of the collection without `watch`).
    List,
    /// `watch` (a GET of the collection with `watch=1`).
    Watch,
    /// `update` (a PUT of one Lease; also one that creates it).
    Update,
    /// `patch` (a PATCH of one Lease, of any type, server-side apply too).
    Patch,
}

impl Requests {
    /// The RBAC verb, as kube-apiserver's authorizer names it.
    fn verb(self) -> &'static str {
        match self {
            Requests::Get => "get",
            Requests::List => "list",
            Requests::Watch => "watch",
            Requests::Update => "update",
            Requests::Patch => "patch",
        }
    }
}

/// How requests of one kind are refused: with `code` and `retry_after`,
/// the next `left` of them (`None`: every one).
#[derive(Clone, Copy, Debug)]
struct Refusal {
    code: StatusCode,
    retry_after: Option<Duration>,
    left: Option<u32>,
}

/// The answers set for the next requests. Kept across restarts.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    after_commit: Mutex<Option<(StatusCode, String)>>,
    refused: Mutex<HashMap<Requests, Refusal>>,
    patch_refused: AtomicBool,
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

    /// Every request of `requests` (or the next `left` of them) is answered
    /// `code` (with `retry_after`) until [`stop_refusing`](Self::stop_refusing).
    pub(crate) fn refuse(
        &self,
        requests: Requests,
        code: StatusCode,
        retry_after: Option<Duration>,
        left: Option<u32>,
    ) {
        let refusal = Refusal {
            code,
            retry_after,
            left,
        };
        let mut refused = self.refused.lock().unwrap();
        if left == Some(0) {
            refused.remove(&requests);
        } else {
            refused.insert(requests, refusal);
        }
    }

    /// Whether requests of `requests` are still refused (a refusal of the
    /// next few ends once they came).
    pub(crate) fn refusing(&self, requests: Requests) -> bool {
        self.refused.lock().unwrap().contains_key(&requests)
    }

    pub(crate) fn stop_refusing(&self, requests: Requests) {
        self.refused.lock().unwrap().remove(&requests);
    }

    /// The answer to a request of `requests` on Lease `name` (or the
    /// namespace's collection) in `ns`, if it is refused.
    pub(crate) fn refusal(
        &self,
        requests: Requests,
        ns: &str,
        name: Option<&str>,
    ) -> Option<Response> {
        let (code, retry_after) = {
            let mut refused = self.refused.lock().unwrap();
            let refusal = refused.get_mut(&requests)?;
            let answer = (refusal.code, refusal.retry_after);
            if let Some(left) = refusal.left.as_mut() {
                *left -= 1;
                if *left == 0 {
                    refused.remove(&requests);
                }
            }
            answer
        };
        let message = match code.as_u16() {
            // apiserver/pkg/endpoints/handlers/responsewriters/errors.go, Forbidden().
            403 => format!(
                "{}{} is forbidden: User \"system:serviceaccount:{ns}:tenure\" cannot {} resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"{ns}\"",
                status::RESOURCE,
                name.map(|n| format!(" {n:?}")).unwrap_or_default(),
                requests.verb(),
            ),
            429 => "Too many requests, please try again later.".to_owned(),
            _ => format!("{} refused by the test server", requests.verb()),
        };
        Some(status::refused(code, message, name, retry_after))
    }

    /// Whether every PATCH is refused (see [`patch_refusal`](Self::patch_refusal)).
    pub(crate) fn refuse_patch(&self, refused: bool) {
        self.patch_refused.store(refused, Ordering::Relaxed);
    }

    /// The answer to a PATCH while patches are refused: 415
    /// UnsupportedMediaType listing no accepted type, as
    /// apiserver/pkg/endpoints/handlers/patch.go (PatchResource) answers a
    /// Content-Type outside the resource's patch types
    /// (`negotiation.NewUnsupportedMediaTypeError(patchTypes)`) when that
    /// list is empty, before it reads the body or the Lease.
    pub(crate) fn patch_refusal(&self) -> Option<Response> {
        self.patch_refused
            .load(Ordering::Relaxed)
            .then(|| status::unsupported_media_type(&[]))
    }
}
