//! Three replicas elect a leader on the in-memory backend, in real time:
//! election, graceful hand-over, a crashed leader replaced after the TTL, and a
//! deposed leader's write refused by a fence.
//!
//! Run: `cargo run --example quickstart`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tenure::{Elector, Fence, FencingToken, LeaderEvent, Leadership, MemoryBackend};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(1);

/// The storage service the leaders write to: it keeps a fence.
#[derive(Default)]
struct Ledger {
    fence: Fence,
    entries: Mutex<Vec<String>>,
}

impl Ledger {
    fn append(&self, token: FencingToken, entry: &str) -> tenure::Result<()> {
        self.fence.write("ledger", token, || {
            self.entries.lock().unwrap().push(entry.to_owned())
        })
    }
}

struct Clock(Instant);
impl Clock {
    fn say(&self, line: impl AsRef<str>) {
        println!("[{:>6} ms] {}", self.0.elapsed().as_millis(), line.as_ref());
    }
}

#[tokio::main]
async fn main() -> tenure::Result<()> {
    let clock = Arc::new(Clock(Instant::now()));
    let server = MemoryBackend::new();
    let ledger = Arc::new(Ledger::default());
    let names = ["replica-a", "replica-b", "replica-c"];
    let clients: Vec<MemoryBackend> = names.iter().map(|_| server.client()).collect();
    let electors: Vec<Elector> = names
        .iter()
        .zip(&clients)
        .map(|(name, client)| {
            Elector::builder(Arc::new(client.clone()))
                .key("billing-job")
                .identity(*name)
                .ttl(TTL)
                .build()
        })
        .collect::<tenure::Result<_>>()?;

    // A dashboard watching who leads.
    let observer = {
        let clock = clock.clone();
        let mut events = electors[0].observe();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    LeaderEvent::Elected(l) => clock.say(format!(
                        "  observer: {} leads (token {})",
                        l.identity,
                        l.token.map_or("-".into(), |t| t.to_string())
                    )),
                    LeaderEvent::Vacant => clock.say("  observer: nobody leads"),
                }
            }
        })
    };

    clock.say(format!(
        "three replicas campaign for \"billing-job\" (TTL {TTL:?})"
    ));
    let (tx, mut elected) = tokio::sync::mpsc::unbounded_channel::<(usize, Leadership)>();
    for (i, elector) in electors.iter().enumerate() {
        let (elector, tx) = (elector.clone(), tx.clone());
        tokio::spawn(async move {
            if let Ok(leadership) = elector.campaign().await {
                let _ = tx.send((i, leadership));
            }
        });
    }

    // 1. Election.
    let (first, leader) = elected.recv().await.expect("someone leads");
    let token = leader.token().expect("memory fences");
    clock.say(format!("{} is leader with token {token}", names[first]));
    ledger.append(token, &format!("{} ran the billing job", names[first]))?;
    clock.say(format!(
        "{} wrote to the ledger with token {token}",
        names[first]
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    clock.say(format!(
        "{} renewed its lease while working: still valid = {}",
        names[first],
        leader.is_valid()
    ));

    // 2. Graceful hand-over.
    clock.say(format!("{} resigns", names[first]));
    let resigned = Instant::now();
    leader.resign().await?;
    let (second, leader) = elected.recv().await.expect("a standby takes over");
    clock.say(format!(
        "{} is leader with token {} after {:.3} ms",
        names[second],
        leader.token().unwrap(),
        resigned.elapsed().as_secs_f64() * 1e3
    ));
    let stale_token = leader.token().unwrap();
    ledger.append(
        stale_token,
        &format!("{} ran the billing job", names[second]),
    )?;

    // 3. The leader's host freezes: nothing it sends arrives any more.
    clock.say(format!(
        "{} freezes (its link to the server is cut; no renewals, no release)",
        names[second]
    ));
    clients[second].faults().cut_off();
    let frozen = Instant::now();
    let stepped_down = {
        let term = leader.term();
        let clock = clock.clone();
        let name = names[second];
        tokio::spawn(async move {
            let reason = term.lost().await;
            clock.say(format!("{name} stops believing it leads ({reason})"));
            Instant::now()
        })
    };
    let (third, new_leader) = elected.recv().await.expect("the last replica takes over");
    let took_over = Instant::now();
    clock.say(format!(
        "{} is leader with token {} after {} ms (TTL {} ms)",
        names[third],
        new_leader.token().unwrap(),
        (took_over - frozen).as_millis(),
        TTL.as_millis()
    ));
    let stepped_down = stepped_down.await.expect("the deposed leader noticed");
    assert!(
        stepped_down <= took_over,
        "the old leader must give up first"
    );
    clock.say(format!(
        "{} gave up {} ms before {} was granted the lease",
        names[second],
        (took_over - stepped_down).as_millis(),
        names[third]
    ));
    ledger.append(
        new_leader.token().unwrap(),
        &format!("{} ran the billing job", names[third]),
    )?;

    // 4. The frozen leader wakes up and tries to write with its old token.
    clients[second].faults().heal();
    match ledger.append(
        stale_token,
        &format!("{} ran the billing job AGAIN", names[second]),
    ) {
        Err(e) => clock.say(format!(
            "{} wakes up and writes: refused: {e}",
            names[second]
        )),
        Ok(()) => panic!("a stale write was accepted"),
    }
    drop(leader);

    clock.say("ledger:");
    for entry in ledger.entries.lock().unwrap().iter() {
        println!("             - {entry}");
    }
    new_leader.resign().await?;
    for elector in &electors {
        elector.shutdown().await;
    }
    observer.await.ok();
    clock.say("done");
    Ok(())
}
