//! The Lease API test server on its own, over the etcd at the endpoints
//! given, for trying the Kubernetes backend (and `cargo run --example kube`)
//! where no cluster is at hand. It prints the `kube://` URL of a kubeconfig
//! that reaches it, and serves until interrupted (Ctrl-C).
//!
//! Usage: `tenure-lease-server http://127.0.0.1:2379 [ENDPOINT...]`

use std::process::ExitCode;

use tenure_lease_server::LeaseServer;

#[tokio::main]
async fn main() -> ExitCode {
    let endpoints: Vec<String> = std::env::args().skip(1).collect();
    if endpoints.is_empty() {
        eprintln!("usage: tenure-lease-server ETCD_ENDPOINT [ETCD_ENDPOINT...]");
        return ExitCode::from(2);
    }
    let server = match LeaseServer::start(&endpoints).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("tenure-lease-server: cannot start over {endpoints:?}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kubeconfig = match server.kubeconfig_file() {
        Ok(file) => file,
        Err(e) => {
            eprintln!("tenure-lease-server: cannot write a kubeconfig: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", kubeconfig.url());
    eprintln!(
        "tenure-lease-server: serving on {} over {endpoints:?}; Ctrl-C ends it",
        server.url()
    );
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
