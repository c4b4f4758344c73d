//! Contract point 3: with many candidates waiting, a leadership change costs
//! O(1) server writes, and O(1) server requests and notifications of any kind.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::candidate::Holder;
use super::context::{Context, Cx, Failure, Step};
use crate::report::Property;

/// Waiting candidates in the herd case.
pub const HERD: usize = 100;
/// Leadership changes counted.
const CHANGES: u32 = 5;
/// Server writes per change a herd-free backend may spend (release, grant, and one spare).
const HERD_FREE_WRITES: f64 = 3.0;
/// Requests and notifications per change a herd-free backend may spend: the
/// release, the next candidate's wake-up and its look or grant, with room
/// for a backend's sync and reads; a backend that tells every waiter (or
/// has every waiter look) spends about [`HERD`].
const HERD_FREE_REQUESTS: f64 = 10.0;

/// The servers' request counter, `None` where the factory has none.
async fn server_requests(cx: &Cx) -> Step<Option<u64>> {
    match cx.factory().server_requests().await {
        None => Ok(None),
        Some(Ok(n)) => Ok(Some(n)),
        Some(Err(e)) => Err(Failure::Fail(format!("reading the request counter: {e}"))),
    }
}

/// The servers' login counter, `None` where clients do not log in.
async fn server_logins(cx: &Cx) -> Step<Option<u64>> {
    match cx.factory().server_logins().await {
        None => Ok(None),
        Some(Ok(n)) => Ok(Some(n)),
        Some(Err(e)) => Err(Failure::Fail(format!("reading the login counter: {e}"))),
    }
}

/// Waits (at most `limit`) until the servers' request counter stays still
/// for a while; whether it did. True at once without a counter.
async fn until_requests_settle(cx: &Cx, limit: Duration) -> Step<bool> {
    const STILL: Duration = Duration::from_millis(150);
    const POLL: Duration = Duration::from_millis(30);
    let Some(mut last) = server_requests(cx).await? else {
        return Ok(true);
    };
    let deadline = Instant::now() + limit;
    let mut since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        let now = server_requests(cx).await?.unwrap_or(last);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= STILL {
            return Ok(true);
        }
    }
    Ok(false)
}

/// With 100 ([`HERD`]) candidates waiting, hands the lease down the line several
/// times and counts the server's writes per change, and where the factory
/// counts them ([`BackendFactory::server_requests`]), every request and
/// notification the servers served per change.
pub async fn herd_writes_per_leadership_change(cx: Cx) -> Step {
    // Alone on the machine, and last: it counts every request the
    // servers serve, and its hundred clients load the machine.
    let Some(first) = cx.factory().server_writes().await else {
        return Err(Failure::Skip(
            "the factory has no server write counter".into(),
        ));
    };
    first.map_err(|e| Failure::Fail(format!("reading the write counter: {e}")))?;
    let key = cx.new_key();
    let mut current = Holder::acquire(&cx, &cx.client().await?, &key, "holder").await?;
    // Setting a hundred candidates up can outlast the TTL: the holder
    // renews meanwhile, as a live leader does (else its lease lapses, the
    // first waiter is granted, its lease lapses unrenewed too, and the
    // line shortens by one a TTL).
    let renew_every = cx.ttl() / 3;
    let mut renewed = Instant::now();
    let (tx, mut grants) = mpsc::unbounded_channel::<Step<Holder>>();
    let mut tasks = Vec::with_capacity(HERD);
    for i in 0..HERD {
        let (cx, key, tx) = (cx.clone(), key.clone(), tx.clone());
        let client = cx.client().await?;
        tasks.push(tokio::spawn(async move {
            let _ = tx.send(Holder::acquire_waiting(&cx, &client, &key, &format!("w{i}")).await);
        }));
        if renewed.elapsed() >= renew_every {
            renewed = Instant::now();
            current
                .renew()
                .await
                .ctx("the holder renewing while the herd queues")?;
        }
    }
    let queued = {
        let queued = cx.until_waiting(&key, HERD);
        tokio::pin!(queued);
        loop {
            tokio::select! {
                queued = &mut queued => break queued,
                () = tokio::time::sleep_until(renewed + renew_every) => {
                    renewed = Instant::now();
                    current.renew().await.ctx("the holder renewing while the herd queues")?;
                }
            }
        }
    };
    if let Err(failure) = queued {
        // Say why candidates are missing, if their acquire ended in an error.
        let mut errors = Vec::new();
        while let Ok(Err(e)) = grants.try_recv() {
            errors.push(format!("{e:?}"));
        }
        if let (Failure::Fail(why), Some(first)) = (&failure, errors.first()) {
            return Err(Failure::Fail(format!(
                "{why}; {} candidates failed, the first with: {first}",
                errors.len()
            )));
        }
        return Err(failure);
    }
    let writes = || async {
        match cx.factory().server_writes().await {
            Some(Ok(n)) => Ok(n),
            other => Err(Failure::Fail(format!(
                "reading the write counter: {other:?}"
            ))),
        }
    };
    // A candidate counts as waiting once its record exists, and may
    // still be taking its first look (a read, a watch opened): let that
    // land first, or it is billed to the first changes. Heartbeats are
    // not counted, so a herd at rest leaves the counter still. The
    // holder renews before and after, as the changes below take less
    // than a TTL from then.
    current
        .renew()
        .await
        .ctx("the holder renewing while the herd settles")?;
    let settled = until_requests_settle(&cx, cx.ttl() / 3).await?;
    current
        .renew()
        .await
        .ctx("the holder renewing while the herd settles")?;
    if !settled {
        cx.note(format!(
            "the request counter still moved {:?} after the herd queued",
            cx.ttl() / 3
        ));
    }
    let before = writes().await?;
    let requests_before = server_requests(&cx).await?;
    let logins_before = server_logins(&cx).await?;
    let mut handovers = Duration::ZERO;
    for _ in 0..CHANGES {
        // Each leader holds a while, as real ones do: waiting that polls costs writes meanwhile.
        tokio::time::sleep(cx.timing().settle.min(cx.ttl() / 4)).await;
        current.write();
        let released = Instant::now();
        current.release().await?;
        let limit = cx.ttl() + cx.timing().round_trip * 4;
        let next = cx
            .within(limit, "the next candidate's grant", grants.recv())
            .await?;
        current = next.ok_or_else(|| Failure::Fail("every waiter ended".into()))??;
        handovers += cx.safety().get(current.term).start - released;
    }
    let after = writes().await?;
    let requests_after = server_requests(&cx).await?;
    let logins_after = server_logins(&cx).await?;
    current.write();
    current.release().await?;
    for task in &tasks {
        task.abort();
    }
    // A waiter's credentials may lapse while it waits (etcd's tokens
    // when unused for --auth-token-ttl): the one whose turn comes logs
    // in again, a write and a request of its own. One login per change
    // is excused from both counts; more (waiters logging in as they
    // wait, or all at each change) counts against the herd.
    let logins = logins_before
        .zip(logins_after)
        .map_or(0, |(before, after)| after.saturating_sub(before));
    let excused = logins.min(u64::from(CHANGES));
    if logins > 0 {
        cx.note(format!(
            "{logins} logins over {CHANGES} changes, {excused} (one a change) not counted as writes or requests"
        ));
    }
    let per_change = (after - before).saturating_sub(excused) as f64 / f64::from(CHANGES);
    let requests_per_change = requests_before.zip(requests_after).map(|(before, after)| {
        after.saturating_sub(before).saturating_sub(excused) as f64 / f64::from(CHANGES)
    });
    cx.figures(|f| {
        f.writes_per_change = Some(per_change);
        f.requests_per_change = requests_per_change;
        f.handover_ms = Some(handovers.as_secs_f64() * 1000.0 / f64::from(CHANGES));
    });
    cx.note(format!(
        "{} server writes over {CHANGES} changes with {HERD} waiting",
        after - before
    ));
    cx.check(Property::HerdFree, per_change <= HERD_FREE_WRITES, || {
        format!("{per_change:.1} server writes per leadership change with {HERD} waiting (herd-free allows {HERD_FREE_WRITES})")
    })?;
    match requests_per_change {
        None => {
            cx.note("requests not counted: the factory has no request counter");
            Ok(())
        }
        Some(per_change) => cx.check(Property::HerdRequests, per_change <= HERD_FREE_REQUESTS, || {
            format!("{per_change:.1} server requests and notifications per leadership change with {HERD} waiting (herd-free allows {HERD_FREE_REQUESTS})")
        }),
    }
}
