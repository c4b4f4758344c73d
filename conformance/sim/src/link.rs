//! A member's link to the memory server: its own client (with its own
//! fault knobs), every call traced and shown to the judge.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, LeaderEvent, Lease,
    LeaseBackend, MemoryBackend, Result,
};

use crate::judge::Judge;
use crate::trace::Event;

/// One member's client of the server.
#[derive(Debug)]
pub(crate) struct Link {
    pub member: usize,
    pub client: MemoryBackend,
    pub judge: Arc<Judge>,
}

impl Link {
    fn call(&self, key: &ElectionKey, op: &'static str) {
        self.judge
            .push(Event::Call(self.member, key.to_string(), op));
    }

    fn answer<T>(&self, key: &ElectionKey, op: &'static str, result: &Result<T>) {
        let outcome = result.as_ref().map(|_| ()).map_err(|e| e.to_string());
        self.judge
            .push(Event::Answer(self.member, key.to_string(), op, outcome));
    }
}

#[async_trait]
impl LeaseBackend for Link {
    fn name(&self) -> &'static str {
        self.client.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.client.capabilities()
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let key = self.judge.key_index(candidacy.key());
        self.judge.acquire_called(self.member, key);
        self.call(candidacy.key(), "acquire");
        let result = self.client.acquire(candidacy, mode).await;
        self.answer(candidacy.key(), "acquire", &result);
        self.judge
            .acquire_answered(self.member, key, result.is_ok());
        result
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.call(lease.key(), "renew");
        let result = self.client.renew(lease).await;
        self.answer(lease.key(), "renew", &result);
        result
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.call(lease.key(), "release");
        let token = lease.token().map_or(0, |t| t.get());
        self.judge.releasing(lease.key(), token, true);
        let result = self.client.release(lease).await;
        self.judge.releasing(lease.key(), token, false);
        self.answer(lease.key(), "release", &result);
        result
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        self.call(key, "watch");
        let result = self.client.watch(key).await;
        self.answer(key, "watch", &result);
        result
    }

    async fn close(&self) -> Result<()> {
        self.client.close().await
    }
}
