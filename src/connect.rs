//! One entry point for every backend: a client from a URL.

use std::sync::Arc;

use tenure_core::backend_url::redacted;
use tenure_core::{Error, LeaseBackend, MemoryBackend, Result};

/// A backend client from a URL. Every backend's URL has one grammar
/// ([`tenure_core::backend_url`]):
///
/// ```text
/// scheme://[user:password@]host[:port][,host[:port]...][/path][?name=value&...]
/// ```
///
/// user and password percent-encoded where needed (`p%40ss` for `p@ss`;
/// never shown in errors), hosts separated by commas, durations written
/// `500ms` or `2s`, no parameter unknown to the backend or given twice. By
/// scheme:
///
/// | URL | backend (cargo feature) | path | parameters |
/// |---|---|---|---|
/// | `memory://` | an in-process memory server of its own (tests, demos) | | |
/// | `etcd://[user:pw@]h[:2379][,...][/prefix/]` | etcd (`etcd`); user:pw is etcd auth | key prefix, a directory | `request_timeout`, `connect_timeout`; `tls=true`, `ca=`, `cert=`, `key=` |
/// | `etcds://...` | etcd over TLS (`etcd-tls`) | as etcd | as etcd |
/// | `zk://[user:pw@]h[:2181][,...][/base]` | ZooKeeper (`zookeeper`); user:pw is digest auth | base path | `session_timeout`, `tick_time`, `request_timeout` |
/// | `kube://[/path/to/kubeconfig]` | Kubernetes Leases (`kube`); TLS and auth come from the kubeconfig (default kubeconfig, else in-cluster) | kubeconfig file | `namespace`, `context`, `fencing` |
/// | `redis://[user:pw@]h[:6379][,...][/prefix]` | Redlock over 1, 3 or 5 independent masters (`redis`) | key prefix | `allow_unfenced=true` (required: it cannot fence), `node_timeout_fraction`, `connect_timeout`, `watch_poll` |
///
/// Each backend's `connect_url` documents its parameters. A URL whose
/// scheme is unknown, or whose backend's cargo feature is off, is an
/// [`Error::InvalidArgument`] naming `url` (and the feature), before any
/// connection is tried; so is a malformed one (the backend's checks).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// let backend = tenure::connect("memory://").await?;
/// let elector = tenure::Elector::builder(backend).key("billing").build()?;
/// # let _ = elector; Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<Arc<dyn LeaseBackend>> {
    match scheme(url)? {
        "memory" => Ok(Arc::new(MemoryBackend::new())),
        "etcd" | "etcds" => etcd(url).await,
        "zk" => zookeeper(url).await,
        "kube" => kube(url).await,
        "redis" | "rediss" => redis(url).await,
        other => Err(Error::invalid(
            "url",
            format!(
                "{:?}: unknown scheme {other:?}; expected memory://, etcd://, etcds://, zk://, kube://, redis:// or rediss://",
                redacted(url)
            ),
        )),
    }
}

/// The scheme of `url`: what comes before `://`.
fn scheme(url: &str) -> Result<&str> {
    match url.split_once("://") {
        Some((scheme, _)) if !scheme.is_empty() => Ok(scheme),
        _ => Err(Error::invalid(
            "url",
            format!(
                "{:?} has no scheme; expected memory://, etcd://, etcds://, zk://, kube://, redis:// or rediss://",
                redacted(url)
            ),
        )),
    }
}

/// The error for a URL whose backend was not compiled in.
#[allow(dead_code)] // unused when every backend feature is on
fn feature_off(url: &str, feature: &str) -> Error {
    Error::invalid(
        "url",
        format!(
            "{:?} needs tenure's cargo feature `{feature}`, which is off",
            redacted(url)
        ),
    )
}

/// `async fn $name(url)`: a client of the backend `$client` (a type with
/// `connect_url`) when tenure's cargo feature `$feature` is on, else the
/// error that says it is off.
macro_rules! connect_with {
    ($name:ident, $feature:literal, $client:path) => {
        async fn $name(url: &str) -> Result<Arc<dyn LeaseBackend>> {
            #[cfg(feature = $feature)]
            return Ok(Arc::new(<$client>::connect_url(url).await?));
            #[cfg(not(feature = $feature))]
            return Err(feature_off(url, $feature));
        }
    };
}

connect_with!(etcd, "etcd", tenure_etcd::EtcdBackend);
connect_with!(zookeeper, "zookeeper", tenure_zookeeper::ZooKeeperBackend);
connect_with!(kube, "kube", tenure_kube::KubeBackend);
connect_with!(redis, "redis", tenure_redis::RedisBackend);

#[cfg(test)]
mod tests {
    use super::*;

    fn field_and_message(error: Error) -> (&'static str, String) {
        let message = error.to_string();
        match error {
            Error::InvalidArgument { field, .. } => (field, message),
            other => panic!("expected InvalidArgument, got {other}"),
        }
    }

    #[tokio::test]
    async fn memory_urls_connect() {
        let backend = connect("memory://").await.unwrap();
        assert_eq!(backend.name(), "memory");
    }

    #[tokio::test]
    async fn unknown_or_missing_schemes_name_the_url() {
        for url in ["redis2://h:1", "localhost:2379", "://x", ""] {
            let (field, message) = field_and_message(connect(url).await.err().unwrap());
            assert_eq!(field, "url", "{url}");
            assert!(message.contains("expected memory://"), "{url}: {message}");
        }
    }

    #[test]
    fn a_backend_compiled_out_is_named_by_its_feature() {
        let (field, message) = field_and_message(feature_off("zk://h:1", "zookeeper"));
        assert_eq!(field, "url");
        assert!(message.contains("`zookeeper`"), "{message}");
    }

    #[cfg(not(feature = "etcd"))]
    #[tokio::test]
    async fn an_etcd_url_without_the_etcd_feature_names_it() {
        let (_, message) = field_and_message(connect("etcd://h:2379").await.err().unwrap());
        assert!(message.contains("`etcd`"), "{message}");
    }

    #[cfg(feature = "etcd")]
    #[tokio::test]
    async fn an_etcd_url_reaches_the_etcd_backend_and_its_checks() {
        // A malformed etcd URL is refused by the etcd backend, before any connection.
        let (field, message) = field_and_message(connect("etcd://").await.err().unwrap());
        assert_eq!(field, "url");
        assert!(message.contains("names no etcd endpoint"), "{message}");
    }

    #[tokio::test]
    async fn a_password_in_a_refused_url_is_hidden() {
        for url in ["nope://u:s3cret@h:1", "u:s3cret@h:1"] {
            let (_, message) = field_and_message(connect(url).await.err().unwrap());
            assert!(!message.contains("s3cret"), "{message}");
        }
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_redis_url_without_the_opt_in_is_refused_naming_allow_unfenced() {
        let (field, message) = field_and_message(connect("redis://h:6379").await.err().unwrap());
        assert_eq!(field, "allow_unfenced");
        assert!(message.contains("allow_unfenced=true"), "{message}");
    }

    #[cfg(not(feature = "redis"))]
    #[tokio::test]
    async fn a_redis_url_without_the_redis_feature_names_it() {
        let (_, message) = field_and_message(
            connect("redis://h:6379?allow_unfenced=true")
                .await
                .err()
                .unwrap(),
        );
        assert!(message.contains("`redis`"), "{message}");
    }
}
