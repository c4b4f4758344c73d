//! `tenure-bench-candidate URL KEY IDENTITY TTL_MS`: one candidate of the
//! bench's crash-failover measure, in a process of its own, driven over the
//! conformance suite's process protocol
//! (`tenure_conformance::process::protocol`: JSON lines, `ready`, a
//! `campaign` command, `elected` once it leads), as the suite's own
//! `tenure-candidate` is. The bench kills the leader with SIGKILL and times
//! the standby's `elected`.
//!
//! The URL's scheme picks the client:
//! - `etcd-election+etcd://h:p,...`: etcd's server-side election API
//!   (etcd-client's `ElectionClient`), its lease kept alive every TTL/3;
//! - `rslock+redis://h:p,...`: the rslock crate (`acquire` loops until
//!   locked, then `extend` every TTL/3);
//! - any other: an Elector over `tenure::connect(URL)` (`memory+tcp://` is a
//!   client of a conformance front, for the bench's own tests).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tenure::LeaseBackend;
use tenure_conformance::process::candidate::{self, Args};
use tenure_conformance::process::clock::to_ns;
use tenure_conformance::process::protocol::{Command, Message, Request, Status};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

const ETCD_ELECTION: &str = "etcd-election+";
const RSLOCK: &str = "rslock+";

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => exit(&e),
    };
    if !args.url.starts_with(ETCD_ELECTION) && !args.url.starts_with(RSLOCK) {
        // tenure itself: the suite's own candidate, over tenure::connect.
        candidate::main_with(connect);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| exit(&e.to_string()));
    if let Err(e) = runtime.block_on(serve_peer(args)) {
        exit(&e);
    }
}

fn exit(why: &str) -> ! {
    eprintln!("tenure-bench-candidate: {why}");
    std::process::exit(2)
}

/// tenure's backend for `url`; `memory+tcp://` and `memory:` as the suite's
/// candidate reads them.
fn connect(url: String) -> BoxFuture<'static, tenure::Result<Arc<dyn LeaseBackend>>> {
    if url.starts_with("memory") {
        return tenure_conformance::process::connect::connect(url);
    }
    Box::pin(async move { tenure::connect(&url).await })
}

/// A peer's campaign: returns once it leads, then keeps leading (renewing
/// in the background) until the process is killed.
async fn campaign(args: &Args) -> Result<(), String> {
    if let Some(url) = args.url.strip_prefix(ETCD_ELECTION) {
        etcd_election(url, &args.key, &args.identity, args.ttl).await
    } else if let Some(url) = args.url.strip_prefix(RSLOCK) {
        rslock(url, &args.key, args.ttl).await
    } else {
        Err(format!("{:?}: not a peer's URL", args.url))
    }
}

/// When the peer was elected, and until when its lease runs.
type Elected = Arc<Mutex<Option<(Instant, Duration)>>>;

/// The protocol's candidate side for a peer: `ready`, then commands;
/// `campaign` starts the peer's campaign and `elected` follows once it
/// leads. A peer cannot resign: it is killed.
async fn serve_peer(args: Args) -> Result<(), String> {
    let out = Arc::new(tokio::sync::Mutex::new(tokio::io::stdout()));
    let elected: Elected = Arc::default();
    say(
        &out,
        &Message::Ready {
            pid: std::process::id(),
        },
    )
    .await;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let request: Request =
            serde_json::from_str(&line).map_err(|e| format!("bad command {line:?}: {e}"))?;
        let error = match request.op {
            Command::Campaign => {
                let (args, out, elected) = (args.clone(), out.clone(), elected.clone());
                tokio::spawn(async move {
                    let leads = async {
                        let done = campaign(&args).await;
                        let at = Instant::now();
                        *elected.lock().unwrap() = Some((at, args.ttl));
                        done
                    };
                    match leads.await {
                        Ok(()) => {
                            let at = elected.lock().unwrap().map(|(at, _)| at);
                            let at = at.unwrap_or_else(Instant::now);
                            let message = Message::Elected {
                                token: None,
                                at_ns: to_ns(at),
                                valid_until_ns: to_ns(at + args.ttl),
                            };
                            say(&out, &message).await;
                        }
                        Err(e) => exit(&format!("campaign: {e}")),
                    }
                });
                None
            }
            Command::Resign => Some("a peer does not resign: kill it".to_owned()),
            Command::Status | Command::Write | Command::Exit => None,
        };
        let status = match *elected.lock().unwrap() {
            Some((at, ttl)) => Status {
                leader: true,
                valid: Instant::now() < at + ttl,
                token: None,
                valid_until_ns: Some(to_ns(at + ttl)),
            },
            None => Status::default(),
        };
        let reply = Message::Reply {
            id: request.id,
            error,
            status,
        };
        say(&out, &reply).await;
        if request.op == Command::Exit {
            break;
        }
    }
    Ok(())
}

async fn say(out: &tokio::sync::Mutex<tokio::io::Stdout>, message: &Message) {
    let mut line = serde_json::to_string(message).expect("messages serialize");
    line.push('\n');
    let mut out = out.lock().await;
    let _ = out.write_all(line.as_bytes()).await;
    let _ = out.flush().await;
}

/// `etcd://h:p,h:p/...?...` → `["h:p", "h:p"]`.
fn hosts(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['/', '?']).next().unwrap_or("");
    rest.split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn etcd_election(url: &str, key: &str, id: &str, ttl: Duration) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_owned();
        move |e: etcd_client::Error| format!("{what}: {e}")
    };
    let mut client = etcd_client::Client::connect(hosts(url), None)
        .await
        .map_err(e("connect"))?;
    let lease = client
        .lease_grant(ttl.as_secs().max(1) as i64, None)
        .await
        .map_err(e("lease grant"))?;
    let (mut keeper, mut answers) = client
        .lease_keep_alive(lease.id())
        .await
        .map_err(e("keep-alive"))?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 3).await;
            if keeper.keep_alive().await.is_err() || answers.message().await.is_err() {
                return;
            }
        }
    });
    client
        .election_client()
        .campaign(key, id, lease.id())
        .await
        .map_err(e("campaign"))?;
    Ok(())
}

async fn rslock(url: &str, key: &str, ttl: Duration) -> Result<(), String> {
    let masters: Vec<String> = hosts(url)
        .into_iter()
        .map(|h| format!("redis://{h}"))
        .collect();
    let manager = rslock::LockManager::new(masters);
    let mut lock = manager
        .acquire_no_guard(key.as_bytes(), ttl)
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 3).await;
            match manager.extend(&lock, ttl).await {
                Ok(extended) => lock = extended,
                Err(e) => exit(&format!("extend: {e}")),
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_split_from_urls() {
        assert_eq!(hosts("etcd://a:1,b:2"), ["a:1", "b:2"]);
        assert_eq!(
            hosts("redis://a:1,b:2/p?allow_unfenced=true"),
            ["a:1", "b:2"]
        );
    }
}
