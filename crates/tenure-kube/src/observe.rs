//! Expiry judged by the observer's own monotonic clock (client-go#448), and
//! waiting for a Lease to change by watching it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{WatchEvent, WatchParams};
use kube::Api;
use tokio::time::Instant;

/// When this process first saw each Lease's current resourceVersion.
#[derive(Debug, Default)]
pub(crate) struct Observations(Mutex<HashMap<String, (String, Instant)>>);

impl Observations {
    /// Records seeing `name` at `resource_version`; returns since when this
    /// process has seen it unchanged.
    pub fn seen(&self, name: &str, resource_version: &str) -> Instant {
        let mut map = self.0.lock().unwrap();
        match map.get(name) {
            Some((rv, since)) if rv == resource_version => *since,
            _ => {
                let now = Instant::now();
                map.insert(name.to_owned(), (resource_version.to_owned(), now));
                now
            }
        }
    }
}

/// What waiting for a change found.
pub(crate) enum Change {
    /// The Lease as the watch delivered it (`None`: deleted). It is the
    /// state at the event's resourceVersion; a write based on it is still a
    /// compare-and-swap, so a later change only makes that write conflict.
    Seen(Option<Box<Lease>>),
    /// The deadline passed, or the watch failed (410 Gone included): re-read.
    Unknown,
}

/// Waits until the Lease `name` changes after `resource_version` (or is
/// deleted), `until` passes, or the watch fails. The changed object comes
/// with the event, so the caller need not read it again: one request fewer
/// on every hand-over.
pub(crate) async fn changed(
    api: &Api<Lease>,
    name: &str,
    resource_version: &str,
    until: Option<Instant>,
) -> Change {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290);
    let wait = async {
        let Ok(stream) = api.watch(&params, resource_version).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Change::Unknown;
        };
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Bookmark(_)) => continue,
                Ok(WatchEvent::Added(lease) | WatchEvent::Modified(lease)) => {
                    return Change::Seen(Some(Box::new(lease)))
                }
                Ok(WatchEvent::Deleted(_)) => return Change::Seen(None),
                Ok(WatchEvent::Error(_)) | Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return Change::Unknown;
                }
            }
        }
        Change::Unknown
    };
    match until {
        Some(until) => tokio::time::timeout_at(until, wait)
            .await
            .unwrap_or(Change::Unknown),
        None => wait.await,
    }
}
