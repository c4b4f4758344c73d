//! A watch stream (or an Elector's observation) with the instant each
//! event arrived.

use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use tenure_core::{ElectionKey, Elector, LeaderEvent};
use tokio::time::Instant;

use super::context::{Context, Cx, Failure, Step};
use crate::factory::Client;
use crate::report::Property;

/// Observes one key through one client's `watch`, or an Elector's `observe`.
pub struct Watcher {
    /// Each event with the instant it arrived.
    events: BoxStream<'static, tenure_core::Result<(LeaderEvent, Instant)>>,
    /// Every event so far, with when it arrived.
    pub seen: Vec<(LeaderEvent, Instant)>,
}

/// `event` in a short form for failure messages.
pub fn show(event: &LeaderEvent) -> String {
    match event {
        LeaderEvent::Vacant => "Vacant".into(),
        LeaderEvent::Elected(info) => {
            let token = info
                .token
                .map_or_else(|| "no token".into(), |t| format!("token {t}"));
            format!("Elected({}, {token})", info.identity)
        }
    }
}

impl Watcher {
    /// Opens a watch on `key`.
    pub async fn open(client: &Client, key: &ElectionKey) -> Step<Watcher> {
        let events = client.backend.watch(key).await.ctx("watch")?;
        Ok(Watcher {
            events: events
                .map(|event| event.map(|e| (e, Instant::now())))
                .boxed(),
            seen: Vec::new(),
        })
    }

    /// Observes `elector`'s key as users do, through [`Elector::observe`]
    /// (a watch that ends with an error is watched again behind the
    /// scenes), read all along by a task of its own, as a user's loop
    /// reads it: the backend's watch runs between the case's looks too.
    pub fn observing(elector: &Elector) -> Watcher {
        let mut observed = elector.observe();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    event = observed.next() => match event {
                        Some(event) => {
                            let _ = tx.send((event, Instant::now()));
                        }
                        None => return,
                    },
                    () = tx.closed() => return,
                }
            }
        });
        let events = futures::stream::unfold(rx, |mut rx| async move {
            let event = rx.recv().await?;
            Some((Ok(event), rx))
        });
        Watcher {
            events: events.boxed(),
            seen: Vec::new(),
        }
    }

    /// The next event, at most `limit` away.
    pub async fn next(&mut self, _cx: &Cx, limit: Duration) -> Step<(LeaderEvent, Instant)> {
        self.next_within(limit)
            .await?
            .ok_or_else(|| Failure::Fail(format!("the next watch event: nothing after {limit:?}")))
    }

    /// The next event, or `None` if none came within `limit`.
    pub async fn next_within(&mut self, limit: Duration) -> Step<Option<(LeaderEvent, Instant)>> {
        let Ok(item) = tokio::time::timeout(limit, self.events.next()).await else {
            return Ok(None);
        };
        let (event, at) = item
            .ok_or_else(|| Failure::Fail("the watch stream ended".into()))?
            .ctx("watch event")?;
        self.seen.push((event.clone(), at));
        Ok(Some((event, at)))
    }

    /// The next event comes within `limit` and satisfies `want`; where not,
    /// the failure says what came before it (`after`, for example "with k
    /// held, a new watch of k/b began with") and the event.
    pub async fn next_is(
        &mut self,
        cx: &Cx,
        limit: Duration,
        want: impl Fn(&LeaderEvent) -> bool,
        after: impl FnOnce() -> String,
    ) -> Step {
        let (event, _) = self.next(cx, limit).await?;
        cx.check(Property::Contract, want(&event), || {
            format!("{} {}", after(), show(&event))
        })
    }

    /// Sees `name` lead, then its lease expire, within the TTL, the
    /// backend's slack and two round trips each; returns when the expiry
    /// was seen. The watch may begin with the vacancy before the grant: it
    /// sees the lead first.
    pub async fn until_expired(&mut self, cx: &Cx, name: &str) -> Step<Instant> {
        let limit = cx.ttl() + cx.caps().expiry_slack + cx.timing().round_trip * 2;
        let (election, expiry) = (format!("{name}'s election"), format!("{name}'s expiry"));
        self.until(cx, limit, &election, elected(cx, name), vacant)
            .await?;
        self.until(cx, limit, &expiry, vacant, elected(cx, name))
            .await
    }

    /// Skips events until one satisfies `want`; the skipped ones must satisfy `may_skip`.
    pub async fn until(
        &mut self,
        cx: &Cx,
        limit: Duration,
        what: &str,
        want: impl Fn(&LeaderEvent) -> bool,
        may_skip: impl Fn(&LeaderEvent) -> bool,
    ) -> Step<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (event, at) = self.next(cx, left).await.map_err(|e| match e {
                Failure::Fail(why) => Failure::Fail(format!("waiting for {what}: {why}")),
                skip => skip,
            })?;
            if want(&event) {
                return Ok(at);
            }
            if !may_skip(&event) {
                return Err(Failure::Fail(format!(
                    "waiting for {what}, the watch reported {}",
                    show(&event)
                )));
            }
        }
    }
}

/// Whether `event` is `name`'s election in `cx`.
pub fn elected(cx: &Cx, name: &str) -> impl Fn(&LeaderEvent) -> bool {
    let identity = cx.identity(name);
    move |e| e.leader().is_some_and(|l| l.identity == identity)
}

/// Whether `event` is a vacancy.
pub fn vacant(e: &LeaderEvent) -> bool {
    *e == LeaderEvent::Vacant
}
