//! Expiry judged by the observer's own monotonic clock (client-go#448), and
//! waiting for a Lease to change by watching it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, WatchEvent, WatchParams};
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

type Events = BoxStream<'static, kube::Result<WatchEvent<Lease>>>;

fn params_for(name: &str) -> WatchParams {
    WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290)
}

/// One Lease's changes, over a watch kept open from one change to the next.
///
/// A watch opened anew after every event would start from a resourceVersion
/// the server may have passed already: kube-apiserver without its watch
/// cache, like the Lease test server, serves that from etcd's catch-up loop,
/// every 100 ms. So a release that lands just after a renewal would reach a
/// standby up to 100 ms late. Kept open, the stream carries the release as
/// soon as it is written; and a waiting candidate makes one request per
/// wait, not one per renewal it sees.
pub(crate) struct LeaseWatch {
    api: Api<Lease>,
    name: String,
    /// The open stream and the resourceVersion of the last event it gave.
    open: Option<(String, Events)>,
}

impl LeaseWatch {
    pub(crate) fn new(api: Api<Lease>, name: &str) -> LeaseWatch {
        LeaseWatch {
            api,
            name: name.to_owned(),
            open: None,
        }
    }

    /// Whether a watch is open and its last event was at `resource_version`.
    pub(crate) fn follows(&self, resource_version: &str) -> bool {
        self.open
            .as_ref()
            .is_some_and(|(rv, _)| rv == resource_version)
    }

    /// Opens the watch from `resource_version` now, unless it is open
    /// there already: a look the caller takes next then cannot miss a change
    /// that the watch would carry only from the server's catch-up.
    pub(crate) async fn open(&mut self, resource_version: &str) -> kube::Result<()> {
        if self.follows(resource_version) {
            return Ok(());
        }
        let stream = self
            .api
            .watch(&params_for(&self.name), resource_version)
            .await?;
        self.open = Some((resource_version.to_owned(), stream.boxed()));
        Ok(())
    }

    /// After a 410 Gone (the history after `resource_version` is gone):
    /// lists the Lease, as client-go's reflector does. If it changed since
    /// `resource_version`, that is the change; otherwise the watch goes on
    /// from the list's resourceVersion, which the server still has. (A watch
    /// from the object's own resourceVersion would be refused again for as
    /// long as the Lease is not written.)
    async fn relist(
        api: &Api<Lease>,
        name: &str,
        resource_version: &str,
    ) -> Option<Result<Change, Events>> {
        let params = ListParams::default().fields(&format!("metadata.name={name}"));
        let list = api.list(&params).await.ok()?;
        let current = list.items.into_iter().next();
        match &current {
            Some(lease) if lease.metadata.resource_version.as_deref() == Some(resource_version) => {
                let from = list.metadata.resource_version?;
                let stream = api.watch(&params_for(name), &from).await.ok()?;
                Some(Err(stream.boxed()))
            }
            _ => Some(Ok(Change::Seen(current.map(Box::new)))),
        }
    }

    /// Waits until the Lease changes after `resource_version` (or is
    /// deleted), `until` passes, or the watch fails. The changed object
    /// comes with the event, so the caller need not read it again: one
    /// request fewer on every hand-over. The stream stays open for the next
    /// call if that call goes on from the event this one returned.
    pub(crate) async fn changed(
        &mut self,
        resource_version: &str,
        until: Option<Instant>,
    ) -> Change {
        let open = self.open.take();
        let (api, name) = (&self.api, self.name.as_str());
        let wait = async {
            let mut stream = match open {
                Some((rv, stream)) if rv == resource_version => stream,
                _ => match api.watch(&params_for(name), resource_version).await {
                    Ok(stream) => stream.boxed(),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return (Change::Unknown, None);
                    }
                },
            };
            let mut relisted = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(WatchEvent::Bookmark(_)) => continue,
                    Ok(WatchEvent::Added(lease) | WatchEvent::Modified(lease)) => {
                        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
                        return (Change::Seen(Some(Box::new(lease))), Some((rv, stream)));
                    }
                    Ok(WatchEvent::Deleted(_)) => return (Change::Seen(None), None),
                    Ok(WatchEvent::Error(e)) if e.code == 410 && !relisted => {
                        relisted = true;
                        match Self::relist(api, name, resource_version).await {
                            Some(Ok(change)) => return (change, None),
                            Some(Err(from_list)) => stream = from_list,
                            None => return (Change::Unknown, None),
                        }
                    }
                    Ok(WatchEvent::Error(_)) | Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return (Change::Unknown, None);
                    }
                }
            }
            (Change::Unknown, None)
        };
        let (change, open) = match until {
            Some(until) => tokio::time::timeout_at(until, wait)
                .await
                .unwrap_or((Change::Unknown, None)),
            None => wait.await,
        };
        self.open = open;
        change
    }
}
