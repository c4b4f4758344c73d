//! Keeping one etcd lease alive, on a keep-alive stream opened on demand.

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use crate::error::{bounded, map, BACKEND};
use crate::Settings;
use tenure_core::{Error, Result};

/// One lease's keep-alive stream. A broken stream is reopened on the next call.
///
/// Answers on the stream carry nothing that ties them to a request, so a
/// call abandoned between sending its keep-alive and reading the answer
/// (its future dropped) would leave that answer for the next call to take as
/// its own, counting an old renewal from a later send. `in_flight` marks
/// such a call; the next one drops the stream and opens a fresh one.
pub(crate) struct KeepAlive {
    lease_id: i64,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    in_flight: bool,
}

/// What a keep-alive told us.
pub(crate) enum Kept {
    /// The lease lives on; the deadline may count from `sent_at`.
    Alive { sent_at: Instant },
    /// The lease is gone on the server.
    Expired,
}

impl KeepAlive {
    pub(crate) fn new(lease_id: i64) -> Self {
        KeepAlive {
            lease_id,
            stream: None,
            in_flight: false,
        }
    }

    fn reset(&mut self) {
        self.stream = None;
        self.in_flight = false;
    }

    /// Sends one keep-alive and waits for its answer.
    pub(crate) async fn keep_alive(
        &mut self,
        client: &Client,
        settings: &Settings,
    ) -> Result<Kept> {
        if self.in_flight {
            // An earlier call gave up before its answer came: that answer may
            // still arrive on this stream. Start over on a new one.
            tracing::debug!(
                lease_id = self.lease_id,
                "keep-alive stream reset after an abandoned renewal"
            );
            self.reset();
        }
        let sent_at = Instant::now();
        let lease_id = self.lease_id;
        let result = match self.stream.as_mut() {
            // Opening the stream sends a keep-alive and reads its answer
            // (etcd-client refuses a lease that is gone): that is this call's
            // renewal.
            None => bounded(client, "keep-alive", settings.request_timeout, || {
                let mut leases = client.lease_client();
                async move { leases.keep_alive(lease_id).await }
            })
            .await
            .map(|opened| {
                self.stream = Some(opened);
                Some(true)
            }),
            Some((keeper, stream)) => {
                // Messages on an open stream carry no token: nothing to refresh.
                let in_flight = &mut self.in_flight;
                let sent = async {
                    *in_flight = true;
                    keeper.keep_alive().await?;
                    let answer = stream.message().await?;
                    *in_flight = false;
                    Ok::<_, etcd_client::Error>(answer.map(|answer| answer.ttl() > 0))
                };
                match tokio::time::timeout(settings.request_timeout, sent).await {
                    Ok(answer) => answer.map_err(map),
                    Err(_) => Err(Error::Timeout {
                        operation: "keep-alive",
                        after: settings.request_timeout,
                    }),
                }
            }
        };
        match result {
            Ok(Some(true)) => Ok(Kept::Alive { sent_at }),
            Ok(Some(false)) => Ok(Kept::Expired),
            Err(Error::Backend { source, .. } | Error::Unavailable { source, .. })
                if source
                    .downcast_ref::<etcd_client::Error>()
                    .is_some_and(crate::error::is_lease_not_found) =>
            {
                self.reset();
                Ok(Kept::Expired)
            }
            Ok(None) => {
                self.reset();
                Err(Error::Unavailable {
                    backend: BACKEND,
                    source: "keep-alive stream closed by the server".into(),
                })
            }
            Err(error) => {
                self.reset();
                Err(error)
            }
        }
    }
}

/// Revokes a lease (deleting every key attached to it), ignoring "not found".
pub(crate) async fn revoke(client: &Client, lease_id: i64, settings: &Settings) -> Result<()> {
    let revoked = bounded(client, "revoke", settings.request_timeout, || {
        let mut leases = client.lease_client();
        async move {
            match leases.revoke(lease_id).await {
                Err(e) if crate::error::is_lease_not_found(&e) => Ok(()),
                Err(e) => Err(e),
                Ok(_) => Ok(()),
            }
        }
    });
    revoked.await
}
