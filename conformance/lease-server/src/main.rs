//! The Lease API test server on its own, over the etcd at the endpoints
//! given, for trying the Kubernetes backend (and `cargo run --example kube`)
//! where no cluster is at hand. It prints the `kube://` URL of a kubeconfig
//! that reaches it, and serves until interrupted (Ctrl-C).
//!
//! Usage: `tenure-lease-server [--refuse-patch] http://127.0.0.1:2379 [ENDPOINT...]`
//!
//! With `--refuse-patch`, every PATCH (server-side apply too) is answered
//! 415 UnsupportedMediaType, as by a server that takes no patch type
//! (`LeaseServer::refuse_patch`).

use std::process::ExitCode;

use tenure_lease_server::LeaseServer;

#[tokio::main]
async fn main() -> ExitCode {
    let mut endpoints: Vec<String> = std::env::args().skip(1).collect();
    let refuse_patch = endpoints.first().is_some_and(|a| a == "--refuse-patch");
    if refuse_patch {
        endpoints.remove(0);
    }
    if endpoints.is_empty() || endpoints.iter().any(|e| e.starts_with('-')) {
        eprintln!("usage: tenure-lease-server [--refuse-patch] ETCD_ENDPOINT [ETCD_ENDPOINT...]");
        return ExitCode::from(2);
    }
    let server = match LeaseServer::start(&endpoints).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("tenure-lease-server: cannot start over {endpoints:?}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if refuse_patch {
        server.refuse_patch();
    }
    let kubeconfig = match server.kubeconfig_file() {
        Ok(file) => file,
        Err(e) => {
            eprintln!("tenure-lease-server: cannot write a kubeconfig: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", kubeconfig.url());
    eprintln!(
        "tenure-lease-server: serving on {} over {endpoints:?}{}; Ctrl-C ends it",
        server.url(),
        if refuse_patch {
            ", every PATCH refused (415)"
        } else {
            ""
        }
    );
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
