//! Leader observations from child watches on the election node.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tenure_core::hosted::{bounded, watch_stream, Looks};
use tenure_core::{LeaderEvent, Result};
use zookeeper_client::{Client, Error as ZkError, EventType, OneshotWatcher};

use crate::error::{map, unavailable};
use crate::latch;
use crate::session::Session;
use crate::Settings;

/// The leader now, and a watch that fires on the next change of the
/// election's children (or of its existence, while it has none).
///
/// A watch's first look goes behind a `sync` (pipelined, one round trip):
/// our server may be a follower that has not yet applied a grant another
/// client saw answered, and a watch must start with the state as of its
/// call. Later looks follow a watch event from our own server, which has
/// applied at least the change it announced.
async fn current(
    client: &Client,
    election: &str,
    settings: &Settings,
    first: bool,
) -> Result<(LeaderEvent, OneshotWatcher)> {
    loop {
        let listed = bounded("list and watch children", settings.request_timeout, async {
            if !first {
                return client.list_and_watch_children(election).await;
            }
            // Sent here, in this order: the list follows the sync.
            let sync = client.sync(election);
            let list = client.list_and_watch_children(election);
            match futures::join!(sync, list) {
                // A missing election node is the list's answer to give.
                (Ok(()) | Err(ZkError::NoNode), listed) => listed,
                (Err(e), _) => Err(e),
            }
        })
        .await?;
        match listed {
            Ok((children, watcher)) => {
                let children = latch::candidates(children);
                let event = match latch::leader(client, election, &children, settings).await? {
                    Some(info) => LeaderEvent::Elected(info),
                    None => LeaderEvent::Vacant,
                };
                return Ok((event, watcher));
            }
            Err(ZkError::NoNode) => {
                let exists = bounded(
                    "exists and watch",
                    settings.request_timeout,
                    client.check_and_watch_stat(election),
                )
                .await?
                .map_err(map)?;
                match exists {
                    (None, watcher) => return Ok((LeaderEvent::Vacant, watcher)),
                    (Some(_), _) => continue, // created meanwhile: list it
                }
            }
            Err(e) => return Err(map(e)),
        }
    }
}

struct Watcher {
    session: Arc<Session>,
    election: String,
    settings: Arc<Settings>,
    /// The watch set by the last look; `None` before the first.
    pending: Option<OneshotWatcher>,
}

#[async_trait]
impl Looks for Watcher {
    /// The leader now, then after each change of the election's children
    /// (or existence); an error once the session ends or is closed.
    async fn next(&mut self) -> Result<LeaderEvent> {
        let session = self.session.clone();
        session
            .unless_closed(self.next_change())
            .await
            .unwrap_or_else(|| Err(unavailable("the ZooKeeper session of a watch was closed")))
    }
}

impl Watcher {
    async fn next_change(&mut self) -> Result<LeaderEvent> {
        let first = match self.pending.take() {
            None => true,
            Some(watcher) => {
                let event = watcher.changed().await;
                if event.event_type == EventType::Session && event.session_state.is_terminated() {
                    return Err(unavailable("the ZooKeeper session of a watch ended"));
                }
                false
            }
        };
        // A client only for this look: a watch waiting for its next
        // change holds none, so it never keeps a closed session open.
        let client = self.session.client()?;
        let (event, watcher) = current(&client, &self.election, &self.settings, first).await?;
        self.pending = Some(watcher);
        Ok(event)
    }
}

pub(crate) async fn watch(
    session: Arc<Session>,
    election: String,
    settings: Arc<Settings>,
) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
    watch_stream(Watcher {
        session,
        election,
        settings,
        pending: None,
    })
    .await
}
