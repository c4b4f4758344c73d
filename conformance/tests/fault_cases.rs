//! The node-kill and cluster-restart cases, on the memory backend dressed
//! as a 3-node cluster: killing the "leader node" cuts every client off
//! until the fake servers re-elect, short of the TTL (the candidate keeps
//! leading) or past it (it steps down and the standby takes over).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_conformance::{
    async_trait, suite, BackendFactory, Client, MemoryFactory, Outcome, ServerFaults, Timing,
};
use tenure_core::{Capabilities, ElectionKey, Result};
use tokio::time::Instant;

/// Which node leads, and since when the servers have been without one.
struct State {
    leader: usize,
    down: Vec<usize>,
    leaderless_since: Option<Instant>,
}

struct FakeCluster {
    memory: MemoryFactory,
    outage: Duration,
    state: Mutex<State>,
}

impl FakeCluster {
    fn start(name: &str, outage: Duration) -> Arc<dyn BackendFactory> {
        Arc::new(FakeCluster {
            memory: MemoryFactory::new().named(name),
            outage,
            state: Mutex::new(State {
                leader: 0,
                down: vec![],
                leaderless_since: None,
            }),
        })
    }
}

#[async_trait]
impl BackendFactory for FakeCluster {
    fn name(&self) -> &str {
        self.memory.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.memory.capabilities()
    }
    async fn client(&self) -> Result<Client> {
        self.memory.client().await
    }
    fn timing(&self) -> Timing {
        self.memory.timing()
    }
    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        self.memory.waiting(key).await
    }
    fn servers(&self) -> Option<&dyn ServerFaults> {
        Some(self)
    }
}

#[async_trait]
impl ServerFaults for FakeCluster {
    fn nodes(&self) -> usize {
        3
    }
    async fn pause(&self, node: usize) -> Result<()> {
        self.memory.pause(node).await
    }
    async fn unpause(&self, node: usize) -> Result<()> {
        self.memory.unpause(node).await
    }
    async fn kill(&self, node: usize) -> Result<()> {
        let leader_killed = {
            let mut st = self.state.lock().unwrap();
            st.down.push(node);
            let hit = node == st.leader;
            if hit {
                st.leaderless_since = Some(Instant::now());
            }
            hit
        };
        if leader_killed {
            self.memory.pause(0).await?;
        }
        Ok(())
    }
    async fn start(&self, node: usize) -> Result<()> {
        self.state.lock().unwrap().down.retain(|&n| n != node);
        Ok(())
    }
    async fn restart_all(&self) -> Result<()> {
        self.memory.pause(0).await?;
        tokio::time::sleep(self.outage).await;
        self.memory.unpause(0).await
    }
    async fn leader(&self) -> Result<Option<usize>> {
        let (leader, reelected) = {
            let mut st = self.state.lock().unwrap();
            match st.leaderless_since {
                Some(since) if since.elapsed() < self.outage => return Ok(None),
                Some(_) => {
                    let next = (0..3).find(|n| !st.down.contains(n)).expect("a live node");
                    st.leader = next;
                    st.leaderless_since = None;
                    (next, true)
                }
                None => (st.leader, false),
            }
        };
        if reelected {
            self.memory.unpause(0).await?;
        }
        Ok(Some(leader))
    }
}

/// The report's notes (and its row printed, for `--nocapture`).
fn notes(report: &tenure_conformance::CaseReport) -> String {
    println!("{}", tenure_conformance::report::row(report));
    report.notes.join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_node_killed_briefly_the_candidate_keeps_leading() {
    let factory = FakeCluster::start("memory-fake-3node-brief", Duration::from_millis(100));
    let report = suite::server_node_killed_leader_survives_or_fails_over(factory).await;
    assert_eq!(report.outcome, Outcome::Pass, "{report:#?}");
    assert!(
        notes(&report).contains("a kept leading through"),
        "{report:#?}"
    );
    assert!(report.figures.handover_ms.is_some(), "{report:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_node_killed_past_the_ttl_the_standby_takes_over() {
    let factory = FakeCluster::start("memory-fake-3node-long", Duration::from_millis(1000));
    let report = suite::server_node_killed_leader_survives_or_fails_over(factory).await;
    assert_eq!(report.outcome, Outcome::Pass, "{report:#?}");
    assert!(notes(&report).contains("a stepped down"), "{report:#?}");
    assert!(report.figures.failover_ms.is_some(), "{report:#?}");
    assert_eq!(report.figures.stale_writes_refused, Some(1), "{report:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_restart_keeps_tokens_increasing() {
    let factory = FakeCluster::start("memory-fake-3node-restart", Duration::from_millis(100));
    let report = suite::cluster_restart_tokens_keep_increasing(factory).await;
    assert_eq!(report.outcome, Outcome::Pass, "{report:#?}");
    assert!(
        notes(&report).contains("tokens 1 before, 2 after"),
        "{report:#?}"
    );
}
