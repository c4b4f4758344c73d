//! `Elector::observe`: a leader stream that survives backend errors.

use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::{ElectionKey, LeaderEvent, LeaseBackend};

struct Observer {
    backend: Arc<dyn LeaseBackend>,
    key: ElectionKey,
    backoff: Backoff,
    shutdown: watch::Receiver<bool>,
    events: Option<BoxStream<'static, crate::Result<LeaderEvent>>>,
    last: Option<LeaderEvent>,
}

impl Observer {
    async fn next_event(&mut self) -> Option<LeaderEvent> {
        loop {
            let Some(events) = self.events.as_mut() else {
                match self.backend.watch(&self.key).await {
                    Ok(events) => {
                        self.events = Some(events);
                        self.backoff.reset();
                    }
                    Err(error) => {
                        tracing::warn!(key = %self.key, %error, "cannot watch the election; retrying");
                        tokio::time::sleep(self.backoff.next_delay()).await;
                    }
                }
                continue;
            };
            match events.next().await {
                Some(Ok(event)) if self.last.as_ref() == Some(&event) => {}
                Some(Ok(event)) => {
                    match &event {
                        LeaderEvent::Elected(info) => tracing::info!(
                            key = %self.key,
                            leader = %info.identity,
                            token = info.token.map(|t| t.get()),
                            "observed new leader"
                        ),
                        LeaderEvent::Vacant => tracing::info!(key = %self.key, "observed vacancy"),
                    }
                    self.last = Some(event.clone());
                    return Some(event);
                }
                Some(Err(error)) => {
                    tracing::warn!(key = %self.key, %error, "watch failed; re-watching");
                    self.events = None;
                    tokio::time::sleep(self.backoff.next_delay()).await;
                }
                None => self.events = None,
            }
        }
    }
}

pub(crate) fn observe(
    backend: Arc<dyn LeaseBackend>,
    key: ElectionKey,
    backoff: Backoff,
    shutdown: watch::Receiver<bool>,
) -> BoxStream<'static, LeaderEvent> {
    let observer = Observer {
        backend,
        key,
        backoff,
        shutdown,
        events: None,
        last: None,
    };
    futures::stream::unfold(observer, |mut o| async move {
        let mut shutdown = o.shutdown.clone();
        let shut_down = async move {
            // A dropped elector is no shutdown: the stream lives on without it.
            if shutdown.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        crate::simulation::select! {
            event = o.next_event() => event.map(|e| (e, o)),
            _ = shut_down => None,
        }
    })
    .fuse()
    .boxed()
}
