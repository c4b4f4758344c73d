//! Faults only a separate OS process can suffer: frozen by SIGSTOP for
//! longer than the TTL, and killed by SIGKILL.

use std::time::Duration;

use tenure_core::FencingToken;
use tokio::time::Instant;

use super::candidate::{elector, Standby};
use super::checks::{after_deadline, failover_within, refused};
use super::context::{Cx, Failure, Step};
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
    let limit = cx.ttl() + Duration::from_secs(5);
    let mut a = CandidateProcess::spawn(
        &command.program,
        &command.url,
        key.as_str(),
        identity.as_str(),
        cx.ttl(),
        limit,
    )
    .await
    .map_err(io("starting the candidate process"))?;
    a.request(Command::Campaign, limit)
        .await
        .map_err(io("campaign"))?
        .map_err(Failure::Fail)?;
    match a.next_event(limit).await {
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
