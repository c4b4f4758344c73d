//! `tenure status`: who leads a key, once.

use std::io::Write;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::args::StatusArgs;
use crate::connect;
use crate::failure::Failure;
use crate::report;

/// Exit status when someone leads.
pub const EXIT_LED: u8 = 0;
/// Exit status when nobody leads.
pub const EXIT_VACANT: u8 = 1;

/// Runs `tenure status`; returns the exit status.
pub async fn status(args: StatusArgs) -> Result<u8, Failure> {
    let started = Instant::now();
    let key = &args.election.key;
    let place = &args.election.backend;
    let (backend, url) = connect::backend(place).await?;
    let elector = connect::observer(backend, key)?;
    let leader = connect::first_look(&elector, &url, place.connect_timeout, started).await;
    let seen = SystemTime::now();
    elector.shutdown().await;
    let leader = leader?;
    let out = if args.json {
        format!("{}\n", report::status_json(key, leader.as_ref(), seen))
    } else {
        report::status_text(key, leader.as_ref(), seen)
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::new(format!("cannot write to standard output: {e}")))?;
    Ok(if leader.is_some() {
        EXIT_LED
    } else {
        EXIT_VACANT
    })
}
