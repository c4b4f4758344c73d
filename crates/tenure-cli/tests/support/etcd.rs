//! One etcd container for the whole test binary, started by the first test
//! that needs it and removed by `stop` at the end of `main`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::etcd::etcd_client::GetOptions;
use tenure::etcd::{EtcdBackend, EtcdOptions};
use tenure_testkit::harness::{Cluster, Topology};

/// Where the tests' elections live on the server.
const PREFIX: &str = "tenure-cli-test/";

pub struct Etcd {
    runtime: tokio::runtime::Runtime,
    /// A client of the test's own, to look at the server.
    inspector: EtcdBackend,
    /// `127.0.0.1:<port>`.
    pub endpoint: String,
    // Dropped last: removes the container.
    cluster: Cluster,
}

static SHARED: Mutex<Option<Arc<Etcd>>> = Mutex::new(None);

/// The shared etcd, started on first use.
pub fn shared() -> Arc<Etcd> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared
        .get_or_insert_with(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the harness");
            let (cluster, inspector) = runtime.block_on(async {
                let cluster = Cluster::start(Topology::Etcd { nodes: 1 })
                    .await
                    .expect("an etcd container");
                let inspector = EtcdBackend::connect(&cluster.endpoints(), EtcdOptions::default())
                    .await
                    .expect("a client of the test etcd");
                (cluster, inspector)
            });
            Arc::new(Etcd {
                endpoint: cluster.endpoints()[0].clone(),
                runtime,
                inspector,
                cluster,
            })
        })
        .clone()
}

/// Removes the container, if one was started (call it once every test is done).
pub fn stop() {
    let etcd = SHARED.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(etcd);
}

impl Etcd {
    /// The `--backend` URL of the tests' elections.
    pub fn url(&self) -> String {
        format!("etcd://{}/{PREFIX}", self.endpoint)
    }

    /// Freezes the server (`docker pause`) until the returned guard is dropped.
    pub fn pause(&self) -> Paused<'_> {
        self.runtime
            .block_on(self.cluster.pause(0))
            .expect("docker pause");
        Paused(self)
    }

    /// How many candidates (leader included) stand for `key`: etcd's
    /// election keeps one key per candidate under `<prefix><key>/`.
    pub fn candidates(&self, key: &str) -> usize {
        let prefix = format!("{PREFIX}{key}/");
        let kv = self.inspector.client().kv_client();
        self.runtime.block_on(async move {
            let mut kv = kv;
            let options = GetOptions::new().with_prefix().with_count_only();
            tokio::time::timeout(Duration::from_secs(5), kv.get(prefix, Some(options)))
                .await
                .ok()
                .and_then(Result::ok)
                .map_or(0, |answer| answer.count() as usize)
        })
    }
}

/// A paused server, thawed when dropped (also when the test fails).
pub struct Paused<'a>(&'a Etcd);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let etcd = self.0;
        if let Err(error) = etcd.runtime.block_on(etcd.cluster.unpause(0)) {
            eprintln!("cannot unpause the test etcd: {error}");
        }
    }
}
