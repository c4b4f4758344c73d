//! The Redlock round: taking the key on every master, waiting for it,
//! keeping it (renewal, and taking back masters that lost it) and letting it
//! go; a round that is not granted undoes what it took.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use redis::Value;
use tokio::time::Instant;

use tenure_core::hosted::CleanupOnDrop;
use tenure_core::{
    Acquisition, Candidacy, ElectionKey, Error, Lease, LeaseHandle, LossReason, Result,
};

use crate::answers::{acquire_answer, holder_of};
use crate::granted::RedisGrant;
use crate::master::{Master, Message};
use crate::{redlock_drift, unavailable, RedisBackend};

/// The least a refused round waits for its remaining answers to say which
/// of two named holders a majority holds.
const MIN_SETTLE: Duration = Duration::from_millis(5);

/// The most a single attempt pauses, at random, before it tries again on
/// masters split between candidates.
const SPLIT_PAUSE: Duration = Duration::from_millis(20);

/// How one attempt to take the key on every master ended.
pub(crate) enum Attempt {
    Granted(Lease),
    /// Not granted. `holder`: the value found on the most masters that
    /// answered, if any; `free_in`: when a majority of masters should be
    /// free again, judged from their answers (`None` when too few answered).
    NotGranted {
        holder: Option<String>,
        /// `holder` was named by a majority of masters (or confirmed so):
        /// it holds the key. Else the masters are split (candidates took a
        /// minority each, or an orphan stands on one) and nobody does.
        majority: bool,
        free_in: Option<Duration>,
        /// A master answered with a key that never expires.
        no_expiry: bool,
        failures: Vec<String>,
    },
}

impl RedisBackend {
    pub(crate) fn redis_key(&self, key: &ElectionKey) -> String {
        format!("{}{}", self.inner.options.key_prefix, key.as_str())
    }

    pub(crate) fn node_timeout(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.inner.options.node_timeout_fraction)
            .max(Duration::from_millis(1))
    }

    /// One Redlock round: `SET NX PX` with a fresh random value on the
    /// masters, granted once a majority said yes while the lease, counted
    /// from the send, is still valid. Whatever was taken of a round that
    /// failed is released on every master.
    ///
    /// The first master that answered its last call is asked first, alone
    /// (the gate): of candidates racing for a free key only the one it
    /// grants goes on to the others, so a hundred waiters woken by one
    /// release do not split the masters' votes among them and all back
    /// off (a livelock measured here without it). The others are then asked
    /// in parallel; also if the gate has not answered within a few of its
    /// round trips (at least 50 ms), so a silent master costs a round no
    /// more than that. Safety is Redlock's all the same: a majority must
    /// grant.
    ///
    /// `known` is the value a majority was last seen to hold (a waiter's
    /// memory across its rounds): a gate that refuses with it is believed
    /// without looking at the others again. The waiter forgets it when a
    /// release of that value is published, and it is forgotten here when
    /// the others no longer hold it: a release that missed the gate leaves
    /// the key there alone.
    pub(crate) async fn attempt(
        &self,
        candidacy: &Candidacy,
        known: &mut Option<String>,
    ) -> Attempt {
        let key = self.redis_key(candidacy.key());
        let value = format!("{}:{}", random_hex(), candidacy.identity().as_str());
        let ttl_ms = candidacy.ttl().as_millis() as u64;
        let timeout = self.node_timeout(candidacy.ttl());
        let n = self.inner.masters.len();
        let quorum = self.inner.quorum;
        // Releases whatever this round took unless it is disarmed: on a
        // failed round, and if the caller drops the round midway.
        let undo = CleanupOnDrop::arm(
            Undo {
                backend: self.clone(),
                key: key.clone(),
                value: value.clone(),
                timeout,
                ttl: candidacy.ttl(),
            },
            undo_round,
        );
        let no_expiry = std::sync::atomic::AtomicBool::new(false);
        let call = |i: usize| {
            let (key, value, no_expiry) = (&key, &value, &no_expiry);
            let m = &self.inner.masters[i];
            async move {
                let mut call = self.inner.scripts.acquire.key(key.as_str());
                call.arg(value.as_str()).arg(ttl_ms).arg(key.as_str());
                let answer = m.invoke(&call, timeout).await;
                // A key that never expires counts as held for a TTL more.
                let answer = answer.and_then(acquire_answer).map(|held| {
                    held.map(|(holder, left)| {
                        if left.is_none() {
                            no_expiry.store(true, Ordering::Relaxed);
                        }
                        (holder, left.unwrap_or(candidacy.ttl()))
                    })
                });
                (m, answer)
            }
        };
        let (mut granted, mut refused) = (0, 0);
        let mut holders: Vec<(String, Duration)> = Vec::new();
        let mut failures = Vec::new();
        let sent_at = Instant::now();
        let gate = (n > 1)
            .then(|| self.inner.masters.iter().position(Master::trusted))
            .flatten();
        let mut calls = FuturesUnordered::new();
        if let Some(g) = gate {
            // Asked alone, but not waited for past a few of its round
            // trips: a silent first master (black-holed, stalled) would
            // otherwise cost every round its whole timeout.
            let mut first = Box::pin(call(g));
            let hedge = self.inner.masters[g].hedge_within(timeout);
            let answered = tokio::select! {
                answer = &mut first => Some(answer),
                _ = tokio::time::sleep(hedge) => None,
            };
            match answered {
                None => {
                    self.inner.masters[g].slow();
                    tracing::debug!(
                        master = %self.inner.masters[g].addr,
                        key,
                        ?hedge,
                        "the first master is slow to answer; asking the others too"
                    );
                    calls.push(first);
                }
                Some((_, Ok(None))) => granted += 1,
                Some((_, Ok(Some((holder, left))))) => {
                    // Refused at the gate: a hint only. The key there may be
                    // an orphan (a release or an undo that missed it, a key
                    // set by hand) while a majority is free.
                    let confirmed = known.as_deref() == Some(holder.as_str())
                        || self.held_by_majority(&key, &holder, g, timeout).await;
                    if confirmed {
                        *known = Some(holder.clone());
                        // Nothing was taken anywhere.
                        undo.disarm();
                        return Attempt::NotGranted {
                            holder: Some(holder),
                            majority: true,
                            free_in: Some(left),
                            no_expiry: no_expiry.load(Ordering::Relaxed),
                            failures,
                        };
                    }
                    *known = None;
                    tracing::debug!(
                        master = %self.inner.masters[g].addr,
                        key,
                        "the first master's key is held nowhere else; asking the others"
                    );
                    refused += 1;
                    holders.push((holder, left));
                }
                Some((m, Err(e))) => failures.push(format!("{}: {e}", m.addr)),
            }
        }
        for i in (0..n).filter(|i| Some(*i) != gate) {
            calls.push(Box::pin(call(i)));
        }
        let mut outstanding = calls.len();
        // Once a grant is out of reach, the refusals so far may still name
        // two holders once each (a round's loser set one master just after
        // the winner took the others): the answers still to come say which
        // a majority holds, so they are waited for, as long again as the
        // round has taken (a silent master does not hold up the answer).
        let mut settle_by = None;
        loop {
            if granted >= quorum {
                break;
            }
            if n - refused - failures.len() < quorum {
                if outstanding == 0 || named_by_majority(&holders, quorum) {
                    break;
                }
                let by = *settle_by
                    .get_or_insert_with(|| Instant::now() + sent_at.elapsed().max(MIN_SETTLE));
                if Instant::now() >= by {
                    break;
                }
            }
            let next = match settle_by {
                Some(by) => match tokio::time::timeout_at(by, calls.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => calls.next().await,
            };
            let Some((m, answer)) = next else {
                break;
            };
            outstanding -= 1;
            match answer {
                Ok(None) => granted += 1,
                Ok(Some((holder, left))) => {
                    refused += 1;
                    holders.push((holder, left));
                }
                Err(e) => failures.push(format!("{}: {e}", m.addr)),
            }
        }
        // Masters still to answer are left: their SET either lands (and is
        // released or renewed with the rest) or not.
        drop(calls);
        if granted >= quorum {
            let lease = Lease::new(
                candidacy.clone(),
                None,
                sent_at,
                LeaseHandle::new(RedisGrant {
                    key: key.clone(),
                    value,
                    released: Default::default(),
                    renewals: Default::default(),
                }),
            )
            .with_expiry_lead(redlock_drift(candidacy.ttl()));
            if lease.is_valid() {
                undo.disarm();
                return Attempt::Granted(lease);
            }
            failures.push(format!(
                "a majority granted, but only after the lease's validity ({:?}) had run out",
                lease.valid_until() - sent_at
            ));
        }
        // Undo only what may have been taken: a grant, an unanswered call
        // (its SET may have landed), or a call still in flight.
        if granted == 0 && failures.is_empty() && outstanding == 0 {
            undo.disarm();
        }
        // When could a majority be free again: masters that were ours are
        // released now; held ones free when their key expires (or sooner,
        // on a release); unanswered ones are unknown.
        let mut free: Vec<Duration> = std::iter::repeat_n(Duration::ZERO, granted)
            .chain(holders.iter().map(|(_, left)| *left))
            .collect();
        free.sort();
        let free_in = free
            .get(quorum - 1)
            .or_else(|| holders.iter().map(|(_, left)| left).max())
            .copied();
        Attempt::NotGranted {
            majority: named_by_majority(&holders, quorum),
            holder: likeliest_holder(holders),
            free_in,
            no_expiry: no_expiry.load(Ordering::Relaxed),
            failures,
        }
    }

    /// Whether `value`, found on master `gate`, is held by a majority: the
    /// other masters are looked at (read only), and where they fall short,
    /// looked at again after as long as that took, since a candidate that
    /// won the gate a moment ago may still be taking the others.
    pub(crate) async fn held_by_majority(
        &self,
        key: &str,
        value: &str,
        gate: usize,
        timeout: Duration,
    ) -> bool {
        let mut pause = None;
        loop {
            let started = Instant::now();
            let mut looks: FuturesUnordered<_> = self
                .inner
                .masters
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != gate)
                .map(|(_, m)| async move {
                    let look = self.inner.scripts.look.key(key);
                    m.invoke(&look, timeout).await
                })
                .collect();
            // Until the answers settle it: a silent master is not waited
            // for once the others decided.
            let mut holding = 1;
            while holding < self.inner.quorum && holding + looks.len() >= self.inner.quorum {
                let Some(answer) = looks.next().await else {
                    break;
                };
                if let Ok(Value::Array(items)) = answer {
                    if matches!(
                        items.first(),
                        Some(Value::BulkString(held)) if held.as_slice() == value.as_bytes()
                    ) {
                        holding += 1;
                    }
                }
            }
            drop(looks);
            if holding >= self.inner.quorum || pause.is_some() {
                return holding >= self.inner.quorum;
            }
            let took = started.elapsed().max(Duration::from_millis(1));
            pause = Some(took);
            tokio::time::sleep(took).await;
        }
    }

    /// Runs `RELEASE` for `value` on every master, for at most `timeout`
    /// each, until a majority let go (or can no longer): how many deleted
    /// it or no longer had it, and what failed. The masters still to answer
    /// finish on the heartbeat runtime, not counted as a cleanup that
    /// `Elector::shutdown` waits for: a silent master does not hold up a
    /// resign, a shutdown or a process's exit, and its key, on a minority,
    /// expires by itself.
    pub(crate) async fn release_everywhere(
        &self,
        key: &str,
        value: &str,
        timeout: Duration,
    ) -> (usize, Vec<String>) {
        let (n, quorum) = (self.inner.masters.len(), self.inner.quorum);
        let mut calls: FuturesUnordered<_> = (0..n)
            .map(|i| {
                let (this, key, value) = (self.clone(), key.to_owned(), value.to_owned());
                async move {
                    let mut call = this.inner.scripts.release.key(key.as_str());
                    call.arg(value.as_str()).arg(key.as_str());
                    (i, this.inner.masters[i].invoke(&call, timeout).await)
                }
            })
            .collect();
        let (mut done, mut failures) = (0, Vec::new());
        while done < quorum && n - failures.len() >= quorum {
            let Some((i, answer)) = calls.next().await else {
                break;
            };
            match answer {
                Ok(_) => done += 1,
                Err(e) => failures.push(format!("{}: {e}", self.inner.masters[i].addr)),
            }
        }
        if !calls.is_empty() {
            tenure_core::heartbeat_runtime().spawn(async move {
                while let Some((_, answer)) = calls.next().await {
                    if let Err(e) = answer {
                        tracing::debug!(error = %e, "a release left to finish in the background failed (the key expires)");
                    }
                }
            });
        }
        (done, failures)
    }

    /// A single attempt: granted, or told who holds the key. Masters split
    /// between candidates that took a minority each (racers whose first
    /// master was slow to answer and who asked the others at once) hold
    /// nothing: every round undoes its minority, so the attempt is made
    /// again after a random pause, as Redlock prescribes, for up to a
    /// twentieth of the TTL. A split that outlasts it is answered with the
    /// likeliest holder.
    pub(crate) async fn acquire_once(&self, candidacy: &Candidacy) -> Result<Acquisition> {
        let give_up = Instant::now() + candidacy.ttl() / 20;
        loop {
            match self.attempt(candidacy, &mut None).await {
                Attempt::Granted(lease) => return Ok(Acquisition::Granted(lease)),
                Attempt::NotGranted {
                    holder: Some(holder),
                    majority,
                    failures,
                    ..
                } if !holder.is_empty() => {
                    if majority || !failures.is_empty() || Instant::now() >= give_up {
                        return Ok(Acquisition::Held(holder_of(&holder)));
                    }
                    tracing::debug!(
                        holder = %holder_of(&holder).identity,
                        "the masters are split and none holds a majority; trying again"
                    );
                    tokio::time::sleep(Duration::from_millis(2) + jitter(SPLIT_PAUSE)).await;
                }
                Attempt::NotGranted { failures, .. } => {
                    return Err(unavailable(format!(
                        "no majority of {} masters granted the key and none names a holder: {}",
                        self.inner.masters.len(),
                        if failures.is_empty() {
                            "the key expired while it was being taken".to_owned()
                        } else {
                            failures.join("; ")
                        }
                    )))
                }
            }
        }
    }

    pub(crate) async fn acquire_waiting(&self, candidacy: &Candidacy) -> Result<Acquisition> {
        let key = self.redis_key(candidacy.key());
        let timeout = self.node_timeout(candidacy.ttl());
        let mut wake = self.subscribe(&key, timeout).await;
        let mut known = None;
        let mut warned_no_expiry = false;
        // When failures were last told at WARN, and how long until the next.
        let mut told: Option<(Instant, Duration)> = None;
        loop {
            let pause = match self.attempt(candidacy, &mut known).await {
                Attempt::Granted(lease) => return Ok(Acquisition::Granted(lease)),
                // Held: try again when a majority should be free, or at a
                // release message, whichever comes first. A key that never
                // expires is looked at again a TTL later.
                Attempt::NotGranted {
                    holder: Some(holder),
                    free_in: Some(free_in),
                    no_expiry,
                    ..
                } => {
                    if no_expiry && !warned_no_expiry {
                        warned_no_expiry = true;
                        tracing::warn!(
                            key,
                            holder = %holder_of(&holder).identity,
                            "the key never expires (set without PX, or PERSISTed): waiting \
                             until it is deleted, looking again every TTL"
                        );
                        candidacy.warning(
                            "campaign",
                            format!(
                                "the key {key} never expires (set without PX, or PERSISTed): \
                                 waiting until it is deleted"
                            ),
                        );
                    }
                    free_in + jitter(Duration::from_millis(3))
                }
                // A split vote (candidates took a minority each) or a
                // failure: a random pause, as Redlock prescribes.
                Attempt::NotGranted { failures, .. } => {
                    if !failures.is_empty() {
                        // Told at WARN, at most once per back-off period
                        // (doubling from 1 s to a minute), else at DEBUG.
                        let now = Instant::now();
                        match told {
                            Some((at, every)) if now < at + every => {
                                tracing::debug!(failures = %failures.join("; "), "no majority; retrying");
                            }
                            _ => {
                                let every = told.map_or(Duration::from_secs(1), |(_, every)| {
                                    (every * 2).min(Duration::from_secs(60))
                                });
                                told = Some((now, every));
                                tracing::warn!(key, failures = %failures.join("; "), "a waiting campaign reached no majority of masters; retrying");
                                candidacy.warning(
                                    "campaign",
                                    format!(
                                        "no majority of masters reached; retrying: {}",
                                        failures.join("; ")
                                    ),
                                );
                            }
                        }
                    }
                    Duration::from_millis(2) + jitter(candidacy.ttl() / 20)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                message = wake.next() => match message {
                    // The holder a majority was seen to hold let go (or a
                    // release did not say whose): its key may stand on a
                    // master the release missed, and is no longer believed
                    // there on its own; the others are asked again. Other
                    // values' releases (the previous holder's, rounds
                    // undoing themselves) leave it believed.
                    Some(Message::Vacant(released)) => {
                        if released.is_none() || released == known {
                            known = None;
                        }
                    }
                    Some(Message::Elected) => {}
                    None => {
                        // Every subscription ended (masters restarted): subscribe again.
                        tokio::time::sleep(pause.min(timeout)).await;
                        wake = self.subscribe(&key, timeout).await;
                    }
                },
            }
        }
    }

    /// Subscribes to `channel` on every master that answers in time; one
    /// merged stream of wake-ups. Returns once a majority is subscribed (a
    /// release reaches a majority, so one of them tells of it) or every
    /// master answered; the others join the stream as they are made, so a
    /// silent master holds up nothing. The stream ends once every
    /// subscription has.
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        timeout: Duration,
    ) -> BoxStream<'static, Message> {
        let mut pending: FuturesUnordered<_> = (0..self.inner.masters.len())
            .map(|i| {
                let (this, channel) = (self.clone(), channel.to_owned());
                async move { this.inner.masters[i].subscribe(&channel, timeout).await }
            })
            .collect();
        let mut made = Vec::new();
        while made.len() < self.inner.quorum {
            match pending.next().await {
                Some(Some(subscription)) => made.push(subscription),
                Some(None) => {}
                None => break,
            }
        }
        let later = pending
            .filter_map(futures::future::ready)
            .flatten_unordered(None);
        futures::stream::select(futures::stream::select_all(made), later).boxed()
    }

    pub(crate) async fn renew_inner(&self, lease: &Lease, state: &RedisGrant) -> Result<Lease> {
        let timeout = self.node_timeout(lease.ttl());
        let ttl_ms = lease.ttl().as_millis() as u64;
        let n = self.inner.masters.len();
        let quorum = self.inner.quorum;
        // From now on a repair of an earlier renewal is not sent: it would
        // reach a master after this renewal's extension.
        let renewal = state.renewals.fetch_add(1, Ordering::SeqCst) + 1;
        let sent_at = Instant::now();
        let mut calls: FuturesUnordered<_> = (0..n)
            .map(|i| {
                let (this, key, value) = (self.clone(), state.key.clone(), state.value.clone());
                async move {
                    let mut call = this.inner.scripts.extend.key(key.as_str());
                    call.arg(value.as_str()).arg(ttl_ms);
                    (i, this.inner.masters[i].invoke(&call, timeout).await)
                }
            })
            .collect();
        let (mut extended, mut gone) = (0, 0);
        // Masters that answered that the key is not ours (gone, or someone
        // else's), and those that failed to answer.
        let (mut lacking, mut failed) = (Vec::new(), Vec::new());
        let mut failures = Vec::new();
        while let Some((i, answer)) = calls.next().await {
            let m = &self.inner.masters[i];
            match answer {
                Ok(Value::Int(1)) => extended += 1,
                Ok(Value::Int(0)) => {
                    gone += 1;
                    lacking.push(i);
                }
                Ok(other) => {
                    failed.push(i);
                    failures.push(format!("{}: unexpected answer {other:?}", m.addr));
                }
                Err(e) => {
                    failed.push(i);
                    failures.push(format!("{}: {e}", m.addr));
                }
            }
            if extended >= quorum || n - gone < quorum {
                break;
            }
        }
        if extended >= quorum {
            let renewed = lease.renewed(sent_at, lease.handle().clone());
            if renewed.is_valid() {
                // A majority holds our value: take back the masters that
                // lost the key now (the next single loss would otherwise
                // let someone else assemble a majority), and those that
                // did not answer in time once they do.
                let expires = sent_at + lease.ttl();
                self.repair(state, renewal, &lacking, expires, &renewed, timeout)
                    .await;
                let (this, state, held) = (self.clone(), state.clone(), renewed.clone());
                // Not a cleanup `Elector::shutdown` waits for: it waits on
                // masters that did not answer in time, and stops taking any
                // back once the lease is released.
                tenure_core::heartbeat_runtime().spawn(async move {
                    let mut lacking = failed;
                    while let Some((i, answer)) = calls.next().await {
                        if !matches!(answer, Ok(Value::Int(1))) {
                            lacking.push(i);
                        }
                    }
                    this.repair(&state, renewal, &lacking, expires, &held, timeout)
                        .await;
                });
                return Ok(renewed);
            }
            return Err(Error::Timeout {
                operation: "renew",
                after: Instant::now() - sent_at,
            });
        }
        drop(calls);
        if n - gone < quorum {
            // The masters cannot tell an expired value from one taken over.
            tracing::debug!(
                gone,
                masters = n,
                "masters no longer hold this lease's value"
            );
            return Err(Error::lease_lost(lease.key().as_str(), LossReason::Revoked));
        }
        Err(unavailable(format!(
            "renewed on {extended} of {n} masters, {quorum} needed: {}",
            failures.join("; ")
        )))
    }

    /// Runs `REPAIR` on each of `masters` while `lease` (just renewed by a
    /// majority, in renewal number `renewal`) is valid and no later renewal
    /// was sent: their key, gone, is taken again with our value, to expire
    /// at `expires` as the majority's does (a key of ours with more time
    /// left is never shortened). Each taken master is a WARN: a lease that
    /// lost a master has no spare left until then.
    pub(crate) async fn repair(
        &self,
        state: &RedisGrant,
        renewal: u64,
        masters: &[usize],
        expires: Instant,
        lease: &Lease,
        timeout: Duration,
    ) {
        let calls: FuturesUnordered<_> = masters
            .iter()
            .map(|&i| async move {
                let left = expires.saturating_duration_since(Instant::now());
                let released = state.released.load(Ordering::SeqCst);
                // A later renewal's extension went out before this repair
                // would: the repair is that renewal's to make, if needed.
                let superseded = state.renewals.load(Ordering::SeqCst) != renewal;
                if released || superseded || !lease.is_valid() || left < Duration::from_millis(1) {
                    return (i, None);
                }
                let mut call = self.inner.scripts.repair.key(state.key.as_str());
                call.arg(state.value.as_str()).arg(left.as_millis() as u64);
                (i, Some(self.inner.masters[i].invoke(&call, timeout).await))
            })
            .collect();
        let answers: Vec<_> = calls.collect().await;
        for (i, answer) in answers {
            let master = &self.inner.masters[i].addr;
            match answer {
                Some(Ok(Value::Int(2))) => {
                    tracing::warn!(
                        master,
                        key = state.key,
                        "a Redis master had lost the lease's key (restarted empty, evicted, or \
                         missed by a grant); taken back, so the lease survives one more such loss"
                    );
                    lease.candidacy().warning(
                        "renew",
                        format!(
                            "Redis master {master} had lost the lease's key (restarted empty, \
                             evicted, or missed by a grant); taken back"
                        ),
                    );
                }
                Some(Ok(_)) | None => {}
                Some(Err(e)) => {
                    tracing::debug!(master, error = %e, "taking back a master that lacks the key failed")
                }
            }
        }
    }

    /// Releases on every master; returns once a majority let go (or can no
    /// longer), the rest finishing in the background: a silent master does
    /// not hold up a resign or a shutdown.
    pub(crate) async fn release_inner(&self, lease: &Lease, state: &RedisGrant) -> Result<()> {
        state.released.store(true, Ordering::SeqCst);
        let timeout = self.node_timeout(lease.ttl());
        let (done, failures) = self
            .release_everywhere(&state.key, &state.value, timeout)
            .await;
        if done >= self.inner.quorum {
            Ok(())
        } else {
            Err(unavailable(format!(
                "released on {done} of {} masters, {} needed: {}",
                self.inner.masters.len(),
                self.inner.quorum,
                failures.join("; ")
            )))
        }
    }
}

/// Whether one holder is named by `quorum` of the refusals.
fn named_by_majority(holders: &[(String, Duration)], quorum: usize) -> bool {
    holders
        .iter()
        .any(|(h, _)| holders.iter().filter(|(o, _)| o == h).count() >= quorum)
}

/// Who most likely holds a key, from the holders the masters that refused
/// named (with the time their keys have left): the one most masters named,
/// and of those named as often, the one whose key has the most time left,
/// that is the newest grant. The tie is a guess: a round that gets two
/// names once each waits for its remaining answers first (see
/// [`RedisBackend::attempt`]), and a loser's key on one master may be newer
/// than the winner's on the others.
pub(crate) fn likeliest_holder(holders: Vec<(String, Duration)>) -> Option<String> {
    let mut counts: Vec<(String, usize, Duration)> = Vec::new();
    for (holder, left) in holders {
        match counts.iter_mut().find(|(h, _, _)| *h == holder) {
            Some((_, c, most)) => {
                *c += 1;
                *most = (*most).max(left);
            }
            None => counts.push((holder, 1, left)),
        }
    }
    counts
        .into_iter()
        .max_by_key(|(_, count, left)| (*count, *left))
        .map(|(holder, _, _)| holder)
}

/// A round's value, released on every master if the round is not granted
/// (see [`undo_round`]).
struct Undo {
    backend: RedisBackend,
    key: String,
    value: String,
    timeout: Duration,
    /// The round's TTL: its keys are gone by then whatever happens.
    ttl: Duration,
}

/// Releases a round's value on every master: the cleanup of a round that
/// failed or was dropped midway.
fn undo_round(undo: Undo) -> BoxFuture<'static, ()> {
    let Undo {
        backend,
        key,
        value,
        timeout,
        ttl,
    } = undo;
    let expired = Instant::now() + ttl;
    Box::pin(async move {
        let (done, failures) = backend.release_everywhere(&key, &value, timeout).await;
        if done >= backend.inner.quorum {
            return;
        }
        // A round whose answers were lost (its connections broken
        // since) may hold a majority that nobody else can take until
        // its keys expire: ask again, on fresh connections, until a
        // majority let go or the keys are gone anyway. In the
        // background: a shutdown does not wait for it.
        tracing::debug!(
            failures = %failures.join("; "),
            "undoing a round that was not granted: no majority answered; asking again"
        );
        tenure_core::heartbeat_runtime().spawn(async move {
            let mut pause = Duration::from_millis(5);
            while Instant::now() + pause < expired {
                tokio::time::sleep(pause).await;
                let (done, failures) = backend.release_everywhere(&key, &value, timeout).await;
                if done >= backend.inner.quorum {
                    return;
                }
                tracing::debug!(
                    failures = %failures.join("; "),
                    "undoing a round that was not granted: no majority answered yet"
                );
                pause = (pause * 2).min(timeout);
            }
        });
    })
}

fn random_hex() -> String {
    let bytes: [u8; 20] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn jitter(max: Duration) -> Duration {
    max.mul_f64(rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_likeliest_holder_is_the_most_named_then_the_newest() {
        let ms = Duration::from_millis;
        let named = |list: &[(&str, u64)]| {
            likeliest_holder(
                list.iter()
                    .map(|(h, left)| (h.to_string(), ms(*left)))
                    .collect(),
            )
        };
        assert_eq!(named(&[]), None);
        // A majority's holder, though another key has more time left.
        assert_eq!(
            named(&[("old", 900), ("new", 300), ("new", 310)]).as_deref(),
            Some("new")
        );
        // Named once each: a released key left on one master (less time
        // left) and its successor's.
        assert_eq!(
            named(&[("released", 420), ("successor", 990)]).as_deref(),
            Some("successor")
        );
        assert_eq!(
            named(&[("successor", 990), ("released", 420)]).as_deref(),
            Some("successor")
        );
    }
}
