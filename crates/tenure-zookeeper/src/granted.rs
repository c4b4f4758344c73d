//! A held lease's node and its local expiry.
//!
//! One ZooKeeper session serves every election of the backend and is kept
//! alive by the client's own pings, so a held node would live on without any
//! renewal. To keep the contract (a lease lapses one TTL after the send time
//! of its last renewal), each held lease has a timer that deletes its node at
//! that instant unless a renewal moved it. If the client cannot reach the
//! servers to delete it, the server expires the session no earlier than that
//! either: the session timeout equals the TTL, counted from a packet that
//! reached the server after the renewal was sent.
//!
//! Each held lease also watches its node ([`own`](crate::own)), so that a
//! deletion by anyone else ends the lease at once, and counts on its
//! session's [terms](crate::terms), so that a server giving the session a
//! shorter timeout than the TTL ends the lease at once.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::LossSignal;
use tokio::sync::Mutex;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::latch;
use crate::own::{self, OwnNodeWatch};
use crate::session::{Claim, Session};
use crate::terms::Counting;
use crate::Settings;

/// What a tenure lease on ZooKeeper carries: the session, not a client of
/// it, so that closing the backend closes the session while leases live on.
pub struct ZkGrant {
    pub(crate) session: Arc<Session>,
    pub(crate) path: String,
    pub(crate) czxid: i64,
    pub(crate) owner: i64,
    pub(crate) state: Arc<Mutex<State>>,
    expiry: AbortHandle,
    /// Watches our node while the lease lives (stops with its last handle).
    own: OwnNodeWatch,
    /// Ends the lease should a server shrink the session (while it lives).
    _counting: Counting,
}

/// Guarded by one lock, which a renewal holds for its whole request, so the
/// expiry timer never deletes a node while a renewal sent before the
/// deadline is in flight.
pub(crate) struct State {
    /// Send time of the last answered renewal (or the grant) plus the TTL.
    pub deadline: Instant,
    /// The timer fired, the lease was released, or a renewal found it
    /// lost: no renewal any more.
    pub ended: bool,
    /// The timer or a release deletes (or deleted) our node: its deletion
    /// is our own doing, not news for the watch of our node.
    pub we_delete: bool,
}

impl ZkGrant {
    /// Starts the expiry timer of a node granted by a request sent at
    /// `sent_at`; the timer keeps the candidacy's claim on the node until
    /// the node is gone (or the session is). And starts watching the node:
    /// deleted by anyone else, `signal` fires; so it does if a server gives
    /// the session a shorter timeout than the TTL (or gave it already).
    pub(crate) fn new(
        session: Arc<Session>,
        claim: Claim,
        node: &latch::OurNode,
        sent_at: Instant,
        ttl: Duration,
        settings: Settings,
        signal: LossSignal,
    ) -> ZkGrant {
        let state = Arc::new(Mutex::new(State {
            deadline: sent_at + ttl,
            ended: false,
            we_delete: false,
        }));
        let counting = session.terms().count_on(signal.clone());
        let own = own::watch(
            session.clone(),
            node,
            state.clone(),
            settings.clone(),
            signal,
        );
        let timer = {
            let (session, path, state) = (session.clone(), node.path.clone(), state.clone());
            async move {
                session
                    .unless_closed(expire(&session, &path, &state, &settings))
                    .await;
                drop(claim);
            }
        };
        let expiry = tenure_core::heartbeat_runtime().spawn(timer).abort_handle();
        ZkGrant {
            session,
            path: node.path.clone(),
            czxid: node.czxid,
            owner: node.owner,
            state,
            expiry,
            own,
            _counting: counting,
        }
    }

    /// Stops the timer and the watch of our node (after a successful release).
    pub(crate) fn disarm(&self) {
        self.expiry.abort();
        self.own.stop();
    }
}

async fn expire(session: &Session, path: &str, state: &Mutex<State>, settings: &Settings) {
    loop {
        let deadline = state.lock().await.deadline;
        tokio::time::sleep_until(deadline).await;
        let mut st = state.lock().await;
        if st.deadline > deadline {
            continue;
        }
        st.ended = true;
        st.we_delete = true;
        drop(st);
        tracing::debug!(path, "lease not renewed within its TTL; deleting its node");
        // Until it is gone, or the session is (which takes the node with it).
        loop {
            let Ok(client) = session.client() else {
                return;
            };
            if session.ended() {
                return;
            }
            match latch::delete(&client, path, settings).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::debug!(path, %error, "deleting an expired node failed; retrying");
                    drop(client);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}
