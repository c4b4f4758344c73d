//! [`ProxyLink`]: the suite's [`Link`] over TCP fault proxies.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use tenure_core::{Error, Result};

use crate::proxy::{FaultProxy, Mode, Tap};
use tenure_conformance::{Link, LinkFault};

/// The link of one client: one [`FaultProxy`] in front of each server
/// endpoint the client uses, all switched together, so a client of a
/// multi-node deployment cannot dodge a cut by moving to another node.
#[derive(Debug)]
pub struct ProxyLink {
    proxies: Vec<FaultProxy>,
    /// The proxies stand in front of the server nodes, in their order.
    numbers_nodes: std::sync::atomic::AtomicBool,
}

impl ProxyLink {
    /// One proxy in front of `upstream`: the link, and the address the
    /// client must connect to instead.
    pub async fn start(upstream: SocketAddr) -> Result<(Arc<ProxyLink>, SocketAddr)> {
        let (link, addrs) = Self::start_all(&[upstream]).await?;
        Ok((link, addrs[0]))
    }

    /// One proxy in front of each of `upstreams`: the link, and the
    /// addresses to connect to instead, in the same order.
    pub async fn start_all(upstreams: &[SocketAddr]) -> Result<(Arc<ProxyLink>, Vec<SocketAddr>)> {
        Self::start_all_tapped(upstreams, None).await
    }

    /// [`start_all`](Self::start_all), with `tap` seeing what every proxy forwards.
    pub async fn start_all_tapped(
        upstreams: &[SocketAddr],
        tap: Option<Arc<dyn Tap>>,
    ) -> Result<(Arc<ProxyLink>, Vec<SocketAddr>)> {
        let mut proxies = Vec::with_capacity(upstreams.len());
        for upstream in upstreams {
            let proxy = FaultProxy::start_tapped(*upstream, tap.clone())
                .await
                .map_err(|e| Error::unavailable("fault proxy", e))?;
            proxies.push(proxy);
        }
        let addrs = proxies.iter().map(FaultProxy::addr).collect();
        let link = ProxyLink {
            proxies,
            numbers_nodes: Default::default(),
        };
        Ok((Arc::new(link), addrs))
    }

    /// Says that the proxies stand in front of the server nodes, in the
    /// order [`ServerFaults`](tenure_conformance::ServerFaults) numbers them: the link
    /// then tells which nodes the client uses ([`Link::nodes_in_use`]).
    pub fn numbers_nodes(&self) {
        self.numbers_nodes
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The proxies, in the order of the upstreams.
    pub fn proxies(&self) -> &[FaultProxy] {
        &self.proxies
    }
}

/// The proxy mode for `fault`.
pub fn mode_for(fault: LinkFault) -> Mode {
    match fault {
        LinkFault::Pass => Mode::Pass,
        // The proxy holds each chunk in each direction: half each way.
        LinkFault::Delay(d) => Mode::Delay(d / 2),
        LinkFault::DelayAnswers(d) => Mode::DelayAnswers(d),
        LinkFault::Blackhole => Mode::Blackhole,
        // Reset resets the open connections (see `Link::set`), then passes.
        LinkFault::Reset => Mode::Pass,
        LinkFault::FailCalls => Mode::Reset,
        LinkFault::DropAnswers => Mode::DropAnswers,
    }
}

#[async_trait]
impl Link for ProxyLink {
    async fn set(&self, fault: LinkFault) -> Result<()> {
        let mode = mode_for(fault);
        for proxy in &self.proxies {
            proxy.set(mode);
            if fault == LinkFault::Reset {
                proxy.reset_connections();
            }
        }
        Ok(())
    }

    fn last_request_at(&self) -> Option<tokio::time::Instant> {
        self.proxies
            .iter()
            .filter_map(FaultProxy::last_request_at)
            .max()
    }

    fn requests_since(&self, since: tokio::time::Instant) -> Option<Vec<tokio::time::Instant>> {
        let mut all: Vec<_> = self
            .proxies
            .iter()
            .flat_map(|p| p.requests_since(since))
            .collect();
        all.sort();
        Some(all)
    }

    fn last_answer_at(&self) -> Option<tokio::time::Instant> {
        self.proxies
            .iter()
            .filter_map(FaultProxy::last_answer_at)
            .max()
    }

    fn in_flight(&self) -> Option<usize> {
        Some(self.proxies.iter().map(FaultProxy::in_flight).sum())
    }

    fn nodes_in_use(&self) -> Option<Vec<usize>> {
        if !self
            .numbers_nodes
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        Some(
            (0..self.proxies.len())
                .filter(|&i| self.proxies[i].open_connections() > 0)
                .collect(),
        )
    }

    fn connections_opened(&self) -> Option<Vec<usize>> {
        self.numbers_nodes
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| {
                self.proxies
                    .iter()
                    .map(|p| p.connections_opened())
                    .collect()
            })
    }

    async fn confine_to(&self, node: Option<usize>) -> Result<()> {
        let numbered = self
            .numbers_nodes
            .load(std::sync::atomic::Ordering::Relaxed);
        if !numbered || node.is_some_and(|n| n >= self.proxies.len()) {
            return Err(Error::Unsupported {
                backend: "fault proxy",
                operation: "confining a client to a server node its proxies do not stand before",
            });
        }
        for (i, proxy) in self.proxies.iter().enumerate() {
            let reachable = node.is_none_or(|n| n == i);
            proxy.set(if reachable { Mode::Pass } else { Mode::Reset });
        }
        Ok(())
    }
}
