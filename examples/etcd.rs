//! Two candidates hand leadership over on an etcd server.
//!
//! Run: `cargo run --example etcd --features etcd -- etcd://127.0.0.1:2379/tenure/`
//! (the URL is the default; see the README for a server to try it on).

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> tenure::Result<()> {
    support::run("etcd://127.0.0.1:2379/tenure/").await
}
