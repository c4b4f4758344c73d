//! Which simulated server nodes keep their clients' watches silent (cut off
//! from their peers, or frozen), for the mutant whose watch trusts its
//! stream ([`Bug::ObserverTrustsItsWatch`](super::Bug::ObserverTrustsItsWatch)).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use tenure_conformance::factory::{Link, ServerFaults};
use tenure_conformance::MemoryFactory;
use tenure_core::{LeaderEvent, Result};
use tokio::sync::watch;

/// The nodes whose clients' watches are silent now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Silent {
    isolated: BTreeSet<usize>,
    paused: BTreeSet<usize>,
}

impl Silent {
    /// Whether `node` is cut off from its peers or frozen.
    fn is(&self, node: usize) -> bool {
        self.isolated.contains(&node) || self.paused.contains(&node)
    }
}

/// The memory factory's server faults, noting which nodes fall silent (as
/// the simulated cluster silences their clients' watches).
pub struct Servers {
    pub memory: MemoryFactory,
    pub silent: Arc<watch::Sender<Silent>>,
}

#[async_trait]
impl ServerFaults for Servers {
    fn nodes(&self) -> usize {
        self.memory.nodes()
    }
    async fn pause(&self, node: usize) -> Result<()> {
        self.memory.pause(node).await?;
        self.silent.send_modify(|s| {
            s.paused.insert(node);
        });
        Ok(())
    }
    async fn unpause(&self, node: usize) -> Result<()> {
        self.memory.unpause(node).await?;
        self.silent.send_modify(|s| {
            s.paused.remove(&node);
        });
        Ok(())
    }
    async fn kill(&self, node: usize) -> Result<()> {
        // A killed node is no longer paused; its clients move.
        self.memory.kill(node).await?;
        self.silent.send_modify(|s| {
            s.paused.remove(&node);
        });
        Ok(())
    }
    async fn start(&self, node: usize) -> Result<()> {
        self.memory.start(node).await
    }
    async fn restart_all(&self) -> Result<()> {
        self.memory.restart_all().await?;
        self.silent.send_modify(|s| s.paused.clear());
        Ok(())
    }
    async fn isolate(&self, node: usize) -> Result<()> {
        self.memory.isolate(node).await?;
        self.silent.send_modify(|s| {
            s.isolated.insert(node);
        });
        Ok(())
    }
    async fn rejoin(&self, node: usize) -> Result<()> {
        self.memory.rejoin(node).await?;
        self.silent.send_modify(|s| {
            s.isolated.remove(&node);
        });
        Ok(())
    }
    async fn leader(&self) -> Result<Option<usize>> {
        self.memory.leader().await
    }
    async fn settle(&self) -> Result<()> {
        self.memory.settle().await
    }
    async fn limit_sessions(&self, node: usize, max: Option<Duration>) -> Result<()> {
        self.memory.limit_sessions(node, max).await
    }
}

/// `events`, each held back while the node of `link`'s client is silent:
/// what a watch that trusts its stream reports (the latest state, once the
/// node is back).
pub fn held_while_silent(
    events: BoxStream<'static, Result<LeaderEvent>>,
    silent: watch::Receiver<Silent>,
    link: Arc<dyn Link>,
) -> BoxStream<'static, Result<LeaderEvent>> {
    let state = (events, silent, link, None, false);
    futures::stream::unfold(
        state,
        |(mut events, mut silent, link, mut held, mut ended)| async move {
            loop {
                let node = link.nodes_in_use().and_then(|n| n.first().copied());
                let quiet = node.is_some_and(|n| silent.borrow_and_update().is(n));
                if !quiet {
                    if let Some(event) = held.take() {
                        return Some((event, (events, silent, link, None, ended)));
                    }
                    if ended {
                        return None;
                    }
                }
                tokio::select! {
                    event = events.next(), if !ended => match event {
                        Some(event) => held = Some(event),
                        None => ended = true,
                    },
                    changed = silent.changed() => if changed.is_err() {
                        return None;
                    },
                }
            }
        },
    )
    .boxed()
}
