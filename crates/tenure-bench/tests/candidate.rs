//! `tenure-bench-candidate` speaks the conformance suite's process protocol,
//! as the bench's crash-failover trial drives it: a leader elected, a
//! standby campaigning behind it, the leader killed, the standby elected
//! once the leader's lease has run out. Against the in-memory server through
//! a conformance front (`memory+tcp://`), so no container is needed.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tenure::{LeaseBackend, MemoryBackend};
use tenure_conformance::process::front;
use tenure_conformance::process::protocol::{Command, Message};
use tenure_conformance::process::CandidateProcess;
use tokio::time::Instant;

/// The bench's own TTL: a leader renews every third of it, so only a
/// machine starved for over a second could lose a lease here.
const TTL: Duration = Duration::from_secs(2);
const LIMIT: Duration = Duration::from_secs(20);

async fn candidate(url: &str, identity: &str) -> CandidateProcess {
    let program = Path::new(env!("CARGO_BIN_EXE_tenure-bench-candidate"));
    let mut process = CandidateProcess::spawn(program, url, "billing", identity, TTL, LIMIT)
        .await
        .expect("the candidate starts and says it is ready");
    process
        .request(Command::Campaign, LIMIT)
        .await
        .expect("a reply to campaign")
        .expect("campaign accepted");
    process
}

/// The token and arrival of `process`'s `elected`, or what came instead.
async fn elected(process: &mut CandidateProcess, within: Duration) -> (Option<u64>, Instant) {
    match process.next_event(within).await {
        Some((Message::Elected { token, .. }, at)) => (token, at),
        other => panic!("expected elected within {within:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_leaders_standby_is_elected_once_its_lease_runs_out() {
    let server = MemoryBackend::new();
    let addr = front::serve(Arc::new(move || {
        Arc::new(server.client()) as Arc<dyn LeaseBackend>
    }))
    .expect("a front on loopback");
    let url = format!("memory+tcp://{addr}");

    let mut leader = candidate(&url, "a").await;
    let (first, _) = elected(&mut leader, LIMIT).await;
    let mut standby = candidate(&url, "b").await;
    // The standby queues up and waits, alive, while the leader holds the lease.
    let heard = standby.next_event(TTL / 4).await;
    assert!(
        heard.is_none(),
        "the standby said {heard:?} while the leader held the lease"
    );
    let status = standby
        .request(Command::Status, LIMIT)
        .await
        .expect("the standby answers")
        .expect("status");
    assert!(
        !status.leader,
        "the standby leads beside the leader: {status:?}"
    );
    let killed = Instant::now();
    leader.kill().await.expect("the leader is killed");
    let (second, at) = elected(&mut standby, TTL * 4).await;
    // The killed leader's lease runs out a TTL after its last renewal, at
    // most a third of the TTL before the kill.
    let waited = at - killed;
    assert!(
        waited >= TTL / 3 && waited <= TTL * 2,
        "the standby led {waited:?} after the kill, TTL {TTL:?}"
    );
    assert!(
        second > first,
        "the standby's token {second:?} must be above the killed leader's {first:?}"
    );
    let _ = standby.kill().await;
}
