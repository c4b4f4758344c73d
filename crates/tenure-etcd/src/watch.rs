//! Leader observations: a prefix watch, re-read on every change it reports,
//! and a look past it now and then, since a watch can be silent.
//!
//! A watch stream's member may be cut off from its peers (it answers, but
//! hears of no change until it gives up on its leader and cancels the
//! stream, three election timeouts on: etcd#8980) or frozen (its
//! connection open and silent until its HTTP/2 pings go unanswered,
//! 15 s). So, as the waiter next in line does, an observer also reads the
//! leader linearizably every eighth of the observed leader's lease TTL
//! (learned once per leader change; until then, an eighth of the request
//! timeout; never under 100 ms). Reads, and the stream, go through one
//! member at a time (members.rs; a client given alone is one member, whose
//! channel picks an endpoint for each request): the one that answered
//! last, unless it is set aside; a try that fails or times out sets its
//! member aside, and the next, 20 ms later, goes to another (after a
//! failed try on each, the next look waits its turn). A silent member
//! costs a try, not the observation. A change found by a look is reported
//! (only if it differs from the last one, as every other), and the watch
//! is opened again on the member that answered. A stream that fails is
//! opened again too, elsewhere, instead of ending the observation. The
//! looks after the first run on the heartbeat runtime
//! (`tenure_core::hosted::watch_stream`), from when the reader first waits
//! for a change.
//!
//! Cost, per observer on a cluster of several members: 8/TTL reads a
//! second (0.8 at the Elector's default 10 s TTL), one key each; one lease
//! `TimeToLive` per leader change; one `MemberList` per watch, at its first
//! look past the stream (a watch dropped before then costs nothing more).
//! On a single-member cluster it looks no more after that: a look would
//! reach the member the stream is on.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, WatchOptions, WatchResponse, WatchStream};
use futures::stream::BoxStream;
use tenure_core::hosted::{watch_stream, Looks};
use tenure_core::{Error, LeaderEvent, Result};
use tokio::time::Instant;

use crate::election::{is_candidate, leader, leader_info, log_in_again, refused};
use crate::error::{map, unary, Route};
use crate::members::Members;
use crate::{Settings, RETRY_PAUSE};

/// The shortest time between two looks.
const MIN_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The shortest bound of a try: a healthy member answers a linearizable
/// read within one heartbeat.
const MIN_TRY: Duration = Duration::from_millis(100);

/// The leader, read once.
struct Read {
    event: LeaderEvent,
    /// The revision read at.
    revision: i64,
    /// The leader's lease (0 if none leads, or its key has none).
    lease: i64,
}

/// When to look past the watch, and how long a try may take.
struct Doubt {
    /// Whether the cluster has more than one member (asked at the first look).
    several: Option<bool>,
    /// Between looks.
    every: Duration,
    /// The lease whose TTL set `every` (0 until one did).
    ttl_of: i64,
    /// The bound of the next try: doubled after one timed out (a slow
    /// link), up to the request timeout.
    try_for: Duration,
    request_timeout: Duration,
    next: Instant,
    /// Looks failed in a row.
    failed: usize,
}

impl Doubt {
    fn new(request_timeout: Duration) -> Doubt {
        let every = (request_timeout / 8).max(MIN_LOOK_EVERY);
        let mut doubt = Doubt {
            several: None,
            every,
            ttl_of: 0,
            try_for: request_timeout,
            request_timeout,
            // At once: a watch read for its first event alone (`Elector::leader`)
            // never waits, and one read on learns the cluster's size and the
            // leader's TTL as soon as it waits for a change.
            next: Instant::now(),
            failed: 0,
        };
        doubt.try_for = doubt.first_try();
        doubt
    }

    fn first_try(&self) -> Duration {
        self.every.max(MIN_TRY).min(self.request_timeout)
    }

    /// Sets the next try's bound after one ended with `result`.
    fn tried<T>(&mut self, result: &Result<T>) {
        self.try_for = match result {
            Err(Error::Timeout { .. }) => (self.try_for * 2).min(self.request_timeout),
            _ => self.first_try(),
        };
    }

    fn doubting(&self) -> bool {
        self.several != Some(false)
    }

    /// Schedules the next look after one that `succeeded` (or not): soon
    /// after a failed try, most likely on another member, until each of
    /// `members` (or 3, for a client alone) has failed one.
    fn looked(&mut self, succeeded: bool, members: usize) {
        self.failed = if succeeded { 0 } else { self.failed + 1 };
        let soon = self.failed > 0 && self.failed < members.max(3);
        self.next = Instant::now() + if soon { RETRY_PAUSE } else { self.every };
    }
}

/// What woke a waiting watcher.
enum Woke {
    Answer(WatchResponse),
    /// The stream ended, with the error if any.
    Ended(Option<Error>),
    Look,
}

struct Watcher {
    members: Arc<Members>,
    /// The member that answered last.
    member: Option<usize>,
    /// The member the stream is on.
    stream_member: Option<usize>,
    prefix: String,
    settings: Arc<Settings>,
    stream: Option<WatchStream>,
    last: Option<LeaderEvent>,
    doubt: Doubt,
    /// Watches etcd refused in a row ([`refused`]): each waits longer
    /// before the next, from 40 ms up to a second.
    refused_in_a_row: u32,
}

impl Watcher {
    /// The next leader state that differs from the last one reported.
    async fn next_news(&mut self) -> Result<LeaderEvent> {
        loop {
            if self.stream.is_none() {
                let event = self.reopen().await?;
                if let Some(news) = self.news(event) {
                    return Ok(news);
                }
            }
            match self.wait().await {
                Woke::Answer(answer) => {
                    if let Some(reason) = refused(&answer) {
                        // The stream's token lapsed (or the auth store
                        // changed): log in again, then read and watch anew.
                        self.refused_in_a_row += 1;
                        let pause = (RETRY_PAUSE * (1 << self.refused_in_a_row.min(6)))
                            .min(Duration::from_secs(1));
                        tracing::debug!(prefix = self.prefix, reason, retry_in = ?pause, "etcd refused the watch; logging in again and watching anew");
                        self.stream = None;
                        if let Some(member) = self.stream_member {
                            let within = self.doubt.try_for;
                            if let Ok(client) = self.members.client_within(member, within).await {
                                if let Err(e) = log_in_again(&client, within).await {
                                    tracing::debug!(prefix = self.prefix, error = %e, "logging in again failed");
                                }
                            }
                        }
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    if answer.created() {
                        self.refused_in_a_row = 0;
                    }
                    if answer.canceled() {
                        // Compacted past our revision, or cancelled: re-read and re-watch.
                        tracing::debug!(
                            prefix = self.prefix,
                            compact_revision = answer.compact_revision(),
                            "watch cancelled; re-reading"
                        );
                        self.stream = None;
                        continue;
                    }
                    // Changes to nested elections' keys (`<prefix>b/...`) are theirs.
                    let ours = answer.events().iter().any(|event| {
                        event
                            .kv()
                            .is_some_and(|kv| is_candidate(&self.prefix, kv.key()))
                    });
                    if ours {
                        let now = self.read().await?;
                        if let Some(news) = self.news(now.event) {
                            return Ok(news);
                        }
                    }
                }
                Woke::Ended(error) => {
                    self.stream = None;
                    match error {
                        // Its member lost its leader (a stream that requires
                        // one is cancelled then), or the connection broke:
                        // watch again, on another member.
                        Some(e) if e.is_retryable() => {
                            tracing::debug!(prefix = self.prefix, error = %e, "watch failed; watching again");
                            if let Some(member) = self.stream_member.take() {
                                self.set_aside(member);
                            }
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                        Some(e) => return Err(e),
                        None => {}
                    }
                }
                Woke::Look => {
                    if let Some(news) = self.look().await {
                        return Ok(news);
                    }
                }
            }
        }
    }

    /// `event` if it differs from the last state reported.
    fn news(&self, event: LeaderEvent) -> Option<LeaderEvent> {
        (self.last.as_ref() != Some(&event)).then_some(event)
    }

    /// Waits for the stream's next answer, or for the next look.
    async fn wait(&mut self) -> Woke {
        let (look_at, doubting) = (self.doubt.next, self.doubt.doubting());
        let stream = self.stream.as_mut().expect("opened before waiting");
        tokio::select! {
            message = stream.message() => match message {
                Ok(Some(answer)) => Woke::Answer(answer),
                Ok(None) => Woke::Ended(None),
                Err(e) => Woke::Ended(Some(map(e))),
            },
            () = tokio::time::sleep_until(look_at), if doubting => Woke::Look,
        }
    }

    /// Looks past the watch: one try. A change found is returned (the
    /// watch is then opened again from the state read anew); a failed try
    /// is tried again soon. Once the state holds still, a new leader's TTL
    /// sets the time between looks.
    async fn look(&mut self) -> Option<LeaderEvent> {
        let members = self.members.len();
        if self.doubt.several.is_none() {
            self.doubt.several = self.several().await;
            if !self.doubt.doubting() {
                return None;
            }
        }
        let now = match self.try_read().await {
            Ok(now) => now,
            Err(e) => {
                tracing::debug!(prefix = self.prefix, error = %e, "a look past the watch failed; looking again");
                self.doubt.looked(false, members);
                return None;
            }
        };
        if let Some(news) = self.news(now.event) {
            tracing::debug!(
                prefix = self.prefix,
                revision = now.revision,
                "a look found a change the watch had not reported; watching again"
            );
            self.stream = None;
            self.doubt.looked(true, members);
            return Some(news);
        }
        let learnt =
            now.lease == 0 || now.lease == self.doubt.ttl_of || self.learn_ttl(now.lease).await;
        self.doubt.looked(learnt, members);
        None
    }

    /// Whether the cluster has more than one member; `None` if it would not say.
    async fn several(&mut self) -> Option<bool> {
        let answer = self
            .through_member(|client, within| async move {
                unary(&client, "member list", within, Route::ThisMember, || {
                    let mut cluster = client.cluster_client();
                    async move { cluster.member_list().await }
                })
                .await
            })
            .await;
        answer.ok().map(|a| a.members().len() > 1)
    }

    /// Looks every eighth of `lease`'s TTL from now on; whether it could
    /// tell.
    async fn learn_ttl(&mut self, lease: i64) -> bool {
        let answer = self
            .through_member(|client, within| async move {
                unary(
                    &client,
                    "lease time to live",
                    within,
                    Route::ThisMember,
                    || {
                        let mut leases = client.lease_client();
                        async move { leases.time_to_live(lease, None).await }
                    },
                )
                .await
            })
            .await;
        match answer {
            Ok(answer) => {
                self.doubt.ttl_of = lease;
                // A lease gone meanwhile answers -1: the next leader's tells.
                if let Ok(secs @ 1..) = u64::try_from(answer.granted_ttl()) {
                    self.doubt.every = (Duration::from_secs(secs) / 8).max(MIN_LOOK_EVERY);
                    self.doubt.try_for = self.doubt.first_try();
                }
                true
            }
            Err(e) => {
                tracing::debug!(prefix = self.prefix, error = %e, "reading the leader's lease TTL failed");
                false
            }
        }
    }

    /// The leader, in tries until one answers or the request timeout has
    /// passed.
    async fn read(&mut self) -> Result<Read> {
        let give_up = Instant::now() + self.settings.request_timeout;
        loop {
            match self.try_read().await {
                Err(e) if e.is_retryable() && Instant::now() + RETRY_PAUSE < give_up => {
                    tracing::debug!(prefix = self.prefix, error = %e, "reading the leader failed; reading again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                read => return read,
            }
        }
    }

    /// Reads the state and watches from just after it, in tries until both
    /// succeed or the request timeout has passed; the state read.
    async fn reopen(&mut self) -> Result<LeaderEvent> {
        let give_up = Instant::now() + self.settings.request_timeout;
        loop {
            let tried = match self.try_read().await {
                Ok(now) => self.open(now.revision).await.map(|()| now.event),
                Err(e) => Err(e),
            };
            match tried {
                Err(e) if e.is_retryable() && Instant::now() + RETRY_PAUSE < give_up => {
                    tracing::debug!(prefix = self.prefix, error = %e, "reading the leader or watching failed; trying again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                tried => return tried,
            }
        }
    }

    /// The leader: one linearizable read, within a try.
    async fn try_read(&mut self) -> Result<Read> {
        let settings = Settings {
            key_prefix: self.settings.key_prefix.clone(),
            request_timeout: self.doubt.try_for,
            route: Route::ThisMember,
        };
        let prefix = self.prefix.clone();
        let (kv, revision) = self
            .through_member(|client, _| async move { leader(&client, &prefix, &settings).await })
            .await?;
        Ok(Read {
            lease: kv.as_ref().map_or(0, |kv| kv.lease()),
            event: kv.map_or(LeaderEvent::Vacant, |kv| {
                LeaderEvent::Elected(leader_info(&kv))
            }),
            revision,
        })
    }

    /// Watches the election from just after `revision`, opened within a
    /// try on the member that answered last.
    async fn open(&mut self, revision: i64) -> Result<()> {
        let prefix = self.prefix.clone();
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let stream = self
            .through_member(|client, within| async move {
                let mut watches = client.watch_client();
                tokio::time::timeout(within, watches.watch(prefix, Some(options)))
                    .await
                    .map_err(|_| Error::Timeout {
                        operation: "watch",
                        after: within,
                    })?
                    .map_err(map)
            })
            .await?;
        self.stream = Some(stream);
        self.stream_member = self.member;
        Ok(())
    }

    /// One request within a try, through one member: the one that answered
    /// last, unless it is set aside; one that fails the try is set aside,
    /// and the next try goes to another.
    async fn through_member<T, F, Fut>(&mut self, request: F) -> Result<T>
    where
        F: FnOnce(Client, Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let member = self.members.pick(self.member);
        let within = self.doubt.try_for;
        let answer = async {
            let client = self.members.client_within(member, within).await?;
            request(client, within).await
        }
        .await;
        self.doubt.tried(&answer);
        match &answer {
            Ok(_) => self.member = Some(member),
            Err(e) if e.is_retryable() => self.set_aside(member),
            Err(_) => {}
        }
        answer
    }

    fn set_aside(&mut self, member: usize) {
        self.members.avoid(member);
        if self.member == Some(member) {
            self.member = None;
        }
    }
}

/// The members a watch reads through, one at a time: the backend's own,
/// or a client alone as the one member (its channel then picks a member
/// per request, as for a client given to `EtcdBackend::from_client`).
pub(crate) struct Through(Arc<Members>);

impl From<Arc<Members>> for Through {
    fn from(members: Arc<Members>) -> Self {
        Through(members)
    }
}

impl From<Client> for Through {
    fn from(client: Client) -> Self {
        Through(Arc::new(Members::single(client)))
    }
}

/// Observes the election under `prefix`.
pub(crate) async fn watch(
    through: impl Into<Through>,
    prefix: String,
    settings: Arc<Settings>,
) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
    let Through(members) = through.into();
    // The first look fails the call if the cluster cannot be read at all.
    watch_stream(Watcher {
        members,
        member: None,
        stream_member: None,
        prefix,
        doubt: Doubt::new(settings.request_timeout),
        settings,
        stream: None,
        last: None,
        refused_in_a_row: 0,
    })
    .await
}

#[async_trait]
impl Looks for Watcher {
    async fn next(&mut self) -> Result<LeaderEvent> {
        let event = self.next_news().await?;
        self.last = Some(event.clone());
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_timed_out_try_doubles_the_next_up_to_the_request_timeout() {
        let mut doubt = Doubt::new(Duration::from_secs(1));
        assert_eq!(doubt.try_for, Duration::from_millis(125));
        let timed_out: Result<()> = Err(Error::Timeout {
            operation: "get",
            after: doubt.try_for,
        });
        for want in [250, 500, 1000, 1000] {
            doubt.tried(&timed_out);
            assert_eq!(doubt.try_for, Duration::from_millis(want));
        }
        doubt.tried(&Ok(()));
        assert_eq!(doubt.try_for, Duration::from_millis(125));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_looks_retry_soon_until_each_member_failed_one() {
        let mut doubt = Doubt::new(Duration::from_secs(5));
        let every = doubt.every;
        assert_eq!(every, Duration::from_millis(625));
        for _ in 0..2 {
            doubt.looked(false, 3);
            assert_eq!(
                doubt.next,
                Instant::now() + RETRY_PAUSE,
                "another member, soon"
            );
        }
        doubt.looked(false, 3);
        assert_eq!(
            doubt.next,
            Instant::now() + every,
            "each failed one: wait a turn"
        );
        doubt.looked(true, 3);
        assert_eq!(doubt.next, Instant::now() + every);
        doubt.looked(false, 3);
        assert_eq!(
            doubt.next,
            Instant::now() + RETRY_PAUSE,
            "a success starts the count again"
        );
    }
}
