//! What the server-fault cases share: skipping faults the factory lacks,
//! finding the servers' own leader, and starting killed nodes again.

use std::fmt::Display;
use std::time::Duration;

use tenure_core::{Error, Result};
use tokio::time::{sleep, Instant};

use super::context::{Context, Failure, Step};
use crate::factory::ServerFaults;

/// How long servers may take to elect a leader or serve again after a fault
/// (generous: a 2-core machine running 3 JVMs).
pub const RECOVERY: Duration = Duration::from_secs(30);

/// A fault's result as a step: a fault the factory does not support skips the case.
pub fn applied<T>(result: Result<T>, what: impl Display) -> Step<T> {
    match result {
        Err(e @ Error::Unsupported { .. }) => Err(Failure::Skip(format!("{what}: {e}"))),
        other => other.ctx(what),
    }
}

/// Waits up to [`RECOVERY`] for the servers to name a leader that `accept`
/// takes; `None` where the deployment elects none.
pub async fn server_leader(
    servers: &dyn ServerFaults,
    accept: impl Fn(usize) -> bool,
) -> Step<Option<usize>> {
    let deadline = Instant::now() + RECOVERY;
    loop {
        match servers.leader().await {
            Err(Error::Unsupported { .. }) => return Ok(None),
            Ok(Some(i)) if accept(i) => return Ok(Some(i)),
            last if Instant::now() >= deadline => {
                return Err(Failure::Fail(format!(
                    "the servers named no suitable leader within {RECOVERY:?} (last: {last:?})"
                )))
            }
            _ => sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Starts every node in `down` again (the case's own cleanup, whatever its
/// outcome, so the deployment is whole for the next case).
pub async fn restore(servers: &dyn ServerFaults, down: &[usize]) -> Step {
    for &node in down {
        servers
            .start(node)
            .await
            .ctx(format_args!("starting node {node} again"))?;
    }
    Ok(())
}

/// Milliseconds, for the report.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
