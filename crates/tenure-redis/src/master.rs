//! One Redis master: a multiplexed connection made on first use (and again
//! after it broke), with the scripts loaded, and one bounded call.

use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ScriptInvocation, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::scripts::Scripts;

/// Why one master gave no answer.
#[derive(Debug)]
pub(crate) enum NodeError {
    /// No answer within the per-master timeout.
    Timeout(Duration),
    /// Connecting failed, the connection broke, or the server refused.
    Redis(redis::RedisError),
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Timeout(after) => write!(f, "no answer within {after:?}"),
            NodeError::Redis(e) => write!(f, "{e}"),
        }
    }
}

pub(crate) struct Master {
    /// `host:port`, for errors.
    pub(crate) addr: String,
    client: redis::Client,
    connection: Mutex<Option<MultiplexedConnection>>,
    connect_timeout: Duration,
    /// Until when this master is not asked first (it failed lately).
    distrusted_until: std::sync::Mutex<Option<Instant>>,
}

/// How long a master that failed a call is not asked first.
const DISTRUST: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Master {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addr)
    }
}

impl Master {
    pub(crate) fn new(addr: String, client: redis::Client, connect_timeout: Duration) -> Master {
        Master {
            addr,
            client,
            connection: Mutex::new(None),
            connect_timeout,
            distrusted_until: std::sync::Mutex::new(None),
        }
    }

    /// The open connection, or a new one with every script loaded, so that
    /// each call is one round trip (`EVALSHA`) even right after a restart.
    async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let mut connection = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let mut load = redis::pipe();
        for script in Scripts::new().all() {
            load.cmd("SCRIPT").arg("LOAD").arg(script).ignore();
        }
        load.query_async::<()>(&mut connection).await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Whether this master answered its last call (it may be asked first).
    pub(crate) fn trusted(&self) -> bool {
        let until = *self
            .distrusted_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        until.is_none_or(|until| Instant::now() >= until)
    }

    fn answered(&self, ok: bool) {
        *self
            .distrusted_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = (!ok).then(|| Instant::now() + DISTRUST);
    }

    /// Forgets a connection that broke, so the next call makes a new one.
    async fn forget(&self) {
        *self.connection.lock().await = None;
    }

    /// Runs one script invocation, answered within `timeout` or not at all.
    pub(crate) async fn invoke(
        &self,
        invocation: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        let call = async {
            let mut connection = self.connection().await?;
            invocation.invoke_async::<Value>(&mut connection).await
        };
        let answer = tokio::time::timeout(timeout, call).await;
        self.answered(matches!(answer, Ok(Ok(_))));
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.forget().await;
                }
                Err(NodeError::Redis(e))
            }
            // A late answer on a multiplexed connection is matched to its
            // request and dropped; the connection itself may be fine.
            Err(_) => Err(NodeError::Timeout(timeout)),
        }
    }

    /// A stream of the messages published on `channel` (a wake-up hint
    /// only); `None` if this master could not be subscribed to in time.
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        timeout: Duration,
    ) -> Option<BoxStream<'static, ()>> {
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            redis::RedisResult::Ok(pubsub.into_on_message().map(|_| ()).boxed())
        };
        match tokio::time::timeout(timeout, subscribe).await {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(e)) => {
                tracing::debug!(master = %self.addr, error = %e, "subscribing failed");
                None
            }
            Err(_) => {
                tracing::debug!(master = %self.addr, "subscribing timed out");
                None
            }
        }
    }
}
