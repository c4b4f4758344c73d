//! Leader observations from a prefix watch, re-read on every change.

use std::sync::Arc;

use etcd_client::{Client, WatchOptions};
use futures::stream::BoxStream;
use futures::StreamExt;
use tenure_core::{LeaderEvent, Result};

use crate::election::{is_candidate, leader, leader_info};
use crate::error::map;
use crate::Settings;

async fn current(client: &Client, prefix: &str, settings: &Settings) -> Result<(LeaderEvent, i64)> {
    let (kv, revision) = leader(client, prefix, settings).await?;
    let event = match kv {
        Some(kv) => LeaderEvent::Elected(leader_info(&kv)),
        None => LeaderEvent::Vacant,
    };
    Ok((event, revision))
}

struct Watcher {
    client: Client,
    prefix: String,
    settings: Arc<Settings>,
    stream: Option<etcd_client::WatchStream>,
    revision: i64,
    last: Option<LeaderEvent>,
}

impl Watcher {
    /// The next leader state that differs from the last one reported.
    async fn next(&mut self) -> Result<LeaderEvent> {
        loop {
            if self.stream.is_none() {
                // (Re)start: read the state, then watch from just after it.
                let (event, revision) = current(&self.client, &self.prefix, &self.settings).await?;
                let options = WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision + 1);
                self.stream = Some(
                    self.client
                        .watch_client()
                        .watch(self.prefix.as_str(), Some(options))
                        .await
                        .map_err(map)?,
                );
                self.revision = revision;
                if self.last.as_ref() != Some(&event) {
                    return Ok(event);
                }
            }
            let stream = self.stream.as_mut().expect("opened above");
            let Some(answer) = stream.message().await.map_err(map)? else {
                self.stream = None;
                continue;
            };
            if answer.canceled() {
                // Compacted past our revision, or cancelled: re-read and re-watch.
                tracing::debug!(
                    prefix = self.prefix,
                    compact_revision = answer.compact_revision(),
                    "watch cancelled; re-reading"
                );
                self.stream = None;
                continue;
            }
            // Changes to nested elections' keys (`<prefix>b/...`) are theirs.
            let ours = answer.events().iter().any(|event| {
                event
                    .kv()
                    .is_some_and(|kv| is_candidate(&self.prefix, kv.key()))
            });
            if !ours {
                continue;
            }
            let (event, revision) = current(&self.client, &self.prefix, &self.settings).await?;
            self.revision = revision;
            if self.last.as_ref() != Some(&event) {
                return Ok(event);
            }
        }
    }
}

pub(crate) async fn watch(
    client: Client,
    prefix: String,
    settings: Arc<Settings>,
) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
    let mut watcher = Watcher {
        client,
        prefix,
        settings,
        stream: None,
        revision: 0,
        last: None,
    };
    // Fail fast if the cluster cannot be read at all.
    let first = watcher.next().await?;
    watcher.last = Some(first.clone());
    let rest = futures::stream::unfold(Some(watcher), |state| async move {
        let mut watcher = state?;
        match watcher.next().await {
            Ok(event) => {
                watcher.last = Some(event.clone());
                Some((Ok(event), Some(watcher)))
            }
            // Report the error and end; `Elector::observe` re-watches with back-off.
            Err(error) => Some((Err(error), None)),
        }
    });
    Ok(futures::stream::once(async move { Ok(first) })
        .chain(rest)
        .boxed())
}
