#![doc = include_str!("../README.md")]
//!
//! # Cargo features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// DESIGN. etcd's election protocol and nothing else: the layers in
// tenure-core check input, trace, and run every operation on the heartbeat
// runtime (HeartbeatBackend).
//
//   lib.rs        EtcdBackend: options, connect, the HeartbeatBackend impl
//   election.rs   concurrency.Election's recipe: a key per candidate, the
//                 lowest create revision leads
//   shared.rs     one lease per client and TTL for all its keys, renewed in
//                 rounds (one keep-alive, one read per 128 keys)
//   keepalive.rs  one lease kept alive, on a stream opened on demand
//   members.rs    one client per member for the requests that keep a lease
//   own.rs        a holder watches its own key (deleted out of band: lost),
//                 every holder of a client on one watch stream
//   watch.rs      leader observations: a prefix watch, re-read per change
//   granted.rs    what a granted lease carries (EtcdGrant)
//   error.rs      etcd-client errors as tenure's, retryable or not
//   url.rs        etcd:// and etcds:// URLs

mod election;
mod error;
mod granted;
mod keepalive;
mod members;
mod own;
mod shared;
mod url;
mod watch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions};
use futures::stream::BoxStream;
use tokio::time::Instant;

pub use etcd_client;
use granted::EtcdGrant;
use members::Members;
use shared::{Attached, Pool, Round};
use tenure_core::hosted::CleanupOnDrop;
use tenure_core::on_heartbeat_runtime;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error, FencingToken,
    HeartbeatBackend, LeaderEvent, Lease, LeaseHandle, LossReason, LossSignal, Result,
};

use crate::error::{is_lease_gone, unary, Route, BACKEND};

/// Options for [`EtcdBackend::connect`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EtcdOptions {
    /// Put before every election key (e.g. `"tenure/"`); default none, so
    /// `etcdctl elect <key>` and Go's `concurrency.NewElection(s, "<key>")` join
    /// the same election.
    pub key_prefix: String,
    /// Deadline of each unary request (never of watches or waiting); default 5 s.
    pub request_timeout: Duration,
    /// etcd client options: TLS, user and password, keep-alive of the connection.
    pub connect: ConnectOptions,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            key_prefix: String::new(),
            request_timeout: Duration::from_secs(5),
            // HTTP/2 pings on connections with open streams: a frozen
            // member's connection is found dead within 15 s, not never.
            // (etcd refuses pings more often than every 5 s by default,
            // `--grpc-keepalive-min-time`, and without streams.)
            connect: ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
                .with_keep_alive_while_idle(false),
        }
    }
}

impl EtcdOptions {
    /// Sets the key prefix.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
    /// Sets the per-request deadline.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
    /// Sets the etcd client's connect options (TLS, credentials).
    pub fn with_connect_options(mut self, options: ConnectOptions) -> Self {
        self.connect = options;
        self
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub key_prefix: String,
    pub request_timeout: Duration,
    /// Where the requests made with these settings go.
    pub route: Route,
}

impl Settings {
    /// These settings for one lease: no single request may wait longer than
    /// its TTL, after which its answer is worthless (and a retry, perhaps on
    /// another endpoint, is the better bet).
    fn for_ttl(&self, ttl: Duration) -> Settings {
        Settings {
            key_prefix: self.key_prefix.clone(),
            request_timeout: self.request_timeout.min(ttl),
            route: self.route,
        }
    }

    /// One unary request under these settings' timeout and route
    /// ([`unary`]).
    pub(crate) async fn unary<T, F, Fut>(
        &self,
        client: &Client,
        operation: &'static str,
        request: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        unary(client, operation, self.request_timeout, self.route, request).await
    }

    /// Reads `key` (a prefix, a revision, ... as `options` say).
    pub(crate) async fn get(
        &self,
        client: &Client,
        key: impl AsRef<[u8]>,
        options: Option<etcd_client::GetOptions>,
    ) -> Result<etcd_client::GetResponse> {
        let key = key.as_ref();
        self.unary(client, "get", || {
            let (mut kv, options) = (client.kv_client(), options.clone());
            async move { kv.get(key, options).await }
        })
        .await
    }

    /// Runs one transaction.
    pub(crate) async fn txn(
        &self,
        client: &Client,
        txn: &etcd_client::Txn,
    ) -> Result<etcd_client::TxnResponse> {
        self.unary(client, "txn", || {
            let (mut kv, txn) = (client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
    }
}

/// Leader election on etcd, as etcd's own `concurrency.Election` does it.
///
/// One value is one etcd client (one gRPC connection) and serves any number
/// of elections. Fencing token: the leader key's create revision.
#[derive(Clone)]
pub struct EtcdBackend {
    /// Behind an `Arc`: tenure's layers take a copy of the backend for
    /// every operation, and a `Client` is a dozen service clients.
    client: Arc<Client>,
    /// The same members, one client each, for keep-alives (members.rs).
    members: Arc<Members>,
    settings: Arc<Settings>,
    /// The leases this client's keys share, one per TTL (shared.rs).
    pool: Arc<Pool>,
    /// The watch of every holder's own key (own.rs).
    own_keys: Arc<own::OwnKeys>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Connects to the cluster at `endpoints` (`"127.0.0.1:2379"` or `"http://host:port"`).
    ///
    /// The connection is driven by tenure's heartbeat thread, so an
    /// application runtime whose workers are all busy cannot stall renewals.
    pub async fn connect<S: AsRef<str>>(endpoints: &[S], options: EtcdOptions) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(Error::invalid(
                "endpoints",
                "at least one etcd endpoint is required",
            ));
        }
        if options.request_timeout.is_zero() {
            return Err(Error::invalid(
                "request_timeout",
                "must be greater than zero",
            ));
        }
        if options.key_prefix.chars().any(char::is_control) {
            return Err(Error::invalid(
                "key_prefix",
                "must not contain control characters",
            ));
        }
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        let each = endpoints.clone();
        // Tokens expire (simple ones after `--auth-token-ttl` of disuse, JWTs
        // after their TTL): etcd-client authenticates again and resends.
        // A member cut off from its peers refuses requests that require a
        // leader at once, and cancels such watch streams once it has had
        // none for three election timeouts (etcd#8980, as etcdctl and
        // kube-apiserver ask: etcd#8672): a waiter then looks elsewhere
        // instead of trusting a watch that will never speak.
        let connect = options
            .connect
            .clone()
            .with_auto_token_refresh(true)
            .with_require_leader(true);
        let members_connect = connect.clone();
        let client = on_heartbeat_runtime(BACKEND, async move {
            Client::connect(endpoints, Some(connect))
                .await
                .map_err(error::map)
        })
        .await?;
        // With several members, keep-alives go to one at a time, each on a
        // client of its own: one frozen member then costs a try, not the
        // lease (members.rs).
        let members = match each.len() {
            1 => Members::single(client.clone()),
            _ => Members::new(&each, members_connect),
        };
        Ok(Self::with_members(client, members, options))
    }

    /// Connects from a URL:
    ///
    /// ```text
    /// etcd://[user:password@]host[:port][,host[:port]...][/key/prefix/][?params]
    /// etcds://...   (TLS; the same as etcd://...?tls=true)
    /// ```
    ///
    /// - hosts without a port get 2379;
    /// - the path, if any, is the key prefix, a directory: `/tenure` and
    ///   `/tenure/` both put the election `billing` under `tenure/billing/`;
    /// - `user:password` (percent-encoded where needed): etcd's own
    ///   authentication ([`ConnectOptions::with_user`]);
    /// - `tls=true|false`; `ca=/path/ca.pem` to trust (else the system's
    ///   roots); `cert=/path/client.pem&key=/path/client.key`, a client
    ///   certificate (mTLS). TLS needs this crate's cargo feature `tls`
    ///   (tenure's `etcd-tls`); without it a TLS URL is refused;
    /// - `request_timeout=5s` ([`EtcdOptions::request_timeout`]),
    ///   `connect_timeout=5s`.
    ///
    /// A bad URL, or an unknown parameter, is an [`Error::InvalidArgument`]
    /// naming `url` (the password hidden), before any connection.
    pub async fn connect_url(url: &str) -> Result<Self> {
        let target = url::parse(url)?;
        let options = target.options()?;
        Self::connect(&target.endpoints, options).await
    }

    /// Wraps a client you built yourself. From `options` only the key prefix
    /// and the request timeout apply (the client is already connected).
    ///
    /// # Build the client on the heartbeat runtime
    ///
    /// An etcd client's connection is driven by tasks spawned on the runtime
    /// it was built on (tonic's channel worker and its HTTP/2 connection).
    /// tenure sends every request from its heartbeat runtime, but the bytes
    /// only move when those tasks run: a client built on your application's
    /// runtime lets a runtime whose workers are all busy or blocked stall
    /// renewals, and leadership is then lost for nothing (safely: the
    /// deadline still counts from each send). [`connect`](Self::connect)
    /// avoids that; with `from_client` it is up to you to build the client
    /// inside [`tenure_core::heartbeat_runtime`]:
    ///
    /// ```rust,no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use tenure_etcd::{etcd_client::Client, EtcdBackend, EtcdOptions};
    ///
    /// let client = tenure_core::heartbeat_runtime()
    ///     .spawn(async { Client::connect(["127.0.0.1:2379"], None).await })
    ///     .await??;
    /// let backend = EtcdBackend::from_client(client, EtcdOptions::default());
    /// # Ok(()) }
    /// ```
    ///
    /// A client built anywhere else works, without that promise.
    pub fn from_client(client: Client, options: EtcdOptions) -> Self {
        let members = Members::single(client.clone());
        Self::with_members(client, members, options)
    }

    fn with_members(client: Client, members: Members, options: EtcdOptions) -> Self {
        let members = Arc::new(members);
        let settings = Arc::new(Settings {
            key_prefix: options.key_prefix,
            request_timeout: options.request_timeout,
            route: Route::AnyMember,
        });
        let pool = Arc::new(Pool::new(client.clone(), members.clone(), settings.clone()));
        let own_keys = Arc::new(own::OwnKeys::new(client.clone(), (*settings).clone()));
        EtcdBackend {
            client: Arc::new(client),
            members,
            settings,
            pool,
            own_keys,
        }
    }

    /// The etcd client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn acquire_inner(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let settings = Arc::new(self.settings.for_ttl(candidacy.ttl()));
        // Reads, creates and deletes go to one member at a time, as
        // renewals do: a frozen member costs a try, not the request
        // timeout (members.rs).
        let (client, settings) = (&self.members, &*settings);
        let members = &*self.members;
        let prefix = election::election_prefix(settings, candidacy.key().as_str());
        if mode == AcquireMode::Once {
            // Read first: a held election costs no write.
            if let (Some(kv), _) = election::leader(client, &prefix, settings).await? {
                return Ok(Acquisition::Held(election::leader_info(&kv)));
            }
        }
        let identity = candidacy.identity().as_str();
        let call_start = Instant::now();
        // Our key, on this client's lease of our TTL (shared.rs): granted
        // now, or shared with its other candidacies and then kept alive by
        // a keep-alive sent alongside the create, so that our deadline
        // counts from a send within this call. A shared lease that expired
        // unnoticed refuses the key: once more, on a new one.
        let mut tries = 0;
        let (mut guard, key, create_revision, mut valid_from) = loop {
            tries += 1;
            let (attached, granted_at) = self.pool.attach(candidacy.ttl()).await?;
            let lease_id = attached.id();
            let key = attached.key_name(&prefix);
            // From here on, leaving (error, or the future dropped) deletes
            // our key, and gives up our use of the lease.
            let mut guard = CleanupOnDrop::arm(
                Candidate {
                    client: client.clone(),
                    key: key.clone(),
                    create_revision: None,
                    settings: Arc::new(settings.clone()),
                    ttl: candidacy.ttl(),
                    attached,
                },
                |candidate| Box::pin(withdraw(candidate)),
            );
            let create = election::create_key(client, &key, identity, lease_id, settings);
            let (created, alive) = match granted_at {
                Some(sent_at) => (create.await, Ok(Round::Alive { sent_at })),
                None => {
                    let deadline = candidacy.deadline_from(call_start);
                    let attached = &guard.state_mut().attached;
                    tokio::join!(create, attached.renew(None, deadline))
                }
            };
            let create_revision = match created {
                Ok(revision) => revision,
                Err(e) if is_lease_gone(&e) && tries == 1 => {
                    guard.state_mut().attached.expired();
                    continue;
                }
                Err(e) => return Err(e),
            };
            guard.state_mut().create_revision = Some(create_revision);
            match alive? {
                Round::Alive { sent_at } => break (guard, key, create_revision, sent_at),
                Round::Expired | Round::KeyGone if tries == 1 => continue,
                Round::Expired | Round::KeyGone => {
                    return Err(Error::unavailable(
                        BACKEND,
                        "this client's lease expired as our key was put on it",
                    ))
                }
            }
        };
        debug_assert!(valid_from >= call_start);
        let period = candidacy.ttl() / 3;
        // A waiter's reads are looks, tried again at once: one that hangs
        // (on a member cut off from its peers, whose reads wait for a
        // leader that cannot answer, or a frozen one) is abandoned after
        // an eighth of the TTL, and the next try may reach another member.
        // A healthy member answers a linearizable read in one heartbeat.
        let look_every = (candidacy.ttl() / 8).max(Duration::from_millis(50));
        // A try that timed out doubles the next one's bound (up to the
        // request timeout): on a link slower than an eighth of the TTL the
        // tries grow until one can answer, instead of timing out forever.
        let first_try = look_every
            .max(Duration::from_millis(100))
            .min(settings.request_timeout);
        let mut look = Settings {
            key_prefix: settings.key_prefix.clone(),
            request_timeout: first_try,
            route: Route::ThisMember,
        };
        // Set when the last look (after a keep-alive) has read our position already.
        let mut looked: Option<election::Position> = None;
        // The member that answered the last look.
        let mut look_member = None;

        loop {
            // A linearizable read, also after a wait: our key may have gone
            // since the predecessor did (lease expired or revoked, deleted by
            // hand, etcd#15247), and a read of the past would not show it.
            let read = match looked.take() {
                Some(position) => Ok(position),
                None if mode == AcquireMode::Wait => {
                    look_at(members, &mut look_member, &prefix, create_revision, &look).await
                }
                None => election::position(client, &prefix, create_revision, settings).await,
            };
            if mode == AcquireMode::Wait {
                look.request_timeout = match &read {
                    Err(Error::Timeout { .. }) => {
                        (look.request_timeout * 2).min(settings.request_timeout)
                    }
                    _ => first_try,
                };
            }
            let position = match read {
                Ok(position) => position,
                // A member without a leader refuses at once (we require
                // one); the next try goes to another member. Waiting, we
                // keep our own lease alive meanwhile.
                Err(e) if e.is_retryable() && mode == AcquireMode::Wait => {
                    tracing::debug!(error = %e, "reading our place in line failed; reading again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    if Instant::now() >= valid_from + period {
                        keep_waiting(&guard.state_mut().attached, candidacy, &mut valid_from)
                            .await?;
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Never claim leadership on a key that is not there.
            if !position.ours_exists {
                return Err(Error::unavailable(
                    BACKEND,
                    "our candidate key vanished while waiting",
                ));
            }
            let leads = position.predecessor_leads;
            let (Some(pred), revision) = (position.predecessor, position.revision) else {
                break;
            };
            if mode == AcquireMode::Once {
                let (leader, _) = election::leader(client, &prefix, settings).await?;
                let holder = election::leader_info(leader.as_ref().unwrap_or(&pred));
                guard.clean_up_now(settings.request_timeout).await;
                return Ok(Acquisition::Held(holder));
            }
            // Wait for the predecessor to go, keeping our own lease alive meanwhile.
            let deleted = election::deleted(
                client,
                pred.key(),
                pred.create_revision(),
                revision + 1,
                settings,
            );
            tokio::pin!(deleted);
            // A watch can be silent: its member cut off from its peers
            // (before the server gives up on its leader and cancels it) or
            // frozen. So the candidate next in line also looks for itself,
            // linearizably, every eighth of the TTL: a leader that died is
            // seen within that of its lease's expiry. One reader per
            // election, not every waiter: the herd stays quiet (the others
            // rely on their watches, which require a leader).
            let mut next_look = Instant::now() + look_every;
            loop {
                tokio::select! {
                    result = &mut deleted => {
                        match result {
                            Ok(()) => {}
                            // The watch broke, or its member lost its leader
                            // (a stream that requires one is cancelled then,
                            // etcd#8980): read our place again, and watch
                            // again, on another member if need be.
                            Err(e) if e.is_retryable() => {
                                tracing::debug!(error = %e, "watch of our predecessor failed; looking again");
                                tokio::time::sleep(RETRY_PAUSE).await;
                            }
                            Err(e) => return Err(e),
                        }
                        break;
                    }
                    _ = tokio::time::sleep_until(valid_from + period) => {
                        keep_waiting(&guard.state_mut().attached, candidacy, &mut valid_from).await?;
                    }
                    _ = tokio::time::sleep_until(next_look), if leads => {
                        next_look = Instant::now() + look_every;
                        match look_at(members, &mut look_member, &prefix, create_revision, &look).await {
                            Ok(now) if now.predecessor.as_ref().map(|p| p.create_revision())
                                == Some(pred.create_revision()) => {}
                            Ok(now) => {
                                tracing::debug!("our predecessor left unseen by its watch");
                                looked = Some(now);
                                break;
                            }
                            Err(e) => {
                                // The next try may reach another member.
                                if matches!(e, Error::Timeout { .. }) {
                                    look.request_timeout =
                                        (look.request_timeout * 2).min(settings.request_timeout);
                                }
                                tracing::debug!(error = %e, "look at our place in line failed");
                                next_look = Instant::now() + RETRY_PAUSE;
                            }
                        }
                    }
                }
            }
        }
        let candidate = guard.disarm();
        let signal = LossSignal::new();
        let own_key = self
            .own_keys
            .watch(key.clone(), create_revision, signal.clone());
        let state = Arc::new(TermState {
            released: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            deadline: std::sync::Mutex::new((candidacy.deadline_from(valid_from), false)),
        });
        tenure_core::heartbeat_runtime().spawn(watch_deadline(
            state.clone(),
            client.clone(),
            key.clone(),
            create_revision,
            settings.clone(),
            candidacy.ttl(),
            // The drift margin: the deadline plus it is a TTL from the send.
            candidacy.ttl() - (candidacy.deadline_from(valid_from) - valid_from),
        ));
        let handle = EtcdGrant {
            held: Held {
                client: client.clone(),
                key,
                create_revision,
                settings: settings.clone(),
                ttl: candidacy.ttl(),
                state,
                release_tried: std::sync::Mutex::new(None),
                attached: Some(candidate.attached),
            },
            _own_key: own_key,
        };
        let token = Some(FencingToken::new(create_revision as u64));
        Ok(Acquisition::Granted(
            Lease::new(
                candidacy.clone(),
                token,
                valid_from,
                LeaseHandle::new(handle),
            )
            .with_loss_signal(signal),
        ))
    }
}

/// A waiter's look at its place in line, through one member: the one that
/// answered the last look, unless it is set aside. A member whose look
/// failed (frozen, or without a leader) is set aside, and the next look
/// goes to another.
async fn look_at(
    members: &Members,
    last: &mut Option<usize>,
    prefix: &str,
    create_revision: i64,
    look: &Settings,
) -> Result<election::Position> {
    let member = members.pick(*last);
    let read = async {
        let client = members.client_within(member, look.request_timeout).await?;
        election::position(&client, prefix, create_revision, look).await
    }
    .await;
    match &read {
        Ok(_) => *last = Some(member),
        Err(e) if e.is_retryable() => {
            members.avoid(member);
            *last = None;
        }
        Err(_) => {}
    }
    read
}

/// How long a waiter pauses after a failed read or watch before it tries
/// again (the next try may reach another member).
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Keeps a waiting candidate's lease alive: where another candidacy's
/// renewal kept it alive since `valid_from`, our key lives from that send on
/// too; else one keep-alive. Renewed, `valid_from` moves up; after a
/// retryable failure with time left to try again, it returns after a pause;
/// else the error.
async fn keep_waiting(
    attached: &Attached,
    candidacy: &Candidacy,
    valid_from: &mut Instant,
) -> Result<()> {
    let since = attached.alive_since();
    if since > *valid_from {
        *valid_from = since;
        return Ok(());
    }
    let deadline = candidacy.deadline_from(*valid_from);
    match attached.renew(None, deadline).await {
        Ok(Round::Alive { sent_at }) => {
            *valid_from = (*valid_from).max(sent_at);
            Ok(())
        }
        Ok(Round::Expired | Round::KeyGone) => Err(Error::unavailable(
            BACKEND,
            "our candidate lease expired while waiting",
        )),
        Err(e) if e.is_retryable() && Instant::now() < candidacy.deadline_from(*valid_from) => {
            tracing::debug!(error = %e, "keep-alive while waiting failed; retrying");
            tokio::time::sleep(candidacy.ttl() / 12).await;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[async_trait]
impl HeartbeatBackend for EtcdBackend {
    const NAME: &'static str = BACKEND;
    type LeaseState = EtcdGrant;

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(true, true);
        caps.min_ttl = Duration::from_secs(1);
        caps.ttl_granularity = Duration::from_secs(1);
        caps.max_key_len = 1024;
        // etcd's lessor checks for expired leases every 500 ms.
        caps.expiry_slack = Duration::from_millis(600);
        // Each holder watches its own key (own.rs).
        caps.holder_watches_own_record = true;
        // A client's keys share a lease, renewed in rounds (shared.rs).
        caps.renewals_batched = true;
        caps
    }

    async fn acquire(&self, candidacy: Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        self.acquire_inner(&candidacy, mode).await
    }

    async fn renew(&self, lease: Lease, state: &EtcdGrant) -> Result<Lease> {
        let held = &state.held;
        if held.state.released.load(Ordering::SeqCst) {
            return Err(Error::lease_lost(
                lease.key().as_str(),
                LossReason::Resigned,
            ));
        }
        let Some(attached) = &held.attached else {
            return Err(Error::lease_lost(
                lease.key().as_str(),
                LossReason::Resigned,
            ));
        };
        let expired = || Error::lease_lost(lease.key().as_str(), LossReason::Expired);
        if Instant::now() >= lease.valid_until() {
            return Err(expired());
        }
        // The lease lives, and then our key too: someone may have deleted
        // it, and a keep-alive racing a revoke may be answered as a success
        // (etcd#20547).
        let key = Some((held.key.clone(), held.create_revision));
        let round = attached.renew(key, lease.valid_until()).await?;
        if matches!(round, Round::Expired | Round::KeyGone) {
            // Nothing left to delete when the handle goes.
            held.state.gone.store(true, Ordering::SeqCst);
        }
        // An answer after the deadline renews nothing: the term was over
        // by then, whatever the servers kept (its key may have gone at it).
        if !matches!(round, Round::Alive { .. }) && Instant::now() >= lease.valid_until() {
            return Err(expired());
        }
        match round {
            Round::Alive { sent_at } => {
                let mut deadline = held.state.deadline();
                // Past the deadline (checked under the lock the watchdog
                // takes before it deletes the key) nothing is renewed.
                let (until, lapsed) = &mut *deadline;
                if *lapsed || Instant::now() >= lease.valid_until() {
                    return Err(expired());
                }
                let renewed = lease.renewed(sent_at, lease.handle().clone());
                *until = (*until).max(renewed.valid_until());
                Ok(renewed)
            }
            // The keep-alive answered TTL <= 0: etcd expired or revoked the lease.
            Round::Expired => Err(Error::lease_lost(lease.key().as_str(), LossReason::Revoked)),
            // Our key is gone, or was recreated with another create revision.
            Round::KeyGone => Err(Error::lease_lost(lease.key().as_str(), LossReason::Deleted)),
        }
    }

    async fn release(&self, lease: Lease, state: &EtcdGrant) -> Result<()> {
        let held = &state.held;
        held.release_tried
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(Instant::now);
        let settings = self.settings.for_ttl(lease.ttl());
        election::delete_if_ours(&self.members, &held.key, held.create_revision, &settings).await?;
        // Our key is gone: nothing is left to delete when the handle goes,
        // and the lease is revoked then if nobody else uses it.
        held.state.released.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn watch(&self, key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let prefix = election::election_prefix(&self.settings, key.as_str());
        watch::watch(self.members.clone(), prefix, self.settings.clone()).await
    }

    /// Revokes every lease this client's keys share, at once (each revoke
    /// within the request timeout): called once nothing uses the client
    /// (after every cleanup), it leaves nothing a standby would wait out,
    /// not even a lease kept a second for the next candidacy.
    async fn close(&self) -> Result<()> {
        self.pool.close().await
    }
}

/// A queued candidacy, withdrawn by deleting its key if its campaign fails
/// or is dropped before it leads; its use of the shared lease ends after.
///
/// The delete is retried until it lands or one TTL has passed (as the
/// ZooKeeper backend's withdrawal is): a key left behind would sit in the
/// queue, kept alive by the client's other candidacies, and the candidate
/// after it would wait for a ghost. One that could not be deleted by then
/// retires its lease ([`Attached::abandoned`]). A key whose create was never answered
/// may still be created after its delete: the lease's renewal rounds delete
/// it again for a while ([`Attached::sweep_later`]), and the lease's
/// revoke, once nobody uses it, takes every key on it.
struct Candidate {
    /// Where its delete goes: one member at a time.
    client: Arc<Members>,
    key: String,
    /// Set once the create was answered.
    create_revision: Option<i64>,
    settings: Arc<Settings>,
    ttl: Duration,
    attached: Attached,
}

async fn withdraw(candidate: Candidate) {
    let Candidate {
        client,
        key,
        create_revision,
        settings,
        ttl,
        attached,
    } = candidate;
    // Deleted even where this looks like the lease's last use: another
    // candidacy of the client may take the lease up meanwhile.
    let give_up = Instant::now() + ttl;
    if !delete_until_gone(&client, &key, create_revision, &settings, give_up).await {
        attached.abandoned(key.clone(), create_revision);
    }
    if create_revision.is_none() {
        attached.sweep_later(key);
    }
    // The lease is revoked a second after its last use went (shared.rs).
    drop(attached);
}

/// Deletes a candidacy's key (only if it still has `create_revision`,
/// where known), retrying transient failures until `give_up`, by when
/// every try has ended too. Whether the delete landed.
async fn delete_until_gone(
    client: &Members,
    key: &str,
    create_revision: Option<i64>,
    settings: &Settings,
    give_up: Instant,
) -> bool {
    let tries = shared::retry_until(give_up, "delete a candidate key", || async {
        let left = give_up.saturating_duration_since(Instant::now());
        let settings = Settings {
            request_timeout: settings.request_timeout.min(left),
            ..settings.clone()
        };
        match create_revision {
            Some(revision) => election::delete_if_ours(client, key, revision, &settings).await,
            None => election::delete_by_name(client, key, &settings).await,
        }
    });
    tokio::time::timeout_at(give_up, tries)
        .await
        .unwrap_or(false)
}

/// A granted key and its use of the shared lease.
///
/// Dropped (the lease's last handle gone) without a release, its holder
/// stopped renewing: it crashed as far as anyone can tell, or its term was
/// lost or given up. Its key may not go before the term's deadline (the
/// holder may have believed it led until then), but must go after it: the
/// shared lease, kept alive for the client's other candidacies, would keep
/// the key, and the election, held by nobody. So the key is deleted (if
/// still ours) at the deadline, and only then is the lease given up, whose
/// last use revokes it. A delete that cannot land by then (one TTL after
/// the deadline, or after the first release tried, whichever is later)
/// retires the lease ([`Attached::abandoned`]): it is not waited for.
struct Held {
    /// Where its delete goes: one member at a time.
    client: Arc<Members>,
    key: String,
    create_revision: i64,
    settings: Settings,
    ttl: Duration,
    /// What its renewals, release, drop and watchdog share.
    state: Arc<TermState>,
    /// When the first release was tried (the Elector's tries go on for a
    /// TTL, and a drop after they failed waits no longer).
    release_tried: std::sync::Mutex<Option<Instant>>,
    attached: Option<Attached>,
}

/// What a held term's renewals, its release, its drop and its watchdog
/// ([`watch_deadline`]) share.
struct TermState {
    /// Set once released: nothing is left to delete.
    released: AtomicBool,
    /// Set once a renewal found the key or the lease gone, or the watchdog
    /// deleted the key: nothing is left to delete.
    gone: AtomicBool,
    /// Set once the handle is gone (its drop's cleanup takes over).
    dropped: AtomicBool,
    /// The latest deadline any renewal gave, and whether the term lapsed
    /// there (its key deleted, or being deleted: no renewal counts after).
    deadline: std::sync::Mutex<(Instant, bool)>,
}

impl TermState {
    fn deadline(&self) -> std::sync::MutexGuard<'_, (Instant, bool)> {
        self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Deletes a held key at its term's deadline if no renewal moved it and
/// it is neither released nor dropped (whose own cleanup does it): the
/// shared lease lives on for the client's other candidacies, whose renewals
/// may run where the holder's cannot (a holder renewing on a starved
/// application runtime, `RenewOn::CurrentRuntime`, beside waiting
/// candidacies kept alive from the heartbeat thread). The key then goes at
/// the deadline of the strictest owner, its holder (plus the drift
/// margin: a TTL from the last renewal's send, as the servers would let it
/// go on a lease of its own), and not when the client's last candidacy
/// goes. A delete that does not land is left to the drop's cleanup.
async fn watch_deadline(
    state: Arc<TermState>,
    members: Arc<Members>,
    key: String,
    revision: i64,
    settings: Settings,
    ttl: Duration,
    margin: Duration,
) {
    let until = loop {
        let until = state.deadline().0 + margin;
        tokio::time::sleep_until(until).await;
        let done = |flag: &AtomicBool| flag.load(Ordering::SeqCst);
        if done(&state.released) || done(&state.gone) || done(&state.dropped) {
            return;
        }
        let mut deadline = state.deadline();
        if Instant::now() < deadline.0 + margin {
            continue; // renewed meanwhile
        }
        deadline.1 = true;
        break deadline.0 + margin;
    };
    tracing::debug!(
        key,
        "the term's deadline passed unrenewed; deleting its key"
    );
    if delete_until_gone(&members, &key, Some(revision), &settings, until + ttl).await {
        state.gone.store(true, Ordering::SeqCst);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(attached) = self.attached.take() else {
            return;
        };
        let state = &self.state;
        state.dropped.store(true, Ordering::SeqCst);
        if state.released.load(Ordering::SeqCst) || state.gone.load(Ordering::SeqCst) {
            drop(attached);
            return;
        }
        let until = state.deadline().0;
        let tried = *self.release_tried.lock().unwrap_or_else(|e| e.into_inner());
        let give_up = match tried {
            // Released in vain for a TTL already (a shutdown, or a term
            // lost with etcd out of reach): the key is left to the
            // retired lease at once, and nothing waits longer.
            Some(tried) => (tried + self.ttl).max(until),
            None => until + self.ttl,
        };
        let (client, key, revision) = (self.client.clone(), self.key.clone(), self.create_revision);
        let settings = self.settings.clone();
        tenure_core::hosted::spawn_cleanup(async move {
            tokio::time::sleep_until(until).await;
            if !delete_until_gone(&client, &key, Some(revision), &settings, give_up).await {
                attached.abandoned(key, Some(revision));
            }
            drop(attached);
        });
    }
}
