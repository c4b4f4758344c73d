//! Candidates in processes of their own: crash failover (SIGKILL the
//! leader) and, for `etcdctl elect`, graceful hand-over (SIGINT).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult};
use crate::error::BenchError;

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

    /// Waits for a line starting with `prefix` (any line if empty); when it came.
    async fn expect(&mut self, prefix: &str, limit: Duration) -> BenchResult<Instant> {
        let wait = async {
            loop {
                match self.lines.next_line().await {
                    Ok(Some(line)) if line.starts_with(prefix) => return Ok(Instant::now()),
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

/// What the candidates print.
#[derive(Clone, Copy, Debug)]
pub struct Markers {
    /// After connecting, before campaigning (empty: none; wait instead).
    pub ready: &'static str,
    /// Once leading (empty: the first line).
    pub leading: &'static str,
    /// How long the standby is given to queue up after `ready`.
    pub settle: Duration,
}

/// One trial: a leader process, a standby queued behind it, the leader
/// stopped; how long until the standby leads.
pub async fn trial(
    command: impl Fn() -> Command,
    lines: Markers,
    stop: Stop,
    limit: Duration,
) -> BenchResult<Duration> {
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
    let led = standby.expect(lines.leading, limit).await?;
    let _ = standby.signal(libc::SIGKILL);
    let _ = leader.child.wait().await;
    let _ = standby.child.wait().await;
    Ok(led - stopped)
}

/// `tenure-bench candidate KIND URL KEY TTL_MS`, this very binary.
pub fn candidate_command(kind: &str, url: &str, key: &str, ttl: Duration) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| "tenure-bench".into());
    let mut c = Command::new(exe);
    c.arg("candidate")
        .arg(kind)
        .arg(url)
        .arg(key)
        .arg(ttl.as_millis().to_string());
    c
}

/// Lines our own candidate mode prints.
pub const OURS: Markers = Markers {
    ready: "ready",
    leading: "leading",
    settle: Duration::from_millis(500),
};
