//! One Redis master: a multiplexed connection made on first use (and again
//! after it broke, in the background, within its own bound and with
//! back-off), with the scripts loaded, and one bounded call.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ScriptInvocation, Value};
use tenure_core::hosted::Backoff;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::scripts::Scripts;

/// Why one master gave no answer.
#[derive(Debug)]
pub(crate) enum NodeError {
    /// No answer within the per-master timeout.
    Timeout(Duration),
    /// The connection broke, or the server refused.
    Redis(redis::RedisError),
    /// Not connected: the last connect failed, and the next is not due yet.
    Down {
        /// Why the last connect failed.
        error: String,
        /// When the next connect may start.
        retry_in: Duration,
    },
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Timeout(after) => write!(f, "no answer within {after:?}"),
            NodeError::Redis(e) => write!(f, "{e}"),
            NodeError::Down { error, retry_in } => write!(
                f,
                "not connected ({error}); connecting again in {retry_in:?}"
            ),
        }
    }
}

/// What a message on a key's channel says (a wake-up hint only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// A candidate took the key on that master.
    Elected,
    /// A holder (or a round undoing itself) let the key go there: the
    /// value it released (`None` from a tenure that did not say).
    Vacant(Option<String>),
}

impl Message {
    fn parse(payload: &[u8]) -> Message {
        match payload.strip_prefix(b"vacant") {
            Some(rest) => Message::Vacant(
                rest.strip_prefix(b":")
                    .map(|value| String::from_utf8_lossy(value).into_owned()),
            ),
            None => Message::Elected,
        }
    }
}

/// The least pause after a failed connect before the next; it doubles
/// (jittered) per failure up to [`MAX_RECONNECT_PAUSE`].
const MIN_RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// The most a master that refuses connections waits between connects:
/// also the longest a master that came back waits to be used again. Short
/// against a lease: a holder whose every connect failed for half of what
/// its lease had left (1 s TTL: about 450 ms) connects again within
/// 250 ms of the fault's end, with time to renew.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_millis(250);

pub(crate) struct Master {
    /// `host:port`, for errors.
    pub(crate) addr: String,
    client: redis::Client,
    link: Arc<Link>,
    connect_timeout: Duration,
    /// Its answers lately: round trips, and whether the last call failed.
    record: std::sync::Mutex<Record>,
}

/// The connection to one master, shared with the task that makes it.
struct Link {
    state: std::sync::Mutex<LinkState>,
    /// Bumped when a connect ends (made or failed): calls waiting for one
    /// look again.
    changed: watch::Sender<u64>,
}

struct LinkState {
    /// The open connection and its number.
    open: Option<(u64, MultiplexedConnection)>,
    /// A connect is under way (in a task of its own: a call that stops
    /// waiting for it, at its timeout, does not stop it).
    connecting: bool,
    /// Why the last connect failed, and when the next may start.
    down: Option<(String, Instant)>,
    /// The pause after the next failed connect.
    backoff: Backoff,
    /// Connections made so far: the open one's number.
    made: u64,
}

impl Link {
    fn state(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
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
            link: Arc::new(Link {
                state: std::sync::Mutex::new(LinkState {
                    open: None,
                    connecting: false,
                    down: None,
                    backoff: Backoff::new(MIN_RECONNECT_PAUSE, MAX_RECONNECT_PAUSE),
                    made: 0,
                }),
                changed: watch::Sender::new(0),
            }),
            connect_timeout,
            record: std::sync::Mutex::default(),
        }
    }

    /// The open connection (and its number), or one made now: a connect
    /// runs in a task of its own, bounded by `connect_timeout`, so a caller
    /// that stops waiting (its call timed out) does not stop it, and the
    /// next call finds the connection made. A connect that failed is not
    /// tried again before its back-off (50 ms doubling to 250 ms,
    /// jittered) has passed; calls meanwhile fail at once.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection), NodeError> {
        let mut changed = self.link.changed.subscribe();
        loop {
            {
                let mut state = self.link.state();
                if let Some((number, connection)) = &state.open {
                    return Ok((*number, connection.clone()));
                }
                if !state.connecting {
                    if let Some((error, at)) = &state.down {
                        let now = Instant::now();
                        if now < *at {
                            return Err(NodeError::Down {
                                error: error.clone(),
                                retry_in: *at - now,
                            });
                        }
                    }
                    state.connecting = true;
                    tenure_core::heartbeat_runtime().spawn(connect(
                        self.addr.clone(),
                        self.client.clone(),
                        self.link.clone(),
                        self.connect_timeout,
                    ));
                }
            }
            // The link (and with it the sender) lives as long as `self`.
            let _ = changed.changed().await;
            let state = self.link.state();
            if let (None, false, Some((error, at))) = (&state.open, state.connecting, &state.down) {
                // The connect this call waited for failed: say why.
                return Err(NodeError::Down {
                    error: error.clone(),
                    retry_in: at.saturating_duration_since(Instant::now()),
                });
            }
        }
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

    /// Forgets connection number `number`, which broke, so the next call
    /// makes a new one at once (a newer connection is kept).
    fn forget(&self, number: u64) {
        let mut state = self.link.state();
        if state.open.as_ref().is_some_and(|(n, _)| *n == number) {
            state.open = None;
        }
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
            let (number, mut connection) = self.connection().await?;
            // The round trip is timed from here: a connection made first
            // (and its scripts loaded) is not one.
            *connected.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            invocation
                .invoke_async::<Value>(&mut connection)
                .await
                .map_err(|e| {
                    if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                        self.forget(number);
                    }
                    NodeError::Redis(e)
                })
        };
        let answer = tokio::time::timeout(timeout, call).await;
        let sent = *connected.lock().unwrap_or_else(|e| e.into_inner());
        self.answered(match (&answer, sent) {
            (Ok(Ok(_)), Some(sent)) => Some(sent.elapsed()),
            _ => None,
        });
        match answer {
            Ok(answer) => answer,
            // A late answer on a multiplexed connection is matched to its
            // request and dropped; the connection itself may be fine. A
            // connect still under way goes on.
            Err(_) => Err(NodeError::Timeout(timeout)),
        }
    }

    /// `CONFIG GET name` within `timeout`: its value, or `None` if the
    /// master did not say (a user whose ACL forbids `CONFIG`, a managed
    /// Redis that renamed it).
    pub(crate) async fn config(&self, name: &str, timeout: Duration) -> Option<String> {
        let get = async {
            let (_, mut connection) = self.connection().await?;
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async::<Vec<String>>(&mut connection)
                .await
                .map_err(NodeError::Redis)
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
    ) -> Option<BoxStream<'static, Message>> {
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            let messages = pubsub
                .into_on_message()
                .map(|m| Message::parse(m.get_payload_bytes()));
            redis::RedisResult::Ok(messages.boxed())
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

/// Makes a connection to one master, with every script loaded, so that
/// each call is one round trip (`EVALSHA`) even right after a restart;
/// within `timeout` as a whole. Made: it is the link's open one, and the
/// back-off starts over. Failed: the next connect waits out the back-off.
async fn connect(addr: String, client: redis::Client, link: Arc<Link>, timeout: Duration) {
    let made = tokio::time::timeout(timeout, async {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None);
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let mut load = redis::pipe();
        for script in Scripts::new().all() {
            load.cmd("SCRIPT").arg("LOAD").arg(script).ignore();
        }
        load.query_async::<()>(&mut connection).await?;
        redis::RedisResult::Ok(connection)
    })
    .await;
    {
        let mut state = link.state();
        state.connecting = false;
        let error = match made {
            Ok(Ok(connection)) => {
                state.made += 1;
                state.open = Some((state.made, connection));
                state.down = None;
                state.backoff.reset();
                None
            }
            Ok(Err(e)) => Some(format!("connecting failed: {e}")),
            Err(_) => Some(format!("connecting took over {timeout:?}")),
        };
        if let Some(error) = error {
            let pause = state.backoff.next_delay();
            tracing::debug!(master = %addr, error, ?pause, "connecting to a Redis master failed");
            state.down = Some((error, Instant::now() + pause));
        }
    }
    link.changed.send_modify(|n| *n += 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_message_names_the_value_released() {
        assert_eq!(Message::parse(b"elected"), Message::Elected);
        assert_eq!(
            Message::parse(b"vacant:abc:replica-1"),
            Message::Vacant(Some("abc:replica-1".into()))
        );
        // From a tenure that did not name it.
        assert_eq!(Message::parse(b"vacant"), Message::Vacant(None));
    }
}
