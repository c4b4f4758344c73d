//! `tenure campaign`: lead a key without a command, like `etcdctl elect`:
//! print a line once leading, hold the lease until interrupted.

use std::io::Write;
use std::ops::ControlFlow;

use tokio::time::Instant;

use crate::args::CampaignArgs;
use crate::connect;
use crate::failure::Failure;
use crate::run::{campaign as campaign_for, EXIT_LOST};
use crate::signals::Signals;

/// Runs `tenure campaign`; returns the exit status.
pub async fn campaign(args: CampaignArgs) -> Result<u8, Failure> {
    let started = Instant::now();
    let mut signals = Signals::listen()?;
    connect::stand(
        &args.backend,
        args.key(),
        &args.candidate,
        started,
        &mut signals,
        async |elector, signals| lead(&args, elector, signals).await,
    )
    .await
}

async fn lead(
    args: &CampaignArgs,
    elector: &tenure::Elector,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let leadership = match campaign_for(elector, args.timeout, signals).await? {
        ControlFlow::Continue(leadership) => leadership,
        ControlFlow::Break(status) => return Ok(status),
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
