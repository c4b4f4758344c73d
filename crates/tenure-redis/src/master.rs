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
    /// Its answers lately: round trips, and whether the last call failed.
    record: std::sync::Mutex<Record>,
}

/// What a master's answers have shown.
#[derive(Debug, Default)]
struct Record {
    /// The last call failed: not asked first (nor alone) until it answers.
    failed: bool,
    /// Smoothed round trip and its mean deviation (RFC 6298's estimator),
    /// over the answered calls; `answers` counts them.
    srtt: Duration,
    rttvar: Duration,
    answers: u32,
}

/// Round trips a master's timeout is not derived from until it answered
/// this many calls (the TTL-derived bound holds until then).
const SAMPLES: u32 = 8;

/// The least per-master timeout derived from round trips: a Redis master
/// can stall that long (a fork for a snapshot, an fsync) and still be fine.
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// The least wait for the first master before the others are asked too.
const MIN_HEDGE: Duration = Duration::from_millis(50);

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
            record: std::sync::Mutex::default(),
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

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this master answered its last call (it may be asked first).
    /// One that failed stays out of that place until it answers again.
    pub(crate) fn trusted(&self) -> bool {
        !self.record().failed
    }

    /// The timeout of one call to this master: `bound` (a share of the
    /// TTL) until its round trips are known, then what they allow (RFC
    /// 6298's retransmission timeout, four times over, at least
    /// [`MIN_NODE_TIMEOUT`]), never above `bound`.
    pub(crate) fn timeout_within(&self, bound: Duration) -> Duration {
        let record = self.record();
        if record.answers < SAMPLES {
            return bound;
        }
        ((record.srtt + record.rttvar * 4) * 4)
            .max(MIN_NODE_TIMEOUT)
            .min(bound)
    }

    /// How long the first master, asked alone, is waited for before the
    /// others are asked too: a few of its round trips, at least
    /// [`MIN_HEDGE`], and no longer than its timeout within `bound`.
    pub(crate) fn hedge_within(&self, bound: Duration) -> Duration {
        let rtt = {
            let record = self.record();
            (record.answers >= SAMPLES).then_some(record.srtt + record.rttvar * 4)
        };
        let timeout = self.timeout_within(bound);
        rtt.map_or(MIN_HEDGE, |rtt| (rtt * 4).max(MIN_HEDGE))
            .min(timeout)
    }

    /// It was asked first and did not answer in time (the call goes on):
    /// not asked first again until it answers.
    pub(crate) fn slow(&self) {
        self.record().failed = true;
    }

    fn answered(&self, took: Option<Duration>) {
        let mut record = self.record();
        record.failed = took.is_none();
        if let Some(rtt) = took {
            if record.answers == 0 {
                record.srtt = rtt;
                record.rttvar = rtt / 2;
            } else {
                let deviation = record.srtt.abs_diff(rtt);
                record.rttvar = (record.rttvar * 3 + deviation) / 4;
                record.srtt = (record.srtt * 7 + rtt) / 8;
            }
            record.answers = record.answers.saturating_add(1);
        }
    }

    /// Forgets a connection that broke, so the next call makes a new one.
    async fn forget(&self) {
        *self.connection.lock().await = None;
    }

    /// Runs one script invocation, answered within this master's timeout
    /// bounded by `bound` ([`timeout_within`](Self::timeout_within)), or
    /// not at all.
    pub(crate) async fn invoke(
        &self,
        invocation: &ScriptInvocation<'_>,
        bound: Duration,
    ) -> Result<Value, NodeError> {
        let timeout = self.timeout_within(bound);
        let connected = std::sync::Mutex::new(None);
        let call = async {
            let mut connection = self.connection().await?;
            // The round trip is timed from here: a connection made first
            // (and its scripts loaded) is not one.
            *connected.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            invocation.invoke_async::<Value>(&mut connection).await
        };
        let answer = tokio::time::timeout(timeout, call).await;
        let sent = *connected.lock().unwrap_or_else(|e| e.into_inner());
        self.answered(match (&answer, sent) {
            (Ok(Ok(_)), Some(sent)) => Some(sent.elapsed()),
            _ => None,
        });
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

    /// `CONFIG GET name` within `timeout`: its value, or `None` if the
    /// master did not say (a user whose ACL forbids `CONFIG`, a managed
    /// Redis that renamed it).
    pub(crate) async fn config(&self, name: &str, timeout: Duration) -> Option<String> {
        let get = async {
            let mut connection = self.connection().await?;
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async::<Vec<String>>(&mut connection)
                .await
        };
        match tokio::time::timeout(timeout, get).await {
            Ok(Ok(pair)) => pair.into_iter().nth(1),
            Ok(Err(e)) => {
                tracing::debug!(master = %self.addr, error = %e, name, "CONFIG GET refused");
                None
            }
            Err(_) => None,
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
