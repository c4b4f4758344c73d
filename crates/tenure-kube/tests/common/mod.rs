//! The Lease API test server over a 1-node etcd in a container, raw Lease
//! access, and a candidate that does what client-go's LeaderElector does,
//! for tenure-kube's own tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::chrono::Utc;
use kube::api::PostParams;
use kube::Api;
use tenure_conformance::harness::{Cluster, Topology};
use tenure_conformance::lease_server::{kube_config_for, LeaseServer};
use tenure_conformance::ProxyLink;
use tenure_core::{AcquireMode, Acquisition, Candidacy, CandidateId, ElectionKey, LeaseBackend};
use tenure_kube::{Fencing, KubeLeaseBackend, KubeOptions};
use tokio::time::Instant;

/// The TTL tenure candidates use, and the Go-style holders' leaseDurationSeconds.
pub const TTL: Duration = Duration::from_secs(2);

/// A Lease API test server over its own 1-node etcd.
pub struct Env {
    // Field order is drop order: the server before its etcd.
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
    Env { server, cluster }
}

impl Env {
    /// A tenure backend talking to the server directly.
    pub async fn backend(&self) -> Arc<KubeLeaseBackend> {
        self.backend_with(KubeOptions::default()).await
    }

    /// A tenure backend with `options`, talking to the server directly.
    pub async fn backend_with(&self, options: KubeOptions) -> Arc<KubeLeaseBackend> {
        let config = self.server.kube_config().await.expect("kubeconfig");
        Arc::new(
            KubeLeaseBackend::from_config(config, options)
                .await
                .expect("backend"),
        )
    }

    /// A tenure backend behind a fault proxy of its own.
    pub async fn proxied_backend(&self) -> (Arc<KubeLeaseBackend>, Arc<ProxyLink>) {
        self.proxied_backend_with(KubeOptions::default()).await
    }

    /// A tenure backend with `options`, behind a fault proxy of its own.
    pub async fn proxied_backend_with(
        &self,
        options: KubeOptions,
    ) -> (Arc<KubeLeaseBackend>, Arc<ProxyLink>) {
        let (link, addr) = ProxyLink::start(self.server.addr()).await.expect("proxy");
        let config = kube_config_for(addr).await.expect("kubeconfig");
        let backend = KubeLeaseBackend::from_config(config, options)
            .await
            .expect("backend");
        (Arc::new(backend), link)
    }

    /// The Lease API of namespace `default`, with no tenure in between.
    pub async fn raw(&self) -> Api<Lease> {
        let config = self.server.kube_config().await.expect("kubeconfig");
        Api::default_namespaced(kube::Client::try_from(config).expect("client"))
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
    Candidacy::new(
        ElectionKey::new(key).unwrap(),
        CandidateId::new(identity).unwrap(),
        TTL,
    )
    .unwrap()
}

/// Acquires once; panics unless granted.
pub async fn hold(backend: &KubeLeaseBackend, key: &str, who: &str) -> tenure_core::Lease {
    match backend
        .acquire(&candidacy(key, who), AcquireMode::Once)
        .await
        .unwrap()
    {
        Acquisition::Granted(lease) => lease,
        Acquisition::Held(h) => panic!("{key} held by {h:?}"),
    }
}

/// The spec of Lease `name`; panics if it is missing.
pub async fn spec(raw: &Api<Lease>, name: &str) -> LeaseSpec {
    raw.get(name)
        .await
        .expect("the Lease")
        .spec
        .expect("a spec")
}

pub fn now() -> MicroTime {
    MicroTime(Utc::now())
}

/// A Lease as client-go's LeaseLock writes it: every field of the record set.
pub fn go_lease(name: &str, holder: &str, duration_secs: i32, transitions: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(duration_secs),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }),
    }
}

/// What client-go's `LeaderElector` does with a `LeaseLock`, step by step:
/// `tryAcquireOrRenew` (GET, judge the holder by this candidate's own clock
/// from when it last saw the record change, then create or PUT with the
/// observed resourceVersion) and `release` (PUT an empty holder with
/// leaseDurationSeconds 1, transitions kept).
pub struct GoCandidate {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration_secs: i32,
    /// The Lease as last read or written (its resourceVersion is the CAS).
    lease: Option<Lease>,
    /// The record last seen and when this candidate first saw it (client-go's
    /// `observedRecord` / `observedTime`).
    observed: Option<(LeaseSpec, Instant)>,
}

impl GoCandidate {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration_secs: i32) -> GoCandidate {
        GoCandidate {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration_secs,
            lease: None,
            observed: None,
        }
    }

    /// Creates the Lease held by this candidate with `transitions`, as a
    /// client-go replica that has led this election before would have left it.
    pub async fn create_held(&mut self, transitions: i32) {
        let lease = go_lease(&self.name, &self.identity, self.duration_secs, transitions);
        let written = self
            .api
            .create(&PostParams::default(), &lease)
            .await
            .expect("create the Lease");
        self.observe(&written);
        self.lease = Some(written);
    }

    /// The Lease as this candidate last read or wrote it.
    pub fn last(&self) -> &Lease {
        self.lease.as_ref().expect("a Lease read or written")
    }

    fn observe(&mut self, lease: &Lease) {
        let spec = lease.spec.clone().unwrap_or_default();
        if self.observed.as_ref().map(|(s, _)| s) != Some(&spec) {
            self.observed = Some((spec, Instant::now()));
        }
    }

    /// client-go's `IsLeader`: the observed record names this candidate.
    pub fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|(s, _)| s.holder_identity.as_deref() == Some(&self.identity))
    }

    /// client-go's `isLeaseValid`: observed time + the record's duration is still ahead.
    fn observed_valid(&self) -> bool {
        self.observed.as_ref().is_some_and(|(s, at)| {
            let secs = s.lease_duration_seconds.unwrap_or(0).max(0) as u64;
            *at + Duration::from_secs(secs) > Instant::now()
        })
    }

    /// client-go's `tryAcquireOrRenew`: whether this candidate leads after it.
    pub async fn try_acquire_or_renew(&mut self) -> bool {
        let Some(current) = self.api.get_opt(&self.name).await.expect("GET the Lease") else {
            let lease = go_lease(&self.name, &self.identity, self.duration_secs, 0);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    self.observe(&written);
                    self.lease = Some(written);
                    true
                }
                Err(_) => false,
            };
        };
        self.observe(&current);
        let old = current.spec.clone().unwrap_or_default();
        let held = old
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty());
        if held && self.observed_valid() && !self.is_leader() {
            return false;
        }
        let mut next = current.clone();
        let spec = next.spec.get_or_insert_with(Default::default);
        let now = now();
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_secs);
        spec.renew_time = Some(now.clone());
        if !self.is_leader() {
            spec.acquire_time = Some(now);
            spec.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + 1);
        }
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                self.observe(&written);
                self.lease = Some(written);
                true
            }
            Err(kube::Error::Api(e)) if e.code == 409 => false,
            Err(e) => panic!("PUT the Lease: {e}"),
        }
    }

    /// Renews from the Lease it last wrote (client-go's fast path for a
    /// leader): PUT with that resourceVersion; whether it still leads.
    pub async fn renew(&mut self) -> bool {
        let mut next = self.lease.clone().expect("a Lease to renew");
        next.spec.get_or_insert_with(Default::default).renew_time = Some(now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                self.observe(&written);
                self.lease = Some(written);
                true
            }
            Err(kube::Error::Api(e)) if e.code == 409 => false,
            Err(e) => panic!("PUT the Lease: {e}"),
        }
    }

    /// client-go's `release`: empty holder, leaseDurationSeconds 1, acquire
    /// and renew time now, transitions as observed.
    pub async fn release(&mut self) {
        assert!(self.is_leader(), "client-go releases only while it leads");
        let mut next = self.lease.clone().expect("a Lease to release");
        let spec = next.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now());
        spec.renew_time = Some(now());
        let written = self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
            .expect("PUT the released Lease");
        self.observe(&written);
        self.lease = Some(written);
    }
}
