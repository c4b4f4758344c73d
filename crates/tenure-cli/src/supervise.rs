//! One term of `tenure run`: the command runs while the term does, and is
//! dead before the term's local deadline once renewals stop.
//!
//! Two deadlines follow the term's `valid_until` (renewals move it; the
//! timers re-read it when they fire and re-arm if it moved):
//! - at `valid_until - 2 * margin` without a renewal, the command's group
//!   gets SIGTERM;
//! - at `valid_until - margin`, SIGKILL.
//!
//! A term that ends earlier (the backend revoked it) sends SIGTERM at once;
//! the SIGKILL deadline stands.

use std::process::ExitStatus;
use std::time::Duration;

use tenure::{LossReason, Term};
use tokio::time::{sleep_until, Instant};

use crate::child::Child;
use crate::signals::{Received, Signals};

/// How a term's command ended.
#[derive(Debug)]
pub enum Ending {
    /// The command exited by itself while we led.
    Exited(ExitStatus),
    /// tenure was asked to stop; the signal was passed on and the command exited.
    Stopped {
        /// What tenure received.
        signal: Received,
        /// How the command exited.
        status: ExitStatus,
    },
    /// Leadership ended, or its deadline came close without a renewal; the
    /// command was stopped.
    Lost {
        /// Why.
        reason: String,
        /// How the command exited.
        status: ExitStatus,
    },
}

/// Where a term stands for its command.
struct Watch {
    /// Why the command is being stopped for the term's sake, once it is.
    lost: Option<String>,
    /// SIGTERM sent for the term's sake.
    terminated: bool,
    /// SIGKILL sent.
    killed: bool,
    /// The stop signal tenure received, if any.
    stop: Option<Received>,
}

/// `instant - by`, or now if that is in the past (or before the clock's start).
fn before(instant: Instant, by: Duration) -> Instant {
    instant.checked_sub(by).unwrap_or_else(Instant::now)
}

/// Runs `child` for the term: forwards signals, stops the command when the
/// term ends or its deadline nears, and returns once the command has exited
/// (its whole group then gets SIGKILL: nothing it started outlives it).
pub async fn supervise(
    child: &mut Child,
    term: &Term,
    signals: &mut Signals,
    margin: Duration,
) -> std::io::Result<Ending> {
    let mut watch = Watch {
        lost: None,
        terminated: false,
        killed: false,
        stop: None,
    };
    let lost = term.lost();
    tokio::pin!(lost);
    let mut lost_seen = false;
    let status = loop {
        let kill_at = before(term.valid_until(), margin);
        let term_at = before(term.valid_until(), margin * 2);
        tokio::select! {
            biased;
            status = child.wait() => break status?,
            reason = &mut lost, if !lost_seen => {
                lost_seen = true;
                watch.on_loss(child, reason);
            }
            _ = sleep_until(kill_at), if !watch.killed => {
                // Renewed meanwhile? Then the deadline moved: re-arm.
                if before(term.valid_until(), margin) <= Instant::now() {
                    watch.kill(child, margin);
                }
            }
            _ = sleep_until(term_at), if !watch.terminated && !watch.killed => {
                if before(term.valid_until(), margin * 2) <= Instant::now() {
                    watch.terminate(child, "no renewal succeeded and the lease's local deadline is near".to_owned());
                }
            }
            received = signals.recv() => {
                tracing::info!(signal = received.0, pid = child.pid(), "passing the signal on to the command");
                child.signal_group(received.0);
                if received.stops() {
                    watch.stop.get_or_insert(received);
                }
            }
        }
    };
    // Nothing the command started may outlive it (or the term).
    child.signal_group(libc::SIGKILL);
    Ok(match (watch.lost, watch.stop) {
        (Some(reason), _) => Ending::Lost { reason, status },
        (None, Some(signal)) => Ending::Stopped { signal, status },
        (None, None) => Ending::Exited(status),
    })
}

impl Watch {
    fn on_loss(&mut self, child: &Child, reason: LossReason) {
        self.terminate(child, format!("leadership ended: {reason}"));
    }

    fn terminate(&mut self, child: &Child, why: String) {
        if !self.terminated && !self.killed {
            tracing::warn!(pid = child.pid(), "{why}; sending SIGTERM to the command");
            child.signal_group(libc::SIGTERM);
            self.terminated = true;
        }
        self.lost.get_or_insert(why);
    }

    fn kill(&mut self, child: &Child, margin: Duration) {
        tracing::warn!(
            pid = child.pid(),
            "the lease's local deadline is {} away; sending SIGKILL to the command",
            humantime::format_duration(margin)
        );
        child.signal_group(libc::SIGKILL);
        self.killed = true;
        self.lost
            .get_or_insert_with(|| "the lease's local deadline came without a renewal".to_owned());
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::sync::Arc;

    use tenure::{ElectionKey, Elector, Leadership, MemoryBackend};

    use super::*;

    async fn lead(backend: &Arc<MemoryBackend>, ttl: Duration) -> Leadership {
        let elector = Elector::builder(backend.clone())
            .key("job")
            .identity("me")
            .ttl(ttl)
            .build()
            .unwrap();
        elector.campaign().await.unwrap()
    }

    fn sh(script: &str) -> Child {
        Child::spawn(&["sh".into(), "-c".into(), script.into()], &[]).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_renewed_term_lets_the_command_run_past_its_ttl() {
        let backend = Arc::new(MemoryBackend::new());
        let leadership = lead(&backend, Duration::from_millis(600)).await;
        let mut child = sh("sleep 1.5");
        let mut signals = Signals::listen().unwrap();
        let ending = supervise(
            &mut child,
            &leadership.term(),
            &mut signals,
            Duration::from_millis(60),
        )
        .await
        .unwrap();
        assert!(
            matches!(ending, Ending::Exited(status) if status.success()),
            "{ending:?}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_renewals_a_command_ignoring_sigterm_dies_before_the_deadline() {
        let backend = Arc::new(MemoryBackend::new());
        let leadership = lead(&backend, Duration::from_secs(1)).await;
        let term = leadership.term();
        backend.faults().cut_off();
        // `trap "" TERM` is inherited by sleep: only SIGKILL stops either.
        let mut child = sh("trap '' TERM; sleep 30");
        let mut signals = Signals::listen().unwrap();
        let margin = Duration::from_millis(100);
        let ending = supervise(&mut child, &term, &mut signals, margin)
            .await
            .unwrap();
        let returned = Instant::now();
        let Ending::Lost { status, .. } = ending else {
            panic!("{ending:?}")
        };
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(
            returned < term.valid_until(),
            "the command was reaped {:?} after the deadline",
            returned - term.valid_until()
        );
        assert!(
            returned + margin * 2 > term.valid_until(),
            "killed too early"
        );
        backend.faults().heal();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_revoked_term_sends_sigterm_at_once() {
        let backend = Arc::new(MemoryBackend::new());
        let ttl = Duration::from_secs(3);
        let leadership = lead(&backend, ttl).await;
        let term = leadership.term();
        // The next renewal (after TTL/3) finds the grant gone: revoked.
        backend.expire_now(&ElectionKey::new("job").unwrap());
        let mut child = sh("sleep 30");
        let mut signals = Signals::listen().unwrap();
        let ending = supervise(&mut child, &term, &mut signals, Duration::from_millis(300))
            .await
            .unwrap();
        let Ending::Lost { status, reason } = ending else {
            panic!("{ending:?}")
        };
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{reason}");
        assert!(reason.contains("revoked"), "{reason}");
        assert_eq!(term.ended(), Some(LossReason::Revoked));
    }
}
