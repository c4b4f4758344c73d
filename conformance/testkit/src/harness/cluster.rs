//! A cluster of server containers and the faults injected into its nodes.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, NetworkConnectRequest, NetworkCreateRequest,
    NetworkDisconnectRequest, PortBinding,
};
use bollard::query_parameters::{CreateContainerOptionsBuilder, KillContainerOptionsBuilder};
use bollard::Docker;
use futures::future::join_all;

use super::auth::{AuthSetup, EtcdAuth};
use super::docker::{self, labels};
use super::error::{HarnessError, Result};
use super::image::Image;
use super::ports;
use super::probe;
use super::servers::{alias, Kind};
use super::stats::ServerStats;
use super::wait::wait_for;

/// How long [`Cluster::start`] and [`Cluster::restart_all`] wait for every
/// node to serve (three JVMs starting at once on two cores take a while).
pub const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long [`Cluster::start_node`] waits for the node to serve again.
pub const NODE_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One etcd cluster of `nodes` members (1 or 3 in the suite).
    Etcd {
        /// Members.
        nodes: usize,
    },
    /// One ZooKeeper ensemble of `nodes` servers (1: standalone).
    ZooKeeper {
        /// Servers.
        nodes: usize,
    },
    /// `masters` independent Redis masters (Redlock's N).
    Redis {
        /// Masters.
        masters: usize,
    },
}

impl Topology {
    fn kind(self) -> Kind {
        match self {
            Topology::Etcd { .. } => Kind::Etcd,
            Topology::ZooKeeper { .. } => Kind::ZooKeeper,
            Topology::Redis { .. } => Kind::Redis,
        }
    }

    /// How many nodes (containers) it has.
    pub fn size(self) -> usize {
        match self {
            Topology::Etcd { nodes } | Topology::ZooKeeper { nodes } => nodes,
            Topology::Redis { masters } => masters,
        }
    }
}

/// One server container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    index: usize,
    name: String,
    container: String,
    host_port: u16,
}

impl Node {
    /// Its position in [`Cluster::nodes`].
    pub fn index(&self) -> usize {
        self.index
    }

    /// The name its peers know it by on the cluster network (`n1`, `n2`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The docker container name.
    pub fn container(&self) -> &str {
        &self.container
    }

    /// The port on 127.0.0.1 its client port is published on; it stays the
    /// same across kill and start.
    pub fn host_port(&self) -> u16 {
        self.host_port
    }

    /// `127.0.0.1:<host port>`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.host_port)
    }

    /// The same, as a socket address (for a [`FaultProxy`](crate::proxy::FaultProxy) upstream).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.host_port))
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct NodeState {
    stopped: bool,
    paused: bool,
    partitioned: bool,
}

/// Servers running in containers, removed again when dropped.
///
/// Use it from a multi- or current-thread tokio runtime on a real clock. All
/// controls take `&self`, so a cluster can be shared (`Arc<Cluster>`)
/// between the tasks of a test.
#[derive(Debug)]
pub struct Cluster {
    topology: Topology,
    kind: Kind,
    run: String,
    image: Image,
    client_network: String,
    cluster_network: String,
    nodes: Vec<Node>,
    state: Mutex<Vec<NodeState>>,
    /// etcd with authentication on, and what its nodes need for it.
    auth: Option<(EtcdAuth, AuthSetup)>,
    /// Flags every etcd member starts with besides the harness's own.
    etcd_args: Vec<String>,
}

fn new_run_id() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!(
        "{:x}-{}-{:04x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        rand::random::<u16>()
    )
}

impl Cluster {
    /// Starts `topology` and returns once every node serves (and, for etcd
    /// and ZooKeeper, a leader is elected). Builds the image if needed and
    /// first [`sweep`](super::sweep)s what dead test processes left behind.
    pub async fn start(topology: Topology) -> Result<Cluster> {
        Self::start_with(topology, None, Vec::new()).await
    }

    /// Starts an etcd cluster of `nodes` members with authentication on
    /// (see [`EtcdAuth`]): it returns once auth is enabled; clients then
    /// need the root user's credentials for every key-value request.
    pub async fn start_etcd_with_auth(nodes: usize, auth: EtcdAuth) -> Result<Cluster> {
        Self::start_with(Topology::Etcd { nodes }, Some(auth), Vec::new()).await
    }

    /// Starts an etcd cluster of `nodes` members, each started with `args`
    /// (`"--max-txn-ops=4"`) besides the harness's own flags.
    pub async fn start_etcd_with_args(nodes: usize, args: &[&str]) -> Result<Cluster> {
        let args = args.iter().map(|a| a.to_string()).collect();
        Self::start_with(Topology::Etcd { nodes }, None, args).await
    }

    /// The authentication the etcd servers run with, if any.
    pub fn etcd_auth(&self) -> Option<&EtcdAuth> {
        self.auth.as_ref().map(|(auth, _)| auth)
    }

    async fn start_with(
        topology: Topology,
        auth: Option<EtcdAuth>,
        etcd_args: Vec<String>,
    ) -> Result<Cluster> {
        let size = topology.size();
        let auth = match auth {
            Some(_) if topology.kind() != Kind::Etcd => {
                return Err(HarnessError::Invalid(format!(
                    "{topology:?}: authentication is for etcd only"
                )))
            }
            Some(auth) => {
                let setup = AuthSetup::new(&auth).await?;
                Some((auth, setup))
            }
            None => None,
        };
        if size == 0 {
            return Err(HarnessError::Invalid(format!("{topology:?} has no nodes")));
        }
        if let Err(e) = super::sweep().await {
            tracing::warn!(error = %e, "sweeping earlier runs failed");
        }
        let image = Image::ensure().await?;
        let run = new_run_id();
        let docker = docker::connect().await?;
        // From here on, dropping `cluster` (also on an error below) removes
        // whatever carries this run's label.
        let mut cluster = Cluster {
            topology,
            kind: topology.kind(),
            client_network: format!("tenure-{run}-client"),
            cluster_network: format!("tenure-{run}-cluster"),
            run,
            image,
            nodes: Vec::with_capacity(size),
            state: Mutex::new(vec![NodeState::default(); size]),
            auth,
            etcd_args,
        };
        for (name, internal) in [
            (&cluster.client_network, false),
            (&cluster.cluster_network, true),
        ] {
            docker
                .create_network(NetworkCreateRequest {
                    name: name.clone(),
                    driver: Some("bridge".to_string()),
                    // Internal: no gateway, so the node's default route (and
                    // with it the port mapping) stays on the client network.
                    internal: Some(internal),
                    labels: Some(labels(&cluster.run)),
                    ..Default::default()
                })
                .await?;
        }
        for index in 0..size {
            let node = cluster.create_node(&docker, index).await?;
            cluster.nodes.push(node);
        }
        cluster.wait_ready(CLUSTER_READY_TIMEOUT).await?;
        if let Some((auth, _)) = &cluster.auth {
            super::auth::enable(&cluster.nodes[0].endpoint(), auth).await?;
        }
        tracing::info!(run = %cluster.run, ?topology, endpoints = ?cluster.endpoints(), auth = ?cluster.etcd_auth().map(|a| &a.tokens), "cluster serving");
        Ok(cluster)
    }

    /// Creates and starts node `index`, picking another host port while
    /// docker reports the picked one taken.
    async fn create_node(&self, docker: &Docker, index: usize) -> Result<Node> {
        let client_port = format!("{}/tcp", self.kind.client_port());
        let name = format!("tenure-{}-{}", self.run, alias(index));
        let mut last_error = None;
        let data = docker::data_dir(&self.run, &alias(index));
        for _ in 0..5 {
            let host_port = ports::pick()?;
            let mut spec = self
                .kind
                .spec(index, self.topology.size(), host_port, &self.run);
            if self.kind == Kind::Etcd {
                spec.cmd.extend(self.etcd_args.iter().cloned());
            }
            if let Some((_, setup)) = &self.auth {
                spec.env.extend(setup.env.iter().cloned());
                spec.cmd = setup.wrap(spec.cmd);
            }
            let body = ContainerCreateBody {
                image: Some(self.image.name().to_string()),
                // No `hostname`: docker 20.10 makes it an alias on every
                // network, and peers must find `nN` on the cluster network only.
                env: Some(spec.env),
                cmd: Some(spec.cmd),
                labels: Some(labels(&self.run)),
                exposed_ports: Some(vec![client_port.clone()]),
                // In memory where it can be (docker::data_dir), else an anonymous volume.
                volumes: data.is_none().then(|| vec!["/data".to_string()]),
                host_config: Some(HostConfig {
                    binds: data
                        .as_ref()
                        .map(|dir| vec![format!("{}:/data", dir.display())]),
                    network_mode: Some(self.client_network.clone()),
                    port_bindings: Some(HashMap::from([(
                        client_port.clone(),
                        Some(vec![PortBinding {
                            host_ip: Some("127.0.0.1".to_string()),
                            host_port: Some(host_port.to_string()),
                        }]),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            };
            docker
                .create_container(
                    Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                    body,
                )
                .await?;
            docker
                .connect_network(
                    &self.cluster_network,
                    NetworkConnectRequest {
                        container: name.clone(),
                        endpoint_config: Some(EndpointSettings {
                            aliases: Some(vec![alias(index)]),
                            ..Default::default()
                        }),
                    },
                )
                .await?;
            match docker.start_container(&name, None).await {
                Ok(()) => {
                    return Ok(Node {
                        index,
                        name: alias(index),
                        container: name,
                        host_port,
                    })
                }
                Err(DockerError::DockerResponseServerError { message, .. })
                    if ports::is_conflict(&message) =>
                {
                    tracing::debug!(host_port, %message, "host port taken; picking another");
                    docker::remove_container(docker, &name).await?;
                    last_error = Some(message);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(HarnessError::Protocol(format!(
            "no free host port for {name}: {}",
            last_error.unwrap_or_default()
        )))
    }

    /// Waits until every node serves and, where there is one, a leader is known.
    async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        wait_for(
            format!("{:?} (run {}) to serve", self.topology, self.run),
            timeout,
            || async {
                let serving = join_all(
                    self.nodes
                        .iter()
                        .map(|n| self.kind.serving_owned(n.endpoint())),
                )
                .await;
                if !serving.iter().all(|s| *s) {
                    return None;
                }
                if self.kind.has_leader() {
                    self.leader_index().await.ok().flatten()?;
                }
                Some(())
            },
        )
        .await
    }

    /// Waits until every node that is neither killed nor paused serves
    /// and, where the servers elect a leader, the same node has led for
    /// `steady` on end (so a re-election a fault set off is over).
    pub async fn settle(&self, steady: Duration) -> Result<()> {
        // The leader seen last, and since when it has been seen on end.
        let since = std::sync::Mutex::new(None::<(Option<usize>, tokio::time::Instant)>);
        wait_for(
            format!("{:?} (run {}) to settle", self.topology, self.run),
            CLUSTER_READY_TIMEOUT,
            || async {
                let serving = join_all(
                    self.reachable()
                        .into_iter()
                        .map(|n| self.kind.serving_owned(n.endpoint())),
                )
                .await;
                let leader = if !serving.iter().all(|s| *s) {
                    None
                } else if self.kind.has_leader() {
                    self.leader_index().await.ok().flatten().map(Some)
                } else {
                    Some(None)
                };
                let now = tokio::time::Instant::now();
                let mut since = since.lock().unwrap_or_else(|e| e.into_inner());
                match (leader, *since) {
                    (None, _) => {
                        *since = None;
                        None
                    }
                    (Some(leader), Some((led, from))) if led == leader => {
                        (now - from >= steady).then_some(())
                    }
                    (Some(leader), _) => {
                        *since = Some((leader, now));
                        steady.is_zero().then_some(())
                    }
                }
            },
        )
        .await
    }

    /// The topology it runs.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// This cluster's run id, the value of the `tenure.conformance.run` label
    /// on its containers and networks (see [`leftovers`](super::leftovers)).
    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// The nodes, in index order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node `index`.
    pub fn node(&self, index: usize) -> Result<&Node> {
        self.nodes.get(index).ok_or_else(|| {
            HarnessError::Invalid(format!(
                "node {index} of a {}-node cluster",
                self.nodes.len()
            ))
        })
    }

    /// Every node's `127.0.0.1:<port>`, in index order.
    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(Node::endpoint).collect()
    }

    /// The name of the internal network the nodes talk to each other on.
    pub fn cluster_network(&self) -> &str {
        &self.cluster_network
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut Vec<NodeState>) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state)
    }

    /// Nodes neither stopped nor paused: worth asking.
    fn reachable(&self) -> Vec<&Node> {
        self.with_state(|s| {
            self.nodes
                .iter()
                .filter(|n| !s[n.index].stopped && !s[n.index].paused)
                .collect()
        })
    }

    /// What `ask` learns from each [reachable](Self::reachable) node, given
    /// its endpoint: the nodes that tell, with their index.
    async fn ask_reachable<T, Fut>(&self, ask: impl Fn(String) -> Fut) -> Vec<(usize, T)>
    where
        Fut: std::future::Future<Output = Option<T>>,
    {
        let asked = self.reachable().into_iter().map(|n| {
            let answer = ask(n.endpoint());
            async move { Some((n.index, answer.await?)) }
        });
        join_all(asked).await.into_iter().flatten().collect()
    }

    /// Whether node `index` answers its protocol right now.
    pub async fn serving(&self, index: usize) -> Result<bool> {
        Ok(self.kind.serving(&self.node(index)?.endpoint()).await)
    }

    /// Kills node `index` with SIGKILL and returns once its container has
    /// stopped; its published port then refuses connections. Its data stays.
    pub async fn kill(&self, index: usize) -> Result<()> {
        let node = self.node(index)?;
        let docker = docker::connect().await?;
        // Works on a paused container too: the engine kills it frozen.
        let options = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
        match docker.kill_container(&node.container, Some(options)).await {
            Ok(()) => {}
            // Not running already (409): that is the state asked for.
            Err(DockerError::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => return Err(e.into()),
        }
        wait_for(
            format!("{} to stop", node.container),
            Duration::from_secs(30),
            || async {
                let inspect = docker.inspect_container(&node.container, None).await;
                let running = inspect.ok()?.state?.running?;
                (!running).then_some(())
            },
        )
        .await?;
        self.with_state(|s| {
            s[index].stopped = true;
            s[index].paused = false;
        });
        tracing::info!(node = %node.container, "killed");
        Ok(())
    }

    /// Starts node `index` again (same container, data and host port) and
    /// returns once it serves.
    pub async fn start_node(&self, index: usize) -> Result<()> {
        let node = self.node(index)?;
        let docker = docker::connect().await?;
        docker.start_container(&node.container, None).await?;
        self.with_state(|s| s[index].stopped = false);
        let endpoint = node.endpoint();
        wait_for(
            format!("{} to serve again", node.container),
            NODE_READY_TIMEOUT,
            || async { self.kind.serving(&endpoint).await.then_some(()) },
        )
        .await?;
        tracing::info!(node = %node.container, "started");
        Ok(())
    }

    /// [`kill`](Self::kill) then [`start_node`](Self::start_node).
    pub async fn restart(&self, index: usize) -> Result<()> {
        self.kill(index).await?;
        self.start_node(index).await
    }

    /// Kills every node, starts them all again, and waits as
    /// [`start`](Self::start) does.
    pub async fn restart_all(&self) -> Result<()> {
        for result in join_all((0..self.nodes.len()).map(|i| self.kill(i))).await {
            result?;
        }
        let docker = docker::connect().await?;
        for node in &self.nodes {
            docker.start_container(&node.container, None).await?;
            self.with_state(|s| s[node.index].stopped = false);
        }
        self.wait_ready(CLUSTER_READY_TIMEOUT).await
    }

    /// Freezes node `index` (`docker pause`): its port still accepts
    /// connections, but nothing answers them, and its peers hear nothing.
    pub async fn pause(&self, index: usize) -> Result<()> {
        self.set_paused(index, true).await
    }

    /// Thaws node `index`.
    pub async fn unpause(&self, index: usize) -> Result<()> {
        self.set_paused(index, false).await
    }

    async fn set_paused(&self, index: usize, paused: bool) -> Result<()> {
        let node = self.node(index)?;
        let docker = docker::connect().await?;
        if paused {
            docker.pause_container(&node.container).await?;
        } else {
            docker.unpause_container(&node.container).await?;
        }
        self.with_state(|s| s[index].paused = paused);
        let what = if paused { "paused" } else { "unpaused" };
        tracing::info!(node = %node.container, "{what}");
        Ok(())
    }

    /// Cuts node `index` off from its peers: disconnects it from the cluster
    /// network. Peers' connections to it fail and its name stops resolving
    /// for them (and theirs for it). Clients are unaffected: the published
    /// port and connections already open through it keep working, so a client
    /// sees exactly what a minority member answers. (Redis masters have no
    /// peers; for them this changes nothing.)
    pub async fn partition(&self, index: usize) -> Result<()> {
        let node = self.node(index)?;
        let docker = docker::connect().await?;
        match docker
            .disconnect_network(
                &self.cluster_network,
                NetworkDisconnectRequest {
                    container: node.container.clone(),
                    force: Some(true),
                },
            )
            .await
        {
            Ok(()) => {}
            // Already disconnected: that is the state asked for.
            Err(_) if self.with_state(|s| s[index].partitioned) => {}
            Err(e) => return Err(e.into()),
        }
        self.with_state(|s| s[index].partitioned = true);
        tracing::info!(node = %node.container, "partitioned");
        Ok(())
    }

    /// Reconnects node `index` to the cluster network under its name.
    pub async fn heal(&self, index: usize) -> Result<()> {
        let node = self.node(index)?;
        let docker = docker::connect().await?;
        docker
            .connect_network(
                &self.cluster_network,
                NetworkConnectRequest {
                    container: node.container.clone(),
                    endpoint_config: Some(EndpointSettings {
                        aliases: Some(vec![node.name.clone()]),
                        ..Default::default()
                    }),
                },
            )
            .await?;
        self.with_state(|s| s[index].partitioned = false);
        tracing::info!(node = %node.container, "healed");
        Ok(())
    }

    /// The node a majority agrees is the leader, if any right now.
    ///
    /// etcd: `/v3/maintenance/status` of every running node; the leader id
    /// reported by a majority of the cluster, mapped to the node with that
    /// member id. ZooKeeper: `srvr` of every running node; the only node in
    /// `Mode: leader`, provided a majority is leader or follower (a standalone
    /// server is its own leader). Redis has no leader: an error.
    pub async fn leader_index(&self) -> Result<Option<usize>> {
        let quorum = self.nodes.len() / 2 + 1;
        match self.kind {
            Kind::Redis => Err(HarnessError::Invalid(
                "independent Redis masters have no leader".into(),
            )),
            Kind::Etcd => {
                let statuses = self
                    .ask_reachable(|ep| async move { probe::etcd_status(&ep).await.ok() })
                    .await;
                let mut votes: HashMap<u64, usize> = HashMap::new();
                for (_, status) in &statuses {
                    if status.leader != 0 {
                        *votes.entry(status.leader).or_default() += 1;
                    }
                }
                Ok(votes
                    .into_iter()
                    .filter(|(_, count)| *count >= quorum)
                    .find_map(|(leader, _)| {
                        statuses
                            .iter()
                            .find(|(_, s)| s.member_id == leader)
                            .map(|(i, _)| *i)
                    }))
            }
            Kind::ZooKeeper => {
                let modes = self
                    .ask_reachable(|ep| async move { probe::zk_mode(&ep).await.ok().flatten() })
                    .await;
                if let [(i, mode)] = modes.as_slice() {
                    if mode == "standalone" {
                        return Ok(Some(*i));
                    }
                }
                let leaders: Vec<usize> = modes
                    .iter()
                    .filter(|(_, m)| m == "leader")
                    .map(|(i, _)| *i)
                    .collect();
                let in_quorum = modes
                    .iter()
                    .filter(|(_, m)| m == "leader" || m == "follower")
                    .count();
                Ok(match leaders.as_slice() {
                    [leader] if in_quorum >= quorum => Some(*leader),
                    _ => None,
                })
            }
        }
    }

    /// Waits up to `timeout` for [`leader_index`](Self::leader_index) to name
    /// a leader that `accept` takes (e.g. `|i| i != old_leader`).
    pub async fn await_leader(
        &self,
        timeout: Duration,
        accept: impl Fn(usize) -> bool,
    ) -> Result<usize> {
        wait_for(
            format!("a leader of {:?} (run {})", self.topology, self.run),
            timeout,
            || async {
                self.leader_index()
                    .await
                    .ok()
                    .flatten()
                    .filter(|i| accept(*i))
            },
        )
        .await
    }

    /// Node `index`'s counters (see [`ServerStats`]).
    pub async fn stats(&self, index: usize) -> Result<ServerStats> {
        self.kind.stats(&self.node(index)?.endpoint()).await
    }

    /// The counters of the node a majority agrees leads (node 0 when none
    /// does, or a standalone node), for counts every node keeps alike.
    pub async fn leader_stats(&self) -> Result<ServerStats> {
        let leader = self.leader_index().await.ok().flatten().unwrap_or(0);
        self.stats(leader).await
    }

    /// The servers' name and version, as node 0 (or the first reachable
    /// node) reports them.
    pub async fn server_version(&self) -> Result<String> {
        let node = self.reachable().first().copied().unwrap_or(&self.nodes[0]);
        self.kind.version(&node.endpoint()).await
    }

    /// The counters of every node neither stopped nor paused, added up.
    pub async fn stats_total(&self) -> Result<ServerStats> {
        let mut total = ServerStats::default();
        for node in self.reachable() {
            total.add(&self.kind.stats(&node.endpoint()).await?);
        }
        Ok(total)
    }

    /// Node `index`'s whole log (stdout and stderr).
    pub async fn logs(&self, index: usize) -> Result<String> {
        let node = self.node(index)?;
        let docker = docker::connect().await?;
        docker::container_logs(&docker, &node.container, None).await
    }

    /// The last `lines` lines of every node's log, each under a header.
    pub async fn dump_logs(&self, lines: usize) -> Result<String> {
        let docker = docker::connect().await?;
        let mut out = String::new();
        for node in &self.nodes {
            let logs = docker::container_logs(&docker, &node.container, Some(lines)).await?;
            out.push_str(&format!("---- {} ----\n{logs}\n", node.container));
        }
        Ok(out)
    }
}

impl Kind {
    async fn serving_owned(self, endpoint: String) -> bool {
        self.serving(&endpoint).await
    }
}

impl Drop for Cluster {
    /// Removes the containers and networks; when the thread is panicking (a
    /// failed test), prints the last 200 lines of each node's log first.
    fn drop(&mut self) {
        docker::remove_run_blocking(&self.run, std::thread::panicking());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send<T: Send>(_: &T) {}

    #[test]
    fn clusters_and_their_futures_can_move_between_tasks() {
        fn is_sync<T: Send + Sync>() {}
        is_sync::<Cluster>();
        // Type-checked only: spawning these on tokio needs them to be Send.
        let _ = |c: &Cluster| {
            is_send(&Cluster::start(Topology::Redis { masters: 1 }));
            is_send(&c.kill(0));
            is_send(&c.start_node(0));
            is_send(&c.restart_all());
            is_send(&c.partition(0));
            is_send(&c.leader_index());
            is_send(&c.await_leader(Duration::ZERO, |_| true));
            is_send(&c.stats_total());
        };
    }
}
