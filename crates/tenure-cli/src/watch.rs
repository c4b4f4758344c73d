//! `tenure watch`: a line each time the leader of a key changes.

use std::io::{ErrorKind, Write};
use std::time::SystemTime;

use futures::StreamExt;
use tokio::time::Instant;

use crate::args::WatchArgs;
use crate::connect;
use crate::failure::Failure;
use crate::report;
use crate::signals::Signals;

/// Runs `tenure watch` until SIGINT or SIGTERM (exit status 0) or until
/// standard output is closed (0 too).
pub async fn watch(args: WatchArgs) -> Result<u8, Failure> {
    let started = Instant::now();
    let mut signals = Signals::listen()?;
    let key = &args.election.key;
    let place = &args.election.backend;
    let (backend, url) = connect::backend(place).await?;
    let elector = connect::observer(backend, key)?;
    // Fail clearly if the backend cannot be reached at all; later outages
    // are retried behind the scenes (with a warning on standard error).
    connect::first_look(&elector, &url, place.connect_timeout, started).await?;
    let mut events = elector.observe();
    let mut last = None;
    let result = loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = signals.stop_requested() => break Ok(0),
        };
        let Some(event) = event else { break Ok(0) };
        if last.as_ref() == Some(&event) {
            continue;
        }
        let seen = SystemTime::now();
        let line = if args.json {
            report::event_json(key, &event, seen).to_string()
        } else {
            report::event_text(&event, seen)
        };
        let mut stdout = std::io::stdout().lock();
        match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::BrokenPipe => break Ok(0),
            Err(e) => {
                break Err(Failure::new(format!(
                    "cannot write to standard output: {e}"
                )))
            }
        }
        last = Some(event);
    };
    drop(events);
    elector.shutdown().await;
    result
}
