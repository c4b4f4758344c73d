//! Watching a key: a look at every master whenever a message says it
//! changed, when the holder's keys should expire, and every `watch_poll`
//! as a backstop. Reports what a majority of masters hold.

use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use redis::Value;
use tenure_core::hosted::{watch_stream, Looks};
use tenure_core::{Error, LeaderEvent, Result};
use tokio::time::Instant;

use crate::answers::holder_of;
use crate::master::Message;
use crate::{RedisBackend, BACKEND};

/// How long one master may take to answer a look.
const LOOK_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) async fn start(
    backend: RedisBackend,
    key: String,
) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
    watch_stream(KeyLooks {
        backend,
        key,
        wake: None,
        next_look: None,
    })
    .await
}

/// Looks at one key for a watch: at once, then whenever a message says it
/// changed, when the holder's keys should expire, or `watch_poll` on.
struct KeyLooks {
    backend: RedisBackend,
    key: String,
    /// The key's change messages, from every master that took the
    /// subscription; `None` before the first look.
    wake: Option<BoxStream<'static, Message>>,
    /// When to look again if no message comes first; `None` before the
    /// first look.
    next_look: Option<Instant>,
}

#[async_trait]
impl Looks for KeyLooks {
    /// The first look fails unless a majority of masters tells a state
    /// (the `watch` call with it). Later, a state once a majority tells
    /// one: until then the looks go on at the poll interval (the stream
    /// says nothing).
    async fn next(&mut self) -> Result<LeaderEvent> {
        let poll = self.backend.inner.options.watch_poll;
        loop {
            match (self.next_look, self.wake.as_mut()) {
                (Some(at), Some(wake)) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        message = wake.next() => {
                            if message.is_none() {
                                tokio::time::sleep(poll).await;
                                self.wake = None;
                            }
                        }
                    }
                }
                (Some(at), None) => tokio::time::sleep_until(at).await,
                (None, _) => {}
            }
            let first = self.next_look.is_none();
            if self.wake.is_none() {
                self.wake = Some(self.backend.subscribe(&self.key, LOOK_TIMEOUT).await);
            }
            let looked = look(&self.backend, &self.key).await;
            let now = Instant::now();
            match looked {
                Some((event, free_in)) => {
                    let pause =
                        free_in.map_or(poll, |d| (d + Duration::from_millis(1)).min(poll * 4));
                    self.next_look = Some(now + pause);
                    return Ok(event);
                }
                None if first => {
                    return Err(Error::unavailable(
                        BACKEND,
                        "too few masters answered to tell who holds the key",
                    ))
                }
                None => self.next_look = Some(now + poll),
            }
        }
    }
}

/// What a majority of masters hold now, and when that should change by
/// expiry; `None` if too few masters answered to tell.
pub(crate) async fn look(
    backend: &RedisBackend,
    key: &str,
) -> Option<(LeaderEvent, Option<Duration>)> {
    let inner = &backend.inner;
    let (n, quorum) = (inner.masters.len(), inner.quorum);
    let mut calls: FuturesUnordered<_> = inner
        .masters
        .iter()
        .map(|m| async move {
            let call = inner.scripts.look.key(key);
            m.invoke(&call, LOOK_TIMEOUT).await
        })
        .collect();
    // value -> the time left on each master holding it (`None`: the key
    // never expires there)
    let mut held: Vec<(String, Vec<Option<Duration>>)> = Vec::new();
    let (mut free, mut answered) = (0, 0);
    while let Some(answer) = calls.next().await {
        let Ok(Value::Array(items)) = answer else {
            continue;
        };
        answered += 1;
        match items.as_slice() {
            [Value::BulkString(value), pttl] => {
                let value = String::from_utf8_lossy(value).into_owned();
                let left = match pttl {
                    Value::Int(ms) if *ms > 0 => Some(Duration::from_millis(*ms as u64)),
                    // No expiry: held with no known end (looked at again at
                    // the poll interval, not at once).
                    Value::Int(-1) => None,
                    _ => Some(Duration::ZERO),
                };
                match held.iter_mut().find(|(v, _)| *v == value) {
                    Some((_, lefts)) => lefts.push(left),
                    None => held.push((value, vec![left])),
                }
            }
            _ => free += 1,
        }
        if let Some((value, lefts)) = held.iter_mut().find(|(_, l)| l.len() >= quorum) {
            // Held while a majority keeps it: until the (count - quorum + 1)th
            // of its masters lets it expire (a key that never expires sorts
            // last: if that one never expires, no end is known).
            lefts.sort_by_key(|left| left.map_or(Duration::MAX, |d| d));
            let free_in = lefts[lefts.len() - quorum];
            return Some((LeaderEvent::Elected(holder_of(value)), free_in));
        }
        let best = held.iter().map(|(_, l)| l.len()).max().unwrap_or(0);
        if best + (n - answered) < quorum {
            let _ = free;
            return Some((LeaderEvent::Vacant, None));
        }
    }
    None
}
