//! Where renewals run: a thread of their own, or the caller's runtime.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Handle;

/// Where an [`Elector`](super::Elector) runs its renewals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOn {
    /// A dedicated OS thread with its own single-threaded tokio runtime, shared
    /// by all electors of the process. An application whose worker threads are
    /// all busy or blocked cannot starve the heartbeat. The default.
    #[default]
    DedicatedThread,
    /// The runtime that calls `campaign`. Use it with `tokio::time::pause()`
    /// (a paused clock belongs to one runtime), or where threads are scarce.
    CurrentRuntime,
}

/// The runtime of the dedicated heartbeat thread, started on first use.
///
/// Backends that own network connections should create them on this runtime
/// (`heartbeat_runtime().spawn(..)`), so that the tasks driving those
/// connections cannot be starved by a busy application runtime either.
pub fn heartbeat_runtime() -> &'static Handle {
    static HANDLE: OnceLock<Handle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("tenure-heartbeat")
            .build()
            .expect("tenure: cannot build the heartbeat runtime");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("tenure-heartbeat".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("tenure: cannot start the heartbeat thread");
        handle
    })
}

impl RenewOn {
    pub(crate) fn spawn<F>(self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self {
            RenewOn::DedicatedThread => drop(heartbeat_runtime().spawn(task)),
            RenewOn::CurrentRuntime => {
                // A simulation running on this thread takes the task.
                if let Some(task) = crate::simulation::spawn(Box::pin(task)) {
                    drop(tokio::spawn(task));
                }
            }
        }
    }
}
