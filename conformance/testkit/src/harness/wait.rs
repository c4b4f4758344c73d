//! Polling a condition until it holds or a deadline passes.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::error::{HarnessError, Result};

/// How often [`wait_for`] re-checks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Calls `check` every [`POLL_INTERVAL`] until it returns `Some`, for at most
/// `timeout`; then fails with [`HarnessError::Timeout`] naming `what`.
///
/// Uses tokio's clock: run it on a real (not paused) clock, since the
/// servers it waits for live outside the test's runtime.
pub async fn wait_for<T, F, Fut>(what: impl Display, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(HarnessError::Timeout {
                what: what.to_string(),
                after: timeout,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
