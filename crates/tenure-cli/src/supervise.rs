//! One term of `tenure run`: the command, and all it started wherever it
//! went (see `descendants`), runs while the term does; the term lasts until
//! all of it has exited, and all of it is dead before the term's local
//! deadline once renewals stop.
//!
//! Two deadlines follow the term's `valid_until` (renewals move it; the
//! timers re-read it when they fire and re-arm if it moved):
//! - at `valid_until - 2 * margin` without a renewal, the command's group
//!   and all the command started get SIGTERM;
//! - at `valid_until - margin`, SIGKILL; the term ends once the killed are
//!   gone.
//!
//! A term that ends earlier (the backend revoked it) sends SIGTERM at once;
//! the SIGKILL deadline stands.
//!
//! A third deadline, `valid_until - margin / 2`, is the keeper's (see
//! `keeper`): a process of its own that kills the same then unless told
//! of a renewal, so that a tenure that is stopped (SIGSTOP, a debugger) or
//! dies cannot leave the command running past the deadline. SIGTSTP
//! (Ctrl-Z) stops the command's group before tenure stops itself.

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
    /// The command was stopped by SIGTTIN or SIGTTOU (it used the terminal
    /// from a background process group) and could not go on: it was ended.
    Stuck {
        /// The signal that stopped it.
        signal: libc::c_int,
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
    /// The terminal signal that stopped the command, once it did.
    stuck: Option<libc::c_int>,
}

/// `instant - by`, or now if that is in the past (or before the clock's start).
fn before(instant: Instant, by: Duration) -> Instant {
    instant.checked_sub(by).unwrap_or_else(Instant::now)
}

/// Where the keeper kills the group: half a margin before the deadline,
/// after tenure's own SIGKILL (so a tenure that runs is always first).
pub fn keeper_deadline(valid_until: Instant, margin: Duration) -> Instant {
    before(valid_until, margin / 2)
}

/// Runs `child` for the term: forwards signals, stops the command when the
/// term ends or its deadline nears, keeps the keeper's deadline current, and
/// returns once nothing tenure started is alive: the command has exited and
/// so has all it started, wherever it went (Linux; see `descendants`).
/// Elsewhere the command's group gets SIGKILL once the command has exited.
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
        stuck: None,
    };
    let lost = term.lost();
    tokio::pin!(lost);
    let mut lost_seen = false;
    // Renewals move the deadline every TTL/3; the keeper hears of it within
    // half a margin (it kills half a margin before the deadline).
    let mut keeper_tick = tokio::time::interval((margin / 2).max(Duration::from_millis(1)));
    keeper_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Once the command has exited, the term goes on while anything it
    // started lives. The last of them to exit is a child of tenure's (an
    // orphan is adopted by tenure), whose exit sends SIGCHLD: each SIGCHLD
    // is a look. This tick is only a backstop.
    let mut backstop = tokio::time::interval(Duration::from_secs(1));
    backstop.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut exited: Option<ExitStatus> = None;
    let status = loop {
        if let Some(status) = exited {
            child.reap_adopted();
            if child.alive() == 0 {
                break status;
            }
        }
        let kill_at = before(term.valid_until(), margin);
        let term_at = before(term.valid_until(), margin * 2);
        tokio::select! {
            biased;
            status = child.wait(), if exited.is_none() => {
                let status = status?;
                exited = Some(status);
                let left = child.alive();
                if left > 0 {
                    tracing::info!(
                        pid = child.pid(),
                        %status,
                        left,
                        "the command exited; what it started still runs: the term goes on until it ends"
                    );
                }
            }
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
            _ = keeper_tick.tick() => {
                let deadline = keeper_deadline(term.valid_until(), margin);
                child.keep_until(deadline);
                if let Err(why) = child.check_keeper(deadline) {
                    watch.terminate(child, why);
                }
            }
            _ = backstop.tick(), if exited.is_some() => {}
            received = signals.recv() => {
                if received.suspends() {
                    watch.suspend(child, term, margin);
                } else if received.child_changed() {
                    if exited.is_none() {
                        watch.check_stopped(child);
                    }
                    child.reap_adopted();
                    let deadline = keeper_deadline(term.valid_until(), margin);
                    if let Err(why) = child.check_keeper(deadline) {
                        watch.terminate(child, why);
                    }
                } else {
                    child.signal_all(received.0);
                    tracing::info!(signal = received.0, pid = child.pid(), "passed the signal on to the command");
                    if received.stops() {
                        watch.stop.get_or_insert(received);
                    }
                }
            }
        }
    };
    // Nothing the command started may outlive the term: on Linux nothing is
    // alive by now; elsewhere this is what ends the rest of its group. The
    // term ends once the killed are gone.
    child.kill_all();
    while child.alive() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        child.reap_adopted();
    }
    if child.release_keeper().await && watch.lost.is_none() {
        watch.lost = Some(
            "tenure was held up past the lease's local deadline (stopped?); its keeper killed the command"
                .to_owned(),
        );
    }
    Ok(match (watch.lost, watch.stuck, watch.stop) {
        (Some(reason), _, _) => Ending::Lost { reason, status },
        (None, Some(signal), _) => Ending::Stuck { signal, status },
        (None, None, Some(signal)) => Ending::Stopped { signal, status },
        (None, None, None) => Ending::Exited(status),
    })
}

impl Watch {
    fn on_loss(&mut self, child: &Child, reason: LossReason) {
        self.terminate(child, format!("leadership ended: {reason}"));
    }

    /// Signals first, logs after: a log line never holds up the signal.
    fn terminate(&mut self, child: &Child, why: String) {
        if !self.terminated && !self.killed {
            child.signal_all(libc::SIGTERM);
            self.terminated = true;
            tracing::warn!(pid = child.pid(), "{why}; sent SIGTERM to the command");
        }
        self.lost.get_or_insert(why);
    }

    /// Signals first, logs after.
    fn kill(&mut self, child: &Child, margin: Duration) {
        child.kill_all();
        self.killed = true;
        self.lost
            .get_or_insert_with(|| "the lease's local deadline came without a renewal".to_owned());
        tracing::warn!(
            pid = child.pid(),
            "the lease's local deadline is {} away; sent SIGKILL to the command",
            humantime::format_duration(margin)
        );
    }

    /// SIGTSTP (Ctrl-Z): stops the command's group, then tenure itself.
    /// Once continued: a term that ended, or whose kill deadline passed,
    /// while stopped gets its still-stopped group SIGKILLed; otherwise the
    /// group is continued.
    fn suspend(&mut self, child: &Child, term: &Term, margin: Duration) {
        child.signal_all(libc::SIGSTOP);
        tracing::info!(pid = child.pid(), "SIGTSTP: stopped the command; stopping");
        crate::signals::stop_self();
        let over = term.ended().is_some() || before(term.valid_until(), margin) <= Instant::now();
        if over {
            child.kill_all();
            self.killed = true;
            self.lost.get_or_insert_with(|| {
                "tenure was suspended (SIGTSTP) until its term was over".to_owned()
            });
            tracing::warn!(
                pid = child.pid(),
                "continued after the term was over; sent SIGKILL to the stopped command"
            );
        } else {
            child.signal_all(libc::SIGCONT);
            tracing::info!(
                pid = child.pid(),
                "continued within the term; continued the command"
            );
        }
    }

    /// SIGCHLD: a command stopped by SIGTTIN or SIGTTOU (it read from, or
    /// configured, the terminal, from a background group) can never go on.
    /// The first time it gets SIGTERM and SIGCONT; the next, SIGKILL.
    fn check_stopped(&mut self, child: &Child) {
        let Some(signal) = child.stopped_by() else {
            return;
        };
        if signal != libc::SIGTTIN && signal != libc::SIGTTOU {
            return;
        }
        if self.stuck.is_none() {
            child.signal_group(libc::SIGTERM);
            child.signal_group(libc::SIGCONT);
            self.stuck = Some(signal);
            tracing::error!(
                pid = child.pid(),
                signal,
                "the command was stopped for using the terminal (it runs in a background \
                 process group; give it no terminal input, e.g. --no-stdin); sent SIGTERM"
            );
        } else if !self.killed {
            child.kill_all();
            self.killed = true;
            tracing::error!(pid = child.pid(), signal, "stopped again; sent SIGKILL");
        }
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
        Child::spawn(
            &["sh".into(), "-c".into(), script.into()],
            &[],
            crate::child::Launch::default(),
        )
        .unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_renewed_term_lets_the_command_run_past_its_ttl() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
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
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
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
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
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

    #[test]
    fn a_log_writer_that_never_returns_holds_up_no_kill() {
        let _one_at_a_time = crate::descendants::PROCESSES.blocking_lock();
        // Standard error as a pipe nobody reads: every write blocks forever.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (subscriber, drain) =
                crate::logging::subscriber("warn", crate::logging::tests::Stuck);
            // Its thread never finishes: do not wait for it.
            std::mem::forget(drain);
            tracing::subscriber::with_default(subscriber, || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let backend = Arc::new(MemoryBackend::new());
                    let leadership = lead(&backend, Duration::from_secs(1)).await;
                    let term = leadership.term();
                    backend.faults().cut_off();
                    let mut child = sh("trap '' TERM; sleep 30");
                    tx.send((child.pid(), term.valid_until().into_std()))
                        .unwrap();
                    let mut signals = Signals::listen().unwrap();
                    let margin = Duration::from_millis(100);
                    let _ = supervise(&mut child, &term, &mut signals, margin).await;
                });
            });
            let _ = done_tx.send(());
        });
        // supervise returns once the command is gone; until then it looks
        // after every child of this process: hold the others' tests back.
        let finished = || {
            done.recv_timeout(Duration::from_secs(10))
                .expect("supervise did not return")
        };
        let (pid, deadline) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
                    .is_some_and(|state| state == 'Z' || state == 'X')
            })
        };
        loop {
            let now = std::time::Instant::now();
            if gone() {
                assert!(
                    now < deadline,
                    "the command died {:?} after the lease's deadline",
                    now - deadline
                );
                finished();
                return;
            }
            if now > deadline + Duration::from_secs(2) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!(
                    "the command was still running {:?} after the lease's deadline: a log write that never returned held up its SIGTERM and SIGKILL",
                    now - deadline
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
