//! One session's renewals, batched: those that arrive within a millisecond
//! of each other go out as one `sync` and one multi-read of every node
//! they renew (ZooKeeper 3.6+), instead of a `sync` and an `exists` each.
//! The Elector renews the terms of a backend that batches on one grid
//! (`Capabilities::renewals_batched`), so a thousand leaderships on one
//! client cost a request or two per renewal interval, not two thousand.
//!
//! Each renewal still counts from the send of the `sync` that renewed it,
//! which comes after the renewal was asked for; a session with one lease
//! sends its renewal at once, as before.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_core::{LossReason, Result};
use tokio::sync::oneshot;
use tokio::time::Instant;
use zookeeper_client::Client;

use crate::error::unavailable;
use crate::latch::{self, Node};
use crate::session::Session;
use crate::Settings;

/// How long the first renewal of a batch waits for others to join it.
const GATHER: Duration = Duration::from_millis(1);

/// What a renewal found: when its `sync` was sent, and whether the node is
/// still ours.
pub(crate) type Checked = (Instant, std::result::Result<(), LossReason>);

/// A renewal waiting for its batch to be sent.
struct Waiting {
    node: Node,
    answer: oneshot::Sender<Result<Checked>>,
}

/// The batch being gathered, if any.
#[derive(Default)]
pub(crate) struct Renewals {
    open: Mutex<Option<Vec<Waiting>>>,
}

impl std::fmt::Debug for Renewals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gathering = self
            .open
            .lock()
            .map_or(0, |open| open.as_ref().map_or(0, Vec::len));
        f.debug_struct("Renewals")
            .field("gathering", &gathering)
            .finish()
    }
}

impl Renewals {
    /// Whether `node` is still ours, read after a `sync` sent after this
    /// call began; batched with the session's other renewals where it holds
    /// other leases.
    pub(crate) async fn still_ours(
        session: &Arc<Session>,
        client: &Client,
        node: Node,
        settings: &Settings,
    ) -> Result<Checked> {
        let this = session.renewals();
        if session.terms().live() <= 1 {
            let sent_at = Instant::now();
            let ours = latch::still_ours(client, &node, settings).await?;
            return Ok((sent_at, ours));
        }
        let (answer, answered) = oneshot::channel();
        let first = {
            let mut open = this.open.lock().unwrap_or_else(|e| e.into_inner());
            let waiting = Waiting { node, answer };
            match open.as_mut() {
                Some(batch) => {
                    batch.push(waiting);
                    false
                }
                None => {
                    *open = Some(vec![waiting]);
                    true
                }
            }
        };
        if first {
            // In a task of its own: a renewal that is cancelled (its term
            // resigned meanwhile) does not take the others' with it.
            let (session, client, settings) = (session.clone(), client.clone(), settings.clone());
            tokio::spawn(async move {
                tokio::time::sleep(GATHER).await;
                let batch = session
                    .renewals()
                    .open
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .unwrap_or_default();
                let nodes: Vec<Node> = batch.iter().map(|w| w.node.clone()).collect();
                let sent_at = Instant::now();
                let verdicts = latch::still_ours_all(&client, &nodes, &settings).await;
                for (waiting, verdict) in batch.into_iter().zip(verdicts) {
                    let _ = waiting.answer.send(verdict.map(|v| (sent_at, v)));
                }
            });
        }
        answered
            .await
            .unwrap_or_else(|_| Err(unavailable("a batched renewal ended unanswered")))
    }
}
