//! The signals tenure handles: SIGINT and SIGTERM stop it; SIGHUP, SIGUSR1
//! and SIGUSR2 are only passed on to the command.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::failure::Failure;

/// Signals received by tenure, listened to from start to exit.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    user1: Signal,
    user2: Signal,
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

    /// The exit status of a tenure stopped by it with no command running.
    pub fn exit_code(self) -> u8 {
        128u8.saturating_add(self.0 as u8)
    }
}

impl Signals {
    /// Starts listening (from here on, these signals no longer end tenure
    /// by their default action).
    pub fn listen() -> Result<Signals, Failure> {
        let on = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::new(format!("cannot handle signals: {e}")))
        };
        Ok(Signals {
            interrupt: on(SignalKind::interrupt())?,
            terminate: on(SignalKind::terminate())?,
            hangup: on(SignalKind::hangup())?,
            user1: on(SignalKind::user_defined1())?,
            user2: on(SignalKind::user_defined2())?,
        })
    }

    /// The next signal.
    pub async fn recv(&mut self) -> Received {
        let number = tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
            _ = self.user1.recv() => libc::SIGUSR1,
            _ = self.user2.recv() => libc::SIGUSR2,
        };
        Received(number)
    }

    /// The next signal that asks tenure to stop; others are logged and
    /// dropped (there is no command to pass them to).
    pub async fn stop_requested(&mut self) -> Received {
        loop {
            let received = self.recv().await;
            if received.stops() {
                return received;
            }
            tracing::info!(
                signal = received.0,
                "no command is running to pass the signal to; ignored"
            );
        }
    }
}
