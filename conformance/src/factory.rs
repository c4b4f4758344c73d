//! What a backend author implements to run the suite: [`BackendFactory`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{Capabilities, ElectionKey, Error, LeaseBackend, Result};

use crate::report::Property;

/// One independent client of the backend under test, and the network link it uses.
#[derive(Clone)]
pub struct Client {
    /// The client (its own connection or session).
    pub backend: Arc<dyn LeaseBackend>,
    /// The link between this client and the server, for cases that cut it
    /// off; `None` when the factory cannot control it (those cases are skipped).
    pub link: Option<Arc<dyn Link>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("backend", &self.backend)
            .field("link", &self.link.is_some())
            .finish()
    }
}

/// What a link between one client and the server does to traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkFault {
    /// Traffic flows normally.
    Pass,
    /// Every message is held back this long, each way split evenly.
    Delay(Duration),
    /// Every answer (server to client) is held back this long; requests pass
    /// at once.
    DelayAnswers(Duration),
    /// Traffic is silently dropped (calls hang) until the link passes again.
    Blackhole,
    /// The client's open connections are reset now (calls in flight fail
    /// with a connection error, watches end); new connections are let
    /// through, so traffic then flows as with [`Pass`](Self::Pass). A
    /// transient fault: a server restarting behind a load balancer, a NAT
    /// entry dropped.
    Reset,
    /// Every call fails at once with a connection error while this is set:
    /// open connections are reset, new ones refused (reset as they are
    /// accepted). Nothing reaches the server.
    FailCalls,
    /// Requests reach the server and are executed, but their answers are
    /// dropped: an ambiguous failure, the client cannot tell whether its
    /// write took. The calls hang (or time out on the client's own
    /// deadline); once the link passes again, a connection that lost an
    /// answer is reset (its stream is out of step), so what still waited
    /// on it fails with a connection error.
    DropAnswers,
}

/// The network between one client and the server: the memory backend's
/// [`Faults`](tenure_core::memory::Faults) or a TCP fault proxy.
#[async_trait]
pub trait Link: Send + Sync + 'static {
    /// Applies `fault` to calls made from now on (and, for a blackhole, to
    /// calls in flight).
    async fn set(&self, fault: LinkFault) -> Result<()>;

    /// When the link last forwarded something from the client towards the
    /// server (on the test process's clock), if it keeps track: an upper
    /// bound for the send time of every request the client made before.
    fn last_request_at(&self) -> Option<tokio::time::Instant> {
        None
    }

    /// When the link forwarded requests at or after `since`, in order (one
    /// instant each request, or each write a TCP link made), if it keeps
    /// track: so a case can name the request of a call that starts its TTL.
    fn requests_since(&self, _since: tokio::time::Instant) -> Option<Vec<tokio::time::Instant>> {
        None
    }

    /// When the link last delivered an answer to the client, if it keeps track.
    fn last_answer_at(&self) -> Option<tokio::time::Instant> {
        None
    }

    /// How many requests and answers the link holds now (delayed or
    /// blackholed, not yet delivered), if it can tell: a case waits for
    /// held traffic to land instead of sleeping.
    fn in_flight(&self) -> Option<usize> {
        None
    }

    /// The server nodes (numbered as [`ServerFaults`] numbers them) the
    /// client has connections open to, if the link can tell; for the case
    /// that pauses the holder's own node.
    fn nodes_in_use(&self) -> Option<Vec<usize>> {
        None
    }

    /// How many connections the client has opened to each server node
    /// (numbered as [`ServerFaults`] numbers them) since the link started,
    /// closed ones included, if the link can tell: whether a client tried a
    /// frozen node again.
    fn connections_opened(&self) -> Option<Vec<usize>> {
        None
    }

    /// Lets the client reach server node `node` only (numbered as
    /// [`ServerFaults`] numbers them): its connections to every other node
    /// are reset, and so are new ones, so what it opens now (a waiting
    /// candidate's watch) goes to `node`; `None` lets it reach every node
    /// again, leaving what it opened in place. [`Error::Unsupported`] where
    /// the link cannot tell the nodes apart (the case that needs it is then
    /// skipped).
    async fn confine_to(&self, _node: Option<usize>) -> Result<()> {
        Err(Error::Unsupported {
            backend: "this client's Link",
            operation: "confining a client to one server node",
        })
    }
}

/// Which of the requests a grant or renewal makes starts the lease's TTL
/// on the servers ([`BackendFactory::ttl_starts_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlStart {
    /// The first request of a grant in this mode (on a vacant key, which
    /// either mode is granted at once) and of a renewal: the one request of
    /// a memory call. The case makes the call on an otherwise idle client,
    /// so the first request the link forwards after the call began is the
    /// call's. (Not etcd's: its single attempt reads the key before the
    /// LeaseGrant that starts the TTL, and its waiting acquire keeps its
    /// lease alive while it waits, its reads tried again when held answers
    /// time them out, so its deadline counts from a later keep-alive; the
    /// case that judges deadlines against the servers' own expiry covers it.)
    FirstRequest(tenure_core::AcquireMode),
    /// Some request of the call, at the latest its last (ZooKeeper, whose
    /// session any request refreshes; Kubernetes, whose replace carries the
    /// renew time).
    LastRequest,
}

/// Real-time settings for the cases, chosen per backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The TTL every case uses; must satisfy the backend's capabilities.
    pub ttl: Duration,
    /// One round trip plus scheduling noise: the allowance added to every
    /// deadline the suite checks, and the bound for a step that takes one
    /// request (a waiting acquire on a vacant key).
    pub round_trip: Duration,
    /// "At once" for a hand-over (a release or resignation to a waiting
    /// standby): the bound on the median of the samples a case takes. Tight
    /// enough that a standby that polls fails: real backends on loopback
    /// measure 3 to 12 ms.
    pub at_once: Duration,
    /// "At once" for every single hand-over sample.
    pub at_once_max: Duration,
    /// How long to let requests land when the factory cannot
    /// [count waiters](BackendFactory::waiting).
    pub settle: Duration,
    /// The servers run inside the test process (the memory backend): a
    /// timing case then needs no other case of this process to run beside
    /// it, but other test processes cannot skew it, so it does not wait for
    /// them (the machine lock across processes is for servers of their own).
    pub in_process: bool,
    /// How long a server node cut off from its peers goes on serving its
    /// clients as if nothing happened, before it notices and drops them
    /// (ZooKeeper: `syncLimit` × `tickTime`; zero for etcd, whose members
    /// refuse at once what requires a leader): a standby whose watch is on
    /// such a node hears of a failover no sooner.
    pub cut_off_noticed: Duration,
}

impl Timing {
    /// 1 s (or the backend's minimum, rounded up to its granularity), 250 ms
    /// round trip, hand-overs at once within a median of 25 ms and 100 ms
    /// each, 500 ms settle: real-time defaults for a networked backend.
    pub fn for_capabilities(caps: &Capabilities) -> Timing {
        let mut ttl = caps.min_ttl.max(Duration::from_secs(1));
        let g = caps.ttl_granularity.as_nanos();
        if g > 0 && !ttl.as_nanos().is_multiple_of(g) {
            ttl = caps.ttl_granularity * (ttl.as_nanos() / g + 1) as u32;
        }
        if let Some(max) = caps.max_ttl {
            ttl = ttl.min(max);
        }
        Timing {
            ttl,
            round_trip: Duration::from_millis(250),
            at_once: Duration::from_millis(25),
            at_once_max: Duration::from_millis(100),
            settle: Duration::from_millis(500),
            in_process: false,
            cut_off_noticed: Duration::ZERO,
        }
    }
}

/// Control over the backend's server nodes, for the cases that fault the
/// servers rather than one client. Nodes are numbered from 0.
///
/// Only `nodes`, `pause` and `unpause` are required; the other faults
/// default to [`Error::Unsupported`], and the cases that need them are then
/// skipped. `tenure_testkit::ClusterServers` implements every one for a
/// harness `Cluster`.
#[async_trait]
pub trait ServerFaults: Send + Sync + 'static {
    /// How many nodes the deployment has.
    fn nodes(&self) -> usize;
    /// Freezes node `node` (docker pause: no answers, no timers).
    async fn pause(&self, node: usize) -> Result<()>;
    /// Thaws it.
    async fn unpause(&self, node: usize) -> Result<()>;
    /// Kills node `node` (SIGKILL; its data stays) and returns once it is down.
    async fn kill(&self, _node: usize) -> Result<()> {
        Err(unsupported("killing a server node"))
    }
    /// Starts a killed node `node` again and returns once it serves.
    async fn start(&self, _node: usize) -> Result<()> {
        Err(unsupported("starting a server node"))
    }
    /// Kills every node, starts them all again, and returns once the
    /// deployment serves (with a leader, where it elects one).
    async fn restart_all(&self) -> Result<()> {
        Err(unsupported("restarting the servers"))
    }
    /// Cuts node `node` off from its peers but not from clients: it still
    /// answers, but without a leader to commit through (and it learns of no
    /// change), as a member on the wrong side of a partition does.
    async fn isolate(&self, _node: usize) -> Result<()> {
        Err(unsupported("cutting a server node off from its peers"))
    }
    /// Reconnects an [isolated](Self::isolate) node to its peers.
    async fn rejoin(&self, _node: usize) -> Result<()> {
        Err(unsupported("reconnecting a server node to its peers"))
    }
    /// The node the servers themselves elected leader (raft, zab), or `None`
    /// while they have none; [`Error::Unsupported`] where the deployment
    /// elects no leader (independent Redis masters).
    async fn leader(&self) -> Result<Option<usize>> {
        Err(unsupported("naming the servers' leader"))
    }
    /// From now on node `node` gives every session (every client's hold on
    /// its leases) that connects or reconnects to it at most `max`, instead
    /// of the timeout it asks for (`None`: the node's defaults again), as a
    /// ZooKeeper server whose `maxSessionTimeout` is below it does (servers
    /// that disagree, a rolling configuration change); the servers then
    /// expire such a session `max` after they last heard of it. Returns once
    /// the node serves so. Clients connected to it may reconnect (the
    /// harness restarts a ZooKeeper node). For the case whose holder's
    /// session shrinks on a reconnect; [`Error::Unsupported`] where the
    /// servers cannot be made to (etcd, Redis, the Lease API: a lease's TTL
    /// is the client's to choose), and the case is skipped.
    async fn limit_sessions(&self, _node: usize, _max: Option<Duration>) -> Result<()> {
        Err(unsupported(
            "giving the sessions on one server node a shorter timeout than they ask for",
        ))
    }
    /// Returns once the deployment is whole and steady: every node serves
    /// and, where the servers elect a leader, the same one has led for a
    /// while. The suite calls it after every case that may fault the
    /// servers, so that the next case does not run into the end of a
    /// re-election the fault set off (an etcd leader elected after a pause
    /// extends every lease). The default returns at once.
    async fn settle(&self) -> Result<()> {
        Ok(())
    }
}

fn unsupported(operation: &'static str) -> Error {
    Error::Unsupported {
        backend: "this factory's ServerFaults",
        operation,
    }
}

/// A candidate binary speaking [`crate::process::protocol`] (such as
/// `tenure-candidate`, or a backend's own built on
/// [`main_with`](crate::process::candidate::main_with)) and the URL it
/// connects to the deployment with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateCommand {
    /// The binary.
    pub program: std::path::PathBuf,
    /// The backend URL it is given.
    pub url: String,
}

/// A property the backend documents it does not keep, so the suite records
/// its violations in the report instead of failing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The property.
    pub property: Property,
    /// Why, as the backend's documentation says it (shown in the report).
    pub why: &'static str,
}

/// Makes clients of one backend deployment for the suite; a backend author
/// implements this once and gets every case.
///
/// Capabilities are the backend's own (`client.capabilities()`), never
/// adjusted to make a case pass. Optional hooks return `None` by default;
/// cases that need one are then skipped or fall back to waiting
/// [`Timing::settle`].
#[async_trait]
pub trait BackendFactory: Send + Sync + 'static {
    /// The backend's name in the report (`memory`, `etcd-3node`, ...).
    fn name(&self) -> &str;

    /// What the backend promises; must equal what its clients report.
    fn capabilities(&self) -> Capabilities;

    /// A NEW independent client with its own connection or session.
    async fn client(&self) -> Result<Client>;

    /// Timing for the cases; the default suits a networked backend.
    fn timing(&self) -> Timing {
        Timing::for_capabilities(&self.capabilities())
    }

    /// The server's own write counter (etcd metrics, ZooKeeper `mntr`, Redis
    /// `INFO commandstats`, ...), for the herd figure.
    async fn server_writes(&self) -> Option<Result<u64>> {
        None
    }

    /// Every request and notification the servers served to clients, of
    /// any kind (reads, writes, watches opened, watch events and grants
    /// pushed to waiting candidates), heartbeats excluded (lease keep-alives,
    /// session pings: a holder renews whether or not anyone waits), from
    /// the servers' own counters where they have them; for the herd figure.
    /// Clients the factory keeps for looking at the servers need not count.
    async fn server_requests(&self) -> Option<Result<u64>> {
        None
    }

    /// Logins the servers served (etcd's `Authenticate`), already counted
    /// in [`server_writes`](Self::server_writes) (one write each, where a
    /// login is a write) and in [`server_requests`](Self::server_requests);
    /// `None` where clients do not log in. A candidate whose credentials
    /// lapsed while it waited logs in again when its turn comes: the herd
    /// case excuses one such login per leadership change, not more.
    async fn server_logins(&self) -> Option<Result<u64>> {
        None
    }

    /// How many candidates wait in line for `key` on the server.
    async fn waiting(&self, _key: &ElectionKey) -> Option<Result<usize>> {
        None
    }

    /// Why the backend's client, having given up a server node that froze,
    /// may connect to that same node again before it tries another, if it
    /// may (zookeeper-client picks the next server at random). The case
    /// that pauses the holder's node then excuses a step-down, but only
    /// where the client's link shows it did open a connection to the frozen
    /// node during the pause, and the step-down was safe and on time.
    fn retries_frozen_nodes(&self) -> Option<&'static str> {
        None
    }

    /// If the backend's client backs off between attempts to reconnect: the
    /// longest outage after which its next attempt is sure to come well
    /// within a lease, and why. After a longer outage that attempt may come
    /// after the lease has run out, and the term ends at its `valid_until`
    /// (safely, but the fault was no transient one for that client). The
    /// case that fails a holder's calls keeps its outage within this and
    /// says so. `None` (the default): the client reconnects at once.
    fn reconnect_backoff(&self) -> Option<(Duration, &'static str)> {
        None
    }

    /// Why a grant whose answer was lost on the way back may stay on the
    /// servers until its TTL runs out, if it may: the client cannot undo
    /// what it never heard of (a record it would need the answer's version
    /// or name to delete). The case whose campaign loses its answer then
    /// gives a standby TTL + expiry slack + a round trip to lead, instead
    /// of a round trip.
    fn grant_outlives_lost_answer(&self) -> Option<&'static str> {
        None
    }

    /// Which request of a grant or a renewal starts the lease's TTL on the
    /// servers, as the link sees the call's requests: the case that holds
    /// back a call's answers bounds the deadline the call returned by that
    /// request's forwarding plus the TTL. [`TtlStart::LastRequest`] (the
    /// default) is the loosest bound that is right for every backend;
    /// naming the first makes the bound catch a deadline counted from a
    /// later request than the one that started the TTL.
    fn ttl_starts_with(&self) -> TtlStart {
        TtlStart::LastRequest
    }

    /// Whether the server holds any state for `key` (used to prove that
    /// rejected input wrote nothing).
    async fn key_exists(&self, _key: &ElectionKey) -> Option<Result<bool>> {
        None
    }

    /// Control over the server nodes (cases that need it are skipped without it).
    fn servers(&self) -> Option<&dyn ServerFaults> {
        None
    }

    /// How to start a candidate as a separate OS process on this deployment,
    /// for the SIGSTOP and SIGKILL cases (skipped without it).
    fn candidate(&self) -> Option<CandidateCommand> {
        None
    }

    /// The servers' name and version (`etcd 3.4.23`), written into every
    /// report.
    async fn server_version(&self) -> Option<String> {
        None
    }

    /// Deletes the election's state on the servers out of band, as an
    /// operator could (etcd: the election's keys; ZooKeeper: its znodes;
    /// Kubernetes: the Lease object); the case that needs it is skipped
    /// without it.
    async fn wipe_election(&self, _key: &ElectionKey) -> Option<Result<()>> {
        None
    }

    /// Makes the servers forget their history up to now, and ends the
    /// watches that history served the way the servers do when it is gone:
    /// etcd writes past its current revision and compacts there (its open,
    /// caught-up watches go on); the Lease test server does the same to its
    /// etcd and ends every open watch with 410 Gone, as kube-apiserver does
    /// when etcd cancels a watch for compaction. Where it ends watches, it
    /// returns once their clients have watched again (or have had a few
    /// seconds to), so that a case need not wait blindly for them. `None`
    /// (the default) where
    /// the servers keep no such history or the factory cannot compact it:
    /// the case that needs it is skipped.
    async fn compact_history(&self) -> Option<Result<()>> {
        None
    }

    /// Properties the backend documents it does not keep, beyond what its
    /// capabilities already say (`fencing: false`, `herd_free_wait: false`).
    fn gaps(&self) -> Vec<Gap> {
        Vec::new()
    }

    /// Lets go of what earlier cases left running that loads the machine
    /// (a ZooKeeper factory keeps every client's session open, and each one
    /// pings): called when a case has the machine, or this backend, to
    /// itself, before it starts. Must not return before what it let go of is
    /// done with the servers (so it is not counted in the case's figures).
    async fn quiesce(&self) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl<T: BackendFactory + ?Sized> BackendFactory for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    async fn client(&self) -> Result<Client> {
        (**self).client().await
    }
    fn timing(&self) -> Timing {
        (**self).timing()
    }
    async fn server_writes(&self) -> Option<Result<u64>> {
        (**self).server_writes().await
    }
    async fn server_requests(&self) -> Option<Result<u64>> {
        (**self).server_requests().await
    }
    async fn server_logins(&self) -> Option<Result<u64>> {
        (**self).server_logins().await
    }

    fn retries_frozen_nodes(&self) -> Option<&'static str> {
        (**self).retries_frozen_nodes()
    }
    fn reconnect_backoff(&self) -> Option<(Duration, &'static str)> {
        (**self).reconnect_backoff()
    }
    fn grant_outlives_lost_answer(&self) -> Option<&'static str> {
        (**self).grant_outlives_lost_answer()
    }
    fn ttl_starts_with(&self) -> TtlStart {
        (**self).ttl_starts_with()
    }
    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        (**self).waiting(key).await
    }
    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        (**self).key_exists(key).await
    }
    fn servers(&self) -> Option<&dyn ServerFaults> {
        (**self).servers()
    }
    fn candidate(&self) -> Option<CandidateCommand> {
        (**self).candidate()
    }
    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        (**self).wipe_election(key).await
    }
    async fn compact_history(&self) -> Option<Result<()>> {
        (**self).compact_history().await
    }
    async fn server_version(&self) -> Option<String> {
        (**self).server_version().await
    }
    fn gaps(&self) -> Vec<Gap> {
        (**self).gaps()
    }
    async fn quiesce(&self) -> Result<()> {
        (**self).quiesce().await
    }
}

/// Waits until the factory's server write counter has not moved for
/// `quiet`, for at most `limit`; `Ok(false)` if it kept moving, `Ok(true)`
/// at once where the factory counts no writes.
///
/// For [`BackendFactory::quiesce`] of a deployment that cases share: leases
/// that earlier cases left to expire expire on the servers up to one TTL
/// (plus the expiry slack) later, and their expiry is a write that a
/// counting case must not count. `quiet` = TTL + expiry slack covers them.
pub async fn until_writes_settle(
    factory: &dyn BackendFactory,
    quiet: Duration,
    limit: Duration,
) -> Result<bool> {
    let start = tokio::time::Instant::now();
    let Some(first) = factory.server_writes().await else {
        return Ok(true);
    };
    let (mut last, mut since) = (first?, start);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = tokio::time::Instant::now();
        let Some(writes) = factory.server_writes().await else {
            return Ok(true);
        };
        let writes = writes?;
        if writes != last {
            (last, since) = (writes, now);
        } else if now - since >= quiet {
            return Ok(true);
        }
        if now - start >= limit {
            return Ok(false);
        }
    }
}
