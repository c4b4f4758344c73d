//! Building a backend: its options, the builder that checks them and
//! connects to every master, and a URL's way to the same builder.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::IntoConnectionInfo;

use tenure_core::backend_url::Host;
use tenure_core::{Error, Result};

use crate::master::Master;
use crate::scripts::Scripts;
use crate::{unavailable, Inner, RedisBackend, BACKEND};

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
    /// How long connecting to one master may take; default 2 s. A connect
    /// (made again after a connection broke) runs on its own: a call that
    /// stops waiting for it at its own, shorter timeout does not stop it.
    /// After a failed connect the next waits 50 ms, doubling to 250 ms
    /// (jittered); calls to that master meanwhile fail at once.
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
    pub(crate) masters: Vec<String>,
    pub(crate) password: Option<(Option<String>, String)>,
    pub(crate) options: RedlockOptions,
    pub(crate) unfenced_accepted: bool,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))] // read only with TLS
    pub(crate) tls: bool,
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
    /// tried again when a call needs them, with back-off (see
    /// [`RedlockOptions::connect_timeout`]).
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
        crate::url::parse(url)?.connect().await
    }

    /// Connects to every master at once; fails unless a majority answered.
    pub(crate) async fn connect_all(&self) -> Result<()> {
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
                tracing::warn!(%failure, "a Redis master is unreachable; it is tried again as calls need it, with back-off");
            }
            Ok(())
        })
        .await
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

#[cfg(test)]
mod tests {
    use super::*;

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
