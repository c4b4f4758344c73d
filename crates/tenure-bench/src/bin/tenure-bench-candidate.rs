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
//! - `kube-lease-manager+kube:///<kubeconfig>?...`: a kube-lease-manager
//!   `LeaseManager` in `watch()` mode (it renews itself), elected once its
//!   channel says so;
//! - `kube-coordinate+kube:///<kubeconfig>?...`: a kube-coordinate
//!   `LeaderElector` (it renews itself), elected once its state is Leading;
//! - any other: an Elector over `tenure::connect(URL)` (`memory+tcp://` is a
//!   client of a conformance front, for the bench's own tests).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tenure::LeaseBackend;
use tenure_conformance::process::candidate::{self, serve, Args, Commands, Out};
use tenure_conformance::process::clock::to_ns;
use tenure_conformance::process::protocol::{Command, Message, Status};
use tokio::time::Instant;

const ETCD_ELECTION: &str = "etcd-election+";
const RSLOCK: &str = "rslock+";
const LEASE_MANAGER: &str = "kube-lease-manager+";
const COORDINATE: &str = "kube-coordinate+";

/// The peers' settings, as the bench's in-process measures use them.
#[path = "../peers/kube_settings.rs"]
mod kube_settings;

/// Whether `url` names a peer rather than tenure.
fn is_peer(url: &str) -> bool {
    [ETCD_ELECTION, RSLOCK, LEASE_MANAGER, COORDINATE]
        .iter()
        .any(|p| url.starts_with(p))
}

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => exit(&e),
    };
    if !is_peer(&args.url) {
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

/// A peer, connected and ready to campaign.
enum Peer {
    /// etcd's election API: a client and a lease kept alive every TTL/3.
    EtcdElection {
        client: Box<etcd_client::Client>,
        lease: i64,
    },
    /// rslock's lock manager over the masters.
    Rslock(rslock::LockManager),
    /// kube-lease-manager's manager of the Lease.
    LeaseManager(Box<kube_lease_manager::LeaseManager>),
    /// A client for kube-coordinate's elector.
    Coordinate(tenure::kube::kube::Client),
}

/// A client of the kubeconfig a `kube:///<path>?...` URL names.
async fn kube_client(url: &str) -> Result<tenure::kube::kube::Client, String> {
    use tenure::kube::kube;
    let path = url
        .strip_prefix("kube://")
        .and_then(|rest| rest.split('?').next())
        .filter(|path| path.starts_with('/'))
        .ok_or_else(|| format!("{url:?}: not a kube:///<kubeconfig> URL"))?;
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

impl Peer {
    /// Connects (and, for etcd, grants and keeps alive the lease the
    /// campaign will use), before the candidate says it is ready.
    async fn connect(args: &Args) -> Result<Peer, String> {
        if let Some(url) = args.url.strip_prefix(ETCD_ELECTION) {
            let mut client = etcd_client::Client::connect(hosts(url)?, None)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let lease = client
                .lease_grant(args.ttl.as_secs().max(1) as i64, None)
                .await
                .map_err(|e| format!("lease grant: {e}"))?
                .id();
            let (mut keeper, mut answers) = client
                .lease_keep_alive(lease)
                .await
                .map_err(|e| format!("keep-alive: {e}"))?;
            let ttl = args.ttl;
            // The keep-alive task holds a client for as long as the process
            // runs, so its connection outlives the campaign's.
            let held = client.clone();
            tokio::spawn(async move {
                let _held = held;
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    if let Err(e) = keeper.keep_alive().await {
                        exit(&format!("keep-alive: {e}"));
                    }
                    match answers.message().await {
                        Ok(Some(_)) => {}
                        Ok(None) => exit("keep-alive: the stream ended"),
                        Err(e) => exit(&format!("keep-alive: {e}")),
                    }
                }
            });
            Ok(Peer::EtcdElection {
                client: Box::new(client),
                lease,
            })
        } else if let Some(url) = args.url.strip_prefix(RSLOCK) {
            let masters = hosts(url)?
                .into_iter()
                .map(|h| format!("redis://{h}"))
                .collect::<Vec<_>>();
            Ok(Peer::Rslock(rslock::LockManager::new(masters)))
        } else if let Some(url) = args.url.strip_prefix(LEASE_MANAGER) {
            let client = kube_client(url).await?;
            let manager =
                kube_settings::lease_manager(&client, &args.key, &args.identity, args.ttl)
                    .build()
                    .await
                    .map_err(|e| format!("LeaseManager: {e}"))?;
            Ok(Peer::LeaseManager(Box::new(manager)))
        } else if let Some(url) = args.url.strip_prefix(COORDINATE) {
            let client = kube_client(url).await?;
            kube_settings::coordinate(&args.key, &args.identity, args.ttl)
                .validate()
                .map_err(|e| e.to_string())?;
            Ok(Peer::Coordinate(client))
        } else {
            Err(format!("{:?}: not a peer's URL", args.url))
        }
    }

    /// Campaigns; returns once the peer leads, and keeps leading (renewing
    /// in the background) until the process is killed. A renewal that fails
    /// ends the process with status 2.
    async fn campaign(self, args: &Args) -> Result<(), String> {
        match self {
            Peer::EtcdElection { client, lease } => {
                client
                    .election_client()
                    .campaign(args.key.as_str(), args.identity.as_str(), lease)
                    .await
                    .map_err(|e| format!("campaign: {e}"))?;
                Ok(())
            }
            Peer::Rslock(manager) => {
                let ttl = args.ttl;
                let mut lock = manager
                    .acquire_no_guard(args.key.as_bytes(), ttl)
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
            Peer::LeaseManager(manager) => {
                // The task renews for as long as the channel is open: it
                // is kept for as long as the process runs.
                let (mut state, task) = manager.watch().await;
                state
                    .wait_for(|leads| *leads)
                    .await
                    .map_err(|_| "the LeaseManager's task ended".to_owned())?;
                tokio::spawn(async move {
                    let _kept = (state, task);
                    std::future::pending::<()>().await
                });
                Ok(())
            }
            Peer::Coordinate(client) => {
                let config = kube_settings::coordinate(&args.key, &args.identity, args.ttl);
                let handle = kube_coordinate::LeaderElector::spawn(config, client)
                    .map_err(|e| format!("LeaderElector: {e}"))?;
                handle
                    .state()
                    .wait_for(kube_coordinate::LeaderState::is_leader)
                    .await
                    .map_err(|_| "the LeaderElector's task ended".to_owned())?;
                tokio::spawn(async move {
                    let _kept = handle;
                    std::future::pending::<()>().await
                });
                Ok(())
            }
        }
    }
}

/// When the peer was elected, and its TTL.
type Elected = Arc<Mutex<Option<(Instant, Duration)>>>;

/// A peer's answers to the driver's commands: `campaign` starts the peer's
/// campaign and `elected` follows once it leads. A peer cannot resign: it
/// is killed.
struct PeerCommands {
    peer: Option<Peer>,
    args: Args,
    out: Out,
    elected: Elected,
}

#[async_trait]
impl Commands for PeerCommands {
    async fn handle(&mut self, op: Command) -> Option<String> {
        match op {
            Command::Campaign => {
                let Some(peer) = self.peer.take() else {
                    return Some("a peer campaigns once".to_owned());
                };
                let (args, out, elected) =
                    (self.args.clone(), self.out.clone(), self.elected.clone());
                tokio::spawn(async move {
                    if let Err(e) = peer.campaign(&args).await {
                        exit(&e);
                    }
                    let at = Instant::now();
                    *elected.lock().unwrap() = Some((at, args.ttl));
                    let message = Message::Elected {
                        token: None,
                        at_ns: to_ns(at),
                        valid_until_ns: to_ns(at + args.ttl),
                    };
                    out.say(&message).await;
                });
                None
            }
            Command::Resign => Some("a peer does not resign: kill it".to_owned()),
            Command::Status | Command::Write | Command::Exit => None,
        }
    }

    async fn status(&self) -> Status {
        match *self.elected.lock().unwrap() {
            // Renewed in the background: valid for as long as it runs.
            Some((at, ttl)) => Status {
                leader: true,
                valid: true,
                token: None,
                valid_until_ns: Some(to_ns(at.max(Instant::now()) + ttl)),
            },
            None => Status::default(),
        }
    }
}

/// The protocol's candidate side for a peer: `ready` once connected, then
/// commands.
async fn serve_peer(args: Args) -> Result<(), String> {
    let peer = Some(Peer::connect(&args).await?);
    let out = Out::stdout();
    let mut commands = PeerCommands {
        peer,
        args,
        out: out.clone(),
        elected: Arc::default(),
    };
    serve(&out, &mut commands).await
}

/// `etcd://h:p,h:p/...?...` → `["h:p", "h:p"]`; credentials are refused
/// (the peers here connect without them).
fn hosts(url: &str) -> Result<Vec<String>, String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['/', '?']).next().unwrap_or("");
    if rest.contains('@') {
        return Err(format!("{url:?}: the peers take no credentials in the URL"));
    }
    Ok(rest
        .split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_split_from_urls() {
        assert_eq!(hosts("etcd://a:1,b:2").unwrap(), ["a:1", "b:2"]);
        assert_eq!(
            hosts("redis://a:1,b:2/p?allow_unfenced=true").unwrap(),
            ["a:1", "b:2"]
        );
        assert!(hosts("etcd://u:p@a:1").unwrap_err().contains("credentials"));
    }
}
