//! `tenure-bench candidate KIND URL KEY TTL_MS`: one candidate in its own
//! process, for crash failover. It prints `ready` once connected and
//! `leading` once it leads, then holds (renewing) until it is killed.
//!
//! Kinds: `tenure` (an Elector over `tenure::connect(URL)`),
//! `etcd-election` (etcd's server-side election API through etcd-client's
//! `ElectionClient`, a lease kept alive every TTL/3), `rslock` (the rslock
//! crate: `acquire` loops until locked, then `extend` every TTL/3).

use std::io::Write;
use std::time::Duration;

use crate::deploy::{ctx, BenchResult};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs the candidate; returns only on an error.
/// Which client a candidate process runs.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Kind {
    /// tenure, on the URL's backend.
    Tenure,
    /// etcd's server-side election API (etcd-client's `ElectionClient`).
    EtcdElection,
    /// The rslock crate's Redlock.
    Rslock,
}

/// A candidate process: campaigns for `key`, says when it leads.
pub async fn main(kind: Kind, url: &str, key: &str, ttl_ms: u64) -> BenchResult<()> {
    let ttl = Duration::from_millis(ttl_ms);
    match kind {
        Kind::Tenure => tenure(url, key, ttl).await,
        Kind::EtcdElection => etcd_election(url, key, ttl).await,
        Kind::Rslock => rslock(url, key, ttl).await,
    }
}

async fn tenure(url: &str, key: &str, ttl: Duration) -> BenchResult<()> {
    let backend = ctx("connect", tenure::connect(url).await)?;
    let elector = ctx(
        "elector",
        tenure::Elector::builder(backend)
            .key(key)
            .identity(format!("p{}", std::process::id()))
            .ttl(ttl)
            .allow_unfenced()
            .build(),
    )?;
    say("ready");
    let leadership = ctx("campaign", elector.campaign().await)?;
    say("leading");
    let reason = leadership.term().lost().await;
    Err(format!("leadership lost: {reason}").into())
}

/// `etcd://h:p,h:p` → `["h:p", "h:p"]`.
pub fn hosts(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['/', '?']).next().unwrap_or("");
    rest.split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn etcd_election(url: &str, key: &str, ttl: Duration) -> BenchResult<()> {
    let mut client = ctx(
        "connect",
        etcd_client::Client::connect(hosts(url), None).await,
    )?;
    let lease = ctx(
        "lease grant",
        client.lease_grant(ttl.as_secs().max(1) as i64, None).await,
    )?;
    let (mut keeper, mut answers) = ctx("keep-alive", client.lease_keep_alive(lease.id()).await)?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 3).await;
            if keeper.keep_alive().await.is_err() || answers.message().await.is_err() {
                return;
            }
        }
    });
    say("ready");
    let id = format!("p{}", std::process::id());
    ctx(
        "campaign",
        client.election_client().campaign(key, id, lease.id()).await,
    )?;
    say("leading");
    std::future::pending::<()>().await;
    Ok(())
}

/// `redis://h:p,h:p?..` → one `redis://h:p` per master.
pub fn redis_uris(url: &str) -> Vec<String> {
    hosts(url)
        .into_iter()
        .map(|h| format!("redis://{h}"))
        .collect()
}

async fn rslock(url: &str, key: &str, ttl: Duration) -> BenchResult<()> {
    let manager = rslock::LockManager::new(redis_uris(url));
    say("ready");
    let mut lock = ctx(
        "acquire",
        manager.acquire_no_guard(key.as_bytes(), ttl).await,
    )?;
    say("leading");
    loop {
        tokio::time::sleep(ttl / 3).await;
        lock = ctx("extend", manager.extend(&lock, ttl).await)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_split_from_urls() {
        assert_eq!(hosts("etcd://a:1,b:2"), ["a:1", "b:2"]);
        assert_eq!(
            redis_uris("redis://a:1,b:2?allow_unfenced=true"),
            ["redis://a:1", "redis://b:2"]
        );
    }
}
