//! Leases in etcd, as kube-apiserver's storage keeps objects: one key per
//! object, JSON value, resourceVersion = the key's mod revision.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, GetResponse, KeyValue, ResponseHeader, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchOptions, WatchStream,
};
use serde_json::Value;

use super::faults::Faults;

/// Why a write did not happen.
pub(crate) enum WriteError {
    /// The object exists (create).
    AlreadyExists,
    /// The object is gone (update, delete).
    NotFound,
    /// The resourceVersion is stale (update).
    Conflict,
    /// etcd failed.
    Etcd(etcd_client::Error),
}

impl From<etcd_client::Error> for WriteError {
    fn from(e: etcd_client::Error) -> Self {
        WriteError::Etcd(e)
    }
}

#[derive(Clone)]
pub(crate) struct Store {
    client: Client,
    writes: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
    expired: Arc<Expiries>,
    faults: Arc<Faults>,
}

/// The etcd key of a Lease.
pub(crate) fn key(namespace: &str, name: &str) -> String {
    format!("/registry/leases/{namespace}/{name}")
}

/// The etcd prefix of a namespace's Leases.
pub(crate) fn prefix(namespace: &str) -> String {
    format!("/registry/leases/{namespace}/")
}

/// The stored object with its resourceVersion set from `revision`.
pub(crate) fn decode(value: &[u8], revision: i64) -> Value {
    let mut object: Value = serde_json::from_slice(value).unwrap_or(Value::Null);
    object["metadata"]["resourceVersion"] = Value::String(revision.to_string());
    object
}

fn decode_kv(kv: &KeyValue) -> Value {
    decode(kv.value(), kv.mod_revision())
}

/// What is stored: the object without its resourceVersion.
fn encode(object: &Value) -> Vec<u8> {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    serde_json::to_vec(&object).expect("JSON")
}

/// The store's revision an answer's `header` gives (0 without one).
pub(crate) fn revision(header: Option<&ResponseHeader>) -> i64 {
    header.map_or(0, |h| h.revision())
}

/// A transaction that does `op` to `key` if its mod revision is still
/// `resource_version`, and reads it otherwise (for [`refused`]).
fn at_revision(key: &str, resource_version: i64, op: TxnOp) -> Txn {
    Txn::new()
        .when([Compare::mod_revision(
            key,
            CompareOp::Equal,
            resource_version,
        )])
        .and_then([op])
        .or_else([TxnOp::get(key, None)])
}

/// Why an [`at_revision`] transaction failed: the object changed
/// ([`WriteError::Conflict`]), or it is gone.
fn refused(answer: &TxnResponse) -> WriteError {
    let exists = answer.op_responses().iter().any(|op| match op {
        TxnOpResponse::Get(get) => !get.kvs().is_empty(),
        _ => false,
    });
    if exists {
        WriteError::Conflict
    } else {
        WriteError::NotFound
    }
}

/// Whether etcd-client failed `e` before sending anything: no connection to
/// the endpoint it picked could be made. Its balanced channel hands a failed
/// reconnect back to the next call routed there once (a node that was down
/// and serves again, while the others served all along); kube-apiserver's
/// etcd client (grpc-go) sends only on connections that are up, so its
/// callers never see that while a quorum serves. Nothing was sent, so a
/// write may be tried again too.
fn never_sent(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("connect error"))
}

/// Runs `request` again while it fails [without being sent](never_sent),
/// a few times (the channel then picks a connection that is up).
async fn sent<T, F, Fut>(mut request: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    const TRIES: u32 = 5;
    let mut tried = 1;
    loop {
        match request().await {
            Err(e) if never_sent(&e) && tried < TRIES => {
                tracing::debug!(error = %e, "lease server: etcd request not sent; trying again");
                tokio::time::sleep(Duration::from_millis(10 * u64::from(tried))).await;
                tried += 1;
            }
            other => return other,
        }
    }
}

/// Whom a watch is for: its namespace, the Lease it names, its User-Agent.
pub(crate) type WatchTarget = (String, String, String);

/// When open watches are to end with 410 Gone (a generation, bumped each
/// time), and how many watches are open in each generation: those of the
/// current one were opened since the last bump and are not to end. Also
/// how many are open on each Lease, by User-Agent.
#[derive(Debug, Default)]
pub(crate) struct Expiries {
    generation: tokio::sync::watch::Sender<u64>,
    open: std::sync::Mutex<std::collections::HashMap<u64, usize>>,
    targets: std::sync::Mutex<std::collections::HashMap<WatchTarget, usize>>,
}

impl Expiries {
    fn open(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn targets(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<WatchTarget, usize>> {
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watches open on Lease `name` in `namespace`, by User-Agent.
    pub(crate) fn open_on(&self, namespace: &str, name: &str) -> Vec<(String, usize)> {
        let targets = self.targets();
        let on = targets
            .iter()
            .filter(|((ns, n, _), _)| ns == namespace && n == name);
        on.map(|((_, _, agent), k)| (agent.clone(), *k)).collect()
    }

    /// Watches open in the current generation.
    pub(crate) fn open_now(&self) -> usize {
        let generation = *self.generation.borrow();
        self.open().get(&generation).copied().unwrap_or(0)
    }

    /// Ends every open watch; returns how many were open.
    pub(crate) fn expire(&self) -> usize {
        let before = self.open_now();
        self.generation.send_modify(|generation| *generation += 1);
        before
    }
}

/// A watch counted in [`Expiries`] while it is open.
pub(crate) struct OpenWatch {
    expiries: Arc<Expiries>,
    generation: u64,
    target: Option<WatchTarget>,
}

fn forget<K: Eq + std::hash::Hash>(counts: &mut std::collections::HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        forget(&mut self.expiries.open(), &self.generation);
        if let Some(target) = &self.target {
            forget(&mut self.expiries.targets(), target);
        }
    }
}

impl Store {
    pub(crate) fn new(
        client: Client,
        writes: Arc<AtomicU64>,
        served: Arc<AtomicU64>,
        expired: Arc<Expiries>,
        faults: Arc<Faults>,
    ) -> Store {
        Store {
            client,
            writes,
            served,
            expired,
            faults,
        }
    }

    /// The answers tests set ([`Faults`]).
    pub(crate) fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Changes when every open watch is to end with 410 Gone
    /// ([`LeaseServer::expire_watches`](super::LeaseServer::expire_watches)).
    pub(crate) fn expiries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.expired.generation.subscribe()
    }

    /// A watch opened (after subscribing to `expiries`), counted until the
    /// guard drops.
    /// `target` is whom a watch of one Lease is for.
    pub(crate) fn watch_opened(
        &self,
        expiries: &tokio::sync::watch::Receiver<u64>,
        target: Option<WatchTarget>,
    ) -> OpenWatch {
        let generation = *expiries.borrow();
        *self.expired.open().entry(generation).or_default() += 1;
        if let Some(target) = &target {
            *self.expired.targets().entry(target.clone()).or_default() += 1;
        }
        OpenWatch {
            expiries: self.expired.clone(),
            generation,
            target,
        }
    }

    /// Counts one HTTP request answered or one watch event sent.
    pub(crate) fn count_served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// An etcd read of `key` (once [sent](sent)).
    pub(crate) async fn read(
        &self,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, etcd_client::Error> {
        sent(|| {
            let (mut kv, options) = (self.client.kv_client(), options.clone());
            async move { kv.get(key, options).await }
        })
        .await
    }

    /// An etcd watch of `key` (once [sent](sent)).
    pub(crate) async fn watch(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<WatchStream, etcd_client::Error> {
        sent(|| {
            let (mut client, options) = (self.client.watch_client(), options.clone());
            async move { client.watch(key, Some(options)).await }
        })
        .await
    }

    pub(crate) async fn get(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Value>, etcd_client::Error> {
        let answer = self.read(&key(ns, name), None).await?;
        Ok(answer.kvs().first().map(decode_kv))
    }

    /// The Lease as the etcd member reached holds it, without a quorum
    /// round (a serializable read): what kube-apiserver's watch cache gives
    /// `GuaranteedUpdate` as its first guess of the current state.
    pub(crate) async fn get_local(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Value>, etcd_client::Error> {
        let options = GetOptions::new().with_serializable();
        let answer = self.read(&key(ns, name), Some(options)).await?;
        Ok(answer.kvs().first().map(decode_kv))
    }

    /// Every Lease of a namespace (or the one named), and the store's revision.
    pub(crate) async fn list(
        &self,
        ns: &str,
        name: Option<&str>,
    ) -> Result<(Vec<Value>, i64), etcd_client::Error> {
        let answer = match name {
            Some(name) => self.read(&key(ns, name), None).await?,
            None => {
                let options = GetOptions::new().with_prefix();
                self.read(&prefix(ns), Some(options)).await?
            }
        };
        Ok((
            answer.kvs().iter().map(decode_kv).collect(),
            revision(answer.header()),
        ))
    }

    /// Runs `txn`, a write, counted once it has committed: not if its
    /// compare failed (nothing was written), nor if etcd failed.
    async fn write(&self, txn: Txn) -> Result<TxnResponse, WriteError> {
        let answer = sent(|| {
            let (mut kv, txn) = (self.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await?;
        if answer.succeeded() {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(answer)
    }

    pub(crate) async fn create(
        &self,
        ns: &str,
        name: &str,
        object: &Value,
    ) -> Result<Value, WriteError> {
        let key = key(ns, name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), encode(object), None)]);
        let answer = self.write(txn).await?;
        if !answer.succeeded() {
            return Err(WriteError::AlreadyExists);
        }
        Ok(decode(&encode(object), revision(answer.header())))
    }

    pub(crate) async fn update(
        &self,
        ns: &str,
        name: &str,
        resource_version: i64,
        object: &Value,
    ) -> Result<Value, WriteError> {
        let key = key(ns, name);
        let put = TxnOp::put(key.as_str(), encode(object), None);
        let answer = self.write(at_revision(&key, resource_version, put)).await?;
        if !answer.succeeded() {
            return Err(refused(&answer));
        }
        Ok(decode(&encode(object), revision(answer.header())))
    }

    /// Deletes a Lease at `resource_version` (its mod revision, read just
    /// before) and returns it as it was: [`WriteError::Conflict`] if it
    /// changed meanwhile.
    pub(crate) async fn delete(
        &self,
        ns: &str,
        name: &str,
        resource_version: i64,
    ) -> Result<Value, WriteError> {
        let key = key(ns, name);
        let delete = TxnOp::delete(
            key.as_str(),
            Some(etcd_client::DeleteOptions::new().with_prev_key()),
        );
        let answer = self
            .write(at_revision(&key, resource_version, delete))
            .await?;
        if !answer.succeeded() {
            return Err(refused(&answer));
        }
        answer
            .op_responses()
            .iter()
            .find_map(|op| match op {
                TxnOpResponse::Delete(deleted) => deleted.prev_kvs().first().map(decode_kv),
                _ => None,
            })
            .ok_or(WriteError::NotFound)
    }
}
