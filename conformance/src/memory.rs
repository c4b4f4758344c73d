//! The suite's factory for the in-process [`MemoryBackend`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{Capabilities, ElectionKey, MemoryBackend, Result};

use crate::factory::{BackendFactory, Client, Link, LinkFault, ServerFaults, Timing};

/// Clients of one in-process server; each client has its own fault knobs,
/// which serve as its [`Link`]. Pausing the (single) server node cuts every
/// client off at once: nothing reaches it and no answer comes back.
#[derive(Clone, Debug)]
pub struct MemoryFactory {
    server: MemoryBackend,
    timing: Timing,
    name: String,
    clients: Arc<Mutex<Vec<MemoryBackend>>>,
}

impl Default for MemoryFactory {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryFactory {
    /// A fresh server with default capabilities; 600 ms TTL.
    pub fn new() -> Self {
        Self::with_capabilities(MemoryBackend::default_capabilities())
    }

    /// A fresh server that declares `capabilities`.
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
        MemoryFactory {
            server: MemoryBackend::with_capabilities(capabilities),
            timing,
            name: "memory".into(),
            clients: Arc::default(),
        }
    }

    /// The same, reported under another name (its own report file).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The server, for its counters.
    pub fn server(&self) -> &MemoryBackend {
        &self.server
    }
}

/// The [`Link`] of one memory client: its [`Faults`](tenure_core::memory::Faults).
pub fn memory_link(client: &MemoryBackend) -> Arc<dyn Link> {
    Arc::new(MemoryLink(client.clone()))
}

struct MemoryLink(MemoryBackend);

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
        }
        Ok(())
    }

    fn last_request_at(&self) -> Option<tokio::time::Instant> {
        self.0.faults().last_request_at()
    }
}

#[async_trait]
impl BackendFactory for MemoryFactory {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        tenure_core::LeaseBackend::capabilities(&self.server)
    }

    async fn client(&self) -> Result<Client> {
        let client = self.server.client();
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(client.clone());
        Ok(Client {
            backend: Arc::new(client.clone()),
            link: Some(memory_link(&client)),
        })
    }

    fn timing(&self) -> Timing {
        self.timing
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        Some(Ok(self.server.stats().writes()))
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

    fn servers(&self) -> Option<&dyn ServerFaults> {
        Some(self)
    }
}

#[async_trait]
impl ServerFaults for MemoryFactory {
    fn nodes(&self) -> usize {
        1
    }

    async fn pause(&self, _node: usize) -> Result<()> {
        for client in self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            client.faults().cut_off();
        }
        Ok(())
    }

    async fn unpause(&self, _node: usize) -> Result<()> {
        for client in self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            client.faults().heal();
        }
        Ok(())
    }
}
