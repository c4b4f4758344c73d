//! The driver's side: spawns a candidate process, sends commands, collects
//! events stamped on arrival, and pauses, resumes or kills it by signal.

use std::collections::HashMap;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command as Process};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, Instant};

use super::protocol::{Command, Message, Request, Status};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Message>>>>;

/// A running candidate process.
pub struct CandidateProcess {
    child: Child,
    pid: u32,
    stdin: ChildStdin,
    next_id: u64,
    pending: Pending,
    events: mpsc::UnboundedReceiver<(Message, Instant)>,
}

fn broken(what: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(what.to_string())
}

impl CandidateProcess {
    /// Starts `program URL KEY IDENTITY TTL_MS` and waits (at most `limit`) until it is ready.
    pub async fn spawn(
        program: &Path,
        url: &str,
        key: &str,
        identity: &str,
        ttl: Duration,
        limit: Duration,
    ) -> std::io::Result<Self> {
        let mut child = Process::new(program)
            .args([url, key, identity, &ttl.as_millis().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| broken("the candidate exited at once"))?;
        let stdin = child.stdin.take().ok_or_else(|| broken("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| broken("no stdout"))?;
        let pending: Pending = Arc::default();
        let (tx, events) = mpsc::unbounded_channel();
        let replies = pending.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let at = Instant::now();
                let Ok(message) = serde_json::from_str::<Message>(&line) else {
                    continue;
                };
                if let Message::Reply { id, .. } = &message {
                    if let Some(reply) =
                        replies.lock().unwrap_or_else(|e| e.into_inner()).remove(id)
                    {
                        let _ = reply.send(message);
                    }
                } else if tx.send((message, at)).is_err() {
                    return;
                }
            }
        });
        let mut process = CandidateProcess {
            child,
            pid,
            stdin,
            next_id: 0,
            pending,
            events,
        };
        match process.next_event(limit).await {
            Some((Message::Ready { .. }, _)) => Ok(process),
            other => Err(broken(format!(
                "the candidate did not get ready: {other:?}"
            ))),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `op` and waits (at most `limit`) for the reply: the candidate's
    /// status, or the error it reported.
    pub async fn request(
        &mut self,
        op: Command,
        limit: Duration,
    ) -> std::io::Result<Result<Status, String>> {
        self.next_id += 1;
        let id = self.next_id;
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let mut line = serde_json::to_string(&Request { id, op }).map_err(broken)?;
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        let reply = timeout(limit, rx).await;
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        match reply {
            Ok(Ok(Message::Reply {
                error: None,
                status,
                ..
            })) => Ok(Ok(status)),
            Ok(Ok(Message::Reply { error: Some(e), .. })) => Ok(Err(e)),
            Ok(Ok(other)) => Err(broken(format!("unexpected reply {other:?}"))),
            Ok(Err(_)) => Err(broken("the candidate's output ended")),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no reply to {op:?} within {limit:?}"),
            )),
        }
    }

    /// The next unasked message and when it arrived, at most `limit` away.
    pub async fn next_event(&mut self, limit: Duration) -> Option<(Message, Instant)> {
        timeout(limit, self.events.recv()).await.ok().flatten()
    }

    fn signal(&self, signal: libc::c_int) -> std::io::Result<()> {
        let pid = libc::pid_t::try_from(self.pid).map_err(broken)?;
        // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped:
        // the Child is alive in `self`), and a valid signal number.
        if unsafe { libc::kill(pid, signal) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// SIGSTOP: the process freezes, timers and all.
    pub fn pause(&self) -> std::io::Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// SIGCONT.
    pub fn resume(&self) -> std::io::Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// SIGKILL, then reaps it.
    pub async fn kill(&mut self) -> std::io::Result<ExitStatus> {
        self.signal(libc::SIGKILL)?;
        self.child.wait().await
    }

    /// Waits for it to exit by itself.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }
}
