//! `tenure run`: campaign, run the command while leading, step down.

use std::ops::ControlFlow;
use std::time::Duration;

use tenure::{Elector, Leadership};
use tokio::time::Instant;

use crate::args::RunArgs;
use crate::child::{exit_code, Child, Launch};
use crate::connect;
use crate::failure::Failure;
use crate::keeper::Keeper;
use crate::signals::Signals;
use crate::supervise::{keeper_deadline, supervise, Ending};

/// Exit status when leadership was lost (without `--respawn`): like
/// EX_TEMPFAIL, "try again later" (a supervisor may restart tenure, which
/// then campaigns again).
pub const EXIT_LOST: u8 = 75;

/// Exit status when `--timeout` passed before tenure led (as timeout(1)).
pub const EXIT_TIMEOUT: u8 = 124;

/// Runs `tenure run`; returns the exit status.
pub async fn run(args: RunArgs) -> Result<u8, Failure> {
    let started = Instant::now();
    let margin = args.kill_margin();
    // SIGTERM goes out at twice the margin before the deadline without a
    // renewal: that must come after the first renewal (at TTL/3) is due.
    let ttl = args.candidate.ttl;
    if margin.is_zero() || margin * 4 > ttl {
        return Err(Failure::new(format!(
            "invalid kill-margin: {} must be above zero and at most a quarter of the ttl ({})",
            humantime::format_duration(margin),
            humantime::format_duration(ttl)
        )));
    }
    warn_if_init();
    adopt_orphans();
    // From here on SIGINT and SIGTERM end tenure only through us.
    let mut signals = Signals::listen()?;
    let election = &args.election;
    connect::stand(
        &election.backend,
        &election.key,
        &args.candidate,
        started,
        &mut signals,
        async |elector, signals| campaign_and_run(&args, elector, signals, margin).await,
    )
    .await
}

/// As a container's PID 1, tenure adopts every orphan in the container,
/// not only its command's: those of `docker exec` sessions count as the
/// command's too (the term waits for them, a lost term kills them).
fn warn_if_init() {
    if std::process::id() == 1 {
        tracing::warn!(
            "running as PID 1: every orphan in the container counts as the command's (the term lasts while one lives); run tenure under an init (docker run --init, tini)"
        );
    }
}

/// Makes the orphans of what the command starts tenure's (Linux), so that
/// the term lasts while any of them lives and a lost term kills them all.
fn adopt_orphans() {
    match crate::descendants::adopt_orphans() {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::Unsupported => {
            tracing::debug!("no child subreaper here: only the command's process group is tracked");
        }
        Err(error) => tracing::warn!(
            %error,
            "cannot become a child subreaper: work that the command's processes leave behind when they exit is not tracked"
        ),
    }
}

/// The campaign, unless a signal asks tenure to stop or `timeout` (if there
/// is one) passes first: then `Break` with the status tenure exits with.
pub async fn campaign(
    elector: &Elector,
    timeout: Option<Duration>,
    signals: &mut Signals,
) -> Result<ControlFlow<u8, Leadership>, Failure> {
    tokio::select! {
        leadership = campaign_within(elector, timeout) => Ok(match leadership? {
            Some(leadership) => ControlFlow::Continue(leadership),
            None => ControlFlow::Break(EXIT_TIMEOUT),
        }),
        received = signals.stop_requested() => Ok(ControlFlow::Break(received.exit_code())),
    }
}

/// The campaign, given up after `timeout` if there is one.
async fn campaign_within(
    elector: &Elector,
    timeout: Option<Duration>,
) -> Result<Option<Leadership>, Failure> {
    match timeout {
        None => Ok(Some(elector.campaign().await?)),
        Some(limit) => match tokio::time::timeout(limit, elector.campaign()).await {
            Ok(leadership) => Ok(Some(leadership?)),
            Err(_) => {
                tracing::warn!(
                    "did not lead within {} (--timeout); giving up",
                    humantime::format_duration(limit)
                );
                Ok(None)
            }
        },
    }
}

/// The program and arguments to start: with `--shell`, `/bin/sh -c` and the
/// words joined by spaces.
fn command_line(args: &RunArgs) -> Vec<std::ffi::OsString> {
    if !args.shell {
        return args.command.clone();
    }
    let mut script = std::ffi::OsString::new();
    for (n, word) in args.command.iter().enumerate() {
        if n > 0 {
            script.push(" ");
        }
        script.push(word);
    }
    vec!["/bin/sh".into(), "-c".into(), script]
}

async fn campaign_and_run(
    args: &RunArgs,
    elector: &Elector,
    signals: &mut Signals,
    margin: Duration,
) -> Result<u8, Failure> {
    loop {
        let leadership = match campaign(elector, args.timeout, signals).await? {
            ControlFlow::Continue(leadership) => leadership,
            ControlFlow::Break(status) => return Ok(status),
        };
        let term = leadership.term();
        // A tenure stopped between the grant and here may hold a term that
        // is over already: then nothing starts.
        if !term.is_valid() {
            tracing::warn!(key = %term.key(), "the term was over before the command could start");
            step_down(leadership).await;
            if !args.respawn {
                return Ok(EXIT_LOST);
            }
            continue;
        }
        // The keeper first: it knows the command's group before the command
        // runs, and kills it if tenure cannot (stopped, or dead).
        let keeper = Keeper::start(keeper_deadline(term.valid_until(), margin))
            .map_err(|e| Failure::new(format!("cannot start the keeper process: {e}")));
        let launch = keeper.map(|keeper| Launch {
            keeper: Some(keeper),
            no_stdin: args.no_stdin,
        });
        let spawned = launch.and_then(|launch| {
            Child::spawn(&command_line(args), &environment(args, &leadership), launch)
        });
        let mut child = match spawned {
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
            Ending::Stuck { signal, status } => {
                tracing::error!(signal, %status, "the command was stopped by the terminal and ended; stepped down");
                if !args.respawn {
                    return Ok(exit_code(status));
                }
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
