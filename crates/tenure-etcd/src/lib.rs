#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod election;
mod error;
mod keepalive;
mod url;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions};
use futures::stream::BoxStream;
use tokio::sync::Mutex;
use tokio::time::Instant;

pub use etcd_client;
use keepalive::{KeepAlive, Kept};
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error, FencingToken,
    HostedBackend, LeaderEvent, Lease, LeaseHandle, Result,
};

use crate::error::{bounded, BACKEND};

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
            connect: ConnectOptions::new().with_connect_timeout(Duration::from_secs(5)),
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
}

impl Settings {
    /// These settings for one lease: no single request may wait longer than
    /// its TTL, after which its answer is worthless (and a retry, perhaps on
    /// another endpoint, is the better bet).
    fn for_ttl(&self, ttl: Duration) -> Settings {
        Settings {
            key_prefix: self.key_prefix.clone(),
            request_timeout: self.request_timeout.min(ttl),
        }
    }
}

/// Leader election on etcd, as etcd's own `concurrency.Election` does it.
///
/// One value is one etcd client (one gRPC connection) and serves any number
/// of elections. Fencing token: the leader key's create revision.
#[derive(Clone)]
pub struct EtcdBackend {
    client: Client,
    settings: Arc<Settings>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What a tenure lease on etcd carries.
struct EtcdLease {
    lease_id: i64,
    key: String,
    create_revision: i64,
    keep_alive: Mutex<KeepAlive>,
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
        let connect = options.connect.clone();
        let client = tenure_core::heartbeat_runtime()
            .spawn(async move { Client::connect(endpoints, Some(connect)).await })
            .await
            .map_err(|e| Error::Backend {
                backend: BACKEND,
                source: Box::new(e),
            })?
            .map_err(error::map)?;
        Ok(Self::from_client(client, options))
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
        EtcdBackend {
            client,
            settings: Arc::new(Settings {
                key_prefix: options.key_prefix,
                request_timeout: options.request_timeout,
            }),
        }
    }

    /// The etcd client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn acquire_inner(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let settings = Arc::new(self.settings.for_ttl(candidacy.ttl()));
        let (client, settings) = (&self.client, &*settings);
        let prefix = election::election_prefix(settings, candidacy.key().as_str());
        if mode == AcquireMode::Once {
            // Read first: a held election costs no write.
            if let (Some(kv), _) = election::leader(client, &prefix, settings).await? {
                return Ok(Acquisition::Held(election::leader_info(&kv)?));
            }
        }
        let ttl_secs = candidacy.ttl().as_secs() as i64;
        let sent_at = Instant::now();
        let grant = bounded(
            "lease grant",
            settings.request_timeout,
            client.lease_client().grant(ttl_secs, None),
        )
        .await?;
        let lease_id = grant.id();
        // From here on, leaving (error, or the future dropped) revokes the lease and so our key.
        let mut guard = RevokeOnDrop::new(client.clone(), lease_id, Arc::new(settings.clone()));
        if grant.ttl() != ttl_secs {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "etcd granted {}s for the requested {}s: its minimum lease TTL is higher; use at least {}s",
                    grant.ttl(),
                    ttl_secs,
                    grant.ttl()
                ),
            ));
        }
        let key = election::candidate_key(&prefix, lease_id);
        let identity = candidacy.identity().as_str();
        let create_revision =
            election::create_key(client, &key, identity, lease_id, settings).await?;
        let mut keep_alive = KeepAlive::new(lease_id);
        let mut valid_from = sent_at;

        loop {
            // A linearizable read, also after a wait: our key may have gone
            // since the predecessor did (lease expired or revoked, deleted by
            // hand, etcd#15247), and a read of the past would not show it.
            let position = election::position(client, &prefix, create_revision, settings).await?;
            // Never claim leadership on a key that is not there.
            if !position.ours_exists {
                return Err(Error::Unavailable {
                    backend: BACKEND,
                    source: "our candidate key vanished while waiting".into(),
                });
            }
            let (Some(pred), revision) = (position.predecessor, position.revision) else {
                break;
            };
            if mode == AcquireMode::Once {
                let (leader, _) = election::leader(client, &prefix, settings).await?;
                let holder = election::leader_info(leader.as_ref().unwrap_or(&pred))?;
                drop(guard); // withdraws our key
                return Ok(Acquisition::Held(holder));
            }
            // Wait for the predecessor to go, keeping our own lease alive meanwhile.
            let pred_key = String::from_utf8_lossy(pred.key()).into_owned();
            let deleted = election::deleted(
                client,
                &pred_key,
                pred.create_revision(),
                revision + 1,
                settings,
            );
            tokio::pin!(deleted);
            let period = candidacy.ttl() / 3;
            loop {
                tokio::select! {
                    result = &mut deleted => { result?; break; }
                    _ = tokio::time::sleep_until(valid_from + period) => {
                        match keep_alive.keep_alive(client, settings).await {
                            Ok(Kept::Alive { sent_at }) => valid_from = sent_at,
                            Ok(Kept::Expired) => return Err(Error::Unavailable {
                                backend: BACKEND,
                                source: "our candidate lease expired while waiting".into(),
                            }),
                            Err(e) if e.is_retryable() && Instant::now() < candidacy.deadline_from(valid_from) => {
                                tracing::debug!(error = %e, "keep-alive while waiting failed; retrying");
                                tokio::time::sleep(period / 4).await;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
        guard.disarm();
        let handle = EtcdLease {
            lease_id,
            key,
            create_revision,
            keep_alive: Mutex::new(keep_alive),
        };
        let token = Some(FencingToken::new(create_revision as u64));
        Ok(Acquisition::Granted(Lease::new(
            candidacy.clone(),
            token,
            valid_from,
            LeaseHandle::new(Arc::new(handle)),
        )))
    }
}

fn etcd_lease(lease: &Lease) -> Result<&Arc<EtcdLease>> {
    lease
        .handle()
        .get::<Arc<EtcdLease>>()
        .ok_or_else(|| Error::invalid("lease", "was not granted by the etcd backend"))
}

#[async_trait]
impl HostedBackend for EtcdBackend {
    const NAME: &'static str = BACKEND;

    fn promises(&self) -> Capabilities {
        let mut caps = Capabilities::new(true, true);
        caps.min_ttl = Duration::from_secs(1);
        caps.ttl_granularity = Duration::from_secs(1);
        caps.max_key_len = 1024;
        // etcd's lessor checks for expired leases every 500 ms.
        caps.expiry_slack = Duration::from_millis(600);
        caps
    }

    async fn acquire(&self, candidacy: Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        self.acquire_inner(&candidacy, mode).await
    }

    async fn renew(&self, lease: Lease) -> Result<Lease> {
        let state = etcd_lease(&lease)?;
        let settings = self.settings.for_ttl(lease.ttl());
        let kept = state
            .keep_alive
            .lock()
            .await
            .keep_alive(&self.client, &settings)
            .await?;
        let Kept::Alive { sent_at } = kept else {
            return Err(Error::lease_lost(
                lease.key().as_str(),
                "the etcd lease expired",
            ));
        };
        // The lease lives; make sure our key does too (someone may have deleted it).
        if !election::still_ours(&self.client, &state.key, state.create_revision, &settings).await?
        {
            return Err(Error::lease_lost(
                lease.key().as_str(),
                "our election key was deleted",
            ));
        }
        Ok(lease.renewed(sent_at, lease.handle().clone()))
    }

    async fn release(&self, lease: Lease) -> Result<()> {
        let state = etcd_lease(&lease)?;
        let settings = self.settings.for_ttl(lease.ttl());
        election::delete_if_ours(&self.client, &state.key, state.create_revision, &settings)
            .await?;
        keepalive::revoke(&self.client, state.lease_id, &settings).await
    }

    async fn watch(&self, key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let prefix = election::election_prefix(&self.settings, key.as_str());
        watch::watch(self.client.clone(), prefix, self.settings.clone()).await
    }
}

/// Revokes a candidate's lease (and so deletes its key) unless disarmed.
struct RevokeOnDrop {
    armed: Option<(Client, i64, Arc<Settings>)>,
}

impl RevokeOnDrop {
    fn new(client: Client, lease_id: i64, settings: Arc<Settings>) -> Self {
        RevokeOnDrop {
            armed: Some((client, lease_id, settings)),
        }
    }
    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for RevokeOnDrop {
    fn drop(&mut self) {
        if let Some((client, lease_id, settings)) = self.armed.take() {
            tenure_core::hosted::spawn_cleanup(async move {
                if let Err(error) = keepalive::revoke(&client, lease_id, &settings).await {
                    tracing::warn!(lease_id, %error, "could not withdraw a candidacy; its lease will expire");
                }
            });
        }
    }
}
