//! The Lease API test server over a 1-node etcd in a container, raw Lease
//! access, and a candidate that does what client-go's LeaderElector does
//! (go.rs), for tenure-kube's own tests.
#![allow(dead_code)]

mod go;

#[allow(unused_imports)]
pub use go::{go_lease, GoCandidate, GoRecord};

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::chrono::{DateTime, Utc};
use kube::Api;
use tenure_core::{AcquireMode, Acquisition, Candidacy, LeaderInfo, LeaseBackend};
use tenure_kube::{Fencing, KubeBackend, KubeOptions};
use tenure_lease_server::{kube_config_for, LeaseServer};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_testkit::ProxyLink;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

/// The TTL tenure candidates use, and the Go-style holders' leaseDurationSeconds.
pub const TTL: Duration = Duration::from_secs(2);

/// A Lease API test server over its own 1-node etcd.
pub struct Env {
    // Field order is drop order: the client before the server, the server
    // before its etcd.
    /// The Lease API of namespace `default`, with no tenure in between.
    pub raw: Api<Lease>,
    pub server: LeaseServer,
    pub cluster: Cluster,
}

pub async fn env() -> Env {
    let cluster = Cluster::start(Topology::Etcd { nodes: 1 })
        .await
        .expect("etcd container");
    let server = LeaseServer::start(&cluster.endpoints())
        .await
        .expect("lease server");
    let config = server.kube_config().await.expect("kubeconfig");
    let raw = Api::default_namespaced(kube::Client::try_from(config).expect("client"));
    Env {
        raw,
        server,
        cluster,
    }
}

/// A Lease API test server and `N` tenure backends talking to it directly.
pub async fn env_with<const N: usize>() -> (Env, [Arc<KubeBackend>; N]) {
    let env = env().await;
    let mut backends = Vec::with_capacity(N);
    for _ in 0..N {
        backends.push(env.backend().await);
    }
    (env, backends.try_into().unwrap())
}

impl Env {
    /// A tenure backend talking to the server directly.
    pub async fn backend(&self) -> Arc<KubeBackend> {
        self.backend_with(KubeOptions::default()).await
    }

    /// A tenure backend with `options`, talking to the server directly.
    pub async fn backend_with(&self, options: KubeOptions) -> Arc<KubeBackend> {
        let config = self.server.kube_config().await.expect("kubeconfig");
        Arc::new(
            KubeBackend::from_config(config, options)
                .await
                .expect("backend"),
        )
    }

    /// A tenure backend behind a fault proxy of its own.
    pub async fn proxied_backend(&self) -> (Arc<KubeBackend>, Arc<ProxyLink>) {
        self.proxied_backend_with(KubeOptions::default()).await
    }

    /// A tenure backend with `options`, behind a fault proxy of its own.
    pub async fn proxied_backend_with(
        &self,
        options: KubeOptions,
    ) -> (Arc<KubeBackend>, Arc<ProxyLink>) {
        let (link, addr) = ProxyLink::start(self.server.addr()).await.expect("proxy");
        let config = kube_config_for(addr).await.expect("kubeconfig");
        let backend = KubeBackend::from_config(config, options)
            .await
            .expect("backend");
        (Arc::new(backend), link)
    }
}

/// Options choosing leaseTransitions as the fencing token.
pub fn lease_transitions() -> KubeOptions {
    let mut options = KubeOptions::default();
    options.fencing = Fencing::LeaseTransitions;
    options
}

/// The resourceVersion of `lease` as a number.
pub fn rv(lease: &Lease) -> u64 {
    lease
        .metadata
        .resource_version
        .as_deref()
        .expect("a resourceVersion")
        .parse()
        .expect("an integer resourceVersion")
}

pub fn candidacy(key: &str, identity: &str) -> Candidacy {
    Candidacy::parse(key, identity, TTL).unwrap()
}

/// One attempt for `key` as `who`: granted, or who holds it.
pub async fn try_acquire(backend: &KubeBackend, key: &str, who: &str) -> Acquisition {
    backend
        .acquire(&candidacy(key, who), AcquireMode::Once)
        .await
        .unwrap()
}

/// Acquires once; panics unless granted.
pub async fn hold(backend: &KubeBackend, key: &str, who: &str) -> tenure_core::Lease {
    match try_acquire(backend, key, who).await {
        Acquisition::Granted(lease) => lease,
        Acquisition::Held(h) => panic!("{key} held by {h:?}"),
    }
}

/// Acquires once; panics unless refused. Who holds `key`.
pub async fn held_by(backend: &KubeBackend, key: &str, who: &str) -> LeaderInfo {
    match try_acquire(backend, key, who).await {
        Acquisition::Held(holder) => holder,
        Acquisition::Granted(_) => panic!("{who} was granted {key}, which was held"),
    }
}

/// Holds `key` once and releases it: the Lease exists and is free, so
/// the next grant is a take-over.
pub async fn leave_free(backend: &KubeBackend, key: &str, who: &str) {
    let lease = hold(backend, key, who).await;
    backend.release(&lease).await.unwrap();
}

/// A waiting acquire in the background: its outcome, and when it came.
pub type Waiting = JoinHandle<(tenure_core::Result<Acquisition>, Instant)>;

/// Starts `who`'s waiting acquire of `key`.
pub fn wait_for_grant(backend: &Arc<KubeBackend>, key: &str, who: &str) -> Waiting {
    wait_with(backend, candidacy(key, who))
}

/// Starts a waiting acquire of `wants`.
pub fn wait_with(backend: &Arc<KubeBackend>, wants: Candidacy) -> Waiting {
    let backend = backend.clone();
    tokio::spawn(async move {
        let outcome = backend.acquire(&wants, AcquireMode::Wait).await;
        (outcome, Instant::now())
    })
}

/// The lease `waiting` was granted within `limit` (else panics saying
/// `what`), and when.
pub async fn granted_within(
    limit: Duration,
    waiting: Waiting,
    what: &str,
) -> (tenure_core::Lease, Instant) {
    let (outcome, at) = timeout(limit, waiting).await.expect(what).unwrap();
    let lease = outcome
        .expect("the waiting acquire")
        .granted()
        .expect("granted");
    (lease, at)
}

/// The spec of Lease `name`; panics if it is missing.
pub async fn spec(raw: &Api<Lease>, name: &str) -> LeaseSpec {
    raw.get(name)
        .await
        .expect("the Lease")
        .spec
        .expect("a spec")
}

/// Sleeps until the wall clock is `fraction` into the second `second`
/// (Unix time), and returns that second. Only the wall clock decides which
/// of a Lease's renewals a client-go peer can tell apart, so this waits on
/// it, not on an event.
pub async fn wall_clock_at(second: i64, fraction: Duration) -> i64 {
    let target = DateTime::from_timestamp(second, fraction.subsec_nanos()).unwrap();
    while Utc::now() < target {
        let left = (target - Utc::now()).to_std().unwrap_or_default();
        sleep(left.max(Duration::from_millis(1))).await;
    }
    second
}
