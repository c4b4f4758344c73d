//! Keeping one etcd lease alive, on a keep-alive stream opened on demand.

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use crate::error::{bounded, map, BACKEND};
use crate::Settings;
use tenure_core::{Error, Result};

/// One lease's keep-alive stream. A broken stream is reopened on the next call.
pub(crate) struct KeepAlive {
    lease_id: i64,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
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
        }
    }

    /// Sends one keep-alive and waits for its answer.
    pub(crate) async fn keep_alive(
        &mut self,
        client: &Client,
        settings: &Settings,
    ) -> Result<Kept> {
        let sent_at = Instant::now();
        let result = bounded("keep-alive", settings.request_timeout, async {
            if self.stream.is_none() {
                self.stream = Some(client.lease_client().keep_alive(self.lease_id).await?);
            }
            let (keeper, stream) = self.stream.as_mut().expect("opened above");
            keeper.keep_alive().await?;
            stream.message().await
        })
        .await;
        match result {
            Ok(Some(answer)) if answer.ttl() > 0 => Ok(Kept::Alive { sent_at }),
            Ok(Some(_)) => Ok(Kept::Expired),
            Err(Error::Backend { source, .. } | Error::Unavailable { source, .. })
                if source
                    .downcast_ref::<etcd_client::Error>()
                    .is_some_and(crate::error::is_lease_not_found) =>
            {
                self.stream = None;
                Ok(Kept::Expired)
            }
            Ok(None) => {
                self.stream = None;
                Err(Error::Unavailable {
                    backend: BACKEND,
                    source: "keep-alive stream closed by the server".into(),
                })
            }
            Err(error) => {
                self.stream = None;
                Err(error)
            }
        }
    }
}

/// Revokes a lease (deleting every key attached to it), ignoring "not found".
pub(crate) async fn revoke(client: &Client, lease_id: i64, settings: &Settings) -> Result<()> {
    let revoke = async { client.lease_client().revoke(lease_id).await };
    match tokio::time::timeout(settings.request_timeout, revoke).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if crate::error::is_lease_not_found(&e) => Ok(()),
        Ok(Err(e)) => Err(map(e)),
        Err(_) => Err(Error::Timeout {
            operation: "revoke",
            after: settings.request_timeout,
        }),
    }
}
