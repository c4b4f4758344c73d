//! `tenure run`: campaign, run the command while leading, step down.

use std::time::Duration;

use tenure::{Elector, Leadership};
use tokio::time::Instant;

use crate::args::RunArgs;
use crate::child::{exit_code, Child};
use crate::connect;
use crate::failure::Failure;
use crate::signals::Signals;
use crate::supervise::{supervise, Ending};

/// Exit status when leadership was lost (without `--respawn`): like
/// EX_TEMPFAIL, "try again later" (a supervisor may restart tenure, which
/// then campaigns again).
pub const EXIT_LOST: u8 = 75;

/// Runs `tenure run`; returns the exit status.
pub async fn run(args: RunArgs) -> Result<u8, Failure> {
    let started = Instant::now();
    // From here on SIGINT and SIGTERM end tenure only through us.
    let mut signals = Signals::listen()?;
    let elector = tokio::select! {
        elector = prepare(&args, started) => elector?,
        received = signals.stop_requested() => return Ok(received.exit_code()),
    };
    let result = campaign_and_run(&args, &elector, &mut signals, args.kill_margin()).await;
    // Withdraws a pending campaign, releases what is still held, closes the client.
    elector.shutdown().await;
    result
}

/// Connects, builds the elector (checking key, identity and TTL against the
/// backend) and makes sure the backend answers.
async fn prepare(args: &RunArgs, started: Instant) -> Result<Elector, Failure> {
    let backend = connect::backend(&args.election).await?;
    // A backend that cannot fence (Redis) is only built from a URL that
    // says so (`?allow_unfenced=true`): that is the user's opt-in, and the
    // command then runs without TENURE_FENCING_TOKEN.
    let unfenced = !backend.capabilities().fencing;
    let mut builder = Elector::builder(backend)
        .key(&args.election.key)
        .ttl(args.ttl);
    if unfenced {
        builder = builder.allow_unfenced();
    }
    if let Some(identity) = &args.identity {
        builder = builder.identity(identity);
    }
    // The TTL is checked first, against the backend's bounds.
    let elector = builder.build()?;
    let margin = args.kill_margin();
    // SIGTERM goes out at twice the margin before the deadline without a
    // renewal: that must come after the first renewal (at TTL/3) is due.
    if margin.is_zero() || margin * 4 > args.ttl {
        return Err(Failure::new(format!(
            "invalid kill-margin: {} must be above zero and at most a quarter of the ttl ({})",
            humantime::format_duration(margin),
            humantime::format_duration(args.ttl)
        )));
    }
    let leader = connect::first_look(&elector, &args.election, started).await?;
    tracing::info!(
        key = %args.election.key,
        leader = leader.as_ref().map(|l| l.identity.to_string()),
        "campaigning"
    );
    Ok(elector)
}

async fn campaign_and_run(
    args: &RunArgs,
    elector: &Elector,
    signals: &mut Signals,
    margin: Duration,
) -> Result<u8, Failure> {
    loop {
        let leadership = tokio::select! {
            leadership = elector.campaign() => leadership?,
            received = signals.stop_requested() => return Ok(received.exit_code()),
        };
        let term = leadership.term();
        let mut child = match Child::spawn(&args.command, &environment(args, &leadership)) {
            Ok(child) => child,
            Err(failure) => {
                step_down(leadership).await;
                return Err(failure);
            }
        };
        tracing::info!(
            key = %term.key(),
            token = term.token().map(|t| t.get()),
            pid = child.pid(),
            "leading; the command started"
        );
        let ending = supervise(&mut child, &term, signals, margin)
            .await
            .map_err(|e| Failure::new(format!("cannot wait for the command: {e}")));
        step_down(leadership).await;
        match ending? {
            Ending::Exited(status) => {
                tracing::info!(%status, "the command exited; stepped down");
                if !args.respawn {
                    return Ok(exit_code(status));
                }
            }
            Ending::Stopped { signal, status } => {
                tracing::info!(signal = signal.0, %status, "stopped on request; stepped down");
                return Ok(exit_code(status));
            }
            Ending::Lost { reason, status } => {
                tracing::warn!(%reason, %status, "the command was stopped: leadership is over");
                if !args.respawn {
                    return Ok(EXIT_LOST);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(args.respawn_delay) => {}
            received = signals.stop_requested() => return Ok(received.exit_code()),
        }
    }
}

/// What the command finds in its environment. Without a token (a backend
/// that cannot fence) TENURE_FENCING_TOKEN is removed, never inherited.
fn environment(args: &RunArgs, leadership: &Leadership) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("TENURE_KEY", Some(args.election.key.clone())),
        ("TENURE_IDENTITY", Some(leadership.identity().to_string())),
        (
            "TENURE_FENCING_TOKEN",
            leadership.token().map(|t| t.to_string()),
        ),
    ]
}

/// Resigns, so a standby takes over at once; a failed release only means
/// the standby waits for the lease to expire.
async fn step_down(leadership: Leadership) {
    if let Err(error) = leadership.resign().await {
        tracing::warn!(%error, "releasing the lease failed; it will expire by itself");
    }
}
