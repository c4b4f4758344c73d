//! A holder watches its own Lease: deleted out of band (`kubectl delete
//! lease`, a namespace cleanup) or taken by another writer (a client-go
//! peer's record applied over ours), the term ends at once rather than at
//! the next renewal, up to a third of the TTL later.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Api;
use tenure_core::hosted::bounded;
use tenure_core::{LossReason, LossSignal};
use tokio::sync::Mutex;
use tokio::task::AbortHandle;

use crate::granted::Ours;
use crate::observe::{Change, LeaseWatch};
use crate::record::{self, Term};

/// The watch of one holder's Lease; it stops when this is dropped (with the
/// lease's last handle).
pub(crate) struct OwnLeaseWatch(AbortHandle);

impl Drop for OwnLeaseWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whom the watch of our own Lease tells what.
pub(crate) struct Told {
    /// Set before our own release: its write is no news.
    pub releasing: Arc<AtomicBool>,
    /// Fired when the Lease is deleted or holds another term.
    pub signal: LossSignal,
    /// The Lease as we last wrote it: a newer version of our term that
    /// someone else wrote (a label naming a waiter) replaces it, so that
    /// our next write does not meet a conflict.
    pub last: Weak<Mutex<Ours>>,
}

/// Starts watching the Lease `written` by our granting write, on the
/// heartbeat runtime, which drives the client. Its deletion fires the
/// signal with [`LossReason::Deleted`]; another term in it (holder,
/// acquireTime or leaseTransitions changed), with [`LossReason::TakenOver`].
/// Our own renewals keep the term, and once `releasing` is set (our own
/// release writes the Lease vacant) nothing is reported.
pub(crate) fn watch(
    api: Api<KubeLease>,
    written: &KubeLease,
    told: Told,
    request_timeout: Duration,
) -> OwnLeaseWatch {
    let Told {
        releasing,
        signal,
        last,
    } = told;
    let name = written.metadata.name.clone().unwrap_or_default();
    let rv = written
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let term = Term::of(written);
    let task = async move {
        let reason = until_lost(&api, &name, rv, &term, &last, request_timeout).await;
        if releasing.load(Ordering::SeqCst) {
            return;
        }
        tracing::debug!(
            name,
            reason = reason.as_str(),
            "our Lease is no longer ours"
        );
        signal.fire(reason);
    };
    OwnLeaseWatch(tenure_core::heartbeat_runtime().spawn(task).abort_handle())
}

/// `now`, a version of our term, as the base of our next write, if it is
/// newer than the one we have and no write of ours is on its way (whose
/// answer will be newer still).
fn bring_up_to_date(last: &Weak<Mutex<Ours>>, now: &KubeLease) {
    let Some(last) = last.upgrade() else { return };
    let Ok(mut ours) = last.try_lock() else {
        return;
    };
    let version = |l: &KubeLease| {
        let rv = l.metadata.resource_version.as_deref().unwrap_or_default();
        rv.parse::<u64>().ok()
    };
    if let (Some(theirs), Some(mine)) = (version(now), version(&ours.lease)) {
        if theirs > mine && Term::of(now) == Term::of(&ours.lease) {
            ours.lease = record::trimmed(now.clone());
        }
    }
}

/// Waits until the Lease is deleted or holds another term.
async fn until_lost(
    api: &Api<KubeLease>,
    name: &str,
    mut rv: String,
    term: &Term,
    last: &Weak<Mutex<Ours>>,
    request_timeout: Duration,
) -> LossReason {
    let agent = crate::observe::user_agent("holder", None);
    let mut watch = LeaseWatch::new(api.clone(), name, agent);
    let mut pause = Duration::from_millis(50);
    let mut look = true;
    loop {
        if look {
            // Open the watch first, then look: a change before the look is
            // in what it reads, one after it comes live on the open stream.
            // (A change between our write and the watch's start would
            // otherwise come from the server's catch-up of past events:
            // kube-apiserver without its watch cache serves those from
            // etcd's, up to 100 ms later.)
            watch.open(&rv).await;
            match bounded("get lease", request_timeout, api.get_opt(name)).await {
                Ok(Ok(None)) => return LossReason::Deleted,
                Ok(Ok(Some(now))) if Term::of(&now) != *term => return LossReason::TakenOver,
                Ok(Ok(Some(now))) => {
                    if !watch.follows(&rv) {
                        rv = now.metadata.resource_version.unwrap_or_default();
                    }
                    look = false;
                    pause = Duration::from_millis(50);
                }
                Ok(Err(error)) => {
                    tracing::debug!(name, %error, retry_in = ?pause, "look at our own Lease failed");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
                Err(error) => {
                    tracing::debug!(name, %error, retry_in = ?pause, "look at our own Lease failed");
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
            }
        }
        match watch.changed(&rv, None).await {
            Change::Seen(None) => return LossReason::Deleted,
            Change::Seen(Some(now)) if Term::of(&now) != *term => return LossReason::TakenOver,
            // One of our renewals, or a label someone else wrote: watch on
            // from it.
            Change::Seen(Some(now)) => {
                bring_up_to_date(last, &now);
                rv = now.metadata.resource_version.unwrap_or_default();
            }
            // The watch failed (after its back-off) or ended: look again.
            Change::Unknown => look = true,
        }
    }
}
