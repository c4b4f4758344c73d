//! Two candidates hand leadership over on a Kubernetes Lease.
//!
//! Run: `cargo run --example kube --features kube -- 'kube:///path/to/kubeconfig?namespace=default'`
//! (without an argument: `kube://`, the default kubeconfig or the
//! in-cluster service account). The credentials need get, create, update
//! and watch on `leases.coordination.k8s.io`.

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> tenure::Result<()> {
    support::run("kube://").await
}
