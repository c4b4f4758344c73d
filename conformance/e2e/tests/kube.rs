//! The conformance suite on the Kubernetes Lease backend, against the Lease
//! API test server over a 1-node and a 3-node etcd; each client reaches the
//! test server through its own fault proxy, and candidate processes through
//! one of their own. Reports: `target/conformance/kube-1node.md` and
//! `target/conformance/kube-3node.md`.
//!
//! With `TENURE_KUBECONFIG` set (a kubeconfig for a real cluster; the
//! namespace is `TENURE_KUBE_NAMESPACE`, default `default`) the suite runs
//! once against that cluster instead (`target/conformance/kube-cluster.md`):
//! every key is new to the run, clients still get fault proxies (TLS passes
//! through them: the client checks the API server's name, not the proxy's),
//! and the cases that fault the servers or count their writes skip.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tenure_conformance::{BackendFactory, ServerFaults, Target};
use tenure_core::{CandidateId, ElectionKey, Error, LeaseBackend, Result};
use tenure_kube::{kube, KubeBackend, KubeOptions};
use tenure_lease_server::{
    etcd_client_for_tests, kube_config_for, kube_url, KubeconfigFile, LeaseServer,
};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_testkit::{
    harness_error, ClusterServers, Deployment, ProxyLink, Upstreams, THREE_NODE_CASES,
};

/// The variable naming a real cluster's kubeconfig.
pub(crate) const KUBECONFIG_VAR: &str = "TENURE_KUBECONFIG";
/// The variable naming the namespace on it.
const NAMESPACE_VAR: &str = "TENURE_KUBE_NAMESPACE";

/// What the suite runs against.
enum ApiServer {
    /// The Lease API test server over a harness etcd cluster.
    TestServer {
        _cluster: Arc<Cluster>,
        servers: ClusterServers,
        server: LeaseServer,
        /// A client of the etcd under `server`, for looking without a request to it.
        etcd: Box<etcd_client::Client>,
        /// The kubeconfig candidate processes use: it reaches the server
        /// through `_candidate_link`.
        candidate_kubeconfig: KubeconfigFile,
        _candidate_link: Arc<ProxyLink>,
    },
    /// A real cluster from `TENURE_KUBECONFIG`.
    Real {
        config: Box<kube::Config>,
        kubeconfig: PathBuf,
        /// The API server's address, for the clients' proxies; `None` where
        /// the kubeconfig goes through an HTTP proxy already.
        upstream: Option<SocketAddr>,
    },
}

mod factory;

struct Kube {
    api_server: ApiServer,
    /// A client without a proxy, for looking at the server.
    inspector: KubeBackend,
}

/// The real cluster's kubeconfig, if `TENURE_KUBECONFIG` names one.
pub(crate) fn real_cluster() -> Option<PathBuf> {
    std::env::var_os(KUBECONFIG_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The factory named `name` over `api_server`, looked at with `inspector`.
fn deploy(
    name: &'static str,
    api_server: ApiServer,
    inspector: KubeBackend,
    version: Option<String>,
) -> Arc<dyn BackendFactory> {
    let capabilities = inspector.capabilities();
    let kube = Kube {
        api_server,
        inspector,
    };
    factory::over(name, kube, capabilities, version)
}

/// Whether the test server serves PATCH (kube_no_patch.rs, which includes
/// this file, runs the suite with it refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Patches {
    Served,
    /// Every PATCH answered 415 (`LeaseServer::refuse_patch`).
    #[allow(dead_code)]
    Refused,
}

pub(crate) async fn test_server(
    nodes: usize,
    name: &'static str,
    patches: Patches,
) -> Arc<dyn BackendFactory> {
    let cluster = Cluster::start(Topology::Etcd { nodes })
        .await
        .expect("etcd cluster");
    let server = LeaseServer::start(&cluster.endpoints())
        .await
        .expect("lease server");
    let etcd = Box::new(etcd_client_for_tests(&server).await.expect("etcd client"));
    let config = server.kube_config().await.expect("kubeconfig");
    let inspector = KubeBackend::from_config(config, KubeOptions::default())
        .await
        .expect("inspector client");
    if patches == Patches::Refused {
        server.refuse_patch();
        let patch = kube::api::Patch::Merge(serde_json::json!({}));
        match inspector
            .api()
            .patch("any", &Default::default(), &patch)
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 415 => {}
            other => panic!("a PATCH while refused was answered {other:?}, not 415"),
        }
    }
    let (candidate_link, addr) = ProxyLink::start(server.addr())
        .await
        .expect("candidates' proxy");
    let candidate_kubeconfig = KubeconfigFile::write(addr).expect("candidates' kubeconfig");
    let version = cluster
        .server_version()
        .await
        .ok()
        .map(|etcd| format!("the Lease API test server over {etcd}"));
    let cluster = Arc::new(cluster);
    let api_server = ApiServer::TestServer {
        servers: ClusterServers::new(cluster.clone()),
        _cluster: cluster,
        server,
        etcd,
        candidate_kubeconfig,
        _candidate_link: candidate_link,
    };
    deploy(name, api_server, inspector, version)
}

async fn real(kubeconfig: PathBuf, name: &'static str) -> Arc<dyn BackendFactory> {
    let kubeconfig = std::fs::canonicalize(&kubeconfig)
        .unwrap_or_else(|e| panic!("{KUBECONFIG_VAR}={}: {e}", kubeconfig.display()));
    let namespace = std::env::var(NAMESPACE_VAR)
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let url = kube_url(&kubeconfig, &namespace);
    let inspector = KubeBackend::connect_url(&url)
        .await
        .unwrap_or_else(|e| panic!("{KUBECONFIG_VAR}={}: {e}", kubeconfig.display()));
    let file = kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("the kubeconfig's current context");
    config.default_namespace = namespace;
    let upstream = upstream(&config)
        .await
        .unwrap_or_else(|e| panic!("{KUBECONFIG_VAR}={}: {e}", kubeconfig.display()));
    let version = inspector
        .api()
        .clone()
        .into_client()
        .apiserver_version()
        .await
        .ok()
        .map(|info| format!("Kubernetes {}", info.git_version));
    let api_server = ApiServer::Real {
        config: Box::new(config),
        kubeconfig,
        upstream,
    };
    deploy(name, api_server, inspector, version)
}

/// The address of `config`'s API server, for a fault proxy in front of it;
/// `None` where the kubeconfig already goes through an HTTP proxy.
async fn upstream(config: &kube::Config) -> Result<Option<SocketAddr>> {
    if config.proxy_url.is_some() {
        return Ok(None);
    }
    let url = &config.cluster_url;
    let https = url.scheme_str() == Some("https");
    let invalid = |why: &str| Error::invalid("cluster_url", format!("{url}: {why}"));
    let host = url.host().ok_or_else(|| invalid("no host"))?;
    let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare_host = host.trim_start_matches('[').trim_end_matches(']');
    let upstream = tokio::net::lookup_host((bare_host, port))
        .await
        .map_err(harness_error)?
        .next()
        .ok_or_else(|| invalid("the host resolves to no address"))?;
    Ok(Some(upstream))
}

/// `config` reaching its API server through the fault proxy at `proxy`.
/// TLS passes through the TCP proxy untouched: the client is told the API
/// server's name to check its certificate against.
fn through_proxy(config: &kube::Config, proxy: SocketAddr) -> Result<kube::Config> {
    let url = &config.cluster_url;
    let invalid = |why: &str| Error::invalid("cluster_url", format!("{url}: {why}"));
    let https = url.scheme_str() == Some("https");
    let mut proxied = config.clone();
    let path = url.path_and_query().map_or("", |p| p.as_str());
    let scheme = url.scheme_str().unwrap_or("https");
    proxied.cluster_url = format!("{scheme}://{proxy}{path}")
        .parse()
        .map_err(|_| invalid("cannot point it at the proxy"))?;
    if https && proxied.tls_server_name.is_none() {
        let host = url.host().ok_or_else(|| invalid("no host"))?;
        proxied.tls_server_name = Some(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        );
    }
    Ok(proxied)
}

#[async_trait]
impl Deployment for Kube {
    fn upstreams(&self) -> Upstreams {
        match &self.api_server {
            ApiServer::TestServer { server, .. } => Upstreams::Server(server.addr()),
            ApiServer::Real {
                upstream: Some(upstream),
                ..
            } => Upstreams::Server(*upstream),
            ApiServer::Real { upstream: None, .. } => Upstreams::Direct,
        }
    }

    async fn connect(&self, through: &[SocketAddr]) -> Result<Arc<dyn LeaseBackend>> {
        let config = match (&self.api_server, through.first()) {
            (ApiServer::TestServer { .. }, Some(&proxy)) => {
                kube_config_for(proxy).await.map_err(harness_error)?
            }
            (ApiServer::Real { config, .. }, Some(&proxy)) => through_proxy(config, proxy)?,
            (ApiServer::Real { config, .. }, None) => config.as_ref().clone(),
            (ApiServer::TestServer { .. }, None) => {
                unreachable!("the test server's clients go through a proxy")
            }
        };
        let backend = KubeBackend::from_config(config, KubeOptions::default()).await?;
        Ok(Arc::new(backend))
    }

    fn candidate_url(&self) -> String {
        match &self.api_server {
            ApiServer::TestServer {
                candidate_kubeconfig,
                ..
            } => candidate_kubeconfig.url(),
            ApiServer::Real { kubeconfig, .. } => kube_url(kubeconfig, self.inspector.namespace()),
        }
    }

    fn servers(&self) -> Option<&dyn ServerFaults> {
        match &self.api_server {
            ApiServer::TestServer { servers, .. } => Some(servers),
            // A real cluster's API servers and etcd are not ours to pause or kill.
            ApiServer::Real { .. } => None,
        }
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        match &self.api_server {
            ApiServer::TestServer { server, .. } => Some(Ok(server.writes())),
            // Other clients of a real cluster write too: no count to trust.
            ApiServer::Real { .. } => None,
        }
    }

    async fn server_requests(&self) -> Option<Result<u64>> {
        match &self.api_server {
            ApiServer::TestServer { server, .. } => Some(Ok(server.served())),
            ApiServer::Real { .. } => None,
        }
    }

    /// The test server's open watches of `key` from waiting candidates
    /// (tenure-kube says so in their User-Agent, with the candidate's
    /// identity), but the holder's: a candidate just granted closes its
    /// waiting watch, and the server hears of that a moment later. The
    /// holder is read from etcd, so the count is no request to the server.
    /// A real cluster does not tell.
    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        let ApiServer::TestServer { server, etcd, .. } = &self.api_server else {
            return None;
        };
        let ns = self.inspector.namespace();
        let stored = etcd
            .kv_client()
            .get(format!("/registry/leases/{ns}/{key}"), None)
            .await;
        let stored = match stored {
            Ok(stored) => stored,
            // A read: another try is safe. (Its connection may have been
            // closed by a case that restarted the etcd nodes: "operation
            // was canceled … connection closed".)
            Err(e) => {
                return Some(Err(Error::Unavailable {
                    backend: "harness",
                    source: Box::new(e),
                }))
            }
        };
        let holder = stored
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice::<serde_json::Value>(kv.value()).ok())
            .and_then(|lease| lease["spec"]["holderIdentity"].as_str().map(str::to_owned))
            .and_then(|holder| CandidateId::new(holder).ok())
            .map(|holder| tenure_kube::waiting_user_agent(&holder));
        let waiting = server
            .open_watches(ns, key.as_str())
            .into_iter()
            .filter(|(agent, _)| agent.starts_with("tenure-kube/") && agent.contains(" (waiting"))
            .filter(|(agent, _)| holder.as_ref() != Some(agent))
            .map(|(_, k)| k)
            .sum();
        Some(Ok(waiting))
    }

    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        Some(
            self.inspector
                .api()
                .get_opt(key.as_str())
                .await
                .map(|l| l.is_some())
                .map_err(harness_error),
        )
    }

    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        let deleted = self
            .inspector
            .api()
            .delete(key.as_str(), &Default::default())
            .await;
        Some(match deleted {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(harness_error(e)),
        })
    }

    async fn compact_history(&self) -> Option<Result<()>> {
        match &self.api_server {
            ApiServer::TestServer { server, .. } => {
                // It returns once the watches it ended are open again.
                Some(
                    server
                        .expire_watches()
                        .await
                        .map(drop)
                        .map_err(harness_error),
                )
            }
            // A real cluster's etcd is not ours to compact.
            ApiServer::Real { .. } => None,
        }
    }
}

/// A Lease's duration is the client's own: no server gives less than asked
/// for on a reconnect.
pub(crate) const SHRUNK: &str = "session_shrunk_on_reconnect_holder_stops_first";

/// The backend takes any TTL above its minimum: no maximum to go over.
pub(crate) const NO_MAX_TTL: &str = "ttl_above_backend_maximum_is_invalid_argument";

fn main() -> std::process::ExitCode {
    let targets = match real_cluster() {
        // A real cluster's servers are not ours to pause, kill or count.
        Some(path) => vec![
            Target::new("single", move || real(path.clone(), "kube-cluster")).expect_skips(&[
                "herd_writes_per_leadership_change",
                "servers_paused_longer_than_ttl_leader_steps_down",
                "servers_stopped_for_several_ttls_then_a_candidate_leads",
                "servers_leader_stopped_then_holder_frozen_a_candidate_leads",
                "server_node_killed_leader_survives_or_fails_over",
                "holders_server_node_paused_longer_than_ttl",
                "servers_leader_paused_longer_than_ttl",
                "standby_sees_failover_when_its_node_is_cut_off",
                "observer_sees_failover_when_its_node_is_cut_off",
                "cluster_restart_tokens_keep_increasing",
                "standby_waits_through_history_compaction",
                SHRUNK,
                NO_MAX_TTL,
            ]),
            Target::new("three", || async { unreachable!("unavailable") }).unavailable(format!(
                "{KUBECONFIG_VAR} is set: the suite runs once, on that cluster (single::)"
            )),
        ],
        None => vec![
            Target::new("single", || test_server(1, "kube-1node", Patches::Served))
                .expect_skips(THREE_NODE_CASES)
                .expect_skips(&[SHRUNK, NO_MAX_TTL]),
            // The candidates reach the Lease server, not an etcd node.
            Target::new("three", || test_server(3, "kube-3node", Patches::Served)).expect_skips(&[
                "holders_server_node_paused_longer_than_ttl",
                "standby_sees_failover_when_its_node_is_cut_off",
                "observer_sees_failover_when_its_node_is_cut_off",
                SHRUNK,
                NO_MAX_TTL,
            ]),
        ],
    };
    tenure_conformance::run_targets(targets)
}
