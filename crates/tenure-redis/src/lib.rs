#![doc = include_str!("../README.md")]
//!
//! # Cargo features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod held;
mod master;
mod scripts;
mod url;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use redis::{IntoConnectionInfo, Value};
use tokio::time::Instant;

pub use redis;
use tenure_core::backend_url::Host;
use tenure_core::hosted::CleanupOnDrop;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, CandidateId, Capabilities, ElectionKey, Error,
    HostedBackend, LeaderEvent, LeaderInfo, Lease, LeaseHandle, LossReason, Result,
};

use held::RedlockLease;
use master::{Master, NodeError};
use scripts::Scripts;

const BACKEND: &str = "redis";

/// Options for a [`RedisBackend`]; see [`RedlockBuilder`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedlockOptions {
    /// Put before every election key; default `"tenure:"`.
    pub key_prefix: String,
    /// The most one master may take to answer one call, as a fraction of
    /// the lease's TTL; default 1/3. A master slower than its timeout counts
    /// as not answering (Redlock's per-node timeout, small against the
    /// TTL). The timeout itself is this bound until the master has answered
    /// a few calls, then derived from its round trips (four times RFC
    /// 6298's retransmission timeout, at least 250 ms), never above it.
    pub node_timeout_fraction: f64,
    /// How long connecting to one master may take; default 2 s.
    pub connect_timeout: Duration,
    /// How often a watch looks at a vacant key when no release message
    /// arrives (a subscription lost to a master's restart); default 250 ms.
    pub watch_poll: Duration,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            key_prefix: "tenure:".into(),
            node_timeout_fraction: 1.0 / 3.0,
            connect_timeout: Duration::from_secs(2),
            watch_poll: Duration::from_millis(250),
        }
    }
}

/// Builds a [`RedisBackend`]. [`connect`](Self::connect) refuses to
/// build one until [`allow_unfenced`](Self::allow_unfenced) was called.
#[derive(Debug)]
#[must_use]
pub struct RedlockBuilder {
    masters: Vec<String>,
    password: Option<(Option<String>, String)>,
    options: RedlockOptions,
    unfenced_accepted: bool,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))] // read only with TLS
    tls: bool,
}

impl RedlockBuilder {
    /// States that you know Redlock cannot fence: no token can make a
    /// store refuse the writes of a leader that lost its lease behind its
    /// back (a master restarted without persistence, a paused process, a
    /// clock that jumped). Required; see the crate documentation.
    ///
    /// The same spelling as `ElectorBuilder::allow_unfenced` and the URL's
    /// `allow_unfenced=true`.
    pub fn allow_unfenced(mut self) -> Self {
        self.unfenced_accepted = true;
        self
    }

    /// The old name of [`allow_unfenced`](Self::allow_unfenced); removed in
    /// the next release.
    #[deprecated(since = "0.1.0", note = "use allow_unfenced")]
    pub fn accept_unfenced(self) -> Self {
        self.allow_unfenced()
    }

    /// Sets the options.
    pub fn options(mut self, options: RedlockOptions) -> Self {
        self.options = options;
        self
    }

    /// Connects to every master over TLS (rustls, the system's trust
    /// roots); the URL form is `rediss://`.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Authenticates with `password` (and `username`, for Redis ACL users).
    pub fn password(mut self, username: Option<String>, password: impl Into<String>) -> Self {
        self.password = Some((username, password.into()));
        self
    }

    /// Checks the settings, then connects to every master; fails unless a
    /// majority of them could be reached. Masters that could not be are
    /// tried again on every call.
    pub async fn connect(self) -> Result<RedisBackend> {
        if !self.unfenced_accepted {
            return Err(Error::invalid(
                "allow_unfenced",
                "Redlock cannot issue fencing tokens: a leader that lost its lease without \
                 knowing (a master restarted without persistence, a process paused past its \
                 deadline) can write beside the next one, and no store can refuse it; call \
                 RedlockBuilder::allow_unfenced() (URL: ?allow_unfenced=true) if a duplicate run \
                 is acceptable for your job",
            ));
        }
        if self.masters.is_empty() {
            return Err(Error::invalid("masters", "at least one master is required"));
        }
        if self.masters.len().is_multiple_of(2) {
            return Err(Error::invalid(
                "masters",
                format!(
                    "{} masters: Redlock needs an odd number (1, 3, 5) of independent masters",
                    self.masters.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = self.masters.iter().find(|m| !seen.insert(m.as_str())) {
            return Err(Error::invalid(
                "masters",
                format!("{dup} is listed twice: each master must be independent"),
            ));
        }
        let f = self.options.node_timeout_fraction;
        if !(f > 0.0 && f < 1.0) {
            return Err(Error::invalid(
                "node_timeout_fraction",
                format!("{f} must be above 0 and below 1"),
            ));
        }
        if self.options.connect_timeout.is_zero() {
            return Err(Error::invalid(
                "connect_timeout",
                "must be greater than zero",
            ));
        }
        if self.options.watch_poll.is_zero() {
            return Err(Error::invalid("watch_poll", "must be greater than zero"));
        }
        let mut masters = Vec::with_capacity(self.masters.len());
        for addr in &self.masters {
            let (host, port) = split_host_port(addr)?;
            let mut settings = redis::RedisConnectionInfo::default();
            if let Some((username, password)) = &self.password {
                if let Some(username) = username {
                    settings = settings.set_username(username);
                }
                settings = settings.set_password(password);
            }
            let info = (host.as_str(), port)
                .into_connection_info()
                .map_err(|e| Error::invalid("masters", format!("{addr}: {e}")))?
                .set_redis_settings(settings);
            #[cfg(feature = "tls")]
            let info = match self.tls {
                true => info.set_addr(redis::ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port,
                    insecure: false,
                    tls_params: None,
                }),
                false => info,
            };
            let client = redis::Client::open(info)
                .map_err(|e| Error::invalid("masters", format!("{addr}: {e}")))?;
            masters.push(Master::new(
                addr.clone(),
                client,
                self.options.connect_timeout,
            ));
        }
        let backend = RedisBackend {
            inner: Arc::new(Inner {
                quorum: masters.len() / 2 + 1,
                masters,
                scripts: Scripts::new(),
                options: self.options,
            }),
        };
        backend.connect_all().await?;
        Ok(backend)
    }
}

/// A master's `host:port`, the host without an IPv6 address's brackets.
fn split_host_port(addr: &str) -> Result<(String, u16)> {
    let Host { host, port } = Host::parse(addr, "masters")?;
    let port =
        port.ok_or_else(|| Error::invalid("masters", format!("{addr:?}: expected host:port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_owned(), port))
}

/// The old name of [`RedisBackend`], named like the other backends now.
#[deprecated(since = "0.1.0", note = "renamed to `RedisBackend`")]
pub type RedlockBackend = RedisBackend;

/// Leader election on Redis with the Redlock algorithm, over 1, 3 or 5
/// independent masters (no replication between them).
///
/// **It cannot fence**: leases carry no token. Building one requires
/// [`RedlockBuilder::allow_unfenced`], and an `Elector` over it requires
/// `ElectorBuilder::allow_unfenced`. See the crate documentation for what
/// that costs.
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    masters: Vec<Master>,
    quorum: usize,
    scripts: Scripts,
    options: RedlockOptions,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("masters", &self.inner.masters)
            .field("quorum", &self.inner.quorum)
            .field("options", &self.inner.options)
            .finish()
    }
}

/// How one attempt to take the key on every master ended.
enum Attempt {
    Granted(Lease),
    /// Not granted. `holder`: the value found on the most masters that
    /// answered, if any; `free_in`: when a majority of masters should be
    /// free again, judged from their answers (`None` when too few answered).
    NotGranted {
        holder: Option<String>,
        free_in: Option<Duration>,
        /// A master answered with a key that never expires.
        no_expiry: bool,
        failures: Vec<String>,
    },
}

/// The drift allowance Redlock prescribes: 1 % of the TTL plus 2 ms, for the
/// masters' clocks running at rates a little apart from ours.
pub fn redlock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

impl RedisBackend {
    /// Starts building a backend over `masters` (`"host:port"` each).
    pub fn builder<S: AsRef<str>>(masters: &[S]) -> RedlockBuilder {
        RedlockBuilder {
            masters: masters.iter().map(|m| m.as_ref().to_owned()).collect(),
            password: None,
            tls: false,
            options: RedlockOptions::default(),
            unfenced_accepted: false,
        }
    }

    /// Connects from a URL:
    ///
    /// ```text
    /// redis://[user:password@]host[:port][,host[:port]...][/prefix]?allow_unfenced=true[&params]
    /// rediss://...   (TLS)
    /// ```
    ///
    /// - hosts without a port get 6379;
    /// - `user:password` (percent-encoded where needed) authenticates to
    ///   every master (`:password@` or `password@` without an ACL user);
    /// - the path, if any, is the key prefix (`/jobs` puts `billing` at
    ///   `jobs:billing`; default `tenure:`);
    /// - `allow_unfenced=true` is required (Redlock cannot fence; without it the
    ///   error names `allow_unfenced`; the old spelling `unfenced=accept`
    ///   still works, deprecated, with one WARN); `node_timeout_fraction`, `connect_timeout`
    ///   and `watch_poll` (`2s`, `500ms`) are optional;
    /// - `rediss://` needs this crate's cargo feature `tls` (tenure's
    ///   `redis-tls`; rustls with the system's trust roots); without it
    ///   the URL is refused.
    ///
    /// Any other problem is an [`Error::InvalidArgument`] naming `url` (the
    /// password hidden), before any connection.
    pub async fn connect_url(url: &str) -> Result<Self> {
        url::parse(url)?.connect().await
    }

    /// The number of masters that must agree.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// Connects to every master at once; fails unless a majority answered.
    async fn connect_all(&self) -> Result<()> {
        let this = self.clone();
        tenure_core::on_heartbeat_runtime(BACKEND, async move {
            let timeout = this.inner.options.connect_timeout;
            let this = &this;
            let mut calls: FuturesUnordered<_> = this
                .inner
                .masters
                .iter()
                .map(|m| async move {
                    // A key under the prefix: a user whose ACL allows only
                    // those (`~<prefix>*`) must be able to connect.
                    let check = format!("{}connect-check", this.inner.options.key_prefix);
                    let look = this.inner.scripts.look.key(check.as_str());
                    let answer = m.invoke(&look, timeout).await;
                    if answer.is_ok() {
                        check_eviction(m, timeout).await;
                    }
                    (m, answer)
                })
                .collect();
            let mut failures = Vec::new();
            while let Some((m, answer)) = calls.next().await {
                if let Err(e) = answer {
                    failures.push(format!("{}: {e}", m.addr));
                }
            }
            let reached = this.inner.masters.len() - failures.len();
            if reached < this.inner.quorum {
                return Err(unavailable(format!(
                    "reached {reached} of {} masters, {} needed: {}",
                    this.inner.masters.len(),
                    this.inner.quorum,
                    failures.join("; ")
                )));
            }
            for failure in failures {
                tracing::warn!(%failure, "a Redis master is unreachable; it is tried again on every call");
            }
            Ok(())
        })
        .await
    }

    fn redis_key(&self, key: &ElectionKey) -> String {
        format!("{}{}", self.inner.options.key_prefix, key.as_str())
    }

    fn node_timeout(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.inner.options.node_timeout_fraction)
            .max(Duration::from_millis(1))
    }

    /// One Redlock round: `SET NX PX` with a fresh random value on the
    /// masters, granted once a majority said yes while the lease, counted
    /// from the send, is still valid. Whatever was taken of a round that
    /// failed is released on every master.
    ///
    /// The first master that answered its last call is asked first, alone
    /// (the gate): of candidates racing for a free key only the one it
    /// grants goes on to the others, so a hundred waiters woken by one
    /// release do not split the masters' votes among them and all back
    /// off (a livelock measured here without it). The others are then asked
    /// in parallel; also if the gate has not answered within a few of its
    /// round trips (at least 50 ms), so a silent master costs a round no
    /// more than that. Safety is Redlock's all the same: a majority must
    /// grant.
    ///
    /// `known` is the value a majority was last seen to hold (a waiter's
    /// memory across its rounds): a gate that refuses with it is believed
    /// without looking at the others again.
    async fn attempt(&self, candidacy: &Candidacy, known: &mut Option<String>) -> Attempt {
        let key = self.redis_key(candidacy.key());
        let value = format!("{}:{}", random_hex(), candidacy.identity().as_str());
        let ttl_ms = candidacy.ttl().as_millis() as u64;
        let timeout = self.node_timeout(candidacy.ttl());
        let n = self.inner.masters.len();
        let quorum = self.inner.quorum;
        // Releases whatever this round took unless it is disarmed: on a
        // failed round, and if the caller drops the round midway.
        let undo = CleanupOnDrop::arm(
            Undo {
                backend: self.clone(),
                key: key.clone(),
                value: value.clone(),
                timeout,
                ttl: candidacy.ttl(),
            },
            undo_round,
        );
        let no_expiry = std::sync::atomic::AtomicBool::new(false);
        let call = |i: usize| {
            let (key, value, no_expiry) = (&key, &value, &no_expiry);
            let m = &self.inner.masters[i];
            async move {
                let mut call = self.inner.scripts.acquire.key(key.as_str());
                call.arg(value.as_str()).arg(ttl_ms).arg(key.as_str());
                let answer = m.invoke(&call, timeout).await;
                // A key that never expires counts as held for a TTL more.
                let answer = answer.and_then(acquire_answer).map(|held| {
                    held.map(|(holder, left)| {
                        if left.is_none() {
                            no_expiry.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        (holder, left.unwrap_or(candidacy.ttl()))
                    })
                });
                (m, answer)
            }
        };
        let (mut granted, mut refused) = (0, 0);
        let mut holders: Vec<(String, Duration)> = Vec::new();
        let mut failures = Vec::new();
        let sent_at = Instant::now();
        let gate = (n > 1)
            .then(|| self.inner.masters.iter().position(Master::trusted))
            .flatten();
        let mut calls = FuturesUnordered::new();
        if let Some(g) = gate {
            // Asked alone, but not waited for past a few of its round
            // trips: a silent first master (black-holed, stalled) would
            // otherwise cost every round its whole timeout.
            let mut first = Box::pin(call(g));
            let hedge = self.inner.masters[g].hedge_within(timeout);
            let answered = tokio::select! {
                answer = &mut first => Some(answer),
                _ = tokio::time::sleep(hedge) => None,
            };
            match answered {
                None => {
                    self.inner.masters[g].slow();
                    tracing::debug!(
                        master = %self.inner.masters[g].addr,
                        key,
                        ?hedge,
                        "the first master is slow to answer; asking the others too"
                    );
                    calls.push(first);
                }
                Some((_, Ok(None))) => granted += 1,
                Some((_, Ok(Some((holder, left))))) => {
                    // Refused at the gate: a hint only. The key there may be
                    // an orphan (a release or an undo that missed it, a key
                    // set by hand) while a majority is free.
                    let confirmed = known.as_deref() == Some(holder.as_str())
                        || self.held_by_majority(&key, &holder, g, timeout).await;
                    if confirmed {
                        *known = Some(holder.clone());
                        // Nothing was taken anywhere.
                        undo.disarm();
                        return Attempt::NotGranted {
                            holder: Some(holder),
                            free_in: Some(left),
                            no_expiry: no_expiry.load(std::sync::atomic::Ordering::Relaxed),
                            failures,
                        };
                    }
                    tracing::debug!(
                        master = %self.inner.masters[g].addr,
                        key,
                        "the first master's key is held nowhere else; asking the others"
                    );
                    refused += 1;
                    holders.push((holder, left));
                }
                Some((m, Err(e))) => failures.push(format!("{}: {e}", m.addr)),
            }
        }
        for i in (0..n).filter(|i| Some(*i) != gate) {
            calls.push(Box::pin(call(i)));
        }
        let mut outstanding = calls.len();
        while granted < quorum && n - refused - failures.len() >= quorum {
            let Some((m, answer)) = calls.next().await else {
                break;
            };
            outstanding -= 1;
            match answer {
                Ok(None) => granted += 1,
                Ok(Some((holder, left))) => {
                    refused += 1;
                    holders.push((holder, left));
                }
                Err(e) => failures.push(format!("{}: {e}", m.addr)),
            }
        }
        // Masters still to answer are left: their SET either lands (and is
        // released or renewed with the rest) or not.
        drop(calls);
        if granted >= quorum {
            let lease = Lease::new(
                candidacy.clone(),
                None,
                sent_at,
                LeaseHandle::new(RedlockLease {
                    key: key.clone(),
                    value,
                    released: Default::default(),
                }),
            )
            .with_expiry_lead(redlock_drift(candidacy.ttl()));
            if lease.is_valid() {
                undo.disarm();
                return Attempt::Granted(lease);
            }
            failures.push(format!(
                "a majority granted, but only after the lease's validity ({:?}) had run out",
                lease.valid_until() - sent_at
            ));
        }
        // Undo only what may have been taken: a grant, an unanswered call
        // (its SET may have landed), or a call still in flight.
        if granted == 0 && failures.is_empty() && outstanding == 0 {
            undo.disarm();
        }
        // When could a majority be free again: masters that were ours are
        // released now; held ones free when their key expires (or sooner,
        // on a release); unanswered ones are unknown.
        let mut free: Vec<Duration> = std::iter::repeat_n(Duration::ZERO, granted)
            .chain(holders.iter().map(|(_, left)| *left))
            .collect();
        free.sort();
        let free_in = free
            .get(quorum - 1)
            .or_else(|| holders.iter().map(|(_, left)| left).max())
            .copied();
        Attempt::NotGranted {
            holder: likeliest_holder(holders),
            free_in,
            no_expiry: no_expiry.load(std::sync::atomic::Ordering::Relaxed),
            failures,
        }
    }

    /// Whether `value`, found on master `gate`, is held by a majority: the
    /// other masters are looked at (read only), and where they fall short,
    /// looked at again after as long as that took, since a candidate that
    /// won the gate a moment ago may still be taking the others.
    async fn held_by_majority(
        &self,
        key: &str,
        value: &str,
        gate: usize,
        timeout: Duration,
    ) -> bool {
        let mut pause = None;
        loop {
            let started = Instant::now();
            let mut looks: FuturesUnordered<_> = self
                .inner
                .masters
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != gate)
                .map(|(_, m)| async move {
                    let look = self.inner.scripts.look.key(key);
                    m.invoke(&look, timeout).await
                })
                .collect();
            // Until the answers settle it: a silent master is not waited
            // for once the others decided.
            let mut holding = 1;
            while holding < self.inner.quorum && holding + looks.len() >= self.inner.quorum {
                let Some(answer) = looks.next().await else {
                    break;
                };
                if let Ok(Value::Array(items)) = answer {
                    if matches!(
                        items.first(),
                        Some(Value::BulkString(held)) if held.as_slice() == value.as_bytes()
                    ) {
                        holding += 1;
                    }
                }
            }
            drop(looks);
            if holding >= self.inner.quorum || pause.is_some() {
                return holding >= self.inner.quorum;
            }
            let took = started.elapsed().max(Duration::from_millis(1));
            pause = Some(took);
            tokio::time::sleep(took).await;
        }
    }

    /// Runs `RELEASE` for `value` on every master, for at most `timeout`
    /// each, until a majority let go (or can no longer): how many deleted
    /// it or no longer had it, and what failed. The masters still to answer
    /// finish on the heartbeat runtime, not counted as a cleanup that
    /// `Elector::shutdown` waits for: a silent master does not hold up a
    /// resign, a shutdown or a process's exit, and its key, on a minority,
    /// expires by itself.
    async fn release_everywhere(
        &self,
        key: &str,
        value: &str,
        timeout: Duration,
    ) -> (usize, Vec<String>) {
        let (n, quorum) = (self.inner.masters.len(), self.inner.quorum);
        let mut calls: FuturesUnordered<_> = (0..n)
            .map(|i| {
                let (this, key, value) = (self.clone(), key.to_owned(), value.to_owned());
                async move {
                    let mut call = this.inner.scripts.release.key(key.as_str());
                    call.arg(value.as_str()).arg(key.as_str());
                    (i, this.inner.masters[i].invoke(&call, timeout).await)
                }
            })
            .collect();
        let (mut done, mut failures) = (0, Vec::new());
        while done < quorum && n - failures.len() >= quorum {
            let Some((i, answer)) = calls.next().await else {
                break;
            };
            match answer {
                Ok(_) => done += 1,
                Err(e) => failures.push(format!("{}: {e}", self.inner.masters[i].addr)),
            }
        }
        if !calls.is_empty() {
            tenure_core::heartbeat_runtime().spawn(async move {
                while let Some((_, answer)) = calls.next().await {
                    if let Err(e) = answer {
                        tracing::debug!(error = %e, "a release left to finish in the background failed (the key expires)");
                    }
                }
            });
        }
        (done, failures)
    }

    async fn acquire_waiting(&self, candidacy: &Candidacy) -> Result<Acquisition> {
        let key = self.redis_key(candidacy.key());
        let timeout = self.node_timeout(candidacy.ttl());
        let mut wake = self.subscribe(&key, timeout).await;
        let mut known = None;
        let mut warned_no_expiry = false;
        // When failures were last told at WARN, and how long until the next.
        let mut told: Option<(Instant, Duration)> = None;
        loop {
            let pause = match self.attempt(candidacy, &mut known).await {
                Attempt::Granted(lease) => return Ok(Acquisition::Granted(lease)),
                // Held: try again when a majority should be free, or at a
                // release message, whichever comes first. A key that never
                // expires is looked at again a TTL later.
                Attempt::NotGranted {
                    holder: Some(holder),
                    free_in: Some(free_in),
                    no_expiry,
                    ..
                } => {
                    if no_expiry && !warned_no_expiry {
                        warned_no_expiry = true;
                        tracing::warn!(
                            key,
                            holder = %holder_of(&holder).identity,
                            "the key never expires (set without PX, or PERSISTed): waiting \
                             until it is deleted, looking again every TTL"
                        );
                        candidacy.warning(
                            "campaign",
                            format!(
                                "the key {key} never expires (set without PX, or PERSISTed): \
                                 waiting until it is deleted"
                            ),
                        );
                    }
                    free_in + jitter(Duration::from_millis(3))
                }
                // A split vote (candidates took a minority each) or a
                // failure: a random pause, as Redlock prescribes.
                Attempt::NotGranted { failures, .. } => {
                    if !failures.is_empty() {
                        // Told at WARN, at most once per back-off period
                        // (doubling from 1 s to a minute), else at DEBUG.
                        let now = Instant::now();
                        match told {
                            Some((at, every)) if now < at + every => {
                                tracing::debug!(failures = %failures.join("; "), "no majority; retrying");
                            }
                            _ => {
                                let every = told.map_or(Duration::from_secs(1), |(_, every)| {
                                    (every * 2).min(Duration::from_secs(60))
                                });
                                told = Some((now, every));
                                tracing::warn!(key, failures = %failures.join("; "), "a waiting campaign reached no majority of masters; retrying");
                                candidacy.warning(
                                    "campaign",
                                    format!(
                                        "no majority of masters reached; retrying: {}",
                                        failures.join("; ")
                                    ),
                                );
                            }
                        }
                    }
                    Duration::from_millis(2) + jitter(candidacy.ttl() / 20)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                message = wake.next() => {
                    if message.is_none() {
                        // Every subscription ended (masters restarted): subscribe again.
                        tokio::time::sleep(pause.min(timeout)).await;
                        wake = self.subscribe(&key, timeout).await;
                    }
                }
            }
        }
    }

    /// Subscribes to `channel` on every master that answers in time; one
    /// merged stream of wake-ups. Returns once a majority is subscribed (a
    /// release reaches a majority, so one of them tells of it) or every
    /// master answered; the others join the stream as they are made, so a
    /// silent master holds up nothing. The stream ends once every
    /// subscription has.
    async fn subscribe(&self, channel: &str, timeout: Duration) -> BoxStream<'static, ()> {
        let mut pending: FuturesUnordered<_> = (0..self.inner.masters.len())
            .map(|i| {
                let (this, channel) = (self.clone(), channel.to_owned());
                async move { this.inner.masters[i].subscribe(&channel, timeout).await }
            })
            .collect();
        let mut made = Vec::new();
        while made.len() < self.inner.quorum {
            match pending.next().await {
                Some(Some(subscription)) => made.push(subscription),
                Some(None) => {}
                None => break,
            }
        }
        let later = pending
            .filter_map(futures::future::ready)
            .flatten_unordered(None);
        futures::stream::select(futures::stream::select_all(made), later).boxed()
    }

    async fn renew_inner(&self, lease: &Lease, state: &RedlockLease) -> Result<Lease> {
        let timeout = self.node_timeout(lease.ttl());
        let ttl_ms = lease.ttl().as_millis() as u64;
        let n = self.inner.masters.len();
        let quorum = self.inner.quorum;
        let sent_at = Instant::now();
        let mut calls: FuturesUnordered<_> = (0..n)
            .map(|i| {
                let (this, key, value) = (self.clone(), state.key.clone(), state.value.clone());
                async move {
                    let mut call = this.inner.scripts.extend.key(key.as_str());
                    call.arg(value.as_str()).arg(ttl_ms);
                    (i, this.inner.masters[i].invoke(&call, timeout).await)
                }
            })
            .collect();
        let (mut extended, mut gone) = (0, 0);
        // Masters that answered that the key is not ours (gone, or someone
        // else's), and those that failed to answer.
        let (mut lacking, mut failed) = (Vec::new(), Vec::new());
        let mut failures = Vec::new();
        while let Some((i, answer)) = calls.next().await {
            let m = &self.inner.masters[i];
            match answer {
                Ok(Value::Int(1)) => extended += 1,
                Ok(Value::Int(0)) => {
                    gone += 1;
                    lacking.push(i);
                }
                Ok(other) => {
                    failed.push(i);
                    failures.push(format!("{}: unexpected answer {other:?}", m.addr));
                }
                Err(e) => {
                    failed.push(i);
                    failures.push(format!("{}: {e}", m.addr));
                }
            }
            if extended >= quorum || n - gone < quorum {
                break;
            }
        }
        if extended >= quorum {
            let renewed = lease.renewed(sent_at, lease.handle().clone());
            if renewed.is_valid() {
                // A majority holds our value: take back the masters that
                // lost the key now (the next single loss would otherwise
                // let someone else assemble a majority), and those that
                // did not answer in time once they do.
                let expires = sent_at + lease.ttl();
                self.repair(state, &lacking, expires, &renewed, timeout)
                    .await;
                let (this, state, held) = (self.clone(), state.clone(), renewed.clone());
                // Not a cleanup `Elector::shutdown` waits for: it waits on
                // masters that did not answer in time, and stops taking any
                // back once the lease is released.
                tenure_core::heartbeat_runtime().spawn(async move {
                    let mut lacking = failed;
                    while let Some((i, answer)) = calls.next().await {
                        if !matches!(answer, Ok(Value::Int(1))) {
                            lacking.push(i);
                        }
                    }
                    this.repair(&state, &lacking, expires, &held, timeout).await;
                });
                return Ok(renewed);
            }
            return Err(Error::Timeout {
                operation: "renew",
                after: Instant::now() - sent_at,
            });
        }
        drop(calls);
        if n - gone < quorum {
            // The masters cannot tell an expired value from one taken over.
            tracing::debug!(
                gone,
                masters = n,
                "masters no longer hold this lease's value"
            );
            return Err(Error::lease_lost(lease.key().as_str(), LossReason::Revoked));
        }
        Err(unavailable(format!(
            "renewed on {extended} of {n} masters, {quorum} needed: {}",
            failures.join("; ")
        )))
    }

    /// Runs `REPAIR` on each of `masters` while `lease` (just renewed by a
    /// majority) is valid: their key, gone, is taken again with our value,
    /// to expire at `expires` as the majority's does. Each taken master is
    /// a WARN: a lease that lost a master has no spare left until then.
    async fn repair(
        &self,
        state: &RedlockLease,
        masters: &[usize],
        expires: Instant,
        lease: &Lease,
        timeout: Duration,
    ) {
        let calls: FuturesUnordered<_> = masters
            .iter()
            .map(|&i| async move {
                let left = expires.saturating_duration_since(Instant::now());
                let released = state.released.load(std::sync::atomic::Ordering::SeqCst);
                if released || !lease.is_valid() || left < Duration::from_millis(1) {
                    return (i, None);
                }
                let mut call = self.inner.scripts.repair.key(state.key.as_str());
                call.arg(state.value.as_str()).arg(left.as_millis() as u64);
                (i, Some(self.inner.masters[i].invoke(&call, timeout).await))
            })
            .collect();
        let answers: Vec<_> = calls.collect().await;
        for (i, answer) in answers {
            let master = &self.inner.masters[i].addr;
            match answer {
                Some(Ok(Value::Int(2))) => {
                    tracing::warn!(
                        master,
                        key = state.key,
                        "a Redis master had lost the lease's key (restarted empty, evicted, or \
                         missed by a grant); taken back, so the lease survives one more such loss"
                    );
                    lease.candidacy().warning(
                        "renew",
                        format!(
                            "Redis master {master} had lost the lease's key (restarted empty, \
                             evicted, or missed by a grant); taken back"
                        ),
                    );
                }
                Some(Ok(_)) | None => {}
                Some(Err(e)) => {
                    tracing::debug!(master, error = %e, "taking back a master that lacks the key failed")
                }
            }
        }
    }

    /// Releases on every master; returns once a majority let go (or can no
    /// longer), the rest finishing in the background: a silent master does
    /// not hold up a resign or a shutdown.
    async fn release_inner(&self, lease: &Lease, state: &RedlockLease) -> Result<()> {
        state
            .released
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let timeout = self.node_timeout(lease.ttl());
        let (done, failures) = self
            .release_everywhere(&state.key, &state.value, timeout)
            .await;
        if done >= self.inner.quorum {
            Ok(())
        } else {
            Err(unavailable(format!(
                "released on {done} of {} masters, {} needed: {}",
                self.inner.masters.len(),
                self.inner.quorum,
                failures.join("; ")
            )))
        }
    }
}

/// WARNs if `m` may evict a lease's key before it expires: a memory limit
/// with a `maxmemory-policy` other than `noeviction` (the `volatile-*`
/// policies evict keys with a TTL, as every lease key has). Silent where
/// the master does not say (`CONFIG` refused).
async fn check_eviction(m: &Master, timeout: Duration) {
    let Some(policy) = m.config("maxmemory-policy", timeout).await else {
        return;
    };
    let maxmemory = m.config("maxmemory", timeout).await;
    if let Some(why) = eviction_risk(maxmemory.as_deref(), &policy) {
        tracing::warn!(master = %m.addr, policy, "{why}");
    }
}

/// Why a master with this `maxmemory` (bytes, as `CONFIG GET` says it;
/// `None` if unknown) and `maxmemory-policy` may evict a lease's key early,
/// if it may.
fn eviction_risk(maxmemory: Option<&str>, policy: &str) -> Option<String> {
    if policy.eq_ignore_ascii_case("noeviction") || maxmemory == Some("0") {
        return None;
    }
    Some(format!(
        "maxmemory-policy is {policy}: under memory pressure this master may evict a lease's \
         key before it expires, and another candidate can then be granted while the holder \
         still leads; set maxmemory-policy noeviction on the masters tenure uses"
    ))
}

/// Who most likely holds a key, from the holders the masters that refused
/// named (with the time their keys have left): the one most masters named,
/// and of those named as often, the one whose key has the most time left,
/// that is the newest grant. A release returns once a majority let go, so a
/// key the last holder released may still stand on one master while its
/// successor holds the others; a racer that saw each once names the
/// successor.
fn likeliest_holder(holders: Vec<(String, Duration)>) -> Option<String> {
    let mut counts: Vec<(String, usize, Duration)> = Vec::new();
    for (holder, left) in holders {
        match counts.iter_mut().find(|(h, _, _)| *h == holder) {
            Some((_, c, most)) => {
                *c += 1;
                *most = (*most).max(left);
            }
            None => counts.push((holder, 1, left)),
        }
    }
    counts
        .into_iter()
        .max_by_key(|(_, count, left)| (*count, *left))
        .map(|(holder, _, _)| holder)
}

/// A round's value, released on every master if the round is not granted
/// (see [`undo_round`]).
struct Undo {
    backend: RedisBackend,
    key: String,
    value: String,
    timeout: Duration,
    /// The round's TTL: its keys are gone by then whatever happens.
    ttl: Duration,
}

/// Releases a round's value on every master: the cleanup of a round that
/// failed or was dropped midway.
fn undo_round(undo: Undo) -> BoxFuture<'static, ()> {
    let Undo {
        backend,
        key,
        value,
        timeout,
        ttl,
    } = undo;
    let expired = Instant::now() + ttl;
    Box::pin(async move {
        let (done, failures) = backend.release_everywhere(&key, &value, timeout).await;
        if done >= backend.inner.quorum {
            return;
        }
        // A round whose answers were lost (its connections broken
        // since) may hold a majority that nobody else can take until
        // its keys expire: ask again, on fresh connections, until a
        // majority let go or the keys are gone anyway. In the
        // background: a shutdown does not wait for it.
        tracing::debug!(
            failures = %failures.join("; "),
            "undoing a round that was not granted: no majority answered; asking again"
        );
        tenure_core::heartbeat_runtime().spawn(async move {
            let mut pause = Duration::from_millis(5);
            while Instant::now() + pause < expired {
                tokio::time::sleep(pause).await;
                let (done, failures) = backend.release_everywhere(&key, &value, timeout).await;
                if done >= backend.inner.quorum {
                    return;
                }
                tracing::debug!(
                    failures = %failures.join("; "),
                    "undoing a round that was not granted: no majority answered yet"
                );
                pause = (pause * 2).min(timeout);
            }
        });
    })
}

/// `{1}` → `None` (granted); `{0, holder, pttl}` → who holds it, for how long.
///
/// The time left is `None` for a key that never expires (set by hand
/// without `PX`, or `PERSIST`ed): held, with no known end.
#[allow(clippy::type_complexity)]
fn acquire_answer(
    value: Value,
) -> std::result::Result<Option<(String, Option<Duration>)>, NodeError> {
    let unexpected = |v: &Value| {
        NodeError::Redis(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected answer to the acquire script",
            format!("{v:?}"),
        )))
    };
    let Value::Array(items) = &value else {
        return Err(unexpected(&value));
    };
    match items.as_slice() {
        [Value::Int(1)] => Ok(None),
        [Value::Int(0), holder, pttl] => {
            let holder = match holder {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                // Expired between SET and GET: free now.
                _ => return Ok(Some((String::new(), Some(Duration::ZERO)))),
            };
            let left = match pttl {
                Value::Int(ms) if *ms > 0 => Some(Duration::from_millis(*ms as u64)),
                Value::Int(-1) => None,
                _ => Some(Duration::ZERO),
            };
            Ok(Some((holder, left)))
        }
        _ => Err(unexpected(&value)),
    }
}

/// The identity inside a stored value (`<40 hex>:<identity>`); a value
/// that tenure did not write is shown whole.
pub(crate) fn holder_of(value: &str) -> LeaderInfo {
    let identity = match value.split_once(':') {
        Some((random, identity)) if random.len() == 40 && !identity.is_empty() => identity,
        _ => value,
    };
    LeaderInfo {
        identity: CandidateId::new(identity)
            .unwrap_or_else(|_| CandidateId::new("(unknown)").expect("a valid identity")),
        token: None,
    }
}

fn random_hex() -> String {
    let bytes: [u8; 20] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn jitter(max: Duration) -> Duration {
    max.mul_f64(rand::random::<f64>())
}

fn unavailable(why: String) -> Error {
    Error::unavailable(BACKEND, why)
}

#[async_trait]
impl HostedBackend for RedisBackend {
    const NAME: &'static str = BACKEND;
    type LeaseState = RedlockLease;

    fn promises(&self) -> Capabilities {
        let mut caps = Capabilities::new(false, false);
        caps.tokens_survive_state_loss = false;
        // Below this the per-master timeout and the drift allowance leave
        // too little of the TTL to lead in.
        caps.min_ttl = Duration::from_millis(100);
        // Waiters retry when a majority's keys should have expired; a
        // release message wakes them at once.
        caps.expiry_slack = Duration::from_millis(10);
        caps
    }

    async fn acquire(&self, candidacy: Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        match mode {
            AcquireMode::Wait => self.acquire_waiting(&candidacy).await,
            AcquireMode::Once => match self.attempt(&candidacy, &mut None).await {
                Attempt::Granted(lease) => Ok(Acquisition::Granted(lease)),
                Attempt::NotGranted {
                    holder: Some(holder),
                    ..
                } if !holder.is_empty() => Ok(Acquisition::Held(holder_of(&holder))),
                Attempt::NotGranted { failures, .. } => Err(unavailable(format!(
                    "no majority of {} masters granted the key and none names a holder: {}",
                    self.inner.masters.len(),
                    if failures.is_empty() {
                        "the key expired while it was being taken".to_owned()
                    } else {
                        failures.join("; ")
                    }
                ))),
            },
        }
    }

    async fn renew(&self, lease: Lease, state: &RedlockLease) -> Result<Lease> {
        self.renew_inner(&lease, state).await
    }

    async fn release(&self, lease: Lease, state: &RedlockLease) -> Result<()> {
        self.release_inner(&lease, state).await
    }

    async fn watch(&self, key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        Ok(watch::start(self.clone(), self.redis_key(&key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_likeliest_holder_is_the_most_named_then_the_newest() {
        let ms = Duration::from_millis;
        let named = |list: &[(&str, u64)]| {
            likeliest_holder(
                list.iter()
                    .map(|(h, left)| (h.to_string(), ms(*left)))
                    .collect(),
            )
        };
        assert_eq!(named(&[]), None);
        // A majority's holder, though another key has more time left.
        assert_eq!(
            named(&[("old", 900), ("new", 300), ("new", 310)]).as_deref(),
            Some("new")
        );
        // Named once each: a released key left on one master (less time
        // left) and its successor's.
        assert_eq!(
            named(&[("released", 420), ("successor", 990)]).as_deref(),
            Some("successor")
        );
        assert_eq!(
            named(&[("successor", 990), ("released", 420)]).as_deref(),
            Some("successor")
        );
    }

    #[test]
    fn only_a_memory_limit_with_an_evicting_policy_is_a_risk() {
        assert_eq!(eviction_risk(Some("0"), "allkeys-lru"), None);
        assert_eq!(eviction_risk(Some("104857600"), "noeviction"), None);
        assert_eq!(eviction_risk(None, "NOEVICTION"), None);
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "volatile-lru",
            "allkeys-random",
        ] {
            let why = eviction_risk(Some("104857600"), policy).expect(policy);
            assert!(why.contains(policy) && why.contains("noeviction"), "{why}");
        }
        assert!(eviction_risk(None, "volatile-lfu").is_some());
    }

    #[test]
    fn a_stored_value_names_its_holder() {
        let v = format!("{}:replica-1", "a".repeat(40));
        assert_eq!(holder_of(&v).identity.as_str(), "replica-1");
        assert_eq!(
            holder_of("someone-elses-lock").identity.as_str(),
            "someone-elses-lock"
        );
        assert_eq!(holder_of("").identity.as_str(), "(unknown)");
    }

    #[test]
    fn acquire_answers_are_read() {
        assert!(matches!(
            acquire_answer(Value::Array(vec![Value::Int(1)])),
            Ok(None)
        ));
        let held = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"x:y".to_vec()),
            Value::Int(250),
        ]);
        let (holder, left) = acquire_answer(held).unwrap().unwrap();
        assert_eq!(
            (holder.as_str(), left),
            ("x:y", Some(Duration::from_millis(250)))
        );
        let forever = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"x:y".to_vec()),
            Value::Int(-1),
        ]);
        assert_eq!(acquire_answer(forever).unwrap().unwrap().1, None);
        assert!(acquire_answer(Value::Int(3)).is_err());
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(
            redlock_drift(Duration::from_secs(1)),
            Duration::from_millis(12)
        );
        assert_eq!(
            redlock_drift(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
    }

    #[tokio::test]
    async fn building_without_the_opt_in_is_refused_before_any_connection() {
        // Port 1 is never a Redis master: an attempt to connect would fail
        // differently (unavailable), so the error proves nothing was tried.
        let err = RedisBackend::builder(&["127.0.0.1:1"])
            .connect()
            .await
            .unwrap_err();
        match err {
            Error::InvalidArgument { field, reason } => {
                assert_eq!(field, "allow_unfenced");
                assert!(reason.contains("fencing"), "{reason}");
            }
            other => panic!("expected InvalidArgument naming allow_unfenced, got {other}"),
        }
    }

    #[test]
    #[allow(deprecated)]
    fn the_deprecated_accept_unfenced_still_opts_in() {
        assert!(
            RedisBackend::builder(&["a:1"])
                .accept_unfenced()
                .unfenced_accepted
        );
        assert!(!RedisBackend::builder(&["a:1"]).unfenced_accepted);
    }

    #[tokio::test]
    async fn bad_master_lists_name_masters_before_any_connection() {
        for masters in [
            vec![],
            vec!["a:1", "b:2"],
            vec!["a:1", "a:1", "b:2"],
            vec!["nohost"],
            vec![":6379"],
            vec!["h:0"],
            vec!["h:99999"],
        ] {
            let err = RedisBackend::builder(&masters)
                .allow_unfenced()
                .connect()
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidArgument {
                        field: "masters",
                        ..
                    }
                ),
                "{masters:?}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn an_unreachable_majority_is_unavailable_and_names_the_masters() {
        // Nothing listens on these loopback ports.
        let closed: Vec<String> = (0..3)
            .map(|_| {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap().to_string()
            })
            .collect();
        let err = RedisBackend::builder(&closed)
            .allow_unfenced()
            .connect()
            .await
            .unwrap_err();
        assert!(err.is_retryable(), "{err}");
        let text = err.to_string();
        for addr in &closed {
            assert!(text.contains(addr.as_str()), "{text} names {addr}");
        }
    }
}
