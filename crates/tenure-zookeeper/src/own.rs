//! A holder watches its own node: deleted out of band (zkCli's `delete`, an
//! operator's cleanup, another session's `delete`), the term ends at once
//! rather than at the next renewal, up to a third of the TTL later.
//!
//! One exists-watch at a time, set again after every event that is not the
//! deletion. The client re-arms it by itself on a reconnect within the
//! session (its `SetWatches` carries our last zxid, so a deletion missed
//! while disconnected is delivered then, ZOOKEEPER-43). The session's end
//! is not this watch's to report: the lease's deadline covers it, as it
//! covers a session cut off from the servers (CURATOR-460).

use std::sync::Arc;
use std::time::Duration;

use tenure_core::hosted::bounded;
use tenure_core::{LossReason, LossSignal};
use tokio::sync::Mutex;
use tokio::task::AbortHandle;
use zookeeper_client::{Error as ZkError, EventType};

use crate::error::map;
use crate::granted::State;
use crate::latch::OurNode;
use crate::session::Session;
use crate::Settings;

/// The watch of one holder's node; it stops when this is dropped (with the
/// lease's last handle) or [stopped](Self::stop) (at a release).
pub(crate) struct OwnNodeWatch(AbortHandle);

impl OwnNodeWatch {
    pub(crate) fn stop(&self) {
        self.0.abort();
    }
}

impl Drop for OwnNodeWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts watching `node` on the heartbeat runtime, which drives the
/// session: its deletion by anyone but us fires `signal` with
/// [`LossReason::Deleted`] (a node of another session in its place, with
/// [`LossReason::TakenOver`]), unless the session ended meanwhile.
pub(crate) fn watch(
    session: Arc<Session>,
    node: &OurNode,
    state: Arc<Mutex<State>>,
    settings: Settings,
    signal: LossSignal,
) -> OwnNodeWatch {
    let (path, czxid, owner) = (node.path.clone(), node.czxid, node.owner);
    let task = async move {
        let watched = session.clone();
        // Holds no client while it waits, and ends with a closed session
        // (see `Session`): a watch must not keep a closed session open.
        let gone = watched
            .unless_closed(until_gone(&session, &path, czxid, owner, &settings))
            .await;
        let Some(Some(reason)) = gone else { return };
        // A release, or the expiry timer, deletes our node itself: no news.
        if state.lock().await.we_delete || session.ended() {
            return;
        }
        tracing::debug!(path, reason = reason.as_str(), "our node is gone");
        signal.fire(reason);
    };
    OwnNodeWatch(tenure_core::heartbeat_runtime().spawn(task).abort_handle())
}

/// Waits until our node is deleted (or another session's stands in its
/// place); `None` once the session has ended.
async fn until_gone(
    session: &Session,
    path: &str,
    czxid: i64,
    owner: i64,
    settings: &Settings,
) -> Option<LossReason> {
    let mut pause = Duration::from_millis(50);
    loop {
        let client = session.client().ok()?;
        if session.ended() {
            return None;
        }
        let set = bounded(
            "exists and watch",
            settings.request_timeout,
            client.check_and_watch_stat(path),
        )
        .await;
        drop(client);
        let error = match set {
            Ok(Ok((Some(stat), watcher))) => {
                if stat.czxid != czxid || stat.ephemeral_owner != owner {
                    // The path bears our uuid: only a meddler recreates it.
                    return Some(LossReason::TakenOver);
                }
                pause = Duration::from_millis(50);
                match watcher.changed().await {
                    event if event.event_type == EventType::NodeDeleted => {
                        return Some(LossReason::Deleted)
                    }
                    event
                        if event.event_type == EventType::Session
                            && event.session_state.is_terminated() =>
                    {
                        return None
                    }
                    // Our node is never written after its creation; whatever
                    // this was, look (and watch) again.
                    _ => continue,
                }
            }
            // Deleted before the watch was set: our session's server had
            // applied our create, so the node did exist.
            Ok(Ok((None, _))) => return Some(LossReason::Deleted),
            Ok(Err(ZkError::SessionExpired | ZkError::ClientClosed)) => return None,
            Ok(Err(error)) => map(error),
            Err(error) => error,
        };
        tracing::debug!(path, %error, retry_in = ?pause, "watch of our own node failed; watching again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
