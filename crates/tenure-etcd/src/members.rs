//! One client per member, for the requests that keep a lease alive and
//! those that start and end a term.
//!
//! etcd-client's channel balances requests over every endpoint at random
//! (tonic's balancer sees no load), and a frozen member still looks ready:
//! it gets its share of keep-alives, reads and writes, and each waits out
//! its whole bound. A lease's renewal, a waiter's look, and a candidate's
//! create, release and delete instead go to one member at a time: the one
//! that answered last, unless it failed lately; a try that fails sets that
//! member aside for [`AVOID_FOR`] and the request goes to another, and a
//! try not answered soon is joined by one to another member, the first
//! answer counting ([`Members::unary`], [`Via`]).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, GetResponse, Txn, TxnResponse};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::{map, Route, BACKEND};
use crate::Settings;
use tenure_core::{on_heartbeat_runtime, Error, Result};

/// The shortest first try of a request on one member of several: a
/// healthy member answers a write or a linearizable read within a few
/// heartbeats (etcd's default is 100 ms).
const MIN_TRY: Duration = Duration::from_millis(100);

/// Below this, what is left of a request's timeout is not worth a try.
const LAST_TRY: Duration = Duration::from_millis(10);

/// No member has answered yet.
const NONE: usize = usize::MAX;

/// How long a member that failed a try is passed over while another can
/// be had.
pub(crate) const AVOID_FOR: Duration = Duration::from_secs(10);

/// The members a backend was given, each with a client of its own, made
/// on first use.
pub(crate) struct Members {
    /// One per member: its endpoint (none for a client given by the user)
    /// and its client once connected.
    members: Vec<Member>,
    connect: ConnectOptions,
    /// Until when each member is passed over.
    avoid_until: Mutex<Vec<Option<Instant>>>,
    /// Where a first pick starts: each lease's next member in turn, so that
    /// they do not all start on the first.
    next: AtomicUsize,
    /// The member that answered the last request sent through
    /// [`Members::unary`] ([`NONE`] before the first).
    last: AtomicUsize,
}

struct Member {
    endpoint: Option<String>,
    client: OnceCell<Client>,
}

impl Members {
    /// A client for each of `endpoints`, connected with `connect` when
    /// first needed.
    pub(crate) fn new(endpoints: &[String], connect: ConnectOptions) -> Self {
        Members {
            members: endpoints
                .iter()
                .map(|endpoint| Member {
                    endpoint: Some(endpoint.clone()),
                    client: OnceCell::new(),
                })
                .collect(),
            connect,
            avoid_until: Mutex::new(vec![None; endpoints.len()]),
            next: AtomicUsize::new(0),
            last: AtomicUsize::new(NONE),
        }
    }

    /// One member: the client the user built (its own balancing, if any,
    /// stays as it is).
    pub(crate) fn single(client: Client) -> Self {
        Members {
            members: vec![Member {
                endpoint: None,
                client: OnceCell::new_with(Some(client)),
            }],
            connect: ConnectOptions::new(),
            avoid_until: Mutex::new(vec![None]),
            next: AtomicUsize::new(0),
            last: AtomicUsize::new(NONE),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    fn avoided(&self) -> std::sync::MutexGuard<'_, Vec<Option<Instant>>> {
        self.avoid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The member to try next: `last` (the one that answered last), unless
    /// it is set aside; else the next one that is not, in order after it
    /// (with no `last`, from the member after the previous first pick's);
    /// else the one whose time aside ends first.
    pub(crate) fn pick(&self, last: Option<usize>) -> usize {
        let now = Instant::now();
        let avoided = self.avoided();
        let n = avoided.len();
        let free = |i: usize| avoided[i].is_none_or(|until| until <= now);
        let start = last.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed)) % n;
        if last.is_some() && free(start) {
            return start;
        }
        let from = if last.is_some() { start + 1 } else { start };
        (from..from + n)
            .map(|i| i % n)
            .find(|&i| free(i))
            .unwrap_or_else(|| {
                (0..n)
                    .min_by_key(|&i| avoided[i].unwrap_or(now))
                    .unwrap_or(0)
            })
    }

    /// Sets `member` aside after a failed try.
    pub(crate) fn avoid(&self, member: usize) {
        if let Some(slot) = self.avoided().get_mut(member) {
            *slot = Some(Instant::now() + AVOID_FOR);
        }
    }

    /// The member that answered the last request sent through
    /// [`unary`](Self::unary), if any.
    pub(crate) fn last(&self) -> Option<usize> {
        Some(self.last.load(Ordering::Relaxed)).filter(|&m| m != NONE)
    }

    /// Notes that `member` answered.
    pub(crate) fn answered(&self, member: usize) {
        self.last.store(member, Ordering::Relaxed);
    }

    /// How long a request waits for its first try on one member of several
    /// before it sends the same request to another as well, for a request
    /// allowed `whole` in all: an eighth of it, at least [`MIN_TRY`] (at
    /// most `whole`). An eighth of the TTL, as a waiter's looks, where the
    /// TTL is below the request timeout.
    pub(crate) fn first_try(whole: Duration) -> Duration {
        (whole / 8).max(MIN_TRY).min(whole)
    }

    /// One unary request, made by `request` with a member's client and the
    /// settings of one try, within `settings.request_timeout` in all: first
    /// to the member that answered the last such request, unless it is set
    /// aside. If no answer came within [`first_try`](Self::first_try) of
    /// the whole, the same request goes to another member as well (then
    /// after twice that, and so on), and the first answer counts: a frozen
    /// member costs that wait, not the request timeout, and a slow link
    /// (every member slow alike) costs nothing, since no try is given up
    /// before the request's own timeout. A try that fails (retryably) sets
    /// its member aside and sends the request to another at once. Every
    /// request sent this way must be safe to send twice (a try not waited
    /// for may still land): a read, a create-if-absent, a delete guarded by
    /// a create revision.
    ///
    /// With one member (one endpoint, or a client given by the user), the
    /// request goes once, with the whole timeout, on that client as it is.
    pub(crate) async fn unary<T, F, Fut>(&self, settings: &Settings, request: F) -> Result<T>
    where
        F: FnMut(Client, Settings) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if self.members.len() == 1 {
            let client = self.client(0).await?;
            let mut request = request;
            return request(client, settings.clone()).await;
        }
        let whole = settings.request_timeout;
        let give_up = Instant::now() + whole;
        let mut wait = Self::first_try(whole);
        // The tries share `request`; each only calls it to make its future.
        let request = Mutex::new(request);
        let mut tries = FuturesUnordered::new();
        let mut busy: Vec<usize> = Vec::new();
        let mut sent = 0;
        let mut next_try = Instant::now();
        let mut last_error = None;
        loop {
            let now = Instant::now();
            let left = give_up.saturating_duration_since(now);
            let may_send = busy.len() < self.members.len()
                && sent < 2 * self.members.len()
                && left >= LAST_TRY;
            if may_send && now >= next_try {
                let member = self.pick_besides(&busy);
                busy.push(member);
                sent += 1;
                if sent > 1 {
                    tracing::debug!(
                        member,
                        ?left,
                        "no answer yet; sending to another member too"
                    );
                }
                let this_try = Settings {
                    key_prefix: settings.key_prefix.clone(),
                    request_timeout: left,
                    route: Route::ThisMember,
                };
                let request = &request;
                tries.push(async move {
                    let answer = async {
                        let client = self.client_within(member, left).await?;
                        let answer = {
                            let mut request = request.lock().unwrap_or_else(|e| e.into_inner());
                            (*request)(client, this_try)
                        };
                        answer.await
                    }
                    .await;
                    (member, answer)
                });
                next_try = now + wait;
                wait = (wait * 2).min(whole);
                continue;
            }
            if tries.is_empty() {
                return Err(last_error.unwrap_or(Error::Timeout {
                    operation: "request",
                    after: whole,
                }));
            }
            let next = if may_send { next_try } else { give_up };
            tokio::select! {
                Some((member, answer)) = tries.next() => {
                    busy.retain(|&m| m != member);
                    match answer {
                        Ok(answer) => {
                            self.answered(member);
                            return Ok(answer);
                        }
                        Err(error) if error.is_retryable() => {
                            tracing::debug!(member, %error, "a try failed; trying another member");
                            self.avoid(member);
                            last_error = Some(error);
                            next_try = Instant::now();
                        }
                        Err(error) => return Err(error),
                    }
                }
                _ = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// The member to send a try to while `busy` have one each: the one
    /// [`pick`](Self::pick) names unless busy; else the next one in order
    /// that is neither busy nor set aside; else the next one not busy.
    fn pick_besides(&self, busy: &[usize]) -> usize {
        let first = self.pick(self.last());
        if !busy.contains(&first) {
            return first;
        }
        let now = Instant::now();
        let n = self.members.len();
        let others: Vec<usize> = (first + 1..first + n)
            .map(|i| i % n)
            .filter(|i| !busy.contains(i))
            .collect();
        let avoided = self.avoided();
        others
            .iter()
            .copied()
            .find(|&i| avoided[i].is_none_or(|until| until <= now))
            .or_else(|| others.first().copied())
            .unwrap_or(first)
    }

    /// `member`'s client within `bound` (a frozen member may not even
    /// finish the handshake): a timeout is [`Error::Timeout`].
    pub(crate) async fn client_within(&self, member: usize, bound: Duration) -> Result<Client> {
        tokio::time::timeout(bound, self.client(member))
            .await
            .map_err(|_| Error::Timeout {
                operation: "connect",
                after: bound,
            })?
    }

    /// `member`'s client, connected on tenure's heartbeat runtime the first
    /// time (authenticating, where the options say so).
    pub(crate) async fn client(&self, member: usize) -> Result<Client> {
        let member = &self.members[member];
        let client = member
            .client
            .get_or_try_init(|| async {
                let endpoint = member
                    .endpoint
                    .clone()
                    .expect("a member without an endpoint has its client from the start");
                let connect = self.connect.clone();
                on_heartbeat_runtime(BACKEND, async move {
                    Client::connect([endpoint], Some(connect))
                        .await
                        .map_err(map)
                })
                .await
            })
            .await?;
        Ok(client.clone())
    }
}

/// Where a request goes: a client as it is (a member's own, for one try
/// of a renewal or a look; the backend's balanced client), or one member
/// at a time ([`Members::unary`]).
#[derive(Clone, Copy)]
pub(crate) enum Via<'a> {
    Client(&'a Client),
    Members(&'a Members),
}

impl<'a> From<&'a Client> for Via<'a> {
    fn from(client: &'a Client) -> Self {
        Via::Client(client)
    }
}

impl<'a> From<&'a Members> for Via<'a> {
    fn from(members: &'a Members) -> Self {
        Via::Members(members)
    }
}

impl<'a> From<&'a Arc<Client>> for Via<'a> {
    fn from(client: &'a Arc<Client>) -> Self {
        Via::Client(client)
    }
}

impl<'a> From<&'a Arc<Members>> for Via<'a> {
    fn from(members: &'a Arc<Members>) -> Self {
        Via::Members(members)
    }
}

impl Via<'_> {
    /// One unary request, made by `request` with a client and the settings
    /// to send it with.
    pub(crate) async fn unary<T, F, Fut>(self, settings: &Settings, mut request: F) -> Result<T>
    where
        F: FnMut(Client, Settings) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        match self {
            Via::Client(client) => request(client.clone(), settings.clone()).await,
            Via::Members(members) => members.unary(settings, request).await,
        }
    }

    /// Reads `key` (a prefix, a revision, ... as `options` say).
    pub(crate) async fn get(
        self,
        key: &[u8],
        options: Option<GetOptions>,
        settings: &Settings,
    ) -> Result<GetResponse> {
        self.unary(settings, |client, settings| {
            let options = options.clone();
            async move { settings.get(&client, key, options).await }
        })
        .await
    }

    /// Runs one transaction.
    pub(crate) async fn txn(self, txn: &Txn, settings: &Settings) -> Result<TxnResponse> {
        self.unary(settings, |client, settings| async move {
            settings.txn(&client, txn).await
        })
        .await
    }

    /// A client to open a watch on, within `within`, and the member it is
    /// (none for a client as it is, and for one member alone): the member
    /// that answered last, unless it is set aside.
    pub(crate) async fn watch_client(self, within: Duration) -> Result<(Client, Option<usize>)> {
        match self {
            Via::Client(client) => Ok((client.clone(), None)),
            Via::Members(members) if members.len() == 1 => Ok((members.client(0).await?, None)),
            Via::Members(members) => {
                let member = members.pick(members.last());
                match members.client_within(member, within).await {
                    Ok(client) => Ok((client, Some(member))),
                    Err(error) => {
                        members.avoid(member);
                        Err(error)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Members {
        let endpoints: Vec<String> = (0..n).map(|i| format!("127.0.0.1:{}", 2379 + i)).collect();
        Members::new(&endpoints, ConnectOptions::new())
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_failed_is_passed_over_until_its_time_aside_ends() {
        let m = members(3);
        assert_eq!(m.pick(None), 0);
        assert_eq!(m.pick(None), 1, "first picks take turns");
        assert_eq!(m.pick(None), 2);
        assert_eq!(m.pick(Some(1)), 1, "the member that answered last stays");
        m.avoid(1);
        assert_eq!(m.pick(Some(1)), 2, "the next one after it");
        tokio::time::advance(Duration::from_millis(1)).await;
        m.avoid(2);
        assert_eq!(m.pick(Some(2)), 0);
        tokio::time::advance(Duration::from_millis(1)).await;
        m.avoid(0);
        // Every member aside: the one whose time aside ends first.
        assert_eq!(m.pick(Some(0)), 1);
        tokio::time::advance(AVOID_FOR).await;
        assert_eq!(m.pick(Some(2)), 2, "back once its time aside is over");
    }

    #[test]
    fn a_first_try_is_an_eighth_of_the_timeout_and_at_least_100ms() {
        let ms = Duration::from_millis;
        assert_eq!(Members::first_try(Duration::from_secs(5)), ms(625));
        assert_eq!(Members::first_try(Duration::from_secs(1)), ms(125));
        assert_eq!(Members::first_try(ms(400)), ms(100));
        assert_eq!(Members::first_try(ms(50)), ms(50), "never over the whole");
    }

    #[tokio::test(start_paused = true)]
    async fn one_member_is_always_the_pick() {
        let m = members(1);
        m.avoid(0);
        assert_eq!(m.pick(Some(0)), 0);
    }
}
