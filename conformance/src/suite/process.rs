//! Faults only a separate OS process can suffer: frozen by SIGSTOP for
//! longer than the TTL, and killed by SIGKILL.

use std::time::Duration;

use tenure_core::FencingToken;
use tokio::time::Instant;

use super::candidate::{elector, Standby};
use super::checks::{after_deadline, failover_within, refused};
use super::context::Context;
use super::context::{Cx, Failure, Step};
use super::faults::millis;
use super::safety::{TermId, Write};
use crate::process::clock::from_ns;
use crate::process::{CandidateProcess, Command, Message};
use crate::report::Property;

fn io(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::Fail(format!("{what}: {e}"))
}

/// The term of candidate process `a`, as the suite records it.
#[derive(Clone, Copy)]
struct ProcessTerm {
    id: TermId,
    token: Option<FencingToken>,
}

impl ProcessTerm {
    /// A write to the fenced store in `a`'s name, under this term.
    fn write(&self, cx: &Cx) -> Write {
        cx.store()
            .write(self.id, cx.identity("a").as_str(), self.token)
    }
}

/// How long a candidate process may take to start, or to answer the
/// driver: a fresh process connects first.
fn process_limit(cx: &Cx) -> Duration {
    cx.ttl() + Duration::from_secs(5)
}

/// Starts candidate process `name` for `key` and has it campaign.
async fn campaigning(
    cx: &Cx,
    command: &crate::factory::CandidateCommand,
    key: &tenure_core::ElectionKey,
    name: &str,
) -> Step<CandidateProcess> {
    let limit = process_limit(cx);
    let identity = cx.identity(name);
    let mut p = CandidateProcess::spawn(
        &command.program,
        &command.url,
        key.as_str(),
        identity.as_str(),
        cx.ttl(),
        limit,
    )
    .await
    .map_err(io("starting a candidate process"))?;
    p.request(Command::Campaign, limit)
        .await
        .map_err(io("campaign"))?
        .map_err(Failure::Fail)?;
    Ok(p)
}

/// Starts candidate process `a` and lets it lead; returns it with its term.
async fn leading_process(
    cx: &Cx,
    key: &tenure_core::ElectionKey,
) -> Step<(CandidateProcess, ProcessTerm)> {
    let Some(command) = cx.factory().candidate() else {
        return Err(Failure::Skip(
            "the factory starts no candidate processes".into(),
        ));
    };
    let identity = cx.identity("a");
    let mut a = campaigning(cx, &command, key, "a").await?;
    match a.next_event(process_limit(cx)).await {
        Some((
            Message::Elected {
                token,
                at_ns,
                valid_until_ns,
            },
            _,
        )) => {
            let token = token.map(FencingToken::new);
            let id = cx.safety().begin(
                key.as_str(),
                identity.as_str(),
                token,
                from_ns(at_ns),
                from_ns(valid_until_ns),
            );
            let term = ProcessTerm { id, token };
            term.write(cx);
            Ok((a, term))
        }
        other => Err(Failure::Fail(format!(
            "the candidate process did not lead: {other:?}"
        ))),
    }
}

/// A candidate process frozen (SIGSTOP) for longer than the TTL is replaced
/// within [`Cx::failover_bound`], never before its `valid_until`; resumed, it
/// reports the loss, is no longer valid, and its write is refused.
pub async fn paused_candidate_loses_and_its_write_is_refused(cx: Cx) -> Step {
    let key = cx.new_key();
    let (mut a, term) = leading_process(&cx, &key).await?;
    let standby = Standby::start(&cx, elector(&cx, &cx.client().await?, &key, "b")?);
    cx.until_waiting(&key, 1).await?;
    let paused = Instant::now();
    a.pause().map_err(io("SIGSTOP"))?;
    let bound = cx.failover_bound();
    let mut b = standby.fails_over(&cx, paused, bound).await?;
    let b_start = cx.safety().get(b.id).start;
    let failover = b_start - paused;
    b.write();
    a.resume().map_err(io("SIGCONT"))?;
    match a.next_event(Duration::from_secs(2)).await {
        Some((
            Message::Lost {
                reason,
                at_ns,
                valid_until_ns,
            },
            _,
        )) => {
            cx.safety().extend(term.id, from_ns(valid_until_ns));
            cx.safety().end(term.id, from_ns(at_ns));
            cx.check(
                Property::Contract,
                !matches!(reason.as_str(), "Resigned" | "Shutdown"),
                || format!("the frozen candidate's term ended as {reason}"),
            )?;
        }
        other => cx.check(Property::Contract, false, || {
            format!("resumed, the candidate reported {other:?}, not its loss")
        })?,
    }
    let deadline = cx.safety().get(term.id).valid_until;
    after_deadline(&cx, deadline, b_start, "b", "the frozen a's")?;
    let status = a
        .request(Command::Write, Duration::from_secs(2))
        .await
        .map_err(io("write"))?
        .map_err(Failure::Fail)?;
    cx.check(Property::Contract, !status.valid, || {
        "resumed after the TTL, the candidate still claims validity".into()
    })?;
    refused(&cx, term.write(&cx), "the resumed candidate's write")?;
    failover_within(&cx, failover, bound)?;
    b.resign().await
}

/// A candidate process killed (SIGKILL) while leading is replaced within
/// [`Cx::failover_bound`] (the TTL, the backend's slack up to 1 s, and 250 ms:
/// tighter than the 1 s the name still says), never before its last
/// `valid_until`; its token is refused after.
pub async fn killed_candidate_taken_over_within_ttl_plus_1s(cx: Cx) -> Step {
    let key = cx.new_key();
    let (mut a, term) = leading_process(&cx, &key).await?;
    let standby = Standby::start(&cx, elector(&cx, &cx.client().await?, &key, "b")?);
    cx.until_waiting(&key, 1).await?;
    let status = a
        .request(Command::Status, Duration::from_secs(2))
        .await
        .map_err(io("status"))?
        .map_err(Failure::Fail)?;
    if let Some(ns) = status.valid_until_ns {
        cx.safety().extend(term.id, from_ns(ns));
    }
    let killed = Instant::now();
    a.kill().await.map_err(io("SIGKILL"))?;
    cx.safety().end(term.id, killed);
    // Not before the last deadline a told of: renewals after it only move it later.
    let mut b = super::elector::takes_over(&cx, standby, term.id, killed, "the killed a's").await?;
    let zombie = term.write(&cx);
    refused(
        &cx,
        zombie,
        "the killed leader's token, after the new leader's,",
    )?;
    b.resign().await
}

/// How a chain of faults starts: the servers' own leader node stopped for
/// this many TTLs (then started again), as in the run that found an etcd
/// election stalled for good (TTL 2 s, the leader member stopped 3 s).
const LEADER_STOPPED_TTLS: f64 = 1.5;

/// Three candidate processes campaign for one key and campaign again
/// whenever a term ends (as `Elector::run` and `tenure run` do). The
/// servers' leader node is stopped for 1.5 TTLs and started again; once
/// the servers have a leader, a candidate leads within the TTL, the
/// backend's expiry slack and a round trip. Then that holder is frozen
/// (SIGSTOP) for longer than the failover bound: another candidate leads
/// within [`Cx::failover_bound`] of the freeze, and a TTL after the holder
/// is resumed someone still leads. What the first fault leaves behind (a
/// term that ended while a member was down, its record revived by the new
/// server leader, kept alive by its own client's next campaign) must not
/// hold up the election for good.
pub async fn servers_leader_stopped_then_holder_frozen_a_candidate_leads(cx: Cx) -> Step {
    let Some(servers) = cx.factory().servers() else {
        return Err(Failure::Skip("the factory cannot stop server nodes".into()));
    };
    let Some(command) = cx.factory().candidate() else {
        return Err(Failure::Skip(
            "the factory starts no candidate processes".into(),
        ));
    };
    let key = cx.new_key();
    let mut all = Campaigners::start(&cx, &command, &key, &["a", "b", "c"]).await?;
    let mut down = None;
    let result = chain(&cx, servers, &mut all, &mut down).await;
    // Whatever happened, nothing stays frozen or down for the next case.
    all.resume_all();
    let restored = match down {
        Some(node) => servers
            .start(node)
            .await
            .ctx(format_args!("starting node {node} again")),
        None => Ok(()),
    };
    let closed = all.close().await;
    result?;
    restored?;
    closed
}

async fn chain(
    cx: &Cx,
    servers: &dyn crate::factory::ServerFaults,
    all: &mut Campaigners<'_>,
    down: &mut Option<usize>,
) -> Step {
    let (ttl, rt, slack) = (cx.ttl(), cx.timing().round_trip, cx.caps().expiry_slack);
    // Setting up, not what the case checks: three fresh clients campaign.
    if !all
        .pump(Instant::now() + ttl + Duration::from_secs(5), |c| {
            c.leader().is_some()
        })
        .await?
    {
        return Err(Failure::Fail(
            "none of the three candidate processes led".into(),
        ));
    }
    // One node is the deployment's leader whether it elects one or not.
    let node = match super::faults::server_leader(servers, |_| true).await? {
        Some(node) => node,
        None if servers.nodes() == 1 => 0,
        None => {
            return Err(Failure::Skip(
                "the servers elect no leader node of their own to stop".into(),
            ))
        }
    };
    super::faults::applied(
        servers.kill(node).await,
        format_args!("stopping node {node}"),
    )?;
    *down = Some(node);
    let stopped = Instant::now();
    all.pump(stopped + ttl.mul_f64(LEADER_STOPPED_TTLS), |_| false)
        .await?;
    super::faults::applied(
        servers.start(node).await,
        format_args!("starting node {node}"),
    )?;
    *down = None;
    super::faults::server_leader(servers, |_| true).await?;
    let recovered = Instant::now();
    let bound = ttl + slack + rt;
    let led = all
        .pump(recovered + bound + rt, |c| c.leader().is_some())
        .await?;
    let took = recovered.elapsed();
    cx.note(format!(
        "node {node} (the servers' leader) down {:.0} ms; a candidate {} {:.0} ms after the servers had a leader again",
        millis(recovered - stopped),
        if led { "led" } else { "had not led" },
        millis(took)
    ));
    cx.check(Property::Timing, led && took <= bound, || {
        format!(
            "no candidate led within {bound:?} (TTL + slack + round trip) of the servers' \
             recovery from node {node}'s stop (waited {took:?}); {}",
            all.story()
        )
    })?;
    let holder = all.leader().expect("checked: a candidate leads");
    let failover = cx.failover_bound();
    let freeze = ttl
        .mul_f64(LEADER_STOPPED_TTLS)
        .max(failover + Cx::FAILOVER_MARGIN);
    all.pause(holder)?;
    let paused = Instant::now();
    all.pump(paused + freeze, |_| false).await?;
    all.resume(holder)?;
    let resumed = Instant::now();
    all.pump(resumed + ttl + slack + rt, |_| false).await?;
    let next = all.first_elected_after(paused);
    match next {
        Some((who, start)) if who != holder => {
            let took = start - paused;
            cx.figures(|f| f.failover_ms = Some(millis(took)));
            cx.check(Property::Timing, took <= failover, || {
                format!(
                    "{} led {took:?} after {} was frozen, bound {failover:?}; {}",
                    all.names[who],
                    all.names[holder],
                    all.story()
                )
            })?;
        }
        other => cx.check(Property::Timing, false, || {
            format!(
                "no other candidate led while {} was frozen for {freeze:?} (bound {failover:?}); \
                 the first grant after the freeze: {other:?}; {}",
                all.names[holder],
                all.story()
            )
        })?,
    }
    cx.note(all.story());
    cx.check(Property::Timing, all.leader().is_some(), || {
        format!(
            "no candidate led {:?} after the frozen {} was resumed; {}",
            resumed.elapsed(),
            all.names[holder],
            all.story()
        )
    })
}

/// Candidate processes that campaign again whenever a term ends; the case
/// reads their events with [`Campaigners::pump`] and records their terms.
struct Campaigners<'a> {
    cx: &'a Cx,
    key: tenure_core::ElectionKey,
    names: Vec<&'static str>,
    procs: Vec<CandidateProcess>,
    /// Each process's term that has not ended, as far as its events tell.
    open: Vec<Option<TermId>>,
    /// Every grant and loss, in the order the driver read them.
    history: Vec<(usize, Instant, String)>,
    started: Instant,
}

impl<'a> Campaigners<'a> {
    async fn start(
        cx: &'a Cx,
        command: &crate::factory::CandidateCommand,
        key: &tenure_core::ElectionKey,
        names: &[&'static str],
    ) -> Step<Campaigners<'a>> {
        let mut procs = Vec::new();
        for name in names {
            procs.push(campaigning(cx, command, key, name).await?);
        }
        Ok(Campaigners {
            cx,
            key: key.clone(),
            names: names.to_vec(),
            open: vec![None; procs.len()],
            procs,
            history: Vec::new(),
            started: Instant::now(),
        })
    }

    /// The process whose term has not ended, if one has.
    fn leader(&self) -> Option<usize> {
        self.open.iter().position(Option::is_some)
    }

    /// The first grant read after `since`: whose, and when it led.
    fn first_elected_after(&self, since: Instant) -> Option<(usize, Instant)> {
        self.history
            .iter()
            .find(|(_, at, what)| *at >= since && what.starts_with("led"))
            .map(|&(who, at, _)| (who, at))
    }

    /// Every grant and loss so far, for a failure's message.
    fn story(&self) -> String {
        let events: Vec<String> = self
            .history
            .iter()
            .map(|(who, at, what)| {
                format!(
                    "{} {what} at {:.0} ms",
                    self.names[*who],
                    millis(*at - self.started)
                )
            })
            .collect();
        format!("what the candidates told: [{}]", events.join(", "))
    }

    fn pause(&self, i: usize) -> Step {
        self.procs[i].pause().map_err(io("SIGSTOP"))
    }

    fn resume(&self, i: usize) -> Step {
        self.procs[i].resume().map_err(io("SIGCONT"))
    }

    fn resume_all(&self) {
        for p in &self.procs {
            let _ = p.resume();
        }
    }

    /// Handles the processes' events until `until`, or until `done` holds
    /// after one of them; whether `done` held. A candidate whose term ended
    /// campaigns again at once.
    async fn pump(&mut self, until: Instant, done: impl Fn(&Self) -> bool) -> Step<bool> {
        loop {
            if done(self) {
                return Ok(true);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let next = self.procs.iter_mut().map(|p| Box::pin(p.next_event(left)));
            let (event, i, _) = futures::future::select_all(next).await;
            match event {
                Some((message, _)) => self.handle(i, message).await?,
                None if Instant::now() < until => {
                    return Err(Failure::Fail(format!(
                        "candidate process {}'s output ended",
                        self.names[i]
                    )))
                }
                None => return Ok(false),
            }
        }
    }

    async fn handle(&mut self, i: usize, message: Message) -> Step {
        let cx = self.cx;
        match message {
            Message::Elected {
                token,
                at_ns,
                valid_until_ns,
            } => {
                let token = token.map(FencingToken::new);
                let identity = cx.identity(self.names[i]);
                let id = cx.safety().begin(
                    self.key.as_str(),
                    identity.as_str(),
                    token,
                    from_ns(at_ns),
                    from_ns(valid_until_ns),
                );
                cx.store().write(id, identity.as_str(), token);
                self.open[i] = Some(id);
                self.history.push((
                    i,
                    from_ns(at_ns),
                    format!("led (token {:?})", token.map(|t| t.get())),
                ));
            }
            Message::Lost {
                reason,
                at_ns,
                valid_until_ns,
            } => {
                if let Some(id) = self.open[i].take() {
                    cx.safety().extend(id, from_ns(valid_until_ns));
                    cx.safety().end(id, from_ns(at_ns));
                }
                self.history
                    .push((i, from_ns(at_ns), format!("lost ({reason})")));
                cx.check(
                    Property::Contract,
                    !matches!(reason.as_str(), "Resigned" | "Shutdown"),
                    || format!("{}'s term ended as {reason}", self.names[i]),
                )?;
                self.procs[i]
                    .request(Command::Campaign, Duration::from_secs(2))
                    .await
                    .map_err(io("campaign again"))?
                    .map_err(Failure::Fail)?;
            }
            other => {
                return Err(Failure::Fail(format!(
                    "candidate process {} said {other:?} unasked",
                    self.names[i]
                )))
            }
        }
        Ok(())
    }

    /// Records the deadline of every term still open, then ends the processes.
    async fn close(&mut self) -> Step {
        for i in 0..self.procs.len() {
            let Some(id) = self.open[i] else { continue };
            let status = self.procs[i]
                .request(Command::Status, Duration::from_secs(2))
                .await
                .map_err(io("status"))?
                .map_err(Failure::Fail)?;
            if let Some(ns) = status.valid_until_ns {
                self.cx.safety().extend(id, from_ns(ns));
            }
        }
        for p in &mut self.procs {
            let _ = p.kill().await;
        }
        Ok(())
    }
}
