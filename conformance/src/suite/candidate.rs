//! Candidates as the cases drive them: a raw lease holder on a client, and
//! an Elector's leadership, both reporting to the case's safety observers.

use std::sync::{Arc, Mutex};
use tenure_core::{
    AcquireMode, Acquisition, ElectionKey, Elector, LeaderInfo, Leadership, Lease, LossReason, Term,
};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::context::{Context, Cx, Failure, Step};
use super::safety::{TermId, Write};
use crate::factory::Client;
use crate::report::Property;

/// A lease held directly through [`LeaseBackend`](tenure_core::LeaseBackend) calls.
pub struct Holder {
    cx: Cx,
    /// The client that holds it.
    pub client: Client,
    /// The lease as last granted or renewed.
    pub lease: Lease,
    /// Its term in the safety recorder.
    pub term: TermId,
}

/// Candidate a leads `key` (campaigning within a round trip) and has
/// written; candidate b waits in line behind it: each on its own client.
pub(crate) async fn leader_and_standby(
    cx: &Cx,
    [ca, cb]: [&Client; 2],
    key: &ElectionKey,
) -> Step<(Leader, Standby)> {
    let a = Leader::campaign(cx, &elector(cx, ca, key, "a")?, cx.set_up_limit()).await?;
    a.write();
    let standby = Standby::start(cx, elector(cx, cb, key, "b")?);
    cx.until_waiting(key, 1).await?;
    Ok((a, standby))
}

/// The lease an acquire on a vacant key must grant.
pub(crate) fn granted_on_vacant(acquisition: Acquisition) -> Step<Lease> {
    match acquisition {
        Acquisition::Granted(lease) => Ok(lease),
        Acquisition::Held(info) => Err(Failure::Fail(format!(
            "a vacant key is held by {}",
            info.identity
        ))),
    }
}

/// Checks what contract points 5 and 9 say of a fresh grant, and records it.
fn granted(
    cx: &Cx,
    client: &Client,
    lease: Lease,
    sent: Instant,
    name: &str,
    key: &ElectionKey,
    waited: bool,
) -> Step<Holder> {
    let now = Instant::now();
    cx.check(
        Property::Contract,
        lease.sent_at() >= sent && lease.sent_at() <= now,
        || {
            format!(
                "deadline counted from {:?} after the request, outside the call",
                lease.sent_at() - sent
            )
        },
    )?;
    cx.check(
        Property::Contract,
        lease.key() == key && *lease.holder() == cx.identity(name),
        || format!("granted {:?} for {}", lease.key(), lease.holder()),
    )?;
    if cx.caps().fencing {
        cx.check(Property::Fencing, lease.token().is_some(), || {
            format!("{name}'s grant carries no token")
        })?;
    }
    let term = cx.safety().begin_lease(&lease, now);
    let forwarded = client.link.as_ref().and_then(|l| l.last_request_at());
    if let Some(at) = grant_bound(cx, waited, forwarded, lease.sent_at()) {
        cx.safety().granted_after(term, at);
    }
    Ok(Holder {
        cx: cx.clone(),
        client: client.clone(),
        lease,
        term,
    })
}

/// A lower bound on when the servers made a grant, for the overlap check
/// ([`SafetyRecorder::granted_after`](super::SafetyRecorder::granted_after)):
/// the later of the grantee link's last forwarded request (`forwarded`) and
/// the instant its deadline counts from (`sent_at`), where the grantee's own
/// request decided it. Not for a grant the candidate `waited` for on
/// networked servers: that one is decided by another client's write (a
/// release, an expiry) while the candidate sends nothing, and what it last
/// sent (a keep-alive, a look; its deadline counts from the last) comes
/// before that write, and so before the previous holder stepped down; the
/// bound is then when it learnt of the grant. On servers in the test
/// process, the deadline of a waited-for grant counts from the servers' own
/// grant instant, which is exact.
fn grant_bound(
    cx: &Cx,
    waited: bool,
    forwarded: Option<Instant>,
    sent_at: Instant,
) -> Option<Instant> {
    if waited && !cx.timing().in_process {
        return None;
    }
    forwarded.map(|at| at.max(sent_at))
}

/// A waiting acquire's answer: the holder, or a contract failure if it
/// returned `Held`.
fn waited(
    cx: &Cx,
    client: &Client,
    outcome: Acquisition,
    sent: Instant,
    name: &str,
    key: &ElectionKey,
) -> Step<Holder> {
    match outcome {
        Acquisition::Granted(lease) => granted(cx, client, lease, sent, name, key, true),
        Acquisition::Held(info) => {
            cx.check(Property::Contract, false, || {
                format!("a waiting acquire returned Held({info:?})")
            })?;
            unreachable!("a failed contract check ends the case")
        }
    }
}

impl Holder {
    /// One attempt: the holder, or who holds the key.
    pub async fn try_acquire(
        cx: &Cx,
        client: &Client,
        key: &ElectionKey,
        name: &str,
    ) -> Step<Result<Holder, LeaderInfo>> {
        let sent = Instant::now();
        match client
            .backend
            .acquire(&cx.candidacy(key, name), AcquireMode::Once)
            .await
            .ctx(format_args!("{name} acquires"))?
        {
            Acquisition::Granted(lease) => {
                Ok(Ok(granted(cx, client, lease, sent, name, key, false)?))
            }
            Acquisition::Held(info) => Ok(Err(info)),
        }
    }

    /// One attempt that must be granted.
    pub async fn acquire(cx: &Cx, client: &Client, key: &ElectionKey, name: &str) -> Step<Holder> {
        let outcome = Self::try_acquire(cx, client, key, name).await?;
        cx.check(Property::Contract, outcome.is_ok(), || {
            format!(
                "{name} was refused a vacant key: held by {:?}",
                outcome.as_ref().err()
            )
        })?;
        Ok(outcome.unwrap_or_else(|_| unreachable!("checked above")))
    }

    /// Takes a key whose holder's TTL has run out. Where the backend judges
    /// expiry by each observer's clock, a client that was not watching must
    /// first see the record unchanged for a TTL, so it waits (at most a TTL
    /// plus slack and a round trip); elsewhere one attempt must be granted.
    pub async fn acquire_after_expiry(
        cx: &Cx,
        client: &Client,
        key: &ElectionKey,
        name: &str,
    ) -> Step<Holder> {
        if !cx.caps().expiry_judged_by_observer {
            return Self::acquire(cx, client, key, name).await;
        }
        let limit = cx.ttl() + cx.caps().expiry_slack + cx.timing().round_trip;
        cx.within(
            limit,
            "the expired key",
            Self::acquire_waiting(cx, client, key, name),
        )
        .await?
    }

    /// Waits in line until granted (the future may be dropped to withdraw).
    pub async fn acquire_waiting(
        cx: &Cx,
        client: &Client,
        key: &ElectionKey,
        name: &str,
    ) -> Step<Holder> {
        let sent = Instant::now();
        let outcome = client
            .backend
            .acquire(&cx.candidacy(key, name), AcquireMode::Wait)
            .await
            .ctx(format_args!("{name} waits"))?;
        waited(cx, client, outcome, sent, name, key)
    }

    /// Waits in line until granted, campaigning again after a retryable
    /// error as [`Elector::campaign`](tenure_core::Elector::campaign) does
    /// (after servers restart, a campaign may be refused while they elect
    /// a leader). Each such error is noted; any other ends the case.
    pub async fn acquire_waiting_retrying(
        cx: &Cx,
        client: &Client,
        key: &ElectionKey,
        name: &str,
    ) -> Step<Holder> {
        let mut retry =
            tenure_core::hosted::Backoff::new(std::time::Duration::from_millis(20), cx.ttl() / 4);
        loop {
            let sent = Instant::now();
            match client
                .backend
                .acquire(&cx.candidacy(key, name), AcquireMode::Wait)
                .await
            {
                Ok(outcome) => return waited(cx, client, outcome, sent, name, key),
                Err(e) if e.is_retryable() => {
                    cx.note(format!(
                        "{name}'s campaign failed after {:.0} ms, retried: {e}",
                        sent.elapsed().as_secs_f64() * 1000.0
                    ));
                    tokio::time::sleep(retry.next_delay()).await;
                }
                Err(e) => return Err(e).ctx(format_args!("{name} waits")),
            }
        }
    }

    /// The holder's name as the report shows it.
    pub fn identity(&self) -> &str {
        self.lease.holder().as_str()
    }

    /// Renews, extending the recorded deadline on success.
    pub async fn renew(&mut self) -> tenure_core::Result<()> {
        let renewed = self.client.backend.renew(&self.lease).await?;
        self.cx.safety().extend(self.term, renewed.valid_until());
        self.lease = renewed;
        Ok(())
    }

    /// Steps down (believing no more from now on), then releases.
    ///
    /// A retryable error is retried for up to a TTL, as the Elector's own
    /// release is (a request may time out on a loaded server, and the
    /// contract makes such an error retryable, not final), and noted; any
    /// other error, or one that lasts a TTL, ends the case. The term has
    /// ended before the first attempt, so the retries change nothing the
    /// safety checks see.
    pub async fn release(self) -> Step {
        let ended = Instant::now();
        self.cx.safety().end(self.term, ended);
        let mut retry =
            tenure_core::hosted::Backoff::new(self.cx.timing().round_trip / 10, self.cx.ttl() / 4);
        loop {
            match self.client.backend.release(&self.lease).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retryable() => {
                    let delay = retry.next_delay();
                    if ended.elapsed() + delay >= self.cx.ttl() {
                        return Err(e).ctx(format_args!(
                            "{} releases (retried for a TTL)",
                            self.identity()
                        ));
                    }
                    self.cx.note(format!(
                        "{}'s release failed after {:.0} ms, retried: {e}",
                        self.identity(),
                        ended.elapsed().as_secs_f64() * 1000.0
                    ));
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e).ctx(format_args!("{} releases", self.identity())),
            }
        }
    }

    /// Renews every third of the TTL in a task of its own until a renewal
    /// fails or the task is aborted (a crash: the lease and its client are
    /// dropped, nothing released). Returns the term, the task, and the
    /// count of renewals so far.
    pub fn keep_renewing(self) -> (TermId, JoinHandle<()>, watch::Receiver<u32>) {
        let (term, ttl) = (self.term, self.cx.ttl());
        let (renewed, renewals) = watch::channel(0u32);
        let task = tokio::spawn(async move {
            let mut a = self;
            loop {
                tokio::time::sleep(ttl / 3).await;
                if a.renew().await.is_err() {
                    return;
                }
                renewed.send_modify(|n| *n += 1);
            }
        });
        (term, task, renewals)
    }

    /// Writes to the fenced store with this lease's token.
    pub fn write(&self) -> Write {
        self.cx
            .store()
            .write(self.term, self.identity(), self.lease.token())
    }

    /// Crashes: stops believing and renewing at once, releases nothing.
    pub fn crash(&self) {
        self.cx.safety().end(self.term, Instant::now());
    }
}

/// An Elector for `name` on `key`, with the case's TTL. The client's link
/// is remembered, to time the elector's grants by what it forwarded.
pub fn elector(cx: &Cx, client: &Client, key: &ElectionKey, name: &str) -> Step<Elector> {
    cx.remember_link(client);
    let builder = Elector::builder(client.backend.clone())
        .key(key.as_str())
        .identity(cx.identity(name).as_str())
        .ttl(cx.ttl())
        .retry_backoff(cx.timing().round_trip / 10, cx.timing().round_trip)
        // The suite judges a backend by what it declares: one that cannot
        // fence has its fencing checks recorded, not refused up front.
        .allow_unfenced();
    let builder = match &cx.0.elector_hook {
        Some(hook) => hook(builder),
        None => builder,
    };
    builder
        .build()
        .ctx(format_args!("building {name}'s elector"))
}

/// An Elector's leadership, with the instant its loss was observed.
pub struct Leader {
    /// The leadership (taken by `resign`).
    pub leadership: Option<Leadership>,
    /// A view of the term.
    pub term: Term,
    /// Its term in the safety recorder.
    pub id: TermId,
    lost: watch::Receiver<Option<(Instant, LossReason)>>,
    cx: Cx,
}

impl Leader {
    /// Records a leadership that `campaign` just returned, and watches for
    /// its loss: the term ends in the safety recorder when its own
    /// [`Term::lost`] resolves, never by the case's say-so.
    pub fn new(cx: &Cx, leadership: Leadership) -> Leader {
        Self::granted(cx, leadership, None, false)
    }

    /// As [`new`](Self::new), for a leadership that `from`'s campaign just
    /// returned: where its client's link tells when it forwarded requests,
    /// the grant is taken to come no earlier than the later of the last
    /// request forwarded before the answer and the instant the grant's
    /// deadline counts from (its `valid_until` less the TTL and drift
    /// margin); elsewhere, or for a grant it `waited` for on networked
    /// servers, at the answer (see `grant_bound`).
    pub fn granted(
        cx: &Cx,
        leadership: Leadership,
        from: Option<&Elector>,
        waited: bool,
    ) -> Leader {
        let now = Instant::now();
        let term = leadership.term();
        let forwarded = from.and_then(|e| {
            let link = cx.link_of(e.backend())?;
            let candidacy = e.candidacy();
            let counted = candidacy.ttl().checked_sub(candidacy.drift_margin())?;
            let sent = term.valid_until().checked_sub(counted)?;
            grant_bound(cx, waited, link.last_request_at(), sent)
        });
        let id = cx.safety().begin_term(&term, now);
        if let Some(at) = forwarded {
            cx.safety().granted_after(id, at);
        }
        let (tx, lost) = watch::channel(None);
        let (watched, safety) = (term.clone(), cx.clone());
        tokio::spawn(async move {
            let reason = watched.lost().await;
            let at = Instant::now();
            safety.safety().end(id, at);
            let _ = tx.send(Some((at, reason)));
        });
        Leader {
            leadership: Some(leadership),
            term,
            id,
            lost,
            cx: cx.clone(),
        }
    }

    /// Campaigns on `elector` until it leads (bounded by `limit`).
    pub async fn campaign(cx: &Cx, elector: &Elector, limit: std::time::Duration) -> Step<Leader> {
        let leadership = cx
            .within(limit, "campaign", elector.campaign())
            .await?
            .ctx("campaign")?;
        Ok(Leader::granted(cx, leadership, Some(elector), false))
    }

    /// When and why the term ended, once observed.
    pub async fn lost(&self) -> (Instant, LossReason) {
        let mut rx = self.lost.clone();
        let seen = rx
            .wait_for(Option::is_some)
            .await
            .map(|v| v.expect("waited for Some"));
        seen.unwrap_or((Instant::now(), LossReason::Expired))
    }

    /// Resigns. The Elector must end the term before it sends the release;
    /// the recorder hears of the end from the term's own `lost()`.
    pub async fn resign(&mut self) -> Step {
        match self.leadership.take() {
            Some(l) => l.resign().await.ctx("resign"),
            None => Ok(()),
        }
    }

    /// Writes to the fenced store with this term's token.
    pub fn write(&self) -> Write {
        self.cx
            .store()
            .write(self.id, self.term.identity().as_str(), self.term.token())
    }
}

/// A standby campaigning in the background.
pub struct Standby {
    handle: tokio::task::JoinHandle<Step<Leader>>,
}

impl Standby {
    /// Starts `elector` campaigning.
    pub fn start(cx: &Cx, elector: Elector) -> Standby {
        let cx = cx.clone();
        let handle = tokio::spawn(async move {
            let leadership = elector.campaign().await.ctx("standby campaign")?;
            Ok(Leader::granted(&cx, leadership, Some(&elector), true))
        });
        Standby { handle }
    }

    /// Starts `elector` campaigning; once it is granted, `first` runs in
    /// the same task, before its term is recorded (to look at another
    /// candidate's term in the order the backend kept).
    pub fn start_then(cx: &Cx, elector: Elector, first: impl FnOnce() + Send + 'static) -> Standby {
        let cx = cx.clone();
        let handle = tokio::spawn(async move {
            let leadership = elector.campaign().await.ctx("standby campaign")?;
            first();
            Ok(Leader::granted(&cx, leadership, Some(&elector), true))
        });
        Standby { handle }
    }

    /// Waits for it to lead, at most `limit`.
    pub async fn leads(mut self, cx: &Cx, limit: std::time::Duration) -> Step<Leader> {
        let joined = cx
            .within(limit, "the standby leading", &mut self.handle)
            .await?;
        joined.map_err(|e| super::context::Failure::Fail(format!("standby task: {e}")))?
    }
}

impl Standby {
    /// Waits for it to lead after a failover that should take at most
    /// `bound` from `since`: a late one is waited for up to twice the bound
    /// (so the case can measure it), and none by then breaks the timing.
    pub async fn fails_over(
        mut self,
        cx: &Cx,
        since: Instant,
        bound: std::time::Duration,
    ) -> Step<Leader> {
        let limit = (since + bound * 2).saturating_duration_since(Instant::now());
        match tokio::time::timeout(limit, &mut self.handle).await {
            Ok(joined) => {
                joined.map_err(|e| super::context::Failure::Fail(format!("standby task: {e}")))?
            }
            Err(_) => {
                let why = format!("no standby led within {:?} (bound {bound:?})", bound * 2);
                cx.check(Property::Timing, false, || why.clone())?;
                Err(super::context::Failure::Fail(why))
            }
        }
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Timestamps its own drop: the work an elector's `run` runs holds one,
/// so a case sees when `run` cancelled it.
struct DropStamp(Arc<Mutex<Option<Instant>>>);

impl Drop for DropStamp {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}

/// How often the work of a [`Running`] wakes, to show when `run`'s task
/// was given the CPU.
const TICK: std::time::Duration = std::time::Duration::from_millis(1);

/// The work's latest wake-ups kept (a quarter of a second of them).
const TICKS_KEPT: usize = 256;

/// An elector's [`run`](Elector::run) in the background. Its work records
/// each term as a [`Leader`], holds it until cancelled, and holds a guard
/// that timestamps its drop: when `run` cancelled the work. Meanwhile it
/// wakes every millisecond and notes when: `run` polls it in its own task,
/// so the wake-ups show when that task ran (see
/// [`cancelled_in_time`](Self::cancelled_in_time)).
pub struct Running {
    /// `run`'s task.
    pub handle: tokio::task::JoinHandle<tenure_core::Result<()>>,
    led: watch::Receiver<Option<(TermId, Term)>>,
    cancelled: Arc<Mutex<Option<Instant>>>,
    ticks: Arc<Mutex<std::collections::VecDeque<Instant>>>,
}

impl Running {
    /// Starts `elector`'s `run`.
    pub fn start(cx: &Cx, elector: &Elector) -> Running {
        let (tx, led) = watch::channel(None);
        let cancelled = Arc::new(Mutex::new(None));
        let ticks = Arc::new(Mutex::new(std::collections::VecDeque::new()));
        let (cx, elector, stamp) = (cx.clone(), elector.clone(), cancelled.clone());
        let woke = ticks.clone();
        let handle = tokio::spawn(async move {
            let from = elector.clone();
            elector
                .run(move |leadership| {
                    let stamp = DropStamp(stamp.clone());
                    let leader = Leader::granted(&cx, leadership, Some(&from), true);
                    tx.send_replace(Some((leader.id, leader.term.clone())));
                    let woke = woke.clone();
                    async move {
                        let _held = (stamp, leader);
                        loop {
                            tokio::time::sleep(TICK).await;
                            let mut woke = woke.lock().unwrap_or_else(|e| e.into_inner());
                            if woke.len() == TICKS_KEPT {
                                woke.pop_front();
                            }
                            woke.push_back(Instant::now());
                        }
                    }
                })
                .await
        });
        Running {
            handle,
            led,
            cancelled,
            ticks,
        }
    }

    /// Waits (at most `limit`) for `run` to lead: its term.
    pub async fn leads(&self, cx: &Cx, limit: std::time::Duration) -> Step<(TermId, Term)> {
        let mut led = self.led.clone();
        let seen = cx
            .within(limit, "run leading", led.wait_for(Option::is_some))
            .await?
            .map(|v| v.clone().expect("waited for Some"));
        seen.map_err(|_| super::context::Failure::Fail("run ended before it led".into()))
    }

    /// When `run` last cancelled (dropped) its work, if it has.
    pub fn cancelled_at(&self) -> Option<Instant> {
        *self.cancelled.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `run` has cancelled its work, at most until `term`'s
    /// `valid_until` plus `late`; not cancelled by then breaks the timing.
    pub async fn until_cancelled(&self, cx: &Cx, term: &Term, late: std::time::Duration) -> Step {
        while self.cancelled_at().is_none() && Instant::now() <= term.valid_until() + late {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        cx.check(Property::Timing, self.cancelled_at().is_some(), || {
            format!("run had not cancelled its work {late:?} after the term's valid_until")
        })
    }

    /// Whether `run`'s task ran between `from` and `to` (a wake-up of the
    /// work noted in that window, a tick's allowance inside each end): a
    /// task the machine did not schedule there could not have cancelled.
    fn ran_between(&self, from: Instant, to: Instant) -> bool {
        let ticks = self.ticks.lock().unwrap_or_else(|e| e.into_inner());
        ticks
            .iter()
            .any(|t| *t >= from + TICK * 2 && *t + TICK * 2 <= to)
    }

    /// Checks that `run` cancelled the work of `term` before `successor`
    /// was granted (its [`granted_after`](super::TermRecord::granted_after)),
    /// and by the term's `valid_until` (plus `late`: a term that expires
    /// ends at its deadline, and the work is cancelled right after).
    ///
    /// `run` cancels in its own task, once it runs after the deadline: a
    /// machine that does not schedule that task for longer than the backend
    /// leaves between the deadline and the next grant (the memory server
    /// grants at the TTL, a drift margin of 2 % after the deadline) makes
    /// the cancellation late with no fault of the Elector's. Such a
    /// cancellation is noted and passes if the task did not run between
    /// the deadline and the cancellation (and the grant came after the
    /// deadline); one that came after the task had run past the deadline
    /// is the Elector's, and fails.
    pub fn cancelled_in_time(
        &self,
        cx: &Cx,
        term: &Term,
        successor: TermId,
        late: std::time::Duration,
    ) -> Step {
        let granted = cx.safety().get(successor).granted_after;
        let Some(at) = self.cancelled_at() else {
            let why = "run's work was still running after its term ended and another \
                       candidate was granted";
            cx.check(Property::Exclusive, false, || why.into())?;
            return Err(super::context::Failure::Fail(why.into()));
        };
        let deadline = term.valid_until();
        let starved = at >= granted && granted > deadline && !self.ran_between(deadline, at);
        if starved {
            cx.note(format!(
                "run cancelled its work {:?} after the next leader was granted, at its first \
                 run after the term's deadline: its task was not scheduled from the deadline \
                 until {:?} after it",
                at - granted,
                at - deadline
            ));
        }
        cx.check(Property::Exclusive, at < granted || starved, || {
            format!(
                "run cancelled its work {:?} after the next leader was granted, though its \
                 task ran after the term's deadline",
                at - granted
            )
        })?;
        cx.check(Property::Timing, at <= deadline + late, || {
            format!(
                "run cancelled its work {:?} after the term's valid_until",
                at - deadline
            )
        })
    }
}
