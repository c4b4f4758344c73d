//! The real client-go against this server: conformance/peers'
//! `client-go-candidate`, client-go 0.32's `leaderelection.RunOrDie` with a
//! `LeaseLock`, built from Debian 13's packages, with client-go's default
//! content type. Its typed Lease client sends its creates and updates as
//! `application/vnd.kubernetes.protobuf` and asks for protobuf back, so it
//! leads only if this server reads and writes protobuf as kube-apiserver
//! does (before the server did, its first create was answered 400 and it
//! retried forever).
//!
//! The binaries come from `conformance/peers/build.sh` (or the directory in
//! `TENURE_PEERS_DIR`); without them the test says so and passes.

mod common;

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// How long a candidate may take to show an event: client-go's retry
/// period here is 133 ms and a crashed holder's Lease lasts 1 s, so
/// anything near this is a failure, not a slow machine.
const EVENT_LIMIT: Duration = Duration::from_secs(20);

/// One client-go-candidate process and the event lines it wrote.
struct Candidate {
    identity: String,
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::UnboundedReceiver<Value>,
}

impl Candidate {
    /// Starts a candidate for Lease `default/leader` with a 1 s Lease,
    /// renew deadline 666 ms (client-go's defaults scaled) and a retry
    /// period of 500 ms rather than 133 ms, so that a release sent just
    /// after a renewal landed (see [`renewed`]) does not race the next.
    fn start(binary: &Path, kubeconfig: &Path, identity: &str) -> Candidate {
        let mut child = Command::new(binary)
            .args(["--identity", identity, "--name", "leader"])
            .args(["--namespace", "default", "--lease-duration", "1s"])
            .args(["--retry-period", "500ms"])
            .arg(kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("client-go-candidate starts");
        let stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let event: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON event line: {line:?}: {e}"));
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        Candidate {
            identity: identity.to_owned(),
            child,
            stdin,
            events,
        }
    }

    /// The next line of `event`, skipping others.
    async fn next(&mut self, event: &str) -> Value {
        let wanted = async {
            loop {
                match self.events.recv().await {
                    Some(line) if line["event"] == event => return line,
                    Some(_) => continue,
                    None => panic!("{} exited before {event}", self.identity),
                }
            }
        };
        tokio::time::timeout(EVENT_LIMIT, wanted)
            .await
            .unwrap_or_else(|_| panic!("{}: no {event} within {EVENT_LIMIT:?}", self.identity))
    }

    /// Closes its stdin, which cancels its election (ReleaseOnCancel), and
    /// waits for it to exit.
    async fn release(mut self) -> (Vec<Value>, ExitStatus) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(EVENT_LIMIT, self.child.wait())
            .await
            .expect("exits after stdin closes")
            .unwrap();
        let mut rest = Vec::new();
        while let Some(line) = self.events.recv().await {
            rest.push(line);
        }
        (rest, status)
    }
}

/// Returns once `holder` has renewed the Lease since this was called.
///
/// client-go's release is one update from the resourceVersion its last
/// renewal saw, never retried; a renewal cancelled in flight may still be
/// applied by the server, and the release then fails 409 (as it would
/// against kube-apiserver: client-go logs "Failed to release lock" and
/// leaves the Lease to expire). Releasing right after a renewal landed
/// keeps the two apart.
async fn renewed(f: &common::Fixture, holder: &str) {
    let first = f.get("leader").await;
    let since = spec_of(&first)["renewTime"].clone();
    let landed = async {
        loop {
            let lease = f.get("leader").await;
            let spec = spec_of(&lease);
            assert_eq!(spec["holderIdentity"], holder, "{spec}");
            if spec["renewTime"] != since {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(EVENT_LIMIT, landed)
        .await
        .unwrap_or_else(|_| panic!("{holder} did not renew within {EVENT_LIMIT:?}"));
}

fn spec_of(lease: &(u16, Value)) -> &Value {
    assert_eq!(lease.0, 200, "{}", lease.1);
    &lease.1["spec"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_leads_hands_over_fails_over_and_releases_in_protobuf() {
    let Some(peers) = common::peers_dir("client-go-candidate") else {
        return;
    };
    let binary = peers.join("client-go-candidate");
    let f = common::fixture().await;
    let kubeconfig = f.server.kubeconfig_file().unwrap();

    // It creates the Lease and leads.
    let mut a = Candidate::start(&binary, kubeconfig.path(), "a");
    a.next("started_leading").await;
    let lease = f.get("leader").await;
    let spec = spec_of(&lease);
    assert_eq!(spec["holderIdentity"], "a");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    assert!(spec["renewTime"].is_string(), "{spec}");

    // A second candidate reads the holder from the server's answers.
    let mut b = Candidate::start(&binary, kubeconfig.path(), "b");
    assert_eq!(b.next("new_leader").await["leader"], "a");

    // A graceful hand-over: a releases, b is elected.
    renewed(&f, "a").await;
    let (rest, status) = a.release().await;
    assert!(status.success(), "a exited {status}");
    let stopped = rest
        .iter()
        .find(|l| l["event"] == "stopped_leading")
        .unwrap_or_else(|| panic!("a never stopped leading: {rest:?}"));
    assert_eq!(stopped["was_leading"], true);
    b.next("started_leading").await;
    let lease = f.get("leader").await;
    assert_eq!(spec_of(&lease)["holderIdentity"], "b");
    assert_eq!(spec_of(&lease)["leaseTransitions"], 1);

    // A crash: b is killed holding the Lease; c is elected once it expires.
    let mut c = Candidate::start(&binary, kubeconfig.path(), "c");
    assert_eq!(c.next("new_leader").await["leader"], "b");
    b.child.start_kill().unwrap();
    b.child.wait().await.unwrap();
    c.next("started_leading").await;
    let lease = f.get("leader").await;
    assert_eq!(spec_of(&lease)["holderIdentity"], "c");
    assert_eq!(spec_of(&lease)["leaseTransitions"], 2);

    // c's release empties the holder, as client-go's release writes it.
    renewed(&f, "c").await;
    let (_, status) = c.release().await;
    assert!(status.success(), "c exited {status}");
    let lease = f.get("leader").await;
    assert_eq!(spec_of(&lease)["holderIdentity"], "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_leader_whose_renewals_are_refused_stops_and_exits() {
    let Some(peers) = common::peers_dir("client-go-candidate") else {
        return;
    };
    let binary = peers.join("client-go-candidate");
    let f = common::fixture().await;
    let kubeconfig = f.server.kubeconfig_file().unwrap();
    let mut a = Candidate::start(&binary, kubeconfig.path(), "a");
    a.next("started_leading").await;
    // Every update answered 500 from now on: client-go retries each
    // renewal until its RenewDeadline (666 ms) passes, then gives up.
    let refused_at = std::time::Instant::now();
    f.server
        .refuse(tenure_lease_server::Requests::Update, 500, None);
    let stopped = a.next("stopped_leading").await;
    let after = refused_at.elapsed();
    assert_eq!(stopped["was_leading"], true);
    // The deadline and a retry period of 500 ms, with room for a slow
    // machine; a leader that never gave up would be caught by next's limit.
    assert!(
        after < Duration::from_secs(5),
        "stopped {after:?} after the refusals began"
    );
    let exited = a.next("exited").await;
    assert_eq!(exited["reason"], "lost");
    let status = a.child.wait().await.unwrap();
    assert_eq!(status.code(), Some(1), "{status}");
}
