//! Contract points 2, 3, 6 and 9 under contention: many candidates going for
//! one grant at the same instant, single attempts racing for a vacant key,
//! and waiting standbys racing for a key whose holder crashed. Exactly one
//! wins each grant, the others are told who did (or keep waiting), and the
//! winners' tokens rise grant after grant.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{ElectionKey, LeaderInfo};
use tokio::sync::{mpsc, Barrier};
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

use super::candidate::Holder;
use super::context::{Context, Cx, Failure, Step};
use crate::factory::Client;
use crate::report::Property;

/// Candidates racing single attempts for one vacant key.
pub const RACERS: usize = 20;
/// Races run one after another on the same key (each winner releases).
const ROUNDS: usize = 3;
/// Standbys waiting in line when the holder crashes.
pub const STANDBYS: usize = 10;

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `n` clients of their own, one per candidate.
async fn clients(cx: &Cx, n: usize) -> Step<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(cx.client().await?);
    }
    Ok(clients)
}

/// Checks that the terms recorded so far carry strictly increasing tokens,
/// in the order their candidates learnt of their grants.
fn tokens_increase(cx: &Cx, what: &str) -> Step {
    let tokens = cx.safety().tokens();
    let raw: Vec<String> = tokens
        .iter()
        .map(|t| t.map_or("none".into(), |t| t.to_string()))
        .collect();
    let increasing = tokens
        .windows(2)
        .all(|w| matches!((w[0], w[1]), (Some(x), Some(y)) if x < y));
    if increasing {
        cx.note(format!("{what}: tokens {}", raw.join(", ")));
    }
    cx.check(Property::Fencing, increasing, || {
        format!("{what}: tokens in grant order: {}", raw.join(", "))
    })
}

/// One race: every client makes one attempt on `key` at the same instant
/// (they meet at a barrier first); the answers, by racer.
async fn race(
    cx: &Cx,
    clients: &[Client],
    key: &ElectionKey,
    round: usize,
) -> Step<Vec<Step<Result<Holder, LeaderInfo>>>> {
    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks: Vec<JoinHandle<Step<Result<Holder, LeaderInfo>>>> = clients
        .iter()
        .enumerate()
        .map(|(i, client)| {
            let (cx, client, key, barrier) =
                (cx.clone(), client.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                Holder::try_acquire(&cx, &client, &key, &format!("r{round}-{i}")).await
            })
        })
        .collect();
    // Every attempt is one request (a compare-and-swap, a create); with all
    // of them at once the servers may queue them: a few round trips in all.
    let limit = cx.timing().round_trip * 4;
    let what = format!("{} single attempts racing", clients.len());
    let joined = cx
        .within(limit, what, futures::future::join_all(tasks))
        .await?;
    Ok(joined
        .into_iter()
        .map(|j| j.map_err(|e| Failure::Fail(format!("racer task: {e}")))?)
        .collect())
}

/// [`RACERS`] clients make one attempt each on one vacant key at the same
/// instant: exactly one is granted, and every other is told `Held` naming
/// it (and its token). The winner releases and they race again, [`ROUNDS`] times; where the
/// backend fences, the winners' tokens strictly increase.
pub async fn racing_single_attempts_grant_exactly_one(cx: Cx) -> Step {
    let clients = clients(&cx, RACERS).await?;
    let key = cx.new_key();
    for round in 0..ROUNDS {
        let answers = race(&cx, &clients, &key, round).await?;
        let mut winners = Vec::new();
        let mut told = Vec::new();
        for answer in answers {
            match answer? {
                Ok(holder) => winners.push(holder),
                Err(info) => told.push(info),
            }
        }
        let names: Vec<&str> = winners.iter().map(Holder::identity).collect();
        cx.check(Property::Exclusive, winners.len() <= 1, || {
            format!(
                "round {round}: {} of {RACERS} racing single attempts were granted: {}",
                winners.len(),
                names.join(", ")
            )
        })?;
        cx.check(Property::Contract, winners.len() == 1, || {
            format!("round {round}: none of {RACERS} racing single attempts on a vacant key was granted")
        })?;
        let winner = winners.pop().expect("checked: one winner");
        let wrong: Vec<String> = told
            .iter()
            .filter(|info| info.identity.as_str() != winner.identity())
            .map(|info| info.identity.to_string())
            .collect();
        cx.check(Property::Contract, wrong.is_empty(), || {
            format!(
                "round {round}: {} won, but {} refused racers were told Held by {}",
                winner.identity(),
                wrong.len(),
                wrong.join(", ")
            )
        })?;
        let token = winner.lease.token();
        let tokens: Vec<String> = told
            .iter()
            .filter(|info| info.token != token)
            .map(|info| format!("{:?}", info.token.map(|t| t.get())))
            .collect();
        cx.check(Property::Fencing, tokens.is_empty(), || {
            format!(
                "round {round}: {} won with token {:?}, but {} refused racers were told tokens {}",
                winner.identity(),
                token.map(|t| t.get()),
                tokens.len(),
                tokens.join(", ")
            )
        })?;
        winner.write();
        winner.release().await?;
    }
    tokens_increase(&cx, "racing winners")
}

/// Renews `holder` every third of the TTL until `until` resolves (a live
/// holder's lease must not lapse while the case sets things up or looks).
async fn renewing<T>(
    cx: &Cx,
    holder: &mut Holder,
    until: impl std::future::Future<Output = T>,
) -> Step<T> {
    tokio::pin!(until);
    let every = cx.ttl() / 3;
    loop {
        tokio::select! {
            out = &mut until => return Ok(out),
            () = sleep(every) => holder.renew().await.ctx(format_args!("{} renews", holder.identity()))?,
        }
    }
}

/// The next grant among the standbys, within `limit`.
async fn next_grant(
    cx: &Cx,
    grants: &mut mpsc::UnboundedReceiver<Step<Holder>>,
    limit: Duration,
    what: &str,
) -> Step<Holder> {
    cx.within(limit, what, grants.recv())
        .await?
        .ok_or_else(|| Failure::Fail("every standby's task ended".into()))?
}

/// While `holder` holds (and renews) for a round trip, no other standby is
/// granted: the line keeps waiting.
async fn others_keep_waiting(
    cx: &Cx,
    holder: &mut Holder,
    grants: &mut mpsc::UnboundedReceiver<Step<Holder>>,
    after: &str,
) -> Step {
    let window = cx.timing().round_trip;
    let extra = renewing(cx, holder, tokio::time::timeout(window, grants.recv())).await?;
    let extra = match extra {
        Ok(Some(Ok(other))) => Some(other.identity().to_owned()),
        Ok(Some(Err(failure))) => return Err(failure),
        Ok(None) | Err(_) => None,
    };
    cx.check(Property::Exclusive, extra.is_none(), || {
        format!(
            "{after}, {} was granted, and {} too, {:.0} ms later at most",
            holder.identity(),
            extra.as_deref().unwrap_or_default(),
            millis(window)
        )
    })
}

/// With [`STANDBYS`] candidates waiting in line (`AcquireMode::Wait`, each
/// on its own client), the holder crashes (stops renewing, releases
/// nothing): exactly one standby is granted, within [`Cx::failover_bound`]
/// of the crash and never before the crashed holder's `valid_until`, while
/// the others keep waiting; it releases, and exactly one of the rest is
/// granted next. Where the backend fences, tokens strictly increase.
pub async fn racing_standbys_after_expiry_grant_one_at_a_time(cx: Cx) -> Step {
    let standby_clients = clients(&cx, STANDBYS).await?;
    let key = cx.new_key();
    let mut holder = Holder::acquire(&cx, &cx.client().await?, &key, "holder").await?;
    holder.write();
    let (tx, mut grants) = mpsc::unbounded_channel::<Step<Holder>>();
    let mut tasks = Vec::with_capacity(STANDBYS);
    for (i, client) in standby_clients.into_iter().enumerate() {
        let (cx, key, tx) = (cx.clone(), key.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let granted = Holder::acquire_waiting(&cx, &client, &key, &format!("s{i}")).await;
            let _ = tx.send(granted);
        }));
    }
    drop(tx);
    let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
    let abort_on_exit = AbortOnDrop(aborts);
    renewing(&cx, &mut holder, cx.until_waiting(&key, STANDBYS)).await??;
    // One more renewal: the crash comes a full TTL before the expiry.
    holder.renew().await.ctx("the holder renews")?;
    let term = holder.term;
    let crashed = Instant::now();
    holder.crash();
    // Its client goes too: a session kept alive by its client (ZooKeeper)
    // would otherwise keep the lease.
    drop(holder);
    let deadline = cx.safety().get(term).valid_until;
    let bound = cx.failover_bound();
    let mut first = next_grant(
        &cx,
        &mut grants,
        bound * 2,
        "a standby's grant after the crash",
    )
    .await?;
    let start = cx.safety().get(first.term).start;
    let failover = start - crashed;
    cx.figures(|f| f.failover_ms = Some(millis(failover)));
    cx.check(Property::Exclusive, deadline < start, || {
        format!(
            "{} was granted {:?} before the crashed holder's valid_until",
            first.identity(),
            deadline - start
        )
    })?;
    cx.check(Property::Timing, failover <= bound, || {
        format!("failover to one of {STANDBYS} standbys took {failover:?}, bound {bound:?}")
    })?;
    first.write();
    others_keep_waiting(&cx, &mut first, &mut grants, "after the holder's expiry").await?;
    let released = Instant::now();
    first.release().await?;
    let limit = cx.ttl() + cx.timing().round_trip;
    let mut second = next_grant(
        &cx,
        &mut grants,
        limit,
        "the next standby's grant after a release",
    )
    .await?;
    cx.note(format!(
        "failover {:.0} ms; hand-over to the next of {} waiting {:.0} ms",
        millis(failover),
        STANDBYS - 1,
        millis(cx.safety().get(second.term).start - released)
    ));
    second.write();
    others_keep_waiting(&cx, &mut second, &mut grants, "after the release").await?;
    // The rest withdraw before the last release, so none is granted after.
    drop(abort_on_exit);
    second.release().await?;
    tokens_increase(&cx, "the crashed holder, then each standby granted")
}

/// Aborts the standbys' tasks when the case ends, however it ends: a
/// dropped waiting acquire withdraws its candidacy.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}
