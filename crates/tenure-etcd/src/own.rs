//! A holder watches its own key: deleted out of band (`etcdctl del`, an
//! operator's cleanup, `etcdctl lease revoke`), the term ends at once rather
//! than at the next renewal, up to a third of the TTL later.

use std::time::Duration;

use etcd_client::{Client, EventType, WatchFilterType, WatchOptions};
use tenure_core::{LossReason, LossSignal};
use tokio::task::JoinHandle;

use crate::Settings;

/// The watch of one holder's key; it stops when this is dropped (with the
/// lease's last handle).
pub(crate) struct OwnKeyWatch(JoinHandle<()>);

impl Drop for OwnKeyWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts watching `key`, created at `create_revision`, on the current
/// runtime (the heartbeat runtime, which drives the client): its deletion
/// fires `signal` with [`LossReason::Deleted`].
pub(crate) fn watch(
    client: Client,
    key: String,
    create_revision: i64,
    settings: Settings,
    signal: LossSignal,
) -> OwnKeyWatch {
    OwnKeyWatch(tokio::spawn(async move {
        let mut pause = Duration::from_millis(50);
        // Watched from just after the key's creation: a delete that came
        // before the watch was open is in the history it replays.
        let mut from = create_revision + 1;
        loop {
            match until_deleted(&client, &key, create_revision, from, &settings).await {
                Ok(Watched::Deleted) => {
                    tracing::debug!(key, "our key was deleted");
                    signal.fire(LossReason::Deleted);
                    return;
                }
                Ok(Watched::ReadFrom(revision)) => from = revision,
                Err(error) => {
                    tracing::debug!(key, %error, retry_in = ?pause, "watch of our own key failed; watching again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }))
}

enum Watched {
    Deleted,
    /// The watch ended (compaction, a closed stream) with the key still
    /// ours as read at a revision: watch again from just after it.
    ReadFrom(i64),
}

async fn until_deleted(
    client: &Client,
    key: &str,
    create_revision: i64,
    from: i64,
    settings: &Settings,
) -> tenure_core::Result<Watched> {
    let options = WatchOptions::new()
        .with_start_revision(from)
        .with_filters([WatchFilterType::NoPut]);
    let mut stream = crate::error::watch_opened(settings.route, settings.request_timeout, || {
        let (mut watches, options) = (client.watch_client(), options.clone());
        async move { watches.watch(key, Some(options)).await }
    })
    .await
    .map_err(crate::error::map)?;
    while let Some(answer) = stream.message().await.map_err(crate::error::map)? {
        if answer
            .events()
            .iter()
            .any(|e| e.event_type() == EventType::Delete)
        {
            return Ok(Watched::Deleted);
        }
        if answer.canceled() {
            break;
        }
        // A watch starting at a revision etcd has passed is caught up by a
        // loop that runs every 100 ms: a delete between the grant and the
        // watch would reach us that late. Once the watch exists, look once.
        if answer.created() {
            if let Looked::Gone = look(client, key, create_revision, settings).await? {
                return Ok(Watched::Deleted);
            }
        }
    }
    // Cancelled (compacted past `from`) or closed: look instead.
    match look(client, key, create_revision, settings).await? {
        Looked::Gone => Ok(Watched::Deleted),
        Looked::OursAt(revision) => Ok(Watched::ReadFrom(revision + 1)),
    }
}

enum Looked {
    Gone,
    OursAt(i64),
}

/// Reads our key: gone (or recreated by someone else), or still ours as of
/// a revision.
async fn look(
    client: &Client,
    key: &str,
    create_revision: i64,
    settings: &Settings,
) -> tenure_core::Result<Looked> {
    let now = settings.get(client, key, None).await?;
    let ours = now
        .kvs()
        .iter()
        .any(|kv| kv.create_revision() == create_revision);
    Ok(match (ours, now.header()) {
        (false, _) => Looked::Gone,
        (true, Some(h)) => Looked::OursAt(h.revision()),
        (true, None) => Looked::OursAt(create_revision),
    })
}
