//! A guard around each granting write: a write whose answer was never read
//! may still have landed, leaving the Lease held by a candidate that does not
//! know it leads, and nobody renewing it, so a standby would wait a whole TTL.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::Api;
use tenure_core::hosted::{bounded, CleanupOnDrop};

use crate::error::{refused, Refused};
use crate::record::{self, Term};

/// Armed while a granting write (create or take-over) is on its way. Dropped
/// armed (the acquire's future was dropped before the answer was read, the
/// answer was lost to a deadline or a broken connection, or it was one that
/// may follow a committed write, see [`answered`](GrantGuard::answered)), it starts a
/// cleanup ([`CleanupOnDrop`]) that reads the Lease
/// and, if it records the term that write would have started (our identity,
/// our acquireTime, our transitions), releases it with a compare-and-swap.
pub(crate) struct GrantGuard(CleanupOnDrop<Armed>);

struct Armed {
    api: Api<Lease>,
    name: String,
    term: Term,
    after: Duration,
}

impl GrantGuard {
    /// Arms a guard for writing `lease` (the body sent) as `name`.
    pub fn arm(api: &Api<Lease>, name: &str, lease: &Lease, after: Duration) -> GrantGuard {
        GrantGuard(CleanupOnDrop::arm(
            Armed {
                api: api.clone(),
                name: name.to_owned(),
                term: Term::of(lease),
                after,
            },
            |armed| Box::pin(release_if_ours(armed)),
        ))
    }

    /// Stands down if `answer` says for certain what became of the write:
    /// a success, or a refusal made before anything was written (400 bad
    /// request, 403 forbidden, 404 not found, 409 conflict, 422 invalid).
    /// Any other answer may follow a committed write: kube-apiserver answers
    /// 500 ("etcdserver: request timed out", "etcdserver: leader changed")
    /// when etcd applied it but did not answer in time, and a load balancer
    /// in front of it 502, 503 or 504 after the apiserver went on; then the
    /// guard stays armed, and its drop looks.
    pub fn answered(self, answer: &Result<Lease, kube::Error>) {
        let definite = match answer {
            Ok(_) => true,
            Err(kube::Error::Api(response)) => {
                matches!(response.code, 400 | 403 | 404 | 409 | 422)
            }
            Err(_) => false,
        };
        if definite {
            // Whatever the answer said, the caller knows.
            self.0.disarm();
        }
    }
}

/// Releases the Lease if it records `armed.term`; a few tries on a conflict
/// (a renewal cannot race: nobody knows the term exists).
async fn release_if_ours(armed: Armed) {
    let Armed {
        api,
        name,
        term,
        after,
    } = armed;
    for _ in 0..3 {
        let read = bounded("get lease", after, api.get_opt(&name)).await;
        let current = match read.and_then(|r| r.map_err(crate::error::map)) {
            Ok(Some(current)) => current,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "could not read the Lease after a dropped grant; if it was granted, it will expire");
                return;
            }
        };
        if Term::of(&current) != term {
            tracing::debug!("the dropped grant's write did not land, or was overtaken");
            return;
        }
        let released = record::released(&current);
        match bounded(
            "release lease",
            after,
            api.replace(&name, &PostParams::default(), &released),
        )
        .await
        {
            Ok(Ok(_)) => {
                tracing::debug!("released a grant whose write's answer was never read");
                return;
            }
            Ok(Err(error)) => match refused(error) {
                Refused::Conflict => continue,
                Refused::NotFound => return,
                Refused::Other(error) => {
                    tracing::warn!(%error, "could not release a dropped grant; it will expire");
                    return;
                }
            },
            Err(error) => {
                tracing::warn!(%error, "could not release a dropped grant; it will expire");
                return;
            }
        }
    }
    tracing::warn!("the Lease kept changing while a dropped grant was released; it will expire");
}
