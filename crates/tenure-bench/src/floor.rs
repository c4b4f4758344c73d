//! The protocol's floor: the fewest requests a graceful hand-over needs on
//! each server, timed with raw clients on the same servers as tenure's
//! hand-over, so that its row can say how far above the floor it is.
//!
//! - etcd: the holder's delete → the standby's watch event (a watch on the
//!   key, opened beforehand on a client of its own) → one linearizable read
//!   (a Range) by the standby: the least the `concurrency.Election` recipe
//!   does before a standby may lead (etcd#11456).
//! - ZooKeeper: the holder's session deletes its ephemeral znode → the
//!   standby's `exists` watch (set beforehand, in its own session) fires →
//!   one `sync` by the standby (its server has applied the quorum's state).
//! - Kubernetes: the holder's release PUT (holderIdentity cleared, as
//!   tenure-kube releases) → the standby's watch event → the standby's
//!   take-over PUT.
//!
//! Each timed from just before the holder's request to the standby's last
//! answer, both in the bench process on tokio's `Instant`; after
//! [`WARM_UP`](crate::sampling::WARM_UP) untimed rounds.

use std::time::Duration;

use futures::StreamExt;
use tenure::etcd::etcd_client;
use tenure::kube::k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use tenure::kube::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tenure::kube::kube;
use tenure::zookeeper::zookeeper_client as zk;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult, Deployment, Server};
use crate::figures::{Figure, Measure, FLOOR};
use crate::plan::TTL;
use crate::sampling::{after_warm_up, fresh_key};

/// How long a standby may take to see the hand-over before the trial fails.
const LIMIT: Duration = Duration::from_secs(10);

/// The floor row of `d`'s hand-over table: `trials` timed hand-overs.
pub async fn handover(d: &Deployment, trials: usize) -> BenchResult<Figure> {
    let label = d.server.label();
    let (samples, note) = match d.server {
        Server::Etcd(_) => (
            etcd(d, trials).await?,
            "raw etcd-client: delete → standby's watch event → linearizable Range",
        ),
        Server::ZooKeeper(_) => (
            zookeeper(d, trials).await?,
            "raw zookeeper-client: delete of an ephemeral znode → standby's exists watch → sync",
        ),
        Server::Kube(_) => (
            lease_api(d, trials).await?,
            "raw kube client: release PUT → standby's watch event → take-over PUT",
        ),
        Server::Memory | Server::Redis(_) => {
            return Err(format!("no floor is measured on {label}").into())
        }
    };
    Ok(Figure::latency(Measure::Handover, &label, FLOOR, &samples).with_note(note))
}

/// The time from `start` to the instant the standby's task reports.
async fn standby_done(
    start: Instant,
    standby: JoinHandle<BenchResult<Instant>>,
) -> BenchResult<Duration> {
    let done = tokio::time::timeout(LIMIT, standby)
        .await
        .map_err(|_| "the standby did not see the hand-over")?
        .map_err(|e| e.to_string())??;
    Ok(done - start)
}

async fn etcd(d: &Deployment, trials: usize) -> BenchResult<Vec<Duration>> {
    let endpoints = d.endpoints();
    let mut holder = ctx(
        "etcd connect",
        etcd_client::Client::connect(&endpoints, None).await,
    )?;
    let standby = ctx(
        "etcd connect",
        etcd_client::Client::connect(&endpoints, None).await,
    )?;
    after_warm_up(trials, async || {
        let key = fresh_key("floor");
        ctx("put", holder.put(key.as_str(), "a", None).await)?;
        let mut standby = standby.clone();
        let mut watch = ctx("watch", standby.watch(key.as_str(), None).await)?;
        // The watch is in place once etcd says it was created.
        let created = ctx("watch created", watch.message().await)?;
        if !created.is_some_and(|c| c.created()) {
            return Err("the watch was not created".into());
        }
        let read = key.clone();
        let waiting = tokio::spawn(async move {
            loop {
                let got = ctx("watch", watch.message().await)?.ok_or("the watch ended")?;
                let deleted = got
                    .events()
                    .iter()
                    .any(|e| e.event_type() == etcd_client::EventType::Delete);
                if deleted {
                    break;
                }
            }
            // Linearizable: a Range is unless made serializable.
            ctx("read", standby.get(read, None).await)?;
            Ok(Instant::now())
        });
        let start = Instant::now();
        ctx("delete", holder.delete(key, None).await)?;
        standby_done(start, waiting).await
    })
    .await
}

async fn zk_connect(d: &Deployment) -> BenchResult<zk::Client> {
    let hosts = d.endpoints().join(",");
    let connect = zk::Client::connector()
        .with_session_timeout(TTL)
        .connect(&hosts);
    ctx("ZooKeeper connect", connect.await)
}

async fn zookeeper(d: &Deployment, trials: usize) -> BenchResult<Vec<Duration>> {
    let holder = zk_connect(d).await?;
    let standby = zk_connect(d).await?;
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    after_warm_up(trials, async || {
        let path = format!("/{}", fresh_key("floor"));
        ctx("create", holder.create(&path, b"a", &ephemeral).await)?;
        let (stat, watcher) = ctx("exists", standby.check_and_watch_stat(&path).await)?;
        stat.ok_or("the holder's node is gone")?;
        let (standby, synced) = (standby.clone(), path.clone());
        let waiting = tokio::spawn(async move {
            let event = watcher.changed().await;
            if event.event_type != zk::EventType::NodeDeleted {
                return Err(format!("the watch fired with {:?}", event.event_type).into());
            }
            match standby.sync(&synced).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(Instant::now()),
                Err(e) => ctx("sync", Err(e)),
            }
        });
        let start = Instant::now();
        ctx("delete", holder.delete(&path, None).await)?;
        standby_done(start, waiting).await
    })
    .await
}

/// A Lease held by `who` for the TTL (holderIdentity empty: released).
fn lease(name: &str, who: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(who.to_owned()),
            lease_duration_seconds: Some(TTL.as_secs().max(1) as i32),
            ..LeaseSpec::default()
        }),
    }
}

/// `lease` as written by `who`, its resourceVersion kept (a PUT's precondition).
fn held_by(lease: &Lease, who: &str) -> Lease {
    let mut next = lease.clone();
    let spec = next.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(who.to_owned());
    next
}

async fn lease_api(d: &Deployment, trials: usize) -> BenchResult<Vec<Duration>> {
    let api = async || -> BenchResult<kube::Api<Lease>> {
        let config = d.kube_config().await?;
        let namespace = config.default_namespace.clone();
        let client = ctx("kube client", kube::Client::try_from(config))?;
        Ok(kube::Api::namespaced(client, &namespace))
    };
    let holder = api().await?;
    let standby = api().await?;
    let put = kube::api::PostParams::default();
    after_warm_up(trials, async || {
        let name = fresh_key("floor");
        let held = ctx("create", holder.create(&put, &lease(&name, "a")).await)?;
        let version = held.metadata.resource_version.clone();
        let version = version.ok_or("the created Lease has no resourceVersion")?;
        let params = kube::api::WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let events = ctx("watch", standby.watch(&params, &version).await)?;
        let (standby, put2, taken) = (standby.clone(), put.clone(), name.clone());
        let waiting = tokio::spawn(async move {
            let mut events = Box::pin(events);
            while let Some(event) = events.next().await {
                match ctx("watch", event)? {
                    kube::api::WatchEvent::Modified(seen) if released(&seen) => {
                        let next = held_by(&seen, "b");
                        ctx("take over", standby.replace(&taken, &put2, &next).await)?;
                        return Ok(Instant::now());
                    }
                    kube::api::WatchEvent::Error(e) => return ctx("watch", Err(e)),
                    _ => {}
                }
            }
            Err("the watch ended".into())
        });
        let start = Instant::now();
        let mut release = held_by(&held, "");
        if let Some(spec) = release.spec.as_mut() {
            // As tenure-kube releases (record::released).
            spec.lease_duration_seconds = Some(1);
        }
        ctx("release", holder.replace(&name, &put, &release).await)?;
        let took = standby_done(start, waiting).await;
        let _ = holder
            .delete(&name, &kube::api::DeleteParams::default())
            .await;
        took
    })
    .await
}

/// Whether `lease` records no holder.
fn released(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}
