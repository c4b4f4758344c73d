#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// DESIGN. ZooKeeper's election protocol (Curator LeaderLatch's) and the
// session it lives on, nothing else: the layers in tenure-core check
// input, trace, and run every operation on the heartbeat runtime.
//
//   lib.rs       ZooKeeperBackend: options, connect, the HeartbeatBackend impl
//   latch.rs     LeaderLatch's recipe: ephemeral sequential nodes, lowest leads
//   campaign.rs  one candidacy: create, look, wait on the node ahead, claim
//   session.rs   the backend's one session, replaced once it ends; a renewal
//                unanswered with a reserve of its lease left leaves its server
//   terms.rs     the session timeout the servers grant, and the leases on it
//   probe.rs     before a session opens: what each server would grant
//   relay.rs     a relay that reads the timeout granted at every (re)connect,
//                and leaves a frozen server (session.rs times renewals)
//   own.rs       a holder watches its own node (deleted out of band: lost)
//   watch.rs     leader observations from child watches
//   granted.rs   what a granted lease carries (ZkGrant)
//   error.rs     zookeeper-client errors as tenure's, retryable or not
//   url.rs       zk:// URLs

mod campaign;
mod error;
mod granted;
mod latch;
mod own;
mod probe;
mod relay;
mod renewals;
mod session;
mod terms;
mod url;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tenure_core::on_heartbeat_runtime;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error, HeartbeatBackend,
    KeyRule, LeaderEvent, Lease, LossReason, Result,
};
use tokio::time::Instant;
pub use zookeeper_client;
use zookeeper_client::Client;

use crate::error::BACKEND;
use crate::granted::ZkGrant;
use crate::session::Sessions;

/// Options for [`ZooKeeperBackend::connect`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ZooKeeperOptions {
    /// The path elections live under (`/services/latches`); default the root,
    /// so key `billing` is the election node `/billing`, where Curator's
    /// `new LeaderLatch(client, "/billing", id)` joins it. Created on demand.
    pub base_path: String,
    /// The session timeout, and so every candidacy's TTL (default 10 s). It
    /// must lie within every server's `minSessionTimeout..=maxSessionTimeout`
    /// (by default 2x..=20x its tickTime); `connect` refuses one any server
    /// would change, and a session that a server gives less later (a rolling
    /// config change) ends its leases at once (see the crate's README,
    /// "Servers must agree on the session timeout").
    pub session_timeout: Duration,
    /// An authentication (`scheme`, `credentials`), e.g. `("digest", b"user:pw")`.
    pub auth: Option<(String, Vec<u8>)>,
    /// Deadline of each request (never of waiting), capped at the TTL; default 5 s.
    pub request_timeout: Duration,
    /// The servers' `tickTime`; default 2 s (ZooKeeper's sample
    /// configuration). A follower passes its clients' activity on to the
    /// quorum leader, which is what expires sessions, only in its answers to
    /// the leader's pings, every half tick; so the leader may count a
    /// session's timeout from activity older than tenure's last answered
    /// request. Every lease's `valid_until` comes
    /// [`ZooKeeperBackend::expiry_lead`] sooner to cover that. A `tick_time`
    /// below the servers' is unsafe; one above it only shortens leases. The
    /// session timeout must be at least 3 ticks.
    pub tick_time: Duration,
}

impl Default for ZooKeeperOptions {
    fn default() -> Self {
        ZooKeeperOptions {
            base_path: String::new(),
            session_timeout: Duration::from_secs(10),
            auth: None,
            request_timeout: Duration::from_secs(5),
            tick_time: Duration::from_secs(2),
        }
    }
}

impl ZooKeeperOptions {
    /// Sets the base path (`/a/b`).
    pub fn with_base_path(mut self, path: impl Into<String>) -> Self {
        self.base_path = path.into();
        self
    }
    /// Sets the session timeout (= the TTL of every candidacy).
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }
    /// Adds an authentication.
    pub fn with_auth(mut self, scheme: impl Into<String>, credentials: impl Into<Vec<u8>>) -> Self {
        self.auth = Some((scheme.into(), credentials.into()));
        self
    }
    /// Sets the per-request deadline.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
    /// Sets the servers' `tickTime`.
    pub fn with_tick_time(mut self, tick: Duration) -> Self {
        self.tick_time = tick;
        self
    }

    /// How long before a request was sent the quorum leader may have last
    /// seen the session active: the client sends something at least every
    /// sixth of the session timeout (see `Sessions::connect`), a follower
    /// passes that on in its answer to the leader's next ping (every half
    /// tick), and half a tick more allows for the ping's delivery.
    fn expiry_lead(&self) -> Duration {
        self.session_timeout / 6 + self.tick_time
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub base_path: String,
    pub request_timeout: Duration,
    /// See [`ZooKeeperBackend::expiry_lead`].
    pub expiry_lead: Duration,
}

impl Settings {
    /// These settings for one lease: no request waits longer than its TTL.
    fn for_ttl(&self, ttl: Duration) -> Settings {
        Settings {
            base_path: self.base_path.clone(),
            request_timeout: self.request_timeout.min(ttl),
            expiry_lead: self.expiry_lead,
        }
    }
}

/// Leader election on ZooKeeper, as Curator's `LeaderLatch` does it.
///
/// One value is one ZooKeeper session (replaced by a new one if the server
/// expires it) and serves any number of elections. Fencing token: the czxid
/// of the leader's node. Every candidacy's TTL is the session timeout.
#[derive(Clone)]
pub struct ZooKeeperBackend {
    sessions: Arc<Sessions>,
    settings: Arc<Settings>,
}

impl std::fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("settings", &self.settings)
            .field("session_timeout", &self.sessions.session_timeout())
            .finish_non_exhaustive()
    }
}

impl ZooKeeperBackend {
    /// Connects to the ensemble at `connect_string` (`"host:2181,host:2182"`)
    /// and opens the session; a session timeout any server would change is
    /// an [`Error::InvalidArgument`] naming `session_timeout` and the server.
    /// Every server is asked first, with a session of its own opened and
    /// closed again; the session's client then reaches the servers through a
    /// relay in this process, which ends the session's leases should a
    /// server give it less than asked for at a reconnect (see the crate's
    /// README, "Servers must agree on the session timeout").
    ///
    /// The session is driven by tenure's heartbeat thread, so an application
    /// runtime whose workers are all busy cannot stall its pings.
    pub async fn connect(connect_string: &str, options: ZooKeeperOptions) -> Result<Self> {
        if connect_string.trim().is_empty() {
            return Err(Error::invalid(
                "connect_string",
                "at least one ZooKeeper server is required",
            ));
        }
        if connect_string.contains('/') {
            return Err(Error::invalid(
                "connect_string",
                "give the chroot as ZooKeeperOptions::base_path, not in the connect string",
            ));
        }
        for (field, value) in [
            ("session_timeout", options.session_timeout),
            ("request_timeout", options.request_timeout),
            ("tick_time", options.tick_time),
        ] {
            if value.is_zero() {
                return Err(Error::invalid(field, "must be greater than zero"));
            }
        }
        if !options
            .session_timeout
            .subsec_nanos()
            .is_multiple_of(1_000_000)
        {
            return Err(Error::invalid(
                "session_timeout",
                "ZooKeeper counts session timeouts in whole milliseconds",
            ));
        }
        if options.session_timeout < options.tick_time * 3 {
            return Err(Error::invalid(
                "tick_time",
                format!(
                    "{:?} is more than a third of the session timeout {:?}: set tick_time to \
                     the servers' tickTime (default 2 s), and a session timeout of at least \
                     3 ticks",
                    options.tick_time, options.session_timeout
                ),
            ));
        }
        let base_path = normalize_base(&options.base_path)?;
        let servers = relay::servers(connect_string)?;
        let sessions = Arc::new(Sessions::new(servers, options.clone()));
        let first = sessions.clone();
        on_heartbeat_runtime(BACKEND, async move { first.client().await.map(drop) }).await?;
        Ok(ZooKeeperBackend {
            sessions,
            settings: Arc::new(Settings {
                base_path,
                request_timeout: options.request_timeout,
                expiry_lead: options.expiry_lead(),
            }),
        })
    }

    /// Connects from a URL:
    ///
    /// ```text
    /// zk://[user:password@]host[:port][,host[:port]...][/base/path][?params]
    /// ```
    ///
    /// - hosts without a port get 2181;
    /// - the path is [`ZooKeeperOptions::base_path`];
    /// - `user:password` (percent-encoded where needed): ZooKeeper digest
    ///   authentication (`addauth digest user:password`);
    /// - `session_timeout` and `tick_time` ([`ZooKeeperOptions`]), and
    ///   `request_timeout`: `6s`, `500ms` (their old names
    ///   `session_timeout_ms` and `tick_time_ms`, which also take a plain
    ///   number of milliseconds, still work but are deprecated);
    /// - `tls=true` is refused: TLS to ZooKeeper is not supported yet.
    ///
    /// A bad URL, or an unknown parameter, is an [`Error::InvalidArgument`]
    /// naming `url` (the password hidden), before any connection.
    pub async fn connect_url(url: &str) -> Result<Self> {
        let (hosts, options) = url::parse(url)?;
        Self::connect(&hosts, options).await
    }

    /// The current session's client (a new session if the last one ended).
    ///
    /// zookeeper-client closes a session when its last `Client` is dropped:
    /// while you hold this one, [`LeaseBackend::close`](tenure_core::LeaseBackend::close)
    /// cannot close the session (it ends tenure's own use of it and waits a
    /// request timeout for the close). It reaches the servers through the
    /// backend's relay (`127.0.0.1` addresses), which stops listening once
    /// the backend has replaced the session.
    pub async fn client(&self) -> Result<Client> {
        let sessions = self.sessions.clone();
        on_heartbeat_runtime(BACKEND, async move { sessions.client().await }).await
    }

    /// How much sooner than one TTL after its last answered request a lease's
    /// `valid_until` comes ([`tenure_core::Lease::expiry_lead`]): a sixth of
    /// the session timeout plus one tick (see [`ZooKeeperOptions::tick_time`]).
    ///
    /// A request through a follower touches the session there; the quorum
    /// leader, whose tracker expires sessions, learns of it only from the
    /// follower's answer to its next ping. A follower cut off from the leader
    /// right after answering our renewal leaves the leader counting from
    /// activity before it: the client's last ping or request that the
    /// follower passed on, at most a sixth of the session timeout plus a half
    /// tick (the ping period) plus a half tick (delivery) earlier.
    pub fn expiry_lead(&self) -> Duration {
        self.settings.expiry_lead
    }

    /// The id of the open session, if one is open; unlike
    /// [`client`](Self::client), never opens one.
    pub async fn session_id(&self) -> Option<i64> {
        self.sessions.open_id().await
    }

    /// The ZooKeeper path of an election.
    pub fn election_path(&self, key: &ElectionKey) -> String {
        latch::election_path(&self.settings.base_path, key.as_str())
    }
}

fn normalize_base(base: &str) -> Result<String> {
    let trimmed = base.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    if !trimmed.starts_with('/')
        || trimmed[1..]
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(Error::invalid(
            "base_path",
            format!("{base:?} must be an absolute ZooKeeper path like /a/b"),
        ));
    }
    Ok(trimmed.to_owned())
}

#[async_trait]
impl HeartbeatBackend for ZooKeeperBackend {
    const NAME: &'static str = BACKEND;
    type LeaseState = ZkGrant;

    fn capabilities(&self) -> Capabilities {
        let timeout = self.sessions.session_timeout();
        let mut caps = Capabilities::new(true, true);
        // The session is the lease: one TTL, the session timeout.
        caps.min_ttl = timeout;
        caps.max_ttl = Some(timeout);
        caps.ttl_granularity = Duration::from_millis(1);
        caps.key_rule = KeyRule::PathSegments;
        // The server expires sessions in tickTime buckets, and a session
        // timeout is at least two ticks.
        caps.expiry_slack = timeout / 2;
        // Each holder watches its own node (own.rs).
        caps.holder_watches_own_record = true;
        // One sync and multi-read for the renewals that come together.
        caps.renewals_batched = true;
        caps
    }

    /// The capabilities' rules, not ZooKeeper's own `/zookeeper` tree, and
    /// no segment named like a candidate node (`latch-<sequence>`), which
    /// the election above it would count as a candidate.
    fn check_key(&self, key: &ElectionKey) -> Result<()> {
        HeartbeatBackend::capabilities(self).check_key(key)?;
        let path = self.election_path(key);
        if path == "/zookeeper" || path.starts_with("/zookeeper/") {
            return Err(Error::invalid(
                "key",
                format!("{path:?} is inside ZooKeeper's reserved /zookeeper tree"),
            ));
        }
        if let Some(segment) = key.as_str().split('/').find(|s| latch::is_candidate(s)) {
            return Err(Error::invalid(
                "key",
                format!(
                    "segment {segment:?} is named like a candidate node (latch-<sequence>): \
                     the election above it would take it for a candidate"
                ),
            ));
        }
        Ok(())
    }

    fn check(&self, candidacy: &Candidacy) -> Result<()> {
        HeartbeatBackend::check_key(self, candidacy.key())?;
        let timeout = self.sessions.session_timeout();
        HeartbeatBackend::capabilities(self)
            .check_ttl(candidacy.ttl())
            .map_err(|e| match e {
                Error::InvalidArgument {
                    field: "ttl",
                    reason,
                } => Error::invalid(
                    "ttl",
                    format!(
                        "{reason}: on ZooKeeper the session is the lease, so a candidacy's TTL \
                         must equal this backend's session timeout, {timeout:?} (set \
                         ZooKeeperOptions::session_timeout, within the server's \
                         minSessionTimeout..=maxSessionTimeout, by default 2x..=20x tickTime)"
                    ),
                ),
                other => other,
            })
    }

    async fn acquire(&self, candidacy: Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let session = self.sessions.session().await?;
        tracing::debug!(session = session.id(), "campaign");
        let settings = self.settings.for_ttl(candidacy.ttl());
        campaign::acquire(session, &candidacy, mode, settings).await
    }

    async fn renew(&self, lease: Lease, held: &ZkGrant) -> Result<Lease> {
        let settings = self.settings.for_ttl(lease.ttl());
        let mut state = held.state.lock().await;
        if state.ended || Instant::now() >= state.deadline {
            // Not renewed within its TTL, or released.
            return Err(Error::lease_lost(lease.key().as_str(), LossReason::Expired));
        }
        let client = match held.session.client() {
            Ok(client) if !client.state().is_terminated() && !held.session.ended() => client,
            _ => {
                state.ended = true;
                // The ZooKeeper session ended, was closed, or a server gave
                // it a shorter timeout than the TTL (see `terms`).
                return Err(Error::lease_lost(lease.key().as_str(), LossReason::Revoked));
            }
        };
        let node = latch::Node {
            path: held.path.clone(),
            czxid: held.czxid,
            owner: held.owner,
        };
        let renewal =
            || renewals::Renewals::still_ours(&held.session, &client, node.clone(), &settings);
        let (sent_at, ours) = held
            .session
            .answered_in_time(lease.valid_until(), renewal)
            .await?;
        if let Err(reason) = ours {
            state.ended = true;
            tracing::debug!(
                path = held.path,
                reason = reason.as_str(),
                "our node is no longer ours"
            );
            return Err(Error::lease_lost(lease.key().as_str(), reason));
        }
        state.deadline = state.deadline.max(sent_at + lease.ttl());
        Ok(lease.renewed(sent_at, lease.handle().clone()))
    }

    async fn release(&self, lease: Lease, held: &ZkGrant) -> Result<()> {
        let settings = self.settings.for_ttl(lease.ttl());
        let mut state = held.state.lock().await;
        state.ended = true;
        state.we_delete = true;
        // A session that ended or was closed took the node with it.
        if let Ok(client) = held.session.client() {
            if !client.state().is_terminated() {
                latch::delete(&client, &held.path, &settings).await?;
            }
        }
        held.disarm();
        Ok(())
    }

    async fn watch(&self, key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let election = self.election_path(&key);
        let session = self.sessions.session().await?;
        watch::watch(session, election, self.settings.clone()).await
    }

    /// Closes the session: campaigns waiting on it end (with a retryable
    /// error), watches end, held leases are lost, and the servers delete
    /// every node the session owned at once; returns once the client
    /// reports the session closed (or after a request timeout, logged).
    /// The next operation opens a new session.
    async fn close(&self) -> Result<()> {
        self.sessions.close().await;
        Ok(())
    }
}
