//! `etcdctl elect` (etcd's own `concurrency.Election`, from Debian's
//! etcd-client package inside the server image) and tenure candidates in one
//! election, both ways round.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{connect, etcd, TTL};
use futures::StreamExt;
use tenure_core::Elector;
use tenure_etcd::EtcdOptions;
use tenure_testkit::harness::Cluster;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::{timeout, Instant};

/// `etcdctl elect <key> <proposal>` (or `-l <key>` to listen), run in the etcd container.
struct Etcdctl {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Etcdctl {
    fn spawn(cluster: &Cluster, args: &[&str]) -> Etcdctl {
        let container = cluster.node(0).expect("node 0").container().to_owned();
        let mut child = Command::new("docker")
            .args([
                "exec",
                "-e",
                "ETCDCTL_API=3",
                &container,
                "etcdctl",
                "--endpoints=127.0.0.1:2379",
                "elect",
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("docker exec etcdctl");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Etcdctl { child, lines }
    }

    /// The next (key, value) pair etcdctl prints: its own election, or in
    /// listen mode each new leader.
    async fn next_leader(&mut self, within: Duration) -> Option<(String, String)> {
        timeout(within, async {
            let key = self.lines.next_line().await.ok()??;
            let value = self.lines.next_line().await.ok()??;
            Some((key, value))
        })
        .await
        .ok()
        .flatten()
    }

    /// The next (key, value) pair within `within`; panics saying `what` was awaited.
    async fn leader(&mut self, within: Duration, what: &str) -> (String, String) {
        self.next_leader(within).await.expect(what)
    }
}

/// Sends SIGINT to the `etcdctl elect <key>` campaign inside the container
/// (what Ctrl-C does): etcdctl resigns and exits.
async fn interrupt(cluster: &Cluster, key: &str) {
    let container = cluster.node(0).unwrap().container().to_owned();
    let status = Command::new("docker")
        .args([
            "exec",
            &container,
            "pkill",
            "-INT",
            "-f",
            &format!("etcdctl --endpoints=127.0.0.1:2379 elect {key} "),
        ])
        .status()
        .await
        .unwrap();
    assert!(status.success(), "no etcdctl campaign to interrupt");
}

/// Prints how long a hand-over (`what`) took, which must be under a second.
fn handover_under_a_second(what: &str, handover: Duration) {
    println!("{what}: {:.1} ms", handover.as_secs_f64() * 1e3);
    assert!(handover < Duration::from_secs(1), "took {handover:?}");
}

async fn elector(cluster: &Cluster, key: &str, identity: &str) -> Elector {
    Elector::builder(connect(cluster, EtcdOptions::default()).await)
        .key(key)
        .identity(identity)
        .ttl(TTL)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn tenure_waits_behind_etcdctl_and_leads_when_it_resigns() {
    let cluster = etcd().await;
    let mut go = Etcdctl::spawn(&cluster, &["interop-a", "go-peer"]);
    let (go_key, value) = go.leader(Duration::from_secs(10), "etcdctl leads").await;
    assert_eq!(value, "go-peer");
    assert!(go_key.starts_with("interop-a/"), "{go_key}");

    let rust = elector(&cluster, "interop-a", "rust-replica").await;
    let mut observed = rust.observe();
    let seen = observed.next().await.expect("an observation");
    assert_eq!(seen.leader().map(|l| l.identity.as_str()), Some("go-peer"));
    let campaign = tokio::spawn({
        let rust = rust.clone();
        async move { rust.campaign().await.map(|l| (Instant::now(), l)) }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !campaign.is_finished(),
        "tenure led while etcdctl held the election"
    );

    let interrupted = Instant::now();
    interrupt(&cluster, "interop-a").await;
    let (led_at, leadership) = campaign.await.unwrap().unwrap();
    handover_under_a_second(
        "etcdctl resigned -> tenure leads (includes docker exec pkill)",
        led_at - interrupted,
    );
    assert!(leadership.is_valid());
    let _ = go.child.wait().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_waits_behind_tenure_and_leads_when_tenure_resigns() {
    let cluster = etcd().await;
    let rust = elector(&cluster, "interop-b", "rust-replica").await;
    let leadership = rust.campaign().await.unwrap();

    // etcdctl's observer sees tenure's candidate as the leader.
    let mut listener = Etcdctl::spawn(&cluster, &["-l", "interop-b"]);
    let (_, value) = listener
        .leader(Duration::from_secs(10), "etcdctl observes")
        .await;
    assert_eq!(value, "rust-replica");

    let mut go = Etcdctl::spawn(&cluster, &["interop-b", "go-peer"]);
    assert!(
        go.next_leader(Duration::from_millis(1500)).await.is_none(),
        "etcdctl led while tenure held the election"
    );

    let resigned = Instant::now();
    leadership.resign().await.unwrap();
    let (_, value) = go
        .leader(Duration::from_secs(5), "etcdctl leads after tenure resigns")
        .await;
    let handover = resigned.elapsed();
    assert_eq!(value, "go-peer");
    handover_under_a_second("tenure resigned -> etcdctl leads", handover);
    let (_, value) = listener
        .leader(Duration::from_secs(5), "listener sees the change")
        .await;
    assert_eq!(value, "go-peer");
    interrupt(&cluster, "interop-b").await;
}
