//! A `coordination.k8s.io/v1` Lease API server for tests, in process, that
//! keeps its objects in etcd the way kube-apiserver's storage does.
//!
//! No kube-apiserver can be had on the machines here, so the Kubernetes
//! backend is tested against this: Leases stored as JSON under
//! `/registry/leases/<namespace>/<name>`, `resourceVersion` = the key's etcd
//! mod revision, create = `Txn(CreateRevision == 0)`, update =
//! `Txn(ModRevision == resourceVersion)` (409 Conflict otherwise), watch =
//! etcd watch (ADDED / MODIFIED / DELETED / BOOKMARK; from a compacted
//! resourceVersion, 200 and one ERROR event, Status 410 Expired), kube-style
//! `Status` bodies and 422 validation; PATCH (JSON merge, JSON, strategic
//! merge) and server-side apply, with `metadata.managedFields` kept on
//! every write as kube-apiserver's field manager keeps them; bodies and
//! answers in JSON, YAML or protobuf (`application/vnd.kubernetes.protobuf`,
//! what client-go's typed clients send by default) as negotiated.
//! Several instances may front one etcd, like several apiservers.
//!
//! Each instance runs on a thread and runtime of its own, so [`LeaseServer::kill`]
//! drops every connection at once, as a killed apiserver does.

// DESIGN. kube-apiserver's Lease endpoints, as strict as the real one, over
// etcd as its storage: the Kubernetes backend's tests trust what it answers.
//   lib.rs         LeaseServer: start, kill, restart, expire watches
//   api.rs         the HTTP routes: get, list or watch, create, update, delete
//   discovery.rs   /apis and /apis/coordination.k8s.io/v1, for kubectl
//   media.rs       content negotiation: bodies in JSON, YAML or protobuf, answers
//                  in the first type Accept asks for that is served
//   protobuf/      Lease, LeaseList, Status, DeleteOptions in Kubernetes'
//                  protobuf encoding (the `k8s\0` envelope), to and from JSON
//   patch.rs       PATCH: merge, JSON, strategic merge patch, server-side apply
//   patches.rs     the patch documents applied to a Lease's JSON
//   selector.rs    labelSelector: parsed and matched as apimachinery's labels
//   managed.rs     metadata.managedFields: field ownership, apply conflicts
//   store.rs       Leases in etcd: resourceVersion = mod revision, writes as txns
//   watch.rs       watch over etcd's watch: events, bookmarks, 410 Expired
//   status.rs      kube-style Status bodies and 422 field errors
//   faults.rs      answers a real apiserver gives that this one would not
//                  (a committed write answered 500, refused reads and
//                  writes, once or until told, every
//                  PATCH refused 415), set by tests
//   kubeconfig.rs  kubeconfigs and kube:// URLs that reach a server
//   main.rs        the `tenure-lease-server` command

mod api;
mod discovery;
mod faults;
mod kubeconfig;
mod managed;
mod media;
mod patch;
mod patches;
mod protobuf;
mod selector;
mod status;
mod store;
mod watch;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::serve::ListenerExt;

use tenure_testkit::harness::HarnessError;

pub use faults::Requests;
pub use kubeconfig::{kube_config_for, kube_url, kubeconfig_yaml, KubeconfigFile};

/// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

/// How long [`LeaseServer::expire_watches`] waits for the clients it told
/// to watch again.
pub const REWATCH_LIMIT: Duration = Duration::from_secs(5);

struct Running {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One Lease API server instance over an etcd cluster.
pub struct LeaseServer {
    endpoints: Vec<String>,
    addr: SocketAddr,
    writes: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
    expired: Arc<store::Expiries>,
    faults: Arc<faults::Faults>,
    running: Mutex<Option<Running>>,
}

impl std::fmt::Debug for LeaseServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseServer")
            .field("addr", &self.addr)
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl LeaseServer {
    /// Starts a server on `127.0.0.1:0` over the etcd at `endpoints`.
    pub async fn start<S: AsRef<str>>(endpoints: &[S]) -> Result<LeaseServer, HarnessError> {
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        let writes = Arc::new(AtomicU64::new(0));
        let served = Arc::new(AtomicU64::new(0));
        let expired = Arc::new(store::Expiries::default());
        let faults = Arc::new(faults::Faults::default());
        let (running, addr) = run(
            endpoints.clone(),
            "127.0.0.1:0".parse().unwrap(),
            Counters {
                writes: writes.clone(),
                served: served.clone(),
                expired: expired.clone(),
                faults: faults.clone(),
            },
        )
        .await?;
        Ok(LeaseServer {
            endpoints,
            addr,
            faults,
            writes,
            served,
            expired,
            running: Mutex::new(Some(running)),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes (create, update, delete, patch) this instance committed to
    /// etcd: each is one etcd transaction whose compare held. A write refused
    /// on what the server read just before (a stale resourceVersion, a failed
    /// precondition) never reaches etcd, as kube-apiserver's
    /// `GuaranteedUpdate` refuses it before writing; one whose transaction's
    /// compare failed (a 409 from a racing write, a create of a Lease that
    /// exists) wrote nothing; neither is counted, as etcd counts only the
    /// puts and deletes it commits.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// The watches of Lease `name` in `namespace` open on this instance, by
    /// the User-Agent their requests came with; each is counted once etcd
    /// has created it, from when a change of the Lease reaches the watcher
    /// at once.
    pub fn open_watches(&self, namespace: &str, name: &str) -> Vec<(String, usize)> {
        self.expired.open_on(namespace, name)
    }

    /// HTTP requests this instance answered (reads, writes, lists, watches
    /// opened), plus the watch events it sent (bookmarks, which a watch gets
    /// whether or not anything changed, left out).
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Compacts the etcd under the server at its current revision (after
    /// writing past it) and ends every open watch with an ERROR event, 410
    /// Gone (reason Expired), as kube-apiserver does when etcd cancels its
    /// watch for compaction. A client that watches again from the
    /// resourceVersion it last saw gets that ERROR event too (an answer of
    /// 200), and must list again.
    ///
    /// Returns once as many watches are open again as were open before (each
    /// client that was told watched again, having listed), or after
    /// [`REWATCH_LIMIT`], whichever comes first: the number still missing
    /// then.
    pub async fn expire_watches(&self) -> Result<usize, HarnessError> {
        let client = etcd_client_for_tests(self).await?;
        compact_etcd(&client)
            .await
            .map_err(|e| HarnessError::Protocol(e.to_string()))?;
        let before = self.expired.expire();
        let give_up = tokio::time::Instant::now() + REWATCH_LIMIT;
        loop {
            let open = self.expired.open_now();
            if open >= before || tokio::time::Instant::now() >= give_up {
                return Ok(before.saturating_sub(open));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The next write (create, update or delete) is committed to etcd, then
    /// answered with `code` (a `Status` with `message`) instead of its
    /// result: what kube-apiserver answers when etcd applied a write but
    /// its answer did not come back in time (500 "etcdserver: request
    /// timed out", "etcdserver: leader changed"), or a load balancer in
    /// front of it that gave up (502, 503, 504). A client cannot tell such
    /// a write from one that never happened.
    pub fn answer_next_write_after_commit(&self, code: u16, message: &str) {
        let code = axum::http::StatusCode::from_u16(code).expect("an HTTP status code");
        self.faults
            .answer_next_write_after_commit(code, message.to_owned());
    }

    /// Answers every request of `requests` with `code` until
    /// [`stop_refusing`](Self::stop_refusing): 403 Forbidden as RBAC
    /// without that verb does, 429 TooManyRequests as API Priority and
    /// Fairness does when it sheds load; with `retry_after` (whole seconds,
    /// at least 1), the Status carries `details.retryAfterSeconds` and the
    /// answer a `Retry-After` header, as kube-apiserver writes them
    /// (`responsewriters.ErrorNegotiated`).
    pub fn refuse(&self, requests: Requests, code: u16, retry_after: Option<Duration>) {
        let code = axum::http::StatusCode::from_u16(code).expect("an HTTP status code");
        self.faults.refuse(requests, code, retry_after, None);
    }

    /// As [`refuse`](Self::refuse), for the next `count` requests of
    /// `requests` only (every Lease's): a write refused once (a 500 from
    /// an etcd that timed out before committing, a 429 from API Priority
    /// and Fairness), then served again. A refused write writes nothing.
    pub fn refuse_next(
        &self,
        requests: Requests,
        count: u32,
        code: u16,
        retry_after: Option<Duration>,
    ) {
        let code = axum::http::StatusCode::from_u16(code).expect("an HTTP status code");
        self.faults.refuse(requests, code, retry_after, Some(count));
    }

    /// Whether requests of `requests` are still refused: a test can tell
    /// that the refusals [`refuse_next`](Self::refuse_next) set were used.
    pub fn refusing(&self, requests: Requests) -> bool {
        self.faults.refusing(requests)
    }

    /// Serves `requests` again.
    pub fn stop_refusing(&self, requests: Requests) {
        self.faults.stop_refusing(requests);
    }

    /// Answers every PATCH (merge, JSON, strategic merge, server-side
    /// apply, any Content-Type) with 415 UnsupportedMediaType listing no
    /// accepted type, until [`serve_patch`](Self::serve_patch): the answer
    /// kube-apiserver's patch handler gives a patch type the resource does
    /// not take, for testing a client against a server (or a proxy in front
    /// of one) that takes none. Nothing is read or written.
    pub fn refuse_patch(&self) {
        self.faults.refuse_patch(true);
    }

    /// Serves PATCH again.
    pub fn serve_patch(&self) {
        self.faults.refuse_patch(false);
    }

    /// Kills the server: every connection and watch drops at once.
    pub fn kill(&self) {
        drop(self.running.lock().unwrap().take());
    }

    /// Starts a killed server again on the same port.
    pub async fn restart(&self) -> Result<(), HarnessError> {
        self.kill();
        let (running, _) = run(
            self.endpoints.clone(),
            self.addr,
            Counters {
                writes: self.writes.clone(),
                served: self.served.clone(),
                expired: self.expired.clone(),
                faults: self.faults.clone(),
            },
        )
        .await?;
        *self.running.lock().unwrap() = Some(running);
        Ok(())
    }

    /// A kubeconfig (YAML) whose current context reaches this server.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_yaml(self.addr)
    }

    /// A `kube::Config` read from [`kubeconfig`](Self::kubeconfig).
    pub async fn kube_config(&self) -> Result<kube::Config, HarnessError> {
        kube_config_for(self.addr).await
    }

    /// [`kubeconfig`](Self::kubeconfig) written to a temporary file, for a
    /// candidate process (`kube:///<path>`); removed when dropped.
    pub fn kubeconfig_file(&self) -> Result<KubeconfigFile, HarnessError> {
        KubeconfigFile::write(self.addr)
    }
}

/// What an instance counts and hears, kept across restarts.
struct Counters {
    writes: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
    expired: Arc<store::Expiries>,
    faults: Arc<faults::Faults>,
}

async fn run(
    endpoints: Vec<String>,
    addr: SocketAddr,
    counters: Counters,
) -> Result<(Running, SocketAddr), HarnessError> {
    let Counters {
        writes,
        served,
        expired,
        faults,
    } = counters;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("lease-server".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("lease server runtime");
            rt.block_on(async move {
                let started = async {
                    let client = etcd_client::Client::connect(endpoints, None)
                        .await
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                    let listener = bind(addr).await?;
                    Ok::<_, std::io::Error>((client, listener))
                };
                let (client, listener) = match started.await {
                    Ok(ok) => ok,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(listener.local_addr()));
                let store = store::Store::new(client, writes, served, expired, faults);
                let app = api::router(store);
                tokio::select! {
                    // Go sets TCP_NODELAY on every TCP connection, so
                    // kube-apiserver's answers are never held back by Nagle's
                    // algorithm: without it, a watch event written shortly
                    // after the watch's headers waited here for the client's
                    // delayed ACK of them (up to 40 ms on Linux).
                    _ = axum::serve(listener.tap_io(|tcp| {
                        let _ = tcp.set_nodelay(true);
                    }), app) => {}
                    _ = shutdown_rx => {}
                }
            });
            rt.shutdown_background();
        })?;
    let addr = ready_rx
        .await
        .map_err(|_| HarnessError::Io(std::io::Error::other("lease server thread died")))?
        .and_then(|r| r)?;
    Ok((
        Running {
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        },
        addr,
    ))
}

/// Binds `addr`, retrying a moment while a killed instance's port is freed.
async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let mut tries = 0;
    loop {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(1024)) {
            Ok(listener) => return Ok(listener),
            Err(e) if tries < 50 => {
                tries += 1;
                tracing::debug!(%e, "lease server bind; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The key [`compact_etcd`] writes to move etcd's revision on.
const HISTORY_KEY: &str = "/tenure-conformance/history";

/// Writes twice past etcd's current revision and compacts there
/// (physically), so no watch or read can start from an earlier revision;
/// returns the compaction's revision. Open watches that are caught up go on,
/// as etcd's do.
pub async fn compact_etcd(client: &etcd_client::Client) -> Result<i64, etcd_client::Error> {
    let mut kv = client.kv_client();
    kv.put(HISTORY_KEY, "1", None).await?;
    let put = kv.put(HISTORY_KEY, "2", None).await?;
    let revision = store::revision(put.header());
    let options = etcd_client::CompactionOptions::new().with_physical();
    kv.compact(revision, Some(options)).await?;
    Ok(revision)
}

/// A plain etcd client on the server's etcd (for tests that compact or inspect it).
pub async fn etcd_client_for_tests(
    server: &LeaseServer,
) -> Result<etcd_client::Client, HarnessError> {
    etcd_client::Client::connect(&server.endpoints, None)
        .await
        .map_err(|e| HarnessError::Protocol(e.to_string()))
}
