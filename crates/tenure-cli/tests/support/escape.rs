//! Commands whose work leaves the process group tenure starts them in, as
//! daemons, `timeout(1)`, job-control shells and `sudo` with a pty do; and
//! the loop they leave behind, which logs its ticks to `$OUT`.

use std::path::Path;

use super::{lines, process_gone, signal};

/// How the command's work escapes its process group.
#[derive(Clone, Copy, Debug)]
pub enum Escape {
    /// `setsid sh -c …` as the command: setsid(1) forks (the command leads
    /// its group, so it cannot setsid itself), and its parent exits at once.
    Setsid,
    /// `sh -c '(sh -c … &); exit 0'`: the loop stays in the group, but its
    /// parent exits at once and the command right after.
    DoubleFork,
    /// `timeout(1)` inside a shell moves itself and its child to a group of
    /// their own; the child ignores timeout's SIGTERM and runs on.
    Timeout,
    /// A job-control shell on a pty (`script` gives it one, as `sudo` with
    /// `use_pty` does): a new session, and the background job a group of its own.
    JobControl,
}

impl Escape {
    /// The command's words: each starts the script in `$ESCAPEE`.
    pub fn command(self) -> &'static [&'static str] {
        match self {
            Escape::Setsid => &["sh", "-c", r#"exec setsid sh -c "$ESCAPEE""#],
            Escape::DoubleFork => &["sh", "-c", r#"(sh -c "$ESCAPEE" &) ; exit 0"#],
            Escape::Timeout => &["sh", "-c", r#"timeout 0.2 sh -c "$ESCAPEE"; exit 0"#],
            Escape::JobControl => &[
                "script",
                "-qec",
                r#"bash -m -c 'sh -c "$ESCAPEE" & exit 0'"#,
                "/dev/null",
            ],
        }
    }

    /// Why it cannot run here, if it cannot.
    pub fn missing(self) -> Option<&'static str> {
        let needs: &[&str] = match self {
            Escape::Setsid => &["setsid"],
            Escape::DoubleFork => &[],
            Escape::Timeout => &["timeout"],
            Escape::JobControl => &["script", "bash"],
        };
        needs
            .iter()
            .find(|program| {
                !["/usr/bin", "/bin"]
                    .iter()
                    .any(|dir| Path::new(dir).join(program).exists())
            })
            .copied()
    }
}

/// The escaped loop: ignores SIGTERM (so only SIGKILL ends it early),
/// writes `tick <pid> <ns>` to `$OUT` every 10 ms, `ticks` times (forever
/// if None), then `end <pid> <ns>`.
pub fn escapee(ticks: Option<u32>) -> String {
    let condition = match ticks {
        Some(n) => format!("[ $i -lt {n} ]"),
        None => ":".to_owned(),
    };
    format!(
        r#"trap '' TERM; i=0; while {condition}; do echo "tick $$ $(date +%s%N)" >> "$OUT"; sleep 0.01; i=$((i+1)); done; echo "end $$ $(date +%s%N)" >> "$OUT""#
    )
}

/// One line of an [`escapee`]'s.
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    /// Whether it is the last line (`end`).
    pub end: bool,
    pub pid: libc::pid_t,
    /// When it was written, ns since the epoch.
    pub at_ns: i128,
}

/// The lines the escaped loop wrote to `out`.
pub fn ticks(out: &Path) -> Vec<Tick> {
    lines(out)
        .iter()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let end = match f.next()? {
                "tick" => false,
                "end" => true,
                _ => return None,
            };
            Some(Tick {
                end,
                pid: f.next()?.parse().ok()?,
                at_ns: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// SIGKILLs a process when dropped, unless it is gone: a test that fails
/// leaves no loop behind.
pub struct Reaper(pub libc::pid_t);

impl Drop for Reaper {
    fn drop(&mut self) {
        if !process_gone(self.0) {
            signal(self.0, libc::SIGKILL);
        }
    }
}
