//! The suite's factory for the in-process [`MemoryBackend`], dressed as a
//! cluster of simulated server nodes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{Capabilities, ElectionKey, LeaseBackend, MemoryBackend, Result};

use crate::factory::{
    BackendFactory, CandidateCommand, Client, Link, LinkFault, ServerFaults, Timing,
};

/// What the servers do with their state when they recover: elect a new
/// leader of their own, or come back from a restart.
pub type Recovery = Arc<dyn Fn(&MemoryBackend) + Send + Sync>;

/// Clients of one in-process server that plays a cluster of nodes (3 by
/// default). Each client has its own fault knobs, which serve as its
/// [`Link`], and talks to one node:
///
/// - a client of a paused (frozen) node has its requests served by the
///   others, as a client with every endpoint moves them after a try that
///   timed out, but its watches are silent until the node is back; a
///   factory made [`clients_stay_on_frozen_nodes`](Self::clients_stay_on_frozen_nodes)
///   has clients whose calls hang instead;
/// - a killed node cuts its clients off; they move to a live one, as a
///   client with every endpoint does;
/// - while the servers have no leader (theirs was killed, or is paused),
///   every client is cut off; a killed leader is replaced after the
///   re-election time (150 ms) if a majority of nodes is up;
/// - a node [given a session limit](ServerFaults::limit_sessions) keeps the
///   sessions of the clients attached to it, then or later (a reconnect),
///   that long at most ([`MemoryBackend::limit_session`]);
/// - on every election and after [`restart_all`](ServerFaults::restart_all)
///   (100 ms down) the servers recover their state as etcd and ZooKeeper do
///   from disk: holders, queues and tokens are kept, and every holder's TTL
///   starts over ([`MemoryBackend::refresh_all`]); a factory made
///   [`on_recovery`](Self::on_recovery) does something else.
///
/// With [`with_candidate`](Self::with_candidate), candidate processes are
/// clients of the same server through a loopback TCP front.
#[derive(Clone)]
pub struct MemoryFactory {
    server: MemoryBackend,
    timing: Timing,
    name: String,
    cluster: Arc<Cluster>,
    candidate: Option<PathBuf>,
    front: Arc<OnceLock<Option<String>>>,
    ttl_start: crate::factory::TtlStart,
}

impl std::fmt::Debug for MemoryFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryFactory")
            .field("name", &self.name)
            .field("timing", &self.timing)
            .field("nodes", &self.cluster.nodes)
            .field("candidate", &self.candidate)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryFactory {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryFactory {
    /// A fresh server with default capabilities on 3 nodes; 600 ms TTL.
    pub fn new() -> Self {
        Self::with_capabilities(MemoryBackend::default_capabilities())
    }

    /// A fresh server on 3 nodes that declares `capabilities`.
    pub fn with_capabilities(capabilities: Capabilities) -> Self {
        let mut timing = Timing::for_capabilities(&capabilities);
        let ttl = timing
            .ttl
            .min(Duration::from_millis(600))
            .max(capabilities.min_ttl);
        let g = capabilities.ttl_granularity.as_nanos().max(1);
        timing.ttl = Duration::from_nanos((ttl.as_nanos().div_ceil(g) * g) as u64);
        timing.round_trip = Duration::from_millis(200);
        timing.settle = Duration::from_millis(50);
        timing.in_process = true;
        MemoryFactory {
            server: MemoryBackend::with_capabilities(capabilities),
            timing,
            name: "memory".into(),
            cluster: Arc::new(Cluster::new(3, Arc::new(MemoryBackend::refresh_all), false)),
            candidate: None,
            front: Arc::default(),
            ttl_start: crate::factory::TtlStart::FirstRequest(tenure_core::AcquireMode::Once),
        }
    }

    /// The same, naming `start` as the request that starts a lease's TTL
    /// ([`BackendFactory::ttl_starts_with`]; a memory call is one request,
    /// so the first of a single attempt by default: a waiting one counts
    /// from the server's grant): to show what naming it catches.
    pub fn naming_ttl_start(mut self, start: crate::factory::TtlStart) -> Self {
        self.ttl_start = start;
        self
    }

    /// The same, reported under another name (its own report file).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The same server played by `nodes` nodes (1 or more); with one node,
    /// pausing it cuts every client off, and it elects itself at once.
    pub fn with_nodes(mut self, nodes: usize) -> Self {
        let stay_on_frozen = self.cluster.state().stay_on_frozen;
        self.cluster = Arc::new(Cluster::new(
            nodes.max(1),
            self.cluster.recovery.clone(),
            stay_on_frozen,
        ));
        self
    }

    /// The same, with clients that stay on a frozen node: their calls hang
    /// until it is back, as those of a client given one endpoint (or one
    /// that tries the same frozen node again and again) do. A mutant's.
    pub fn clients_stay_on_frozen_nodes(mut self) -> Self {
        self.cluster = Arc::new(Cluster::new(
            self.cluster.nodes,
            self.cluster.recovery.clone(),
            true,
        ));
        self
    }

    /// The same, with `recovery` instead of refreshing every lease when the
    /// servers elect a leader or come back from a restart: a mutant can lose
    /// its leases, or its tokens, there.
    pub fn on_recovery(
        mut self,
        recovery: impl Fn(&MemoryBackend) + Send + Sync + 'static,
    ) -> Self {
        let stay_on_frozen = self.cluster.state().stay_on_frozen;
        self.cluster = Arc::new(Cluster::new(
            self.cluster.nodes,
            Arc::new(recovery),
            stay_on_frozen,
        ));
        self
    }

    /// The same, starting candidate processes with `program` (a binary built
    /// on [`main_with`](crate::process::candidate::main_with) that knows
    /// `memory+tcp://`, such as `tenure-candidate`).
    pub fn with_candidate(mut self, program: impl Into<PathBuf>) -> Self {
        self.candidate = Some(program.into());
        self
    }

    /// The same, with the server's clock running `rate` times as fast as
    /// the clients' (1.01: 1 % fast; see
    /// [`MemoryBackend::set_server_clock_rate`]): its leases expire early
    /// by the clients' clock. The Elector's default drift margin is 2 % of
    /// the TTL (`tenure_core::default_drift_margin`), and the suite's
    /// Electors and candidacies use it: a server up to about 2 % fast
    /// expires no lease before its holder's `valid_until`, a faster one
    /// lets a standby in while the holder still leads.
    pub fn with_server_clock_rate(self, rate: f64) -> Self {
        self.server.set_server_clock_rate(rate);
        self
    }

    /// The server, for its counters.
    pub fn server(&self) -> &MemoryBackend {
        &self.server
    }

    /// A new client of the server, attached to a node like every client the
    /// factory makes, as the concrete [`MemoryBackend`] (to wrap it).
    pub fn memory_client(&self) -> MemoryBackend {
        let client = self.server.client();
        self.cluster.attach(client.clone());
        client
    }

    /// The [`Link`] of a client made by [`memory_client`](Self::memory_client):
    /// its faults, and the simulated node it is attached to.
    pub fn link(&self, client: &MemoryBackend) -> Arc<dyn Link> {
        Arc::new(MemoryLink(client.clone(), Some(self.cluster.clone())))
    }

    /// A command starting a candidate process on `make`'s clients, through
    /// this factory's front (started on the current runtime on first use):
    /// `None` without [`with_candidate`](Self::with_candidate) or a runtime.
    pub fn candidate_serving(
        &self,
        make: impl Fn() -> Arc<dyn LeaseBackend> + Send + Sync + 'static,
    ) -> Option<CandidateCommand> {
        let program = self.candidate.clone()?;
        let url = self.front.get_or_init(|| {
            crate::process::front::serve(Arc::new(make))
                .map(|addr| format!("memory+tcp://{addr}"))
                .ok()
        });
        Some(CandidateCommand {
            program,
            url: url.clone()?,
        })
    }
}

/// The [`Link`] of one memory client: its [`Faults`](tenure_core::memory::Faults).
pub fn memory_link(client: &MemoryBackend) -> Arc<dyn Link> {
    Arc::new(MemoryLink(client.clone(), None))
}

/// A client's faults, and the simulated cluster it is attached to.
struct MemoryLink(MemoryBackend, Option<Arc<Cluster>>);

#[async_trait]
impl Link for MemoryLink {
    async fn set(&self, fault: LinkFault) -> Result<()> {
        let faults = self.0.faults();
        faults.reset();
        match fault {
            LinkFault::Pass => {}
            LinkFault::Delay(d) => {
                faults.delay_requests(d / 2);
                faults.delay_responses(d - d / 2);
            }
            LinkFault::DelayAnswers(d) => faults.delay_responses(d),
            LinkFault::Blackhole => faults.cut_off(),
            LinkFault::Reset => faults.reset_connections(),
            // As the fault proxy does: open connections reset, new ones refused.
            LinkFault::FailCalls => {
                faults.fail_calls(true);
                faults.reset_connections();
            }
            LinkFault::DropAnswers => faults.drop_answers(true),
        }
        Ok(())
    }

    fn last_request_at(&self) -> Option<tokio::time::Instant> {
        self.0.faults().last_request_at()
    }

    fn requests_since(&self, since: tokio::time::Instant) -> Option<Vec<tokio::time::Instant>> {
        Some(self.0.faults().requests_since(since))
    }

    fn last_answer_at(&self) -> Option<tokio::time::Instant> {
        self.0.faults().last_answer_at()
    }

    fn in_flight(&self) -> Option<usize> {
        Some(self.0.faults().in_flight())
    }

    fn nodes_in_use(&self) -> Option<Vec<usize>> {
        let cluster = self.1.as_ref()?;
        let st = cluster.state();
        let node = st
            .clients
            .iter()
            .find(|(c, _)| std::ptr::eq(c.faults(), self.0.faults()))
            .map(|&(_, node)| node)?;
        Some(vec![node])
    }

    /// Attaches the client to `node`; `None` leaves it there (a memory
    /// client talks to one node at a time).
    async fn confine_to(&self, node: Option<usize>) -> Result<()> {
        let (Some(cluster), Some(node)) = (self.1.as_ref(), node) else {
            return match self.1 {
                Some(_) => Ok(()),
                None => Err(tenure_core::Error::Unsupported {
                    backend: "memory link",
                    operation: "confining a client that belongs to no simulated cluster",
                }),
            };
        };
        if node >= cluster.nodes {
            return Err(tenure_core::Error::invalid(
                "node",
                format!("the simulated cluster has {} nodes", cluster.nodes),
            ));
        }
        cluster.update(|st| {
            for (c, at) in st.clients.iter_mut() {
                if std::ptr::eq(c.faults(), self.0.faults()) {
                    *at = node;
                }
            }
        });
        Ok(())
    }
}

#[async_trait]
impl BackendFactory for MemoryFactory {
    fn name(&self) -> &str {
        &self.name
    }

    /// A memory call is one request (unless told otherwise, to show what
    /// naming it catches).
    fn ttl_starts_with(&self) -> crate::factory::TtlStart {
        self.ttl_start
    }

    fn capabilities(&self) -> Capabilities {
        tenure_core::LeaseBackend::capabilities(&self.server)
    }

    async fn client(&self) -> Result<Client> {
        let client = self.memory_client();
        Ok(Client {
            backend: Arc::new(client.clone()),
            link: Some(self.link(&client)),
        })
    }

    fn timing(&self) -> Timing {
        self.timing
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        Some(Ok(self.server.stats().writes()))
    }

    async fn server_requests(&self) -> Option<Result<u64>> {
        Some(Ok(self.server.stats().served()))
    }

    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        Some(Ok(self.server.queue_len(key)))
    }

    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        Some(Ok(self.server.knows(key)))
    }

    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        self.server.wipe(key);
        Some(Ok(()))
    }

    async fn compact_history(&self) -> Option<Result<()>> {
        // The memory server keeps no history: its waiters are queued on the
        // server, and a watch is told the current state, not a revision.
        // Nothing to forget; the case runs as it would on a server whose
        // compaction its clients survive.
        Some(Ok(()))
    }

    fn servers(&self) -> Option<&dyn ServerFaults> {
        Some(self)
    }

    fn candidate(&self) -> Option<CandidateCommand> {
        let factory = self.clone();
        self.candidate_serving(move || Arc::new(factory.memory_client()))
    }
}

#[async_trait]
impl ServerFaults for MemoryFactory {
    fn nodes(&self) -> usize {
        self.cluster.nodes
    }

    async fn pause(&self, node: usize) -> Result<()> {
        self.cluster.update(|st| st.paused[node] = true);
        Ok(())
    }

    async fn unpause(&self, node: usize) -> Result<()> {
        self.cluster.update(|st| st.paused[node] = false);
        Ok(())
    }

    async fn kill(&self, node: usize) -> Result<()> {
        let elect = self.cluster.update(|st| st.kill(node));
        if elect {
            self.cluster.clone().elect_later(self.server.clone());
        }
        Ok(())
    }

    async fn start(&self, node: usize) -> Result<()> {
        let elect = self.cluster.update(|st| {
            st.down[node] = false;
            st.leader.is_none() && !st.electing
        });
        if elect {
            self.cluster.clone().elect_later(self.server.clone());
        }
        Ok(())
    }

    async fn restart_all(&self) -> Result<()> {
        self.cluster.update(|st| {
            for node in 0..st.down.len() {
                st.kill(node);
            }
            st.electing = true;
        });
        tokio::time::sleep(RESTART).await;
        self.cluster
            .update(|st| st.down.iter_mut().for_each(|d| *d = false));
        tokio::time::sleep(REELECTION).await;
        self.cluster.elect(&self.server);
        Ok(())
    }

    async fn isolate(&self, node: usize) -> Result<()> {
        let elect = self.cluster.update(|st| {
            st.isolated[node] = true;
            if st.leader == Some(node) {
                st.leader = None;
            }
            let elect = st.leader.is_none() && !st.electing;
            st.electing |= elect;
            elect
        });
        if elect {
            self.cluster.clone().elect_later(self.server.clone());
        }
        Ok(())
    }

    async fn rejoin(&self, node: usize) -> Result<()> {
        self.cluster.update(|st| st.isolated[node] = false);
        Ok(())
    }

    async fn leader(&self) -> Result<Option<usize>> {
        Ok(self.cluster.state().leader)
    }

    /// The node's clients, and every client attached to it later (a
    /// reconnect), have their sessions kept at most `max`
    /// ([`MemoryBackend::limit_session`]); `None` lifts it for those the
    /// node has then.
    async fn limit_sessions(&self, node: usize, max: Option<Duration>) -> Result<()> {
        if node >= self.cluster.nodes {
            return Err(tenure_core::Error::invalid(
                "node",
                format!("the simulated cluster has {} nodes", self.cluster.nodes),
            ));
        }
        self.cluster.update(|st| st.session_limits[node] = max);
        Ok(())
    }
}

/// How long the simulated servers take to elect a new leader.
const REELECTION: Duration = Duration::from_millis(150);

/// How long the simulated servers are down in a restart, before they elect.
const RESTART: Duration = Duration::from_millis(100);

/// The simulated nodes and the clients attached to them.
struct Cluster {
    nodes: usize,
    recovery: Recovery,
    state: Mutex<ClusterState>,
}

struct ClusterState {
    /// Whether a frozen node's clients stay on it (their calls hang).
    stay_on_frozen: bool,
    clients: Vec<(MemoryBackend, usize)>,
    attached: usize,
    down: Vec<bool>,
    paused: Vec<bool>,
    /// Cut off from their peers, not from clients: their clients' watches
    /// go silent, their requests move to nodes that can serve.
    isolated: Vec<bool>,
    /// What each node gives the sessions on it at most
    /// ([`ServerFaults::limit_sessions`]).
    session_limits: Vec<Option<Duration>>,
    leader: Option<usize>,
    electing: bool,
}

impl ClusterState {
    /// Kills `node`; whether an election must start.
    fn kill(&mut self, node: usize) -> bool {
        self.down[node] = true;
        self.paused[node] = false;
        if let Some(live) = (0..self.down.len()).find(|&n| !self.down[n]) {
            for (_, at) in self.clients.iter_mut().filter(|(_, at)| *at == node) {
                *at = live;
            }
        }
        if self.leader == Some(node) {
            self.leader = None;
        }
        let elect = self.leader.is_none() && !self.electing;
        self.electing |= elect;
        elect
    }

    /// Whether a client of `node` reaches the servers' leader: through
    /// `node`, or, where that is frozen, through the others.
    fn reaches(&self, node: usize) -> bool {
        let through_node = !self.paused[node] || !self.stay_on_frozen;
        !self.down[node] && through_node && self.leader.is_some_and(|l| !self.paused[l])
    }

    /// Cuts off, or lets through, every client as its node stands, and
    /// keeps its session as its node gives it.
    fn apply(&self) {
        for (client, node) in &self.clients {
            client.limit_session(self.session_limits[*node]);
            client.faults().node_down(!self.reaches(*node));
            client
                .faults()
                .silence_watches(self.isolated[*node] || self.paused[*node]);
        }
    }
}

impl Cluster {
    fn new(nodes: usize, recovery: Recovery, stay_on_frozen: bool) -> Self {
        Cluster {
            nodes,
            recovery,
            state: Mutex::new(ClusterState {
                stay_on_frozen,
                clients: Vec::new(),
                attached: 0,
                down: vec![false; nodes],
                paused: vec![false; nodes],
                isolated: vec![false; nodes],
                session_limits: vec![None; nodes],
                leader: Some(0),
                electing: false,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the state, then cuts off or lets through every client.
    fn update<T>(&self, change: impl FnOnce(&mut ClusterState) -> T) -> T {
        let mut st = self.state();
        let out = change(&mut st);
        st.apply();
        out
    }

    /// Attaches `client` to the next live node, round robin.
    fn attach(&self, client: MemoryBackend) {
        self.update(|st| {
            let n = st.down.len();
            let node = (0..n)
                .map(|i| (st.attached + i) % n)
                .find(|&i| !st.down[i])
                .unwrap_or(st.attached % n);
            st.attached += 1;
            st.clients.push((client, node));
        });
    }

    /// Elects a leader after [`REELECTION`].
    fn elect_later(self: Arc<Self>, server: MemoryBackend) {
        tokio::spawn(async move {
            tokio::time::sleep(REELECTION).await;
            self.elect(&server);
        });
    }

    /// Elects the first live node if a majority is up, and recovers the
    /// servers' state; else waits for a node to start.
    fn elect(&self, server: &MemoryBackend) {
        let mut st = self.state();
        st.electing = false;
        let live: Vec<usize> = (0..self.nodes)
            .filter(|&n| !st.down[n] && !st.isolated[n])
            .collect();
        if st.leader.is_some() || live.len() <= self.nodes / 2 {
            return;
        }
        (self.recovery)(server);
        st.leader = live.first().copied();
        st.apply();
    }
}
