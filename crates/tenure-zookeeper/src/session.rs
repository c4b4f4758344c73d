//! The backend's one ZooKeeper session, replaced by a new one once it ends.

use std::time::Duration;

use tenure_core::{Error, Result};
use tokio::sync::Mutex;
use zookeeper_client::Client;

use crate::error::{map, BACKEND};
use crate::ZooKeeperOptions;

/// The current session. Every election of the backend shares it; once the
/// server expires it (or it fails authentication, or is closed), the next
/// operation opens a new one, and nodes of the old one are never reused.
#[derive(Debug)]
pub(crate) struct Sessions {
    connect_string: String,
    options: ZooKeeperOptions,
    current: Mutex<Option<Client>>,
}

impl Sessions {
    pub(crate) fn new(connect_string: String, options: ZooKeeperOptions) -> Self {
        Sessions {
            connect_string,
            options,
            current: Mutex::new(None),
        }
    }

    /// The live session's client, connecting a new session if there is none.
    pub(crate) async fn client(&self) -> Result<Client> {
        let mut current = self.current.lock().await;
        if let Some(client) = current.as_ref().filter(|c| !c.state().is_terminated()) {
            return Ok(client.clone());
        }
        let client = self.connect().await?;
        *current = Some(client.clone());
        Ok(client)
    }

    /// The open session's id, if there is one (none before the first
    /// operation, or once it ended); never opens one.
    pub(crate) async fn open_id(&self) -> Option<i64> {
        let current = self.current.lock().await;
        current
            .as_ref()
            .filter(|c| !c.state().is_terminated())
            .map(|c| c.session_id().0)
    }

    async fn connect(&self) -> Result<Client> {
        let requested = self.options.session_timeout;
        // With a connection timeout of a third of the session timeout, the
        // client pings after an eighth of it without sending anything,
        // checked every 24th: the servers hear from the session at least
        // every sixth of its timeout, which `ZooKeeperOptions::expiry_lead`
        // counts on.
        let mut connector = Client::connector()
            .with_session_timeout(requested)
            .with_connection_timeout(requested / 3);
        if let Some((scheme, auth)) = &self.options.auth {
            connector = connector.with_auth(scheme, auth);
        }
        let connect = connector.connect(&self.connect_string);
        let client = match tokio::time::timeout(
            self.options.request_timeout.max(requested),
            connect,
        )
        .await
        {
            Ok(result) => result.map_err(map)?,
            Err(_) => {
                return Err(Error::Timeout {
                    operation: "connect",
                    after: self.options.request_timeout.max(requested),
                })
            }
        };
        let negotiated = client.session_timeout();
        if negotiated != requested {
            return Err(Error::invalid(
                "session_timeout",
                format!(
                    "ZooKeeper negotiated {negotiated:?} for the requested {requested:?}: \
                     the server allows minSessionTimeout..=maxSessionTimeout (by default \
                     2x..=20x its tickTime); ask for a timeout within those bounds"
                ),
            ));
        }
        tracing::debug!(
            backend = BACKEND,
            session = client.session_id().0,
            "ZooKeeper session established"
        );
        Ok(client)
    }

    /// Lets go of the open session, if any, and waits (at most a request
    /// timeout) until it is closed: zookeeper-client closes a session when
    /// its last `Client` goes, and the servers then delete its ephemeral
    /// nodes at once. A session still in use elsewhere (a watch) closes when
    /// that ends. The next operation opens a new session.
    pub(crate) async fn close(&self) {
        let Some(client) = self.current.lock().await.take() else {
            return;
        };
        let session = client.session_id().0;
        let mut state = client.state_watcher();
        drop(client);
        let closed = async {
            while !state.state().is_terminated() {
                state.changed().await;
            }
        };
        let bound = self
            .options
            .request_timeout
            .min(self.options.session_timeout);
        match tokio::time::timeout(bound, closed).await {
            Ok(()) => tracing::debug!(backend = BACKEND, session, "ZooKeeper session closed"),
            Err(_) => tracing::debug!(
                backend = BACKEND,
                session,
                "ZooKeeper session still in use; it closes when its last user goes"
            ),
        }
    }

    /// The session timeout every session is opened with.
    pub(crate) fn session_timeout(&self) -> Duration {
        self.options.session_timeout
    }
}
