//! Running the `tenure` binary from tests: to the end with a time limit, or
//! in the background; bounded waits; scratch files.

pub mod escape;
pub mod etcd;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use libtest_mimic::Failed;

/// A test's result.
pub type Outcome = Result<(), Failed>;

/// Fails the test with a message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        let holds: bool = $cond;
        if !holds {
            return Err(format!($($msg)+).into());
        }
    };
}

/// The `tenure` binary with `args`, its standard input closed.
pub fn tenure<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command
        .args(args)
        .stdin(Stdio::null())
        .env_remove("RUST_LOG");
    command
}

/// A finished command.
#[derive(Debug)]
pub struct Finished {
    /// The command as run (program, arguments, environment changes).
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Fails unless it exited with `code` and its standard error mentions
    /// each of `mentions`.
    pub fn exits_with(&self, code: i32, mentions: &[&str]) -> Outcome {
        ensure!(
            self.code() == Some(code),
            "expected status {code}: {self:?}"
        );
        mentions_all(
            &format!("the standard error of {}", self.command),
            &self.stderr,
            mentions,
        )
    }
}

/// Fails unless `text` (`what`, in the message) contains each of `needles`.
pub fn mentions_all(what: &str, text: &str, needles: &[&str]) -> Outcome {
    for needle in needles {
        ensure!(text.contains(needle), "{what} lacks {needle:?}:\n{text}");
    }
    Ok(())
}

/// `text` parsed as JSON.
pub fn json(text: &str) -> Result<serde_json::Value, Failed> {
    serde_json::from_str(text).map_err(|e| format!("{e}: {text}").into())
}

/// Runs `command` to its end; fails (and kills it) if that takes over `limit`.
pub fn finish(mut command: Command, limit: Duration) -> Result<Finished, Failed> {
    let started = Instant::now();
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start tenure: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => {
            let output = output.map_err(|e| format!("waiting for tenure: {e}"))?;
            Ok(Finished {
                command: format!("{command:?}"),
                status: output.status,
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
                took: started.elapsed(),
            })
        }
        Err(_) => {
            signal(pid, libc::SIGKILL);
            Err(format!("{command:?} did not finish within {limit:?}").into())
        }
    }
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, signal) };
}

/// Whether process `pid` is gone: no such process, or a zombie (dead,
/// waiting for whoever adopted it to reap it).
pub fn process_gone(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

/// The state letter of process `pid` (`R`, `S`, `T`, `Z`...), if it exists.
pub fn process_state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// A signal mask of process `pid` from /proc/<pid>/status (`SigIgn`, `SigCgt`...).
pub fn signal_status(pid: libc::pid_t, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field)
            .then(|| u64::from_str_radix(value.trim(), 16).ok())
            .flatten()
    })
}

/// Nanoseconds since the epoch, as `date +%s%N` prints them.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i128
}

/// Polls `check` every 10 ms until it gives a value; fails after `limit`.
pub fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T, Failed> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}").into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A directory of its own for one test, under cargo's scratch directory.
pub fn scratch(test: &str) -> PathBuf {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "cli-{}-{}-{test}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// The lines of a file written by commands (none if it does not exist yet).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A `tenure` process running in the background, its standard output and
/// error in files; SIGKILLed when dropped if still running.
pub struct Background {
    pub name: String,
    pub pid: libc::pid_t,
    exited: mpsc::Receiver<(ExitStatus, SystemTime)>,
    ended: Option<(ExitStatus, SystemTime)>,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Background {
    /// Starts `command`, writing its output to `<dir>/<name>.out` and `.err`.
    pub fn start(name: &str, mut command: Command, dir: &Path) -> Result<Background, Failed> {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        let file = |path: &Path| std::fs::File::create(path).map_err(|e| e.to_string());
        let mut child = command
            .stdout(file(&stdout)?)
            .stderr(file(&stderr)?)
            .spawn()
            .map_err(|e| format!("cannot start tenure: {e}"))?;
        let pid = child.id() as libc::pid_t;
        let (tx, exited) = mpsc::channel();
        // Waits at once, so the moment of exit is known to the millisecond.
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = tx.send((status, SystemTime::now()));
            }
        });
        Ok(Background {
            name: name.to_owned(),
            pid,
            exited,
            ended: None,
            stdout,
            stderr,
        })
    }

    pub fn signal(&self, signal: libc::c_int) {
        if self.ended.is_none() {
            self.signal_now(signal);
        }
    }

    /// Sends `signal`, then waits up to `limit` for it to exit.
    pub fn end(
        &mut self,
        signal: libc::c_int,
        limit: Duration,
    ) -> Result<(ExitStatus, SystemTime), Failed> {
        self.signal(signal);
        self.wait(limit)
    }

    /// Waits up to `limit` for it to exit; fails unless it exits with
    /// `code`. Returns when it exited.
    pub fn exits_with(&mut self, code: i32, limit: Duration) -> Result<SystemTime, Failed> {
        let (status, at) = self.wait(limit)?;
        ensure!(
            status.code() == Some(code),
            "{} exited with {status:?}, not {code}: {}",
            self.name,
            self.stderr()
        );
        Ok(at)
    }

    /// The first line of its standard output, once there is one (waits up to `limit`).
    pub fn first_line(&self, what: &str, limit: Duration) -> Result<String, Failed> {
        wait_until(what, limit, || {
            self.stdout().lines().next().map(str::to_owned)
        })
    }

    fn signal_now(&self, sig: libc::c_int) {
        signal(self.pid, sig);
    }

    /// Exit status and wall-clock time of exit, once it has exited (waits up to `limit`).
    pub fn wait(&mut self, limit: Duration) -> Result<(ExitStatus, SystemTime), Failed> {
        if let Some(ended) = self.ended {
            return Ok(ended);
        }
        match self.exited.recv_timeout(limit) {
            Ok(ended) => {
                self.ended = Some(ended);
                Ok(ended)
            }
            Err(_) => Err(format!(
                "{} did not exit within {limit:?}; its log:\n{}",
                self.name,
                self.stderr()
            )
            .into()),
        }
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.ended.is_none() && self.exited.try_recv().is_err() {
            self.signal_now(libc::SIGKILL);
        }
    }
}

/// The processes whose parent is `parent` (zombies too), from /proc.
pub fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &libc::pid_t| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// The time since the epoch of `at`, in ns (as `date +%s%N` prints it).
pub fn epoch_ns(at: SystemTime) -> i128 {
    at.duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i128
}
