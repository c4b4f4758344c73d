//! `tenure campaign`: lead a key without a command, like `etcdctl elect`:
//! print a line once leading, hold the lease until interrupted.

use std::io::Write;

use tokio::time::Instant;

use crate::args::CampaignArgs;
use crate::connect;
use crate::failure::Failure;
use crate::run::{campaign as campaign_for, EXIT_LOST, EXIT_TIMEOUT};
use crate::signals::Signals;

/// Runs `tenure campaign`; returns the exit status.
pub async fn campaign(args: CampaignArgs) -> Result<u8, Failure> {
    let started = Instant::now();
    let mut signals = Signals::listen()?;
    let key = args.key();
    let prepare = connect::candidate(
        &args.backend,
        key,
        args.identity.as_deref(),
        args.ttl,
        started,
    );
    let elector = tokio::select! {
        elector = prepare => elector?,
        received = signals.stop_requested() => return Ok(received.exit_code()),
    };
    let result = lead(&args, &elector, &mut signals).await;
    elector.shutdown().await;
    result
}

async fn lead(
    args: &CampaignArgs,
    elector: &tenure::Elector,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let leadership = tokio::select! {
        leadership = campaign_for(elector, args.timeout) => match leadership? {
            Some(leadership) => leadership,
            None => return Ok(EXIT_TIMEOUT),
        },
        received = signals.stop_requested() => return Ok(received.exit_code()),
    };
    let line = match leadership.token() {
        Some(token) => format!(
            "leading {} as {} token={token}\n",
            args.key(),
            leadership.identity()
        ),
        None => format!("leading {} as {}\n", args.key(), leadership.identity()),
    };
    print(&line)?;
    let term = leadership.term();
    tokio::select! {
        reason = term.lost() => {
            // Best effort: the lease is over whether or not this is read.
            let _ = print(&format!("lost {}: {reason}\n", args.key()));
            let _ = leadership.resign().await;
            Ok(EXIT_LOST)
        }
        _ = signals.stop_requested() => {
            if let Err(error) = leadership.resign().await {
                tracing::warn!(%error, "releasing the lease failed; it will expire by itself");
            }
            Ok(0)
        }
    }
}

fn print(line: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(line.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::new(format!("cannot write to standard output: {e}")))
}
