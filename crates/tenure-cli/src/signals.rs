//! The signals tenure handles: SIGINT and SIGTERM stop it; SIGHUP, SIGUSR1
//! and SIGUSR2 are only passed on to the command; SIGTSTP stops the
//! command's group and then tenure itself; SIGCHLD tells that the command
//! may have stopped. A signal that tenure's parent left ignored (`nohup`
//! ignores SIGHUP) stays ignored, for tenure and for the command.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::failure::Failure;

/// Signals received by tenure, listened to from start to exit.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    /// None when inherited ignored.
    hangup: Option<Signal>,
    user1: Signal,
    user2: Signal,
    /// SIGTSTP; None when inherited ignored.
    suspend: Option<Signal>,
    child: Signal,
}

/// One signal tenure received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received(pub libc::c_int);

impl Received {
    /// Whether it asks tenure to stop (SIGINT, SIGTERM); the others are
    /// only forwarded to a running command.
    pub fn stops(self) -> bool {
        matches!(self.0, libc::SIGINT | libc::SIGTERM)
    }

    /// Whether it asks tenure to suspend (SIGTSTP: Ctrl-Z).
    pub fn suspends(self) -> bool {
        self.0 == libc::SIGTSTP
    }

    /// Whether it says a child changed state (SIGCHLD): never forwarded.
    pub fn child_changed(self) -> bool {
        self.0 == libc::SIGCHLD
    }

    /// The exit status of a tenure stopped by it with no command running.
    pub fn exit_code(self) -> u8 {
        128u8.saturating_add(self.0 as u8)
    }
}

/// Whether `signal` is ignored (SIG_IGN), as inherited from tenure's parent
/// if nothing here has handled it yet.
pub fn ignored(signal: libc::c_int) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one
    // into the struct we pass.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

/// Stops tenure itself, as SIGTSTP would have by default; returns once
/// something (SIGCONT: `fg`, `kill -CONT`) continues it.
pub fn stop_self() {
    // raise(3) signals the calling thread: it stops before the next line.
    // SAFETY: raise has no memory-safety preconditions.
    unsafe { libc::raise(libc::SIGSTOP) };
}

impl Signals {
    /// Starts listening (from here on, these signals no longer end tenure
    /// by their default action). Signals inherited ignored are left so.
    pub fn listen() -> Result<Signals, Failure> {
        let on = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::new(format!("cannot handle signals: {e}")))
        };
        let unless_ignored = |number: libc::c_int| {
            if ignored(number) {
                tracing::debug!(signal = number, "inherited ignored; left ignored");
                Ok(None)
            } else {
                on(SignalKind::from_raw(number)).map(Some)
            }
        };
        Ok(Signals {
            interrupt: on(SignalKind::interrupt())?,
            terminate: on(SignalKind::terminate())?,
            hangup: unless_ignored(libc::SIGHUP)?,
            user1: on(SignalKind::user_defined1())?,
            user2: on(SignalKind::user_defined2())?,
            suspend: unless_ignored(libc::SIGTSTP)?,
            child: on(SignalKind::child())?,
        })
    }

    /// The next signal.
    pub async fn recv(&mut self) -> Received {
        async fn maybe(signal: &mut Option<Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let number = tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = maybe(&mut self.hangup) => libc::SIGHUP,
            _ = self.user1.recv() => libc::SIGUSR1,
            _ = self.user2.recv() => libc::SIGUSR2,
            _ = maybe(&mut self.suspend) => libc::SIGTSTP,
            _ = self.child.recv() => libc::SIGCHLD,
        };
        Received(number)
    }

    /// The next signal that asks tenure to stop; SIGTSTP suspends tenure
    /// (there is no command to stop first); others are logged and dropped
    /// (there is no command to pass them to).
    pub async fn stop_requested(&mut self) -> Received {
        loop {
            let received = self.recv().await;
            if received.stops() {
                return received;
            }
            if received.suspends() {
                stop_self();
                continue;
            }
            if !received.child_changed() {
                tracing::info!(
                    signal = received.0,
                    "no command is running to pass the signal to; ignored"
                );
            }
        }
    }
}
