//! Running each operation on the heartbeat thread, next to its connection.

use std::future::Future;

use tenure_core::{Error, Result};
use tokio::task::JoinHandle;

use crate::error::BACKEND;

/// Runs `work` on tenure's heartbeat thread, where this backend's connection
/// lives, so that a request, its answer and what follows (a watch event and
/// the read it prompts) stay on one thread instead of crossing threads at
/// every step. Dropping the returned future aborts `work` (and so runs its
/// drop guards, such as withdrawing a candidacy).
pub(crate) async fn on_heartbeat<T, F>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let mut task = AbortOnDrop(tenure_core::heartbeat_runtime().spawn(work));
    match (&mut task.0).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::Backend {
            backend: BACKEND,
            source: Box::new(e),
        }),
    }
}

struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
