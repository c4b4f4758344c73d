//! Curator's LeaderLatch (Debian's libcurator-*-java inside the server image)
//! and tenure candidates in one election, both ways round. The test compiles
//! `interop/Latch.java` with javac in the ZooKeeper container and runs it
//! there with `docker exec`.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{connect, zookeeper, TTL};
use futures::StreamExt;
use tenure_core::Elector;
use tenure_testkit::harness::Cluster;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::{timeout, Instant};

const SOURCE: &str = include_str!("interop/Latch.java");
const CLASSPATH: &str = "/tmp/latch:/usr/share/java/curator-client.jar:/usr/share/java/curator-framework.jar:\
/usr/share/java/curator-recipes.jar:/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:\
/usr/share/java/guava.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar";

/// Compiles Latch.java inside the container.
async fn compile(cluster: &Cluster) {
    let container = cluster.node(0).unwrap().container().to_owned();
    let mut child = Command::new("docker")
        .args(["exec", "-i", &container, "sh", "-c"])
        .arg(format!(
            "mkdir -p /tmp/latch && cat > /tmp/latch/Latch.java && javac -nowarn -cp {CLASSPATH} -d /tmp/latch /tmp/latch/Latch.java"
        ))
        .stdin(Stdio::piped())
        .spawn()
        .expect("docker exec javac");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(SOURCE.as_bytes()).await.unwrap();
    drop(stdin);
    assert!(child.wait().await.unwrap().success(), "javac failed");
}

/// A running Curator LeaderLatch participant.
struct Curator {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Curator {
    fn spawn(cluster: &Cluster, path: &str, id: &str) -> Curator {
        let container = cluster.node(0).unwrap().container().to_owned();
        let mut child = Command::new("docker")
            .args(["exec", "-i", &container, "java", "-cp", CLASSPATH, "Latch"])
            .args(["127.0.0.1:2181", path, id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("docker exec java");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Curator {
            child,
            stdin,
            lines,
        }
    }

    /// Waits for a line equal to `what`.
    async fn until(&mut self, what: &str, within: Duration) -> bool {
        timeout(within, async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                if line.trim() == what {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false)
    }

    async fn close(&mut self) {
        let mut stdin = self.stdin.take().unwrap();
        stdin.write_all(b"close\n").await.unwrap();
        stdin.flush().await.unwrap();
    }
}

/// Prints how long a hand-over (`what`) took, which must be under a second.
fn handover_under_a_second(what: &str, handover: Duration) {
    println!("{what}: {:.1} ms", handover.as_secs_f64() * 1e3);
    assert!(handover < Duration::from_secs(1), "took {handover:?}");
}

async fn elector(cluster: &Cluster, key: &str, identity: &str) -> Elector {
    Elector::builder(connect(cluster).await)
        .key(key)
        .identity(identity)
        .ttl(TTL)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn tenure_waits_behind_curator_and_leads_when_it_closes() {
    let cluster = zookeeper().await;
    compile(&cluster).await;
    let mut java = Curator::spawn(&cluster, "/interop-a", "java-peer");
    assert!(
        java.until("LEADER", Duration::from_secs(30)).await,
        "Curator leads"
    );

    let rust = elector(&cluster, "interop-a", "rust-replica").await;
    let mut observed = rust.observe();
    let seen = observed.next().await.expect("an observation");
    assert_eq!(
        seen.leader().map(|l| l.identity.as_str()),
        Some("java-peer")
    );
    let campaign = tokio::spawn({
        let rust = rust.clone();
        async move { rust.campaign().await.map(|l| (Instant::now(), l)) }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !campaign.is_finished(),
        "tenure led while Curator held the latch"
    );

    let closed = Instant::now();
    java.close().await;
    let (led_at, leadership) = campaign.await.unwrap().unwrap();
    handover_under_a_second(
        "Curator closed -> tenure leads (includes the docker exec pipe)",
        led_at - closed,
    );
    assert!(leadership.is_valid());
    assert!(java.until("CLOSED", Duration::from_secs(10)).await);
    let _ = java.child.wait().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn curator_waits_behind_tenure_and_leads_when_tenure_resigns() {
    let cluster = zookeeper().await;
    compile(&cluster).await;
    let rust = elector(&cluster, "interop-b", "rust-replica").await;
    let leadership = rust.campaign().await.unwrap();

    let mut java = Curator::spawn(&cluster, "/interop-b", "java-peer");
    assert!(java.until("STARTED", Duration::from_secs(30)).await);
    assert!(
        !java.until("LEADER", Duration::from_millis(1500)).await,
        "Curator led while tenure held the election"
    );
    // Curator's node queues behind ours: tenure observes itself still leading.
    let mut observed = rust.observe();
    let seen = observed.next().await.expect("an observation");
    assert_eq!(
        seen.leader().map(|l| l.identity.as_str()),
        Some("rust-replica")
    );

    let resigned = Instant::now();
    leadership.resign().await.unwrap();
    assert!(
        java.until("LEADER", Duration::from_secs(5)).await,
        "Curator leads after tenure resigns"
    );
    handover_under_a_second(
        "tenure resigned -> Curator leads (includes the docker exec pipe)",
        resigned.elapsed(),
    );
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let event = observed.next().await.expect("an observation");
            if let Some(l) = event.leader() {
                if l.identity.as_str() == "java-peer" {
                    return event;
                }
            }
        }
    })
    .await
    .expect("tenure observes Curator leading");
    assert!(seen.leader().is_some());
    java.close().await;
    assert!(java.until("CLOSED", Duration::from_secs(10)).await);
}
