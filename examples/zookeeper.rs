//! Two candidates hand leadership over on a ZooKeeper server.
//!
//! Run: `cargo run --example zookeeper --features zookeeper -- 'zk://127.0.0.1:2181/tenure?tick_time=200ms'`
//! (the URL is the default; `tick_time` must be the server's tickTime;
//! see the README for a server to try it on).

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> tenure::Result<()> {
    support::run("zk://127.0.0.1:2181/tenure?tick_time=200ms").await
}
