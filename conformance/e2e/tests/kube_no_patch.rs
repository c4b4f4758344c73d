//! The conformance suite on the Kubernetes Lease backend against the Lease
//! API test server with every PATCH refused (415 UnsupportedMediaType,
//! `LeaseServer::refuse_patch`), as a server or proxy that takes no patch
//! type answers: tenure-kube must keep every promise without PATCH or
//! server-side apply. One topology (a 1-node etcd): the refusal is the
//! Lease server's, before etcd is reached, and kube.rs runs both
//! topologies with PATCH served. Report: `target/conformance/kube-1node-no-patch.md`.
//!
//! The deployment is kube.rs's, included whole; its `main` goes unused.

#[path = "kube.rs"]
#[allow(dead_code)]
mod kube;

use kube::{real_cluster, test_server, Patches, KUBECONFIG_VAR, NO_MAX_TTL, SHRUNK};
use tenure_conformance::Target;
use tenure_testkit::THREE_NODE_CASES;

fn main() -> std::process::ExitCode {
    let target = Target::new("single", || {
        test_server(1, "kube-1node-no-patch", Patches::Refused)
    });
    let target = match real_cluster() {
        // A real cluster's API server is not ours to make refuse PATCH.
        Some(_) => target.unavailable(format!(
            "{KUBECONFIG_VAR} is set: a real cluster serves PATCH (kube.rs runs the suite on it)"
        )),
        None => target
            .expect_skips(THREE_NODE_CASES)
            .expect_skips(&[SHRUNK, NO_MAX_TTL]),
    };
    tenure_conformance::run_targets(vec![target])
}
