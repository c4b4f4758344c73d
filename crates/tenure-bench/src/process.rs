//! Candidates in processes of their own: crash failover (SIGKILL the
//! leader) and, for `etcdctl elect` and Curator, graceful hand-over
//! (SIGINT) too.
//!
//! The bench's own candidates (tenure, etcd's election API, rslock,
//! kube-lease-manager, kube-coordinate) are
//! `tenure-bench-candidate` processes driven over the conformance suite's
//! process protocol ([`candidate_trial`]); programs the bench does not
//! write (`etcdctl elect`) or that run on the JVM (Curator) are read by the
//! lines they print ([`trial`]).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tenure_conformance::process::protocol::{Command as ProtocolCommand, Message};
use tenure_conformance::process::CandidateProcess;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult};
use crate::error::BenchError;
use crate::figures::{Figure, Measure};
use crate::sampling::fresh_key;

/// A candidate process and its output.
struct Candidate {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Candidate {
    fn spawn(mut command: Command) -> BenchResult<Candidate> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = ctx("spawning a candidate", command.spawn())?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        Ok(Candidate {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Waits for a line starting with `prefix` (any line if empty); when it
    /// came, and the line.
    async fn expect(&mut self, prefix: &str, limit: Duration) -> BenchResult<(Instant, String)> {
        let wait = async {
            loop {
                match self.lines.next_line().await {
                    Ok(Some(line)) if line.starts_with(prefix) => {
                        return Ok((Instant::now(), line))
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => {
                        return Err(format!("the candidate exited before {prefix:?}").into())
                    }
                    Err(e) => return Err(format!("reading the candidate: {e}").into()),
                }
            }
        };
        tokio::time::timeout(limit, wait).await.map_err(|_| {
            BenchError::from(format!("no {prefix:?} from the candidate within {limit:?}"))
        })?
    }

    fn signal(&self, signal: i32) -> BenchResult<()> {
        let pid = self.child.id().ok_or("the candidate has exited")?;
        // SAFETY: kill(2) on a child we started and have not reaped.
        if unsafe { libc::kill(pid as i32, signal) } != 0 {
            return Err(format!("kill: {}", std::io::Error::last_os_error()).into());
        }
        Ok(())
    }
}

/// How the leader is made to go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGKILL: a crash; the standby waits out the TTL.
    Kill,
    /// SIGINT: a graceful exit (etcdctl elect resigns on it).
    Interrupt,
}

impl Stop {
    /// What a trial that stops the leader so measures.
    pub fn measure(self) -> Measure {
        match self {
            Stop::Kill => Measure::Failover,
            Stop::Interrupt => Measure::Handover,
        }
    }
}

/// What the candidates print.
#[derive(Clone, Copy, Debug)]
pub struct Markers {
    /// After connecting, before campaigning (empty: none; wait instead).
    pub ready: &'static str,
    /// Once leading (empty: the first line).
    pub leading: &'static str,
    /// As the leader resigns, in the signal's handler (empty: none). With
    /// it, both it and `leading` carry the process's CLOCK_MONOTONIC in
    /// nanoseconds after the marker (`leading 123456789`), and a hand-over
    /// is also timed from one stamp to the other ([`Trial::stamped`]).
    pub resigning: &'static str,
    /// How long the standby is given to queue up after `ready`.
    pub settle: Duration,
}

/// What one [`trial`] measured.
#[derive(Clone, Copy, Debug)]
pub struct Trial {
    /// From the bench's signal to the standby's `leading` line, both in
    /// the bench process.
    pub signalled: Duration,
    /// A hand-over from the leader's `resigning` stamp to the standby's
    /// `leading` one, both taken in the candidates (see
    /// [`Markers::resigning`]); `None` without those stamps.
    pub stamped: Option<Duration>,
}

/// The CLOCK_MONOTONIC nanoseconds after `marker` in `line`.
fn stamp(line: &str, marker: &str) -> BenchResult<i128> {
    let nanos = line.strip_prefix(marker).unwrap_or(line).trim();
    nanos
        .parse()
        .map_err(|_| format!("no clock stamp after {marker:?} in {line:?}").into())
}

/// One trial: a leader process, a standby queued behind it, the leader
/// stopped; how long until the standby leads.
pub async fn trial(
    command: impl Fn() -> Command,
    lines: Markers,
    stop: Stop,
    limit: Duration,
) -> BenchResult<Trial> {
    let mut leader = Candidate::spawn(command())?;
    leader
        .expect(lines.leading, Duration::from_secs(30))
        .await?;
    let mut standby = Candidate::spawn(command())?;
    if !lines.ready.is_empty() {
        standby.expect(lines.ready, Duration::from_secs(30)).await?;
    }
    // Let the standby connect and queue up behind the leader.
    tokio::time::sleep(lines.settle).await;
    let stopped = Instant::now();
    leader.signal(match stop {
        Stop::Kill => libc::SIGKILL,
        Stop::Interrupt => libc::SIGINT,
    })?;
    let (led, led_line) = standby.expect(lines.leading, limit).await?;
    let stamped = if stop == Stop::Interrupt && !lines.resigning.is_empty() {
        let (_, resigned) = leader.expect(lines.resigning, limit).await?;
        let took = stamp(&led_line, lines.leading)? - stamp(&resigned, lines.resigning)?;
        let took = u64::try_from(took)
            .map_err(|_| format!("the standby led {} ns before the resign", -took))?;
        Some(Duration::from_nanos(took))
    } else {
        None
    };
    let _ = standby.signal(libc::SIGKILL);
    let _ = leader.child.wait().await;
    let _ = standby.child.wait().await;
    Ok(Trial {
        signalled: led - stopped,
        stamped,
    })
}

/// A peer the bench does not write (`etcdctl elect`, Curator's
/// LeaderLatch), measured by [`trial`]s of its candidate program.
pub struct LinePeer {
    /// Its name in the tables.
    pub name: &'static str,
    /// What its candidates print.
    pub markers: Markers,
    /// Its lease's (or session's) TTL: a crash failover waits it out, and
    /// the row subtracts it.
    pub ttl: Duration,
    /// How long the standby is given to lead once the leader is stopped.
    pub limit: Duration,
    /// Each trial's key is fresh, from this prefix.
    pub key_prefix: &'static str,
}

impl LinePeer {
    /// `trials` trials on `server`, the leader stopped by `stop`, each
    /// trial's candidates made by `command` from the trial's key; the row
    /// notes `note`, then how many trials failed. A hand-over whose
    /// candidates stamp it ([`Markers::resigning`]) is the row's figure;
    /// the note then gives the signal → `leading` line figures too.
    pub async fn measure(
        &self,
        server: &str,
        stop: Stop,
        trials: usize,
        command: impl Fn(&str) -> Command,
        note: &str,
    ) -> Figure {
        let (mut samples, mut stamped) = (Vec::new(), Vec::new());
        let mut errors = Vec::new();
        for _ in 0..trials {
            let key = fresh_key(self.key_prefix);
            match trial(|| command(&key), self.markers, stop, self.limit).await {
                Ok(t) => {
                    samples.push(t.signalled);
                    stamped.extend(t.stamped);
                }
                Err(e) => errors.push(e),
            }
        }
        let f = match stop {
            Stop::Kill => Figure::failover(server, self.name, &samples, self.ttl).with_note(note),
            Stop::Interrupt if !self.markers.resigning.is_empty() => {
                let signalled = Figure::latency(Measure::Handover, server, self.name, &samples);
                let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.2}"));
                Figure::latency(Measure::Handover, server, self.name, &stamped)
                    .with_note(note)
                    .with_note(format!(
                        "from the SIGINT to the standby's line instead: p50 {} ms, p99 {} ms",
                        ms(signalled.p50_ms),
                        ms(signalled.p99_ms)
                    ))
            }
            Stop::Interrupt => {
                Figure::latency(Measure::Handover, server, self.name, &samples).with_note(note)
            }
        };
        match errors.first() {
            Some(e) => f.with_note(format!("{} trials failed: {e}", errors.len())),
            None => f,
        }
    }
}

/// How long a standby is given to queue up behind the leader.
const SETTLE: Duration = Duration::from_millis(500);

/// One crash-failover trial through `tenure-bench-candidate` processes
/// (see its docs for the URL forms): a leader elected, a standby
/// campaigning behind it, the leader SIGKILLed; how long until the standby
/// says it leads, stamped as its `elected` arrives.
pub async fn candidate_trial(
    url: &str,
    key: &str,
    ttl: Duration,
    limit: Duration,
) -> BenchResult<Duration> {
    let program = candidate_program()?;
    let start = |identity: &'static str| {
        let program = program.clone();
        async move {
            let mut process = ctx(
                "starting a candidate",
                CandidateProcess::spawn(&program, url, key, identity, ttl, LIMIT).await,
            )?;
            let campaign = ctx(
                "asking a candidate to campaign",
                process.request(ProtocolCommand::Campaign, LIMIT).await,
            )?;
            campaign.map_err(|e| BenchError::from(format!("{identity}'s campaign: {e}")))?;
            Ok::<_, BenchError>(process)
        }
    };
    let mut leader = start("a").await?;
    elected(&mut leader, LIMIT).await?;
    let mut standby = start("b").await?;
    // Let the standby queue up behind the leader.
    tokio::time::sleep(SETTLE).await;
    // A standby that already leads (the leader lost its lease early) would
    // make a sample of the wrong thing.
    if let Some((message, _)) = standby.next_event(Duration::ZERO).await {
        return Err(format!("before the kill, the standby said {message:?}").into());
    }
    let stopped = Instant::now();
    ctx("killing the leader", leader.kill().await)?;
    let led = elected(&mut standby, limit).await?;
    let _ = standby.kill().await;
    if led < stopped {
        return Err("the standby led before the leader was killed".into());
    }
    Ok(led - stopped)
}

/// The longest a candidate may take to start, answer or lead unopposed.
const LIMIT: Duration = Duration::from_secs(30);

/// When `candidate` said it leads; other messages are passed over.
async fn elected(candidate: &mut CandidateProcess, limit: Duration) -> BenchResult<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match candidate.next_event(left).await {
            Some((Message::Elected { .. }, at)) => return Ok(at),
            Some((Message::Lost { reason, .. }, _)) => {
                return Err(format!(
                    "the candidate lost its term ({reason}) before the trial ended"
                )
                .into())
            }
            Some(_) => continue,
            None if Instant::now() < deadline => {
                return Err("the candidate exited before it led (its errors are above)".into())
            }
            None => {
                return Err(format!("no \"elected\" from the candidate within {limit:?}").into())
            }
        }
    }
}

/// `tenure-bench-candidate`, built beside this binary.
fn candidate_program() -> BenchResult<PathBuf> {
    let exe = ctx("finding this binary", std::env::current_exe())?;
    let program = exe.with_file_name("tenure-bench-candidate");
    if !program.exists() {
        return Err(format!(
            "{} is missing: build the package's binaries (cargo build -p tenure-bench)",
            program.display()
        )
        .into());
    }
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::stamp;

    #[test]
    fn a_stamp_is_the_number_after_its_marker() {
        assert_eq!(
            stamp("leading 1234567890123", "leading").unwrap(),
            1_234_567_890_123
        );
        assert!(stamp("leading", "leading").is_err());
        assert!(stamp("leading soon", "leading").is_err());
    }
}
