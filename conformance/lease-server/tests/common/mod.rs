//! What the Lease API test server's tests share: a server over a real etcd,
//! its Leases' URL, and the answers' checks.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use tenure_lease_server::LeaseServer;
use tenure_testkit::harness::{Cluster, Topology};

pub struct Fixture {
    _cluster: Cluster,
    pub server: LeaseServer,
    pub http: reqwest::Client,
}

/// A Lease API test server over a one-node etcd of its own.
pub async fn fixture() -> Fixture {
    let cluster = Cluster::start(Topology::Etcd { nodes: 1 })
        .await
        .expect("etcd");
    let server = LeaseServer::start(&cluster.endpoints())
        .await
        .expect("lease server");
    Fixture {
        _cluster: cluster,
        server,
        http: reqwest::Client::new(),
    }
}

impl Fixture {
    /// The Leases of the `default` namespace, or the one named.
    pub fn url(&self, name: Option<&str>) -> String {
        let base = format!(
            "{}/apis/coordination.k8s.io/v1/namespaces/default/leases",
            self.server.url()
        );
        match name {
            Some(name) => format!("{base}/{name}"),
            None => base,
        }
    }

    pub async fn get(&self, name: &str) -> (u16, Value) {
        answer_of(self.http.get(self.url(Some(name)))).await
    }
}

/// The status and JSON body `request` is answered with.
pub async fn answer_of(request: reqwest::RequestBuilder) -> (u16, Value) {
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// `answer` is a Status with `code` and `reason`.
pub fn assert_status(answer: &(u16, Value), code: u16, reason: &str) {
    assert_eq!(answer.0, code, "{}", answer.1);
    assert_eq!(answer.1["kind"], "Status", "{}", answer.1);
    assert_eq!(answer.1["code"], code, "{}", answer.1);
    assert_eq!(answer.1["reason"], reason, "{}", answer.1);
}

/// The directory where `conformance/peers/build.sh` put the Go peers and
/// kubectl (or `TENURE_PEERS_DIR`), if they are built; if not, says on
/// stderr that the test needing `program` is skipped and how to build it.
pub fn peers_dir(program: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TENURE_PEERS_DIR") {
        return Some(dir.into());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../peers/build.sh");
    let built = std::process::Command::new("bash")
        .arg(&script)
        .env("CHECK", "1")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if built.is_none() {
        // Written to stderr itself, past libtest's capture, so that the
        // skip shows in every run, not only with --nocapture.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {program} is not built; run conformance/peers/build.sh \
             (2 to 4 minutes the first time, cached after)"
        );
    }
    built
}
