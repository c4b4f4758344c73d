//! `tenure-e2e-kube-peer URL KEY IDENTITY TTL_MS`: a candidate of another
//! Rust crate for leader election on Kubernetes Leases, driven over the
//! conformance suite's process protocol (`tenure_conformance::process`) as
//! `tenure-e2e-candidate` is, for the mixed elections of
//! `tests/kube_mixed.rs`.
//!
//! The URL picks the crate, then names the kubeconfig as tenure's `kube://`
//! URLs do:
//! - `kube-lease-manager+kube:///<kubeconfig>?namespace=<ns>`: a
//!   `LeaseManager` (duration TTL_MS in whole seconds, grace 1 s) in its
//!   `watch()` mode;
//! - `kube-coordinate+kube:///<kubeconfig>?namespace=<ns>`: a
//!   `LeaderElector` with lease_duration TTL, renew_deadline 2/3 of it,
//!   retry_period 1 s and api_timeout 1 s (the least it takes), in the
//!   proportions of its defaults (15 s, 10 s, 2 s, 5 s): renew_deadline +
//!   api_timeout = lease_duration where the TTL is 3 s.
//!
//! `campaign` starts the crate's loop; `elected` and `lost` report the
//! crate's own "am I leader" state (kube-lease-manager's watch channel,
//! kube-coordinate's `LeaderState` channel) each time it changes, stamped
//! on the shared monotonic clock. Neither crate gives its leadership a
//! deadline, so `elected` carries a nominal one (TTL after) and `lost`
//! ends the belief. `resign`: kube-lease-manager's channel is dropped (it
//! releases the Lease); kube-coordinate's task is shut down (it has no
//! release: the Lease is left to expire).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kube_coordinate::{LeaderElector, LeaderElectorHandle, LeaderState};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tenure_conformance::process::candidate::{serve, Args, Commands, Out};
use tenure_conformance::process::clock::now_ns;
use tenure_conformance::process::protocol::{Command, Message, Status};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

const LEASE_MANAGER: &str = "kube-lease-manager+";
const COORDINATE: &str = "kube-coordinate+";

/// kube-lease-manager's grace: how long before its lease runs out a holder renews.
const GRACE_SECS: u64 = 1;

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => exit(&e),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| exit(&e.to_string()));
    if let Err(e) = runtime.block_on(run(args)) {
        exit(&e);
    }
}

fn exit(why: &str) -> ! {
    eprintln!("tenure-e2e-kube-peer: {why}");
    std::process::exit(2)
}

/// The kubeconfig path and namespace of a `kube:///<path>?namespace=<ns>` URL.
fn kubeconfig_of(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("kube://")
        .ok_or_else(|| format!("{url:?}: not a kube:// URL"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let namespace = query
        .split('&')
        .find_map(|p| p.strip_prefix("namespace="))
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    Ok((percent_decoded(path)?, namespace.to_owned()))
}

fn percent_decoded(text: &str) -> Result<String, String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' && tail.len() >= 2 {
            let hex = std::str::from_utf8(&tail[..2]).map_err(|e| e.to_string())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|e| format!("{text:?}: {e}"))?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

async fn client(url: &str) -> Result<(kube::Client, String), String> {
    let (path, namespace) = kubeconfig_of(url)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    Ok((client, namespace))
}

/// kube-coordinate's configuration for `args` (see the crate docs above).
fn coordinate_config(args: &Args, namespace: &str) -> kube_coordinate::Config {
    kube_coordinate::Config::default()
        .name(&args.key)
        .namespace(namespace)
        .identity(&args.identity)
        .manager("kube-coordinate")
        .lease_duration(args.ttl)
        .renew_deadline(args.ttl * 2 / 3)
        .retry_period(Duration::from_secs(1))
        .api_timeout(Duration::from_secs(1))
}

/// A peer's campaign in progress.
enum Running {
    /// kube-lease-manager's watch task, which returns the manager once its
    /// channel is dropped and it has released the Lease.
    LeaseManager(JoinHandle<kube_lease_manager::Result<LeaseManager>>),
    /// kube-coordinate's task.
    Coordinate(LeaderElectorHandle),
}

/// The peer's own "am I leader" state, as last reported.
type Leading = Arc<Mutex<bool>>;

struct PeerCommands {
    args: Args,
    client: kube::Client,
    namespace: String,
    /// kube-lease-manager's manager between campaigns.
    manager: Option<LeaseManager>,
    running: Option<(Running, oneshot::Sender<()>, JoinHandle<()>)>,
    leading: Leading,
    out: Out,
}

/// Reports each change of `state` (as `leads` reads it) until `stop`:
/// `elected` when it starts leading, `lost` when it stops, and `lost`
/// ("Resigned") if it leads when stopped. Drops `state` when it returns.
fn report<T: Send + Sync + 'static>(
    mut state: watch::Receiver<T>,
    leads: fn(&T) -> bool,
    leading: Leading,
    out: Out,
    ttl: Duration,
    mut stop: oneshot::Receiver<()>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let say = |now: bool, reason: &'static str| {
            let (out, leading) = (out.clone(), leading.clone());
            async move {
                let changed = {
                    let mut was = leading.lock().unwrap();
                    std::mem::replace(&mut *was, now) != now
                };
                if !changed {
                    return;
                }
                let at_ns = now_ns();
                let message = if now {
                    Message::Elected {
                        token: None,
                        at_ns,
                        valid_until_ns: at_ns + ttl.as_nanos() as u64,
                    }
                } else {
                    Message::Lost {
                        reason: reason.to_owned(),
                        at_ns,
                        valid_until_ns: at_ns,
                    }
                };
                out.say(&message).await;
            }
        };
        loop {
            let now = leads(&state.borrow_and_update());
            say(now, "NotLeader").await;
            tokio::select! {
                changed = state.changed() => if changed.is_err() { break },
                _ = &mut stop => break,
            }
        }
        say(false, "Resigned").await;
    })
}

impl PeerCommands {
    async fn campaign(&mut self) -> Result<(), String> {
        if self.running.is_some() {
            return Err("already campaigning".into());
        }
        let (stop_tx, stop) = oneshot::channel();
        let (leading, out, ttl) = (self.leading.clone(), self.out.clone(), self.args.ttl);
        let (running, reporter) = if self.args.url.starts_with(LEASE_MANAGER) {
            let manager = match self.manager.take() {
                Some(manager) => manager,
                None => LeaseManagerBuilder::new(self.client.clone(), &self.args.key)
                    .with_namespace(&self.namespace)
                    .with_identity(&self.args.identity)
                    .with_duration(self.args.ttl.as_secs().max(GRACE_SECS + 1))
                    .with_grace(GRACE_SECS)
                    .build()
                    .await
                    .map_err(|e| e.to_string())?,
            };
            let (state, task) = manager.watch().await;
            let reporter = report(state, |l| *l, leading, out, ttl, stop);
            (Running::LeaseManager(task), reporter)
        } else {
            let config = coordinate_config(&self.args, &self.namespace);
            let handle =
                LeaderElector::spawn(config, self.client.clone()).map_err(|e| e.to_string())?;
            let reporter = report(
                handle.state(),
                LeaderState::is_leader,
                leading,
                out,
                ttl,
                stop,
            );
            (Running::Coordinate(handle), reporter)
        };
        self.running = Some((running, stop_tx, reporter));
        Ok(())
    }

    async fn resign(&mut self) -> Result<(), String> {
        let (running, stop, reporter) = self.running.take().ok_or("not campaigning")?;
        // The belief ends first (the reporter says `lost` and drops its
        // channel), then the crate steps down its own way.
        let _ = stop.send(());
        reporter.await.map_err(|e| e.to_string())?;
        match running {
            Running::LeaseManager(task) => {
                let manager = task.await.map_err(|e| e.to_string())?;
                self.manager = Some(manager.map_err(|e| e.to_string())?);
            }
            Running::Coordinate(handle) => handle.shutdown().await.map_err(|e| e.to_string())?,
        }
        Ok(())
    }
}

#[async_trait]
impl Commands for PeerCommands {
    async fn handle(&mut self, op: Command) -> Option<String> {
        match op {
            Command::Campaign => self.campaign().await.err(),
            Command::Resign => self.resign().await.err(),
            Command::Write => Some("a peer has no fencing token to write with".into()),
            Command::Status | Command::Exit => None,
        }
    }

    async fn status(&self) -> Status {
        let leading = *self.leading.lock().unwrap();
        Status {
            leader: leading,
            valid: leading,
            token: None,
            valid_until_ns: None,
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let url = args
        .url
        .strip_prefix(LEASE_MANAGER)
        .or_else(|| args.url.strip_prefix(COORDINATE))
        .ok_or_else(|| format!("{:?}: not a peer's URL", args.url))?;
    let (client, namespace) = client(url).await?;
    if args.url.starts_with(COORDINATE) {
        coordinate_config(&args, &namespace)
            .validate()
            .map_err(|e| e.to_string())?;
    }
    let out = Out::stdout();
    let mut commands = PeerCommands {
        args,
        client,
        namespace,
        manager: None,
        running: None,
        leading: Arc::default(),
        out: out.clone(),
    };
    serve(&out, &mut commands).await?;
    if commands.running.is_some() {
        commands.resign().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::kubeconfig_of;

    #[test]
    fn kube_urls_name_a_kubeconfig_and_a_namespace() {
        assert_eq!(
            kubeconfig_of("kube:///tmp/a%20b.yaml?namespace=ns").unwrap(),
            ("/tmp/a b.yaml".to_owned(), "ns".to_owned())
        );
        assert_eq!(
            kubeconfig_of("kube:///tmp/k.yaml").unwrap().1,
            "default".to_owned()
        );
        assert!(kubeconfig_of("etcd://h:1").is_err());
    }
}
