//! Running each operation on the heartbeat thread, next to its connection.

use std::future::Future;

use tenure_core::Result;

use crate::error::BACKEND;

/// [`tenure_core::on_heartbeat_runtime`] for this backend.
pub(crate) async fn on_heartbeat<T, F>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    tenure_core::on_heartbeat_runtime(BACKEND, work).await
}
