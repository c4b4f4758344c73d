//! One lease per client and TTL, shared by the keys of all its candidacies,
//! as etcd's `concurrency.Session` shares one lease among its elections.
//!
//! A thousand leaderships on one client then cost one keep-alive per
//! renewal interval, and one read per 128 keys to learn that each key is
//! still ours (etcd's default `--max-txn-ops`), instead of a keep-alive and
//! a read per key. The Elector renews the terms of a backend that batches
//! on one grid (`Capabilities::renewals_batched`); renewals that arrive
//! within [`GATHER`] of each other go out as one round.
//!
//! What sharing means:
//! - each renewal still counts from the send of a keep-alive sent after it
//!   was asked for (a round not yet sent is joined, one under way is not);
//! - the lease expiring or revoked (`etcdctl lease revoke`) ends every term
//!   on it, and every waiting candidacy;
//! - one key deleted out of band ends only its own term;
//! - a candidacy that ends (released, withdrawn, or its lease handle
//!   dropped after a loss) deletes its own key, since the lease lives on
//!   for the others; the last one to go revokes the lease.
//!
//! A key whose cleanup gave up (nothing answered its delete for a TTL: an
//! outage, a frozen member) is left on a lease that does not expire by
//! itself: the client's other candidacies keep it alive, and a new etcd
//! leader's `Promote` gives every lease a fresh TTL after an outage. Such a
//! key would lead its election for good. So its lease is retired
//! ([`Attached::abandoned`]): no candidacy attaches it again, the key is
//! deleted once a member answers, and the lease is revoked once its last
//! user goes (at once if none is left), retried until it lands.
//!
//! A candidacy withdrawn while its create request was unanswered cannot
//! know whether the create will still land. Its key is deleted at once and
//! again by each round for [`SWEEP_FOR`] after (the shared lease would keep
//! such a ghost alive), unless it was the lease's last user, whose revoke
//! takes everything with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp};
use tenure_core::hosted::spawn_cleanup;
use tenure_core::{Error, Result};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::BACKEND;
use crate::keepalive::{self, KeepAlive, Renewed};
use crate::members::Members;
use crate::Settings;

/// How long the first renewal of a round waits for others to join it,
/// where its lease has other users.
const GATHER: Duration = Duration::from_millis(1);

/// How long a lease no candidacy uses stays for the next one (at most half
/// its TTL) before it is revoked.
const LINGER: Duration = Duration::from_secs(1);

/// How long a key whose create may still land after its withdrawal is
/// deleted again by each round.
const SWEEP_FOR: Duration = Duration::from_secs(60);

/// Every shared lease of one client: one per TTL.
pub(crate) struct Pool {
    client: Client,
    members: Arc<Members>,
    settings: Arc<Settings>,
    leases: Mutex<HashMap<u64, Arc<Shared>>>,
    /// Held while a lease is granted, so that candidacies starting together
    /// share the one granted.
    granting: tokio::sync::Mutex<()>,
    /// Operations per transaction: etcd's default `--max-txn-ops` until a
    /// server refuses as many (halved then, for good).
    max_txn_ops: AtomicUsize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let leases = self.leases.lock().map_or(0, |l| l.len());
        f.debug_struct("Pool")
            .field("leases", &leases)
            .finish_non_exhaustive()
    }
}

/// One shared lease.
pub(crate) struct Shared {
    pub(crate) id: i64,
    ttl: Duration,
    /// Candidacies attached (each holds an [`Attached`]); changed only under
    /// the pool's lock, so that the last one out and a newcomer never pass.
    users: AtomicUsize,
    /// The next key name's number (the first key is the lease id alone).
    names: AtomicU64,
    /// Set once a keep-alive found the lease gone, or it was revoked.
    dead: AtomicBool,
    /// Set once a key on it was left behind ([`Attached::abandoned`]): no
    /// candidacy attaches it again, and it is revoked once unused.
    retired: AtomicBool,
    /// Keys left behind on it (name, create revision where known), deleted
    /// once a member answers.
    orphans: Mutex<Vec<(String, Option<i64>)>>,
    /// Whether a task clears it now ([`clear`]).
    clearing: AtomicBool,
    keep_alive: tokio::sync::Mutex<KeepAlive>,
    /// The send of the latest keep-alive (or the grant) answered alive.
    alive_since: Mutex<Instant>,
    /// The round being gathered, if any.
    open: Mutex<Option<Vec<Waiting>>>,
    /// Keys withdrawn while their create was unanswered, and until when
    /// each is deleted again.
    sweep: Mutex<Vec<(String, Instant)>>,
}

/// A renewal waiting for its round.
struct Waiting {
    /// The key to check (name, create revision), if any.
    key: Option<(String, i64)>,
    deadline: Instant,
    answer: oneshot::Sender<Result<Round>>,
}

/// What a round told one renewal.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Round {
    /// The lease lives, and the key asked about (if any) is still ours; its
    /// deadline may count from `sent_at`.
    Alive { sent_at: Instant },
    /// The lease is gone on the server.
    Expired,
    /// The lease lives, but the key asked about is gone or not ours.
    KeyGone,
}

/// A candidacy's use of a shared lease; the last one dropped revokes it.
pub(crate) struct Attached {
    pool: Arc<Pool>,
    lease: Arc<Shared>,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("lease_id", &self.lease.id)
            .finish()
    }
}

impl Pool {
    pub(crate) fn new(client: Client, members: Arc<Members>, settings: Arc<Settings>) -> Self {
        Pool {
            client,
            members,
            settings,
            leases: Mutex::new(HashMap::new()),
            granting: tokio::sync::Mutex::new(()),
            max_txn_ops: AtomicUsize::new(crate::election::MAX_TXN_OPS),
        }
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Shared>>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A use of the live lease of `ttl`, granted first if there is none;
    /// with the send of the grant if this call made it.
    pub(crate) async fn attach(
        self: &Arc<Self>,
        ttl: Duration,
    ) -> Result<(Attached, Option<Instant>)> {
        let secs = ttl.as_secs();
        if let Some(attached) = self.live(secs) {
            return Ok((attached, None));
        }
        let _granting = self.granting.lock().await;
        if let Some(attached) = self.live(secs) {
            return Ok((attached, None));
        }
        let settings = self.settings.for_ttl(ttl);
        let ttl_secs = secs as i64;
        let sent_at = Instant::now();
        let client = &self.client;
        let grant = settings
            .unary(client, "lease grant", || {
                let mut leases = client.lease_client();
                async move { leases.grant(ttl_secs, None).await }
            })
            .await?;
        if grant.ttl() != ttl_secs {
            let (client, id) = (client.clone(), grant.id());
            spawn_cleanup(async move { revoke_until_gone(client, id, settings, ttl).await });
            return Err(Error::invalid(
                "ttl",
                format!(
                    "etcd granted {}s for the requested {}s: its minimum lease TTL is higher; use at least {}s",
                    grant.ttl(),
                    ttl_secs,
                    grant.ttl()
                ),
            ));
        }
        let lease = Arc::new(Shared {
            id: grant.id(),
            ttl,
            users: AtomicUsize::new(1),
            names: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            orphans: Mutex::new(Vec::new()),
            clearing: AtomicBool::new(false),
            keep_alive: tokio::sync::Mutex::new(KeepAlive::new(grant.id())),
            alive_since: Mutex::new(sent_at),
            open: Mutex::new(None),
            sweep: Mutex::new(Vec::new()),
        });
        self.leases().insert(secs, lease.clone());
        let attached = Attached {
            pool: self.clone(),
            lease,
        };
        Ok((attached, Some(sent_at)))
    }

    fn live(self: &Arc<Self>, secs: u64) -> Option<Attached> {
        let leases = self.leases();
        let lease = leases.get(&secs)?;
        if lease.dead.load(Ordering::SeqCst) {
            return None;
        }
        lease.users.fetch_add(1, Ordering::SeqCst);
        Some(Attached {
            pool: self.clone(),
            lease: lease.clone(),
        })
    }

    /// Takes `lease` out of the pool if no candidacy uses it (to revoke it);
    /// whether it did.
    fn take_if_unused(&self, lease: &Arc<Shared>) -> bool {
        let mut leases = self.leases();
        if lease.users.load(Ordering::SeqCst) > 0 || lease.dead.swap(true, Ordering::SeqCst) {
            return false;
        }
        let secs = lease.ttl.as_secs();
        if leases.get(&secs).is_some_and(|l| Arc::ptr_eq(l, lease)) {
            leases.remove(&secs);
        }
        true
    }

    /// Revokes every lease of the pool at once, each within an eighth of
    /// its TTL (the client is closing, and a process exiting after it must
    /// not wait for a server out of reach: a lease nobody keeps alive
    /// expires by itself a TTL later): the first failure, if any.
    pub(crate) async fn close(&self) -> Result<()> {
        let leases: Vec<Arc<Shared>> = self.leases().drain().map(|(_, l)| l).collect();
        let revokes = leases.iter().map(|lease| {
            lease.dead.store(true, Ordering::SeqCst);
            let settings = self.settings.for_ttl(lease.ttl / 8);
            let client = &self.client;
            async move { keepalive::revoke(client, lease.id, &settings).await }
        });
        futures::future::join_all(revokes)
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()
            .map(drop)
    }

    /// Takes `lease` out of the pool (gone on the server): new candidacies
    /// get a new one.
    fn forget(&self, lease: &Arc<Shared>) {
        lease.dead.store(true, Ordering::SeqCst);
        self.unpool(lease);
    }

    /// Takes `lease` out of the pool, if it is there.
    fn unpool(&self, lease: &Arc<Shared>) {
        let mut leases = self.leases();
        let secs = lease.ttl.as_secs();
        if leases.get(&secs).is_some_and(|l| Arc::ptr_eq(l, lease)) {
            leases.remove(&secs);
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let last = {
            let _leases = self.pool.leases();
            self.lease.users.fetch_sub(1, Ordering::SeqCst) == 1
        };
        if !last || self.lease.dead.load(Ordering::SeqCst) {
            return;
        }
        if self.lease.retired.load(Ordering::SeqCst) {
            // Nobody may reuse it: revoked now, until that lands.
            clear(&self.pool, &self.lease);
            return;
        }
        // The last use gone: the lease stays in the pool a while, for the
        // client's next candidacy (a candidate that resigned often stands
        // again at once), and is revoked then if still unused. A revoke
        // right away is a write that the servers make while the next
        // leader reads its place in line: it slowed that read (the
        // hand-over) by half a millisecond on one etcd node. It holds no
        // key by then, so nothing waits for it (not `close`).
        let (pool, lease) = (self.pool.clone(), self.lease.clone());
        let linger = LINGER.min(lease.ttl / 2);
        tenure_core::heartbeat_runtime().spawn(async move {
            tokio::time::sleep(linger).await;
            if pool.take_if_unused(&lease) {
                // Retried until it lands: a lease left behind lives on
                // after an outage (a new etcd leader gives it a fresh TTL).
                let settings = pool.settings.for_ttl(lease.ttl);
                let client = pool.client.clone();
                let pool = Arc::downgrade(&pool);
                retry_while(&pool, "revoke an unused lease", || {
                    keepalive::revoke(&client, lease.id, &settings)
                })
                .await;
            }
        });
    }
}

impl Attached {
    pub(crate) fn id(&self) -> i64 {
        self.lease.id
    }

    /// Whether other candidacies use this lease too.
    pub(crate) fn shared(&self) -> bool {
        self.lease.users.load(Ordering::SeqCst) > 1
    }

    /// A key name under `prefix` that no other candidacy of this lease has
    /// had or will have: the lease id in hex (as `concurrency.Election`
    /// names its key) for the first, then `<lease id>-<n>`.
    pub(crate) fn key_name(&self, prefix: &str) -> String {
        match self.lease.names.fetch_add(1, Ordering::SeqCst) {
            0 => format!("{prefix}{:x}", self.lease.id),
            n => format!("{prefix}{:x}-{n:x}", self.lease.id),
        }
    }

    /// The send of the lease's latest keep-alive (or its grant) that was
    /// answered alive: every key on it lives at least a TTL from then.
    pub(crate) fn alive_since(&self) -> Instant {
        *self
            .lease
            .alive_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The lease was found gone (a key could not be put on it): new
    /// candidacies of this client get a new one.
    pub(crate) fn expired(&self) {
        self.pool.forget(&self.lease);
    }

    /// `key` (with `create_revision`, where known) could not be deleted in
    /// its time and stays on this lease, which lives on for the client's
    /// other candidacies (or, after an outage, by a new etcd leader's
    /// `Promote`): the lease is retired. No candidacy attaches it again;
    /// the key is deleted once a member answers; the lease is revoked once
    /// its last user goes, retried until it lands.
    pub(crate) fn abandoned(&self, key: String, create_revision: Option<i64>) {
        if self.lease.dead.load(Ordering::SeqCst) {
            return;
        }
        tracing::warn!(
            lease_id = self.lease.id,
            key,
            "a key could not be deleted in time; its lease is retired, the key deleted and the lease revoked once etcd answers"
        );
        self.lease
            .orphans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, create_revision));
        self.lease.retired.store(true, Ordering::SeqCst);
        self.pool.unpool(&self.lease);
        clear(&self.pool, &self.lease);
    }

    /// Deletes `key` again in each round for a while: its create may land
    /// after its withdrawal (and the lease may live on, for the client's
    /// other candidacies or its next).
    pub(crate) fn sweep_later(&self, key: String) {
        if !self.lease.dead.load(Ordering::SeqCst) {
            self.lease
                .sweep
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((key, Instant::now() + SWEEP_FOR));
        }
    }

    /// Keeps the lease alive with a keep-alive sent after this call, and
    /// checks `key` (name, create revision) is still ours after it, in one
    /// round with the renewals of this lease's other candidacies asked for
    /// within [`GATHER`]. `deadline` bounds the tries as in
    /// [`keepalive::renew`].
    pub(crate) async fn renew(
        &self,
        key: Option<(String, i64)>,
        deadline: Instant,
    ) -> Result<Round> {
        let (answer, answered) = oneshot::channel();
        let first = {
            let mut open = self.lease.open.lock().unwrap_or_else(|e| e.into_inner());
            let waiting = Waiting {
                key,
                deadline,
                answer,
            };
            match open.as_mut() {
                Some(round) => {
                    round.push(waiting);
                    false
                }
                None => {
                    *open = Some(vec![waiting]);
                    true
                }
            }
        };
        if first {
            // A task of its own: a renewal cancelled midway (its term
            // resigned, its caller gone) neither takes the others' with it
            // nor leaves an answer on the stream for the next one.
            let (pool, lease) = (self.pool.clone(), self.lease.clone());
            let gather = self.shared();
            tokio::spawn(async move {
                if gather {
                    tokio::time::sleep(GATHER).await;
                }
                let round = lease
                    .open
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .unwrap_or_default();
                run(&pool, &lease, round).await;
            });
        }
        answered.await.unwrap_or_else(|_| {
            Err(Error::unavailable(
                BACKEND,
                "a renewal round ended unanswered",
            ))
        })
    }
}

/// One round: a keep-alive, then reads of the keys asked about, answered to
/// each renewal of the round.
async fn run(pool: &Pool, lease: &Arc<Shared>, round: Vec<Waiting>) {
    let Some(deadline) = round.iter().map(|w| w.deadline).max() else {
        return;
    };
    let settings = pool.settings.for_ttl(lease.ttl);
    let keys: Vec<(String, i64)> = round.iter().filter_map(|w| w.key.clone()).collect();
    let renewed = {
        let mut keep = lease.keep_alive.lock().await;
        let limit = &pool.max_txn_ops;
        keepalive::renew(&mut keep, &pool.members, &settings, deadline, &keys, limit).await
    };
    let mut ours = Vec::new();
    let outcome = match renewed {
        Ok(Renewed::Alive {
            sent_at,
            ours: read,
        }) => {
            let mut since = lease.alive_since.lock().unwrap_or_else(|e| e.into_inner());
            *since = (*since).max(sent_at);
            ours = read;
            Ok(Round::Alive { sent_at })
        }
        Ok(Renewed::Expired) => {
            pool.forget(lease);
            Ok(Round::Expired)
        }
        Err(error) => Err(error),
    };
    let mut ours = ours.into_iter();
    for waiting in round {
        let answer = match &outcome {
            Ok(Round::Alive { sent_at }) => match waiting.key.map(|_| ours.next()) {
                Some(Some(Err(refused))) => Err(refused),
                Some(Some(Ok(true))) | None => Ok(Round::Alive { sent_at: *sent_at }),
                Some(Some(Ok(false)) | None) => Ok(Round::KeyGone),
            },
            Ok(other) => Ok(*other),
            Err(error) => Err(error.duplicate()),
        };
        let _ = waiting.answer.send(answer);
    }
    if matches!(outcome, Ok(Round::Alive { .. })) {
        sweep(pool, lease, &settings).await;
    }
}

/// Deletes the keys withdrawn while their create was unanswered, in case
/// the create landed since; forgets those past their time.
async fn sweep(pool: &Pool, lease: &Shared, settings: &Settings) {
    let names: Vec<String> = {
        let mut sweep = lease.sweep.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sweep.retain(|(_, until)| *until > now);
        sweep.iter().map(|(name, _)| name.clone()).collect()
    };
    let limit = pool.max_txn_ops.load(Ordering::SeqCst).max(1);
    for chunk in names.chunks(limit) {
        let txn = Txn::new().and_then(
            chunk
                .iter()
                .map(|name| TxnOp::delete(name.as_str(), None))
                .collect::<Vec<_>>(),
        );
        if let Err(error) = settings.txn(&pool.client, &txn).await {
            if crate::error::is_too_many_ops(&error) {
                pool.max_txn_ops
                    .fetch_min(chunk.len() / 2, Ordering::SeqCst);
            }
            tracing::debug!(%error, "deleting withdrawn keys again failed; the next round tries");
            return;
        }
    }
}

/// Clears a retired lease, in a task of its own (one at a time), retried
/// until it lands: while candidacies use it, deletes the keys left on it;
/// once none does, revokes it. A key that cannot be deleted for good (a
/// refusal, not a transient failure) has the lease revoked under its other
/// users too, whose terms end: nothing else would remove it.
fn clear(pool: &Arc<Pool>, lease: &Arc<Shared>) {
    if lease.clearing.swap(true, Ordering::SeqCst) {
        return;
    }
    let (weak, lease) = (Arc::downgrade(pool), lease.clone());
    tenure_core::heartbeat_runtime().spawn(async move {
        loop {
            let Some((client, settings)) = weak
                .upgrade()
                .map(|p| (p.client.clone(), p.settings.for_ttl(lease.ttl)))
            else {
                return;
            };
            let unused = lease.users.load(Ordering::SeqCst) == 0;
            let orphans: Vec<_> = lease
                .orphans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let revoke = unused || {
                let deleted = retry_while(&weak, "delete keys left on a lease", || {
                    delete_all(&client, &orphans, &settings)
                })
                .await;
                match deleted {
                    Some(true) => {
                        let mut left = lease.orphans.lock().unwrap_or_else(|e| e.into_inner());
                        left.retain(|o| !orphans.contains(o));
                        false
                    }
                    // Refused: only the revoke takes them.
                    Some(false) => true,
                    None => return,
                }
            };
            if revoke && !lease.dead.load(Ordering::SeqCst) {
                let revoked = retry_while(&weak, "revoke a retired lease", || {
                    keepalive::revoke(&client, lease.id, &settings)
                })
                .await;
                if revoked == Some(true) {
                    lease.dead.store(true, Ordering::SeqCst);
                    tracing::info!(lease_id = lease.id, "a retired lease revoked");
                }
            }
            lease.clearing.store(false, Ordering::SeqCst);
            // A last user gone, or a key left, since this pass looked:
            // another pass, unless another task took over.
            let more = !lease.dead.load(Ordering::SeqCst)
                && (lease.users.load(Ordering::SeqCst) == 0
                    || !lease
                        .orphans
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_empty());
            if !more || lease.clearing.swap(true, Ordering::SeqCst) {
                return;
            }
        }
    });
}

/// Deletes `keys` (each only while it still has its create revision, where
/// known).
async fn delete_all(
    client: &Client,
    keys: &[(String, Option<i64>)],
    settings: &Settings,
) -> Result<()> {
    for (key, revision) in keys {
        match revision {
            Some(revision) => {
                crate::election::delete_if_ours(client, key, *revision, settings).await?
            }
            None => crate::election::delete_by_name(client, key, settings).await?,
        }
    }
    Ok(())
}

/// Runs `op` until it succeeds (`Some(true)`), fails for good
/// (`Some(false)`), or `pool` is gone (`None`: the backend was dropped);
/// pausing 50 ms, doubling to 1 s, between tries.
async fn retry_while<F, Fut>(pool: &Weak<Pool>, what: &'static str, op: F) -> Option<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    retry(what, op, |_| true, || pool.upgrade().is_some()).await
}

/// Revokes a lease, retrying transient failures until it lands or the lease
/// must have expired by itself (one TTL from now: nobody keeps it alive).
pub(crate) async fn revoke_until_gone(client: Client, id: i64, settings: Settings, ttl: Duration) {
    retry_until(Instant::now() + ttl, "revoke a lease", || {
        keepalive::revoke(&client, id, &settings)
    })
    .await;
}

/// Runs `op` until it succeeds, a failure is not worth retrying, or
/// `give_up` comes; pausing 50 ms, doubling to 1 s, between tries. Whether
/// it succeeded.
pub(crate) async fn retry_until<F, Fut>(give_up: Instant, what: &'static str, op: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let in_time = |pause| Instant::now() + pause < give_up;
    retry(what, op, in_time, || true).await == Some(true)
}

/// Runs `op` until it succeeds (`Some(true)`), fails in a way not worth
/// retrying or `may_retry(pause)` says no more (`Some(false)`), or
/// `wanted()` turns false after a pause (`None`); pausing 50 ms, doubling
/// to 1 s, between tries.
async fn retry<F, Fut>(
    what: &'static str,
    mut op: F,
    mut may_retry: impl FnMut(Duration) -> bool,
    mut wanted: impl FnMut() -> bool,
) -> Option<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut pause = Duration::from_millis(50);
    let mut attempts = 1u32;
    loop {
        match op().await {
            Ok(()) => {
                if attempts > 1 {
                    tracing::info!(what, attempts, "landed after retries");
                }
                return Some(true);
            }
            Err(error) if error.is_retryable() && may_retry(pause) => {
                tracing::debug!(what, %error, attempts, retry_in = ?pause, "failed; retrying");
            }
            Err(error) => {
                tracing::warn!(what, %error, attempts, "gave up");
                return Some(false);
            }
        }
        tokio::time::sleep(pause).await;
        if !wanted() {
            return None;
        }
        pause = (pause * 2).min(Duration::from_secs(1));
        attempts += 1;
    }
}
