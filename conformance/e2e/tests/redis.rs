//! The conformance suite on Redis (Redlock), in containers: 1 and 3
//! independent masters, each client behind its own fault proxies, plus the
//! failure matrix: Redis-specific faults, each run as a case that records
//! whether two candidates' validity intervals overlapped and whether a
//! deposed holder's write got into a store that has no token to check. The
//! measured matrix must equal the one documented in
//! `crates/tenure-redis/README.md` and the top README. Reports:
//! `target/conformance/redis-1master.md`, `redis-3masters.md`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tenure_conformance::suite::{run_case, Cx, Failure, Holder, Meta, Step, TermId};
use tenure_conformance::{BackendFactory, CaseReport, Client, LinkFault, ServerFaults, Target};
use tenure_core::{AcquireMode, Acquisition, Candidacy, ElectionKey, Lease, LeaseBackend, Result};
use tenure_redis::redis::aio::MultiplexedConnection;
use tenure_redis::{RedisBackend, RedlockOptions};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_testkit::{
    endpoints, harness_error, ClusterFactory, ClusterServers, Deployment, Upstreams,
    THREE_NODE_CASES,
};
use tokio::time::Instant;

mod factory;

struct Redis {
    servers: ClusterServers,
    /// A client without proxies, kept (and its connections to every
    /// master open) for the factory's life.
    _inspector: RedisBackend,
}

type RedisFactory = ClusterFactory<Redis>;

/// The key prefix of every client (the backend's default).
fn stored(key: &ElectionKey) -> String {
    format!("{}{}", RedlockOptions::default().key_prefix, key.as_str())
}

async fn deploy(masters: usize, name: &'static str) -> Arc<RedisFactory> {
    let cluster = Cluster::start(Topology::Redis { masters })
        .await
        .expect("redis masters");
    let inspector = RedisBackend::builder(&cluster.endpoints())
        .allow_unfenced()
        .connect()
        .await
        .expect("inspector client");
    let version = cluster.server_version().await.ok();
    let capabilities = inspector.capabilities();
    let redis = Redis {
        servers: ClusterServers::new(Arc::new(cluster)),
        _inspector: inspector,
    };
    factory::over(name, redis, capabilities, version)
}

impl Redis {
    /// A plain connection to master `index`.
    async fn master(&self, index: usize) -> Result<MultiplexedConnection> {
        let node = self.servers.cluster().node(index).map_err(harness_error)?;
        let client = tenure_redis::redis::Client::open(format!("redis://{}/", node.endpoint()))
            .map_err(harness_error)?;
        client
            .get_multiplexed_async_connection()
            .await
            .map_err(harness_error)
    }

    /// Runs `cmd` on every master that serves, answers by master.
    async fn on_masters<T: tenure_redis::redis::FromRedisValue>(
        &self,
        cmd: &tenure_redis::redis::Cmd,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        for i in 0..self.servers.cluster().nodes().len() {
            let mut c = self.master(i).await?;
            out.push(cmd.query_async(&mut c).await.map_err(harness_error)?);
        }
        Ok(out)
    }

    async fn stats_sum(&self, field: &str) -> Result<u64> {
        Ok(self
            .servers
            .cluster()
            .stats_total()
            .await
            .map_err(harness_error)?
            .get(field))
    }
}

#[async_trait]
impl Deployment for Redis {
    fn upstreams(&self) -> Upstreams {
        Upstreams::nodes_of(self.servers.cluster())
    }

    async fn connect(&self, through: &[SocketAddr]) -> Result<Arc<dyn LeaseBackend>> {
        let endpoints = endpoints(through);
        let backend = RedisBackend::builder(&endpoints)
            .allow_unfenced()
            .connect()
            .await?;
        Ok(Arc::new(backend))
    }

    fn candidate_url(&self) -> String {
        format!(
            "redis://{}?allow_unfenced=true",
            self.servers.cluster().endpoints().join(",")
        )
    }

    fn servers(&self) -> Option<&dyn ServerFaults> {
        Some(&self.servers)
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        // Changes to the data set (SET, PEXPIRE, DEL, expiries), summed over
        // the masters: Redis's own dirty counter (nothing is ever saved).
        Some(self.stats_sum("rdb_changes_since_last_save").await)
    }

    async fn server_requests(&self) -> Option<Result<u64>> {
        Some(self.stats_sum("total_commands_processed").await)
    }

    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        // A waiting candidate subscribes to the key's channel on every
        // master before its first attempt (and nothing else does but
        // watches): the most subscribers any master counts.
        let mut cmd = tenure_redis::redis::cmd("PUBSUB");
        cmd.arg("NUMSUB").arg(stored(key));
        Some(
            self.on_masters::<(String, usize)>(&cmd)
                .await
                .map(|answers| answers.into_iter().map(|(_, n)| n).max().unwrap_or(0)),
        )
    }

    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        let mut cmd = tenure_redis::redis::cmd("EXISTS");
        cmd.arg(stored(key));
        Some(
            self.on_masters::<u64>(&cmd)
                .await
                .map(|n| n.into_iter().any(|n| n > 0)),
        )
    }

    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        let mut cmd = tenure_redis::redis::cmd("DEL");
        cmd.arg(stored(key));
        Some(self.on_masters::<u64>(&cmd).await.map(drop))
    }

    /// At once: the Redis targets do not wait for the masters' write
    /// counter to settle.
    async fn quiesce(&self, _factory: &ClusterFactory<Self>) -> Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The failure matrix.

/// What one fault did: two candidates' validity intervals overlapped; a
/// deposed holder's write got into a store that has no token to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Outcome {
    overlap: bool,
    stale_write: bool,
}

/// The faults of the matrix, by the name the README's table gives them.
const FAULTS: &[&str] = &[
    "master_restarted_without_persistence",
    "master_key_expired_early",
    "two_faults_one_renewal_apart",
    "holder_paused_past_its_deadline",
    "holder_partitioned_from_the_masters",
];

/// Tries for `key` as `name` until granted, for at most `limit`.
async fn take(
    cx: &Cx,
    client: &Client,
    key: &ElectionKey,
    name: &str,
    limit: Duration,
) -> Step<Option<Holder>> {
    let until = Instant::now() + limit;
    loop {
        match Holder::try_acquire(cx, client, key, name).await {
            Ok(Ok(holder)) => return Ok(Some(holder)),
            Ok(Err(_held)) => {}
            Err(Failure::Fail(why)) if why.contains("unavailable") => {}
            Err(e) => return Err(e),
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `a`'s lease, held through raw backend calls with a TTL of the fault's
/// choosing, reported to the case's safety recorder and store.
struct Raw {
    lease: Lease,
    term: TermId,
}

impl Raw {
    async fn acquire(cx: &Cx, client: &Client, key: &ElectionKey, ttl: Duration) -> Step<Raw> {
        let candidacy = Candidacy::new(key.clone(), cx.identity("a"), ttl).ctx("a's candidacy")?;
        let lease = match client
            .backend
            .acquire(&candidacy, AcquireMode::Once)
            .await
            .ctx("a acquires")?
        {
            Acquisition::Granted(lease) => lease,
            Acquisition::Held(info) => {
                return Err(Failure::Fail(format!("a vacant key is held by {info:?}")))
            }
        };
        let term = cx.safety().begin(
            key.as_str(),
            lease.holder().as_str(),
            lease.token(),
            Instant::now(),
            lease.valid_until(),
        );
        Ok(Raw { lease, term })
    }

    fn write(&self, cx: &Cx) {
        cx.store()
            .write(self.term, self.lease.holder().as_str(), self.lease.token());
    }
}

/// One fault of the matrix as a case: `a` holds the key, the fault
/// strikes, `b` tries for the key; whoever gets it writes, and `a` writes
/// too where it still believes it leads (or, paused, had checked before).
/// Where the fault is on the servers, `a`'s TTL is long (10 s), so that the
/// fault (a container restart takes about a second) always strikes while
/// `a`'s lease is valid: the outcome is Redlock's, not the harness's timing.
async fn fault_case(
    factory: Arc<dyn BackendFactory>,
    fault: &'static str,
    redis: Arc<RedisFactory>,
) -> CaseReport {
    let meta = Meta::backend(fault, "matrix");
    run_case(factory, meta, move |cx| async move {
        let (ca, cb) = (cx.client().await?, cx.client().await?);
        let key = cx.new_key();
        let ttl = cx.ttl();
        let on_servers = fault.starts_with("master_");
        let mut a = Raw::acquire(&cx, &ca, &key, if on_servers { LONG_TTL } else { ttl }).await?;
        a.write(&cx);
        // Whether `a` checked its lease just before the fault struck and
        // goes on to write regardless (a pause between check and write).
        let mut checked_before = false;
        // Whether a learnt that it lost the lease (a renewal said so).
        let mut a_lost = false;
        let b = match fault {
            "master_restarted_without_persistence" => {
                let servers = &redis.deployment.servers;
                servers.kill(0).await.ctx("killing master 0")?;
                servers
                    .start(0)
                    .await
                    .ctx("starting master 0 again, empty")?;
                take(&cx, &cb, &key, "b", ttl / 4).await?
            }
            "master_key_expired_early" => {
                expire_early(&redis, &key, 0).await?;
                take(&cx, &cb, &key, "b", ttl / 4).await?
            }
            "two_faults_one_renewal_apart" => {
                // a's key vanishes on master 0, a renews, then it vanishes
                // on master 1 (on one master: master 0 again): a lease that
                // did not take master 0 back rests on one master of three.
                let masters = redis.deployment.servers.nodes();
                expire_early(&redis, &key, 0).await?;
                match ca.backend.renew(&a.lease).await {
                    Ok(renewed) => {
                        cx.safety().extend(a.term, renewed.valid_until());
                        a.lease = renewed;
                    }
                    Err(e) if e.loss_reason().is_some() => {
                        // a knows it lost: it neither leads nor writes.
                        cx.safety().end(a.term, Instant::now());
                        a_lost = true;
                    }
                    Err(e) => return Err(Failure::Fail(format!("a renews: {e}"))),
                }
                expire_early(&redis, &key, 1 % masters).await?;
                take(&cx, &cb, &key, "b", ttl / 4).await?
            }
            "holder_paused_past_its_deadline" => {
                checked_before = a.lease.is_valid();
                // `a` is frozen (GC, SIGSTOP): it neither renews nor checks.
                take(&cx, &cb, &key, "b", ttl * 2).await?
            }
            "holder_partitioned_from_the_masters" => {
                let link = ca
                    .link
                    .clone()
                    .ok_or_else(|| Failure::Skip("no link to cut".into()))?;
                link.set(LinkFault::Blackhole).await.ctx("cutting a off")?;
                // `a` keeps trying to renew while it believes it leads.
                let renewing = async {
                    while a.lease.is_valid() {
                        if let Ok(Ok(renewed)) =
                            tokio::time::timeout(ttl / 4, ca.backend.renew(&a.lease)).await
                        {
                            cx.safety().extend(a.term, renewed.valid_until());
                            a.lease = renewed;
                        }
                        tokio::time::sleep(ttl / 10).await;
                    }
                };
                let (b, ()) = tokio::join!(take(&cx, &cb, &key, "b", ttl * 2), renewing);
                link.set(LinkFault::Pass).await.ctx("healing a's link")?;
                b?
            }
            other => return Err(Failure::Fail(format!("no fault {other}"))),
        };
        match b {
            Some(b) => {
                b.write();
                if (a.lease.is_valid() && !a_lost) || checked_before {
                    a.write(&cx);
                }
                cx.safety().end(a.term, Instant::now());
                let _ = b.release().await;
            }
            None => {
                cx.note("b was not granted the key while a held it");
                cx.safety().end(a.term, Instant::now());
            }
        }
        let _ = ca.backend.release(&a.lease).await;
        Ok(())
    })
    .await
}

/// Expires `a`'s key on master `index` with `PEXPIRE` (as a clock jump or
/// an eviction there would), and lets it go.
async fn expire_early(redis: &RedisFactory, key: &ElectionKey, index: usize) -> Step<()> {
    let mut m = redis
        .deployment
        .master(index)
        .await
        .ctx(&format!("connecting to master {index}"))?;
    let _: i64 = tenure_redis::redis::cmd("PEXPIRE")
        .arg(stored(key))
        .arg(1)
        .query_async(&mut m)
        .await
        .ctx(&format!("expiring a's key on master {index}"))?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(())
}

/// `a`'s TTL where the fault is on the servers.
const LONG_TTL: Duration = Duration::from_secs(10);

trait Ctx<T> {
    fn ctx(self, what: &str) -> Step<T>;
}

impl<T, E: std::fmt::Display> Ctx<T> for std::result::Result<T, E> {
    fn ctx(self, what: &str) -> Step<T> {
        self.map_err(|e| Failure::Fail(format!("{what}: {e}")))
    }
}

/// The READMEs that document the matrix: the crate's and the top one.
const READMES: &[(&str, &str)] = &[
    (
        "crates/tenure-redis/README.md",
        include_str!("../../../crates/tenure-redis/README.md"),
    ),
    ("README.md", include_str!("../../../README.md")),
];

/// The matrix as `readme` documents it: fault → (masters → outcome).
fn documented(readme: &str) -> BTreeMap<String, BTreeMap<usize, Outcome>> {
    let table = readme
        .split("<!-- failure-matrix:begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- failure-matrix:end -->").next())
        .expect("the README marks its failure matrix");
    let yes = |cell: &str| match cell.trim() {
        "yes" => true,
        "no" => false,
        other => panic!("a matrix cell is yes or no, not {other:?}"),
    };
    let mut matrix = BTreeMap::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        assert_eq!(cells.len(), 5, "a matrix row has five cells: {line}");
        let fault = cells[0].trim().trim_matches('`').to_owned();
        let row = BTreeMap::from([
            (
                1,
                Outcome {
                    overlap: yes(cells[1]),
                    stale_write: yes(cells[2]),
                },
            ),
            (
                3,
                Outcome {
                    overlap: yes(cells[3]),
                    stale_write: yes(cells[4]),
                },
            ),
        ]);
        matrix.insert(fault, row);
    }
    matrix
}

/// Runs every fault on this deployment and checks each outcome against
/// the documented matrix.
fn failure_matrix(
    factory: Arc<dyn BackendFactory>,
) -> BoxFuture<'static, std::result::Result<(), String>> {
    Box::pin(async move {
        let masters = factory.servers().map(|s| s.nodes()).unwrap_or(0);
        let redis = deployment(masters).ok_or("no such deployment")?;
        let mut wrong = Vec::new();
        let matrix = documented(READMES[0].1);
        for (path, readme) in &READMES[1..] {
            if documented(readme) != matrix {
                wrong.push(format!(
                    "{path}'s failure matrix differs from {}'s",
                    READMES[0].0
                ));
            }
        }
        for &fault in FAULTS {
            let report = fault_case(factory.clone(), fault, redis.clone()).await;
            if let Err(e) = tenure_conformance::report::record(&report) {
                eprintln!("cannot write the conformance report: {e}");
            }
            if let tenure_conformance::Outcome::Skipped(why) = &report.outcome {
                wrong.push(format!("{fault}: skipped ({why})"));
                continue;
            }
            // A case that failed for any reason but the two it measures
            // measured nothing.
            if let tenure_conformance::Outcome::Fail(why) = &report.outcome {
                if !why.starts_with("exclusive") && !why.starts_with("fencing") {
                    wrong.push(format!("{fault}: {why}"));
                    continue;
                }
            }
            let measured = Outcome {
                overlap: report.figures.overlaps.unwrap_or(0) > 0,
                stale_write: report.figures.stale_writes_accepted.unwrap_or(0) > 0,
            };
            println!("{masters} master(s), {fault}: {measured:?}");
            match matrix.get(fault).and_then(|row| row.get(&masters)) {
                Some(doc) if *doc == measured => {}
                Some(doc) => wrong.push(format!(
                    "{fault} on {masters} master(s): measured {measured:?}, documented {doc:?}"
                )),
                None => wrong.push(format!("{fault}: not in the README's matrix")),
            }
        }
        if matrix.len() != FAULTS.len() {
            wrong.push(format!(
                "the README's matrix has {} rows, the suite runs {} faults",
                matrix.len(),
                FAULTS.len()
            ));
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("\n"))
        }
    })
}

/// The deployments, shared by the suite's targets and the matrix trials.
fn deployments() -> &'static std::sync::Mutex<BTreeMap<usize, Arc<RedisFactory>>> {
    static D: OnceLock<std::sync::Mutex<BTreeMap<usize, Arc<RedisFactory>>>> = OnceLock::new();
    D.get_or_init(Default::default)
}

fn deployment(masters: usize) -> Option<Arc<RedisFactory>> {
    deployments().lock().unwrap().get(&masters).cloned()
}

async fn start(masters: usize, name: &'static str) -> Arc<dyn BackendFactory> {
    let factory = deploy(masters, name).await;
    deployments()
        .lock()
        .unwrap()
        .insert(masters, factory.clone());
    factory
}

/// Redis stores any key: no key breaks a key rule.
const ANY_KEY: &str = "key_breaking_backend_rule_is_invalid_argument";

/// Redlock has no tokens to keep increasing.
const TOKENS_WIPED: &str = "token_increases_after_state_wiped";

/// Redis keeps no history a waiting candidate resumes from.
const HISTORY: &str = "standby_waits_through_history_compaction";

/// Why Redlock may fail the restart case (when the restart is quicker than the TTL), as the README says it.
const RESTART: (&str, &str) = (
    "cluster_restart_tokens_keep_increasing",
    "masters without persistence forget every lease when they restart: the next candidate \
     is granted while the holder still believes it leads",
);

/// A key's TTL is the client's own: no master gives less than asked for.
const SHRUNK: &str = "session_shrunk_on_reconnect_holder_stops_first";

/// The backend takes any TTL above its minimum: no maximum to go over.
const NO_MAX_TTL: &str = "ttl_above_backend_maximum_is_invalid_argument";

/// What every Redis deployment skips.
const SKIPS: &[&str] = &[ANY_KEY, TOKENS_WIPED, HISTORY, SHRUNK, NO_MAX_TTL];

/// What three independent masters skip: they elect no leader of their own
/// to pause or stop, and have no peers to be cut off from.
const INDEPENDENT_MASTERS: &[&str] = &[
    "servers_leader_paused_longer_than_ttl",
    "servers_leader_stopped_then_holder_frozen_a_candidate_leads",
    "standby_sees_failover_when_its_node_is_cut_off",
    "observer_sees_failover_when_its_node_is_cut_off",
];

/// The suite, and the failure matrix, on `masters` masters (a deployment
/// named `name`), skipping [`SKIPS`] and `skips`.
fn target(
    group: &'static str,
    masters: usize,
    name: &'static str,
    skips: &[&'static str],
) -> Target {
    Target::new(group, move || start(masters, name))
        .expect_skips(SKIPS)
        .expect_skips(skips)
        .expect_broken(&[RESTART])
        .with_trial("failure_matrix", failure_matrix)
}

fn main() -> std::process::ExitCode {
    // `TENURE_LOG=tenure_redis=debug` (with `--nocapture`) logs the backend.
    tenure_testkit::log_from_env();
    let code = tenure_conformance::run_targets(vec![
        target("single", 1, "redis-1master", THREE_NODE_CASES),
        target("three", 3, "redis-3masters", INDEPENDENT_MASTERS),
    ]);
    // The deployments go now (their containers are removed on drop), in a
    // runtime's context for what their clients leave to it.
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime for the clean-up");
    let _context = runtime.enter();
    drop(std::mem::take(&mut *deployments().lock().unwrap()));
    code
}
