//! The keeper: a small process beside the command that kills the command's
//! group when the lease's local deadline passes without an extension, or
//! when tenure dies, so that no signal to tenure alone (SIGSTOP, a debugger,
//! SIGKILL of a tenure whose command changed credentials) lets the command
//! outlive the deadline.
//!
//! tenure forks it (no exec) before it starts the command; it shares no
//! runtime, lock or allocator state with tenure: from the fork on it makes
//! only async-signal-safe system calls (poll, read, clock_gettime, kill,
//! _exit) on its own stack. It runs in a process group of its own (a Ctrl-C
//! or Ctrl-Z at the terminal does not reach it) and ignores the signals a
//! terminal or a shell sends; only SIGKILL ends it before its time.
//!
//! tenure talks to it through a pipe, in 16-byte records (under PIPE_BUF, so
//! each write is atomic): the command's process group (written by the
//! command itself, before its exec, so the keeper knows it before the
//! command runs a line of its own), each new deadline, and a last "stand
//! down" once the command is dead and reaped. The pipe closing without that
//! last word means tenure died: the keeper then kills the group at once.
//! Before it judges a deadline it reads every record waiting in the pipe
//! (the newest deadline counts, never a stale one), and it never passes a
//! deadline without a kill: until it knows the group, it waits for it.
//!
//! Its kill reaches more than the group: on Linux it kills every live
//! descendant of tenure's (see `descendants`; tenure adopts the orphans of
//! what the command started), so work that left the group dies too when
//! tenure is stopped. When tenure dies (the pipe closes) its children are
//! handed to another reaper at once: the keeper kills the group, what it
//! still finds under tenure, and what its last look (every 500 ms) found
//! there that is still the same process (pid and start time).
//!
//! Its name is not tenure's: `lease-keeper` in /proc/PID/comm and in its
//! argument area (Linux), so `pkill tenure`, `pkill -STOP tenure` or
//! `pkill -f 'tenure run'` reach tenure alone, and the keeper then does
//! its job.

use std::io;
use std::time::Duration;

use tokio::time::Instant;

/// The command's process group follows.
const GROUP: u64 = 1;
/// A new deadline follows (CLOCK_MONOTONIC nanoseconds).
const DEADLINE: u64 = 2;
/// The command is dead and reaped: exit without killing anything.
const STAND_DOWN: u64 = 3;

/// How the keeper exits: stood down on request.
pub const STOOD_DOWN: i32 = 0;
/// How the keeper exits: it killed the group when the deadline passed.
pub const KILLED_AT_DEADLINE: i32 = 1;
/// How the keeper exits: it killed the group when tenure went away.
pub const KILLED_ON_EOF: i32 = 2;

/// A running keeper: its pid and the pipe's writing end.
pub struct Keeper {
    pid: libc::pid_t,
    /// The pipe's writing end (non-blocking, close-on-exec); -1 once closed.
    fd: libc::c_int,
    /// The last deadline sent, CLOCK_MONOTONIC nanoseconds.
    sent: u64,
    /// Its wait status, once reaped.
    reaped: Option<libc::c_int>,
}

/// Where a keeper stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Running,
    /// Stopped (SIGSTOP): it cannot kill anything until continued.
    Stopped,
    /// It killed the group at its deadline, and exited.
    KilledAtDeadline,
    /// It died (SIGKILL, say) or exited otherwise: nothing keeps the command.
    Gone,
}

impl Keeper {
    /// Starts a keeper that kills the group (once it is told) at
    /// `deadline` unless told a later one.
    pub fn start(deadline: Instant) -> io::Result<Keeper> {
        let deadline_ns = monotonic_ns_at(deadline);
        let [read_end, write_end] = pipe()?;
        // SAFETY: getpid and getpgrp have no preconditions.
        let tenure = Tenure::new(unsafe { libc::getpid() }, unsafe { libc::getpgrp() });
        // No handler of tenure's may run in the child before `keep` resets
        // them: block every signal across the fork.
        // SAFETY: sigfillset and pthread_sigmask fill and read sets we own.
        let mut saved: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut saved);
        }
        // SAFETY: fork has no memory-safety preconditions of its own; the
        // child runs only `keep`, which makes async-signal-safe calls and
        // never returns.
        let pid = unsafe { libc::fork() };
        let fork_error = io::Error::last_os_error();
        if pid == 0 {
            // SAFETY: the child of a fork; see `keep`.
            unsafe {
                libc::close(write_end);
                keep(read_end, deadline_ns, &tenure)
            }
        }
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut()) };
        // SAFETY: closing a descriptor of ours.
        unsafe { libc::close(read_end) };
        if pid < 0 {
            // SAFETY: as above.
            unsafe { libc::close(write_end) };
            return Err(fork_error);
        }
        // Never block tenure on a keeper that does not read (stopped, say).
        // SAFETY: fcntl on our own descriptor.
        unsafe {
            let flags = libc::fcntl(write_end, libc::F_GETFL);
            libc::fcntl(write_end, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Ok(Keeper {
            pid,
            fd: write_end,
            sent: deadline_ns,
            reaped: None,
        })
    }

    /// The keeper's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// What the command, between fork and exec, calls to tell the keeper its
    /// process group (its own pid). Async-signal-safe; allocates nothing.
    pub fn announcer(&self) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
        let fd = self.fd;
        move || {
            // SAFETY: getpid has no preconditions.
            let pid = unsafe { libc::getpid() };
            // No allocation between fork and exec: an OS error only.
            if send(fd, GROUP, pid as u64) {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(libc::EPIPE))
            }
        }
    }

    /// Tells the keeper a new deadline, if it moved. A keeper that cannot
    /// be told is found out by [`Keeper::state`].
    pub fn extend(&mut self, deadline: Instant) {
        let deadline_ns = monotonic_ns_at(deadline);
        if deadline_ns == self.sent || self.fd < 0 {
            return;
        }
        if send(self.fd, DEADLINE, deadline_ns) {
            self.sent = deadline_ns;
        } else {
            let error = io::Error::last_os_error();
            tracing::debug!(keeper = self.pid, %error, "cannot tell the keeper its deadline");
        }
    }

    /// Tells the keeper the command's process group (which the command
    /// tells it itself before it execs; this is for a keeper started later).
    pub fn announce(&self, group: libc::pid_t) -> io::Result<()> {
        if send(self.fd, GROUP, group as u64) {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Whether the keeper still runs; if it exited, it is reaped here.
    pub fn state(&mut self) -> State {
        if self.reaped.is_some() {
            return State::Gone;
        }
        let mut status = 0;
        // SAFETY: waitpid on our own child, with a valid out pointer.
        let reaped =
            unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG | libc::WUNTRACED) };
        if reaped != self.pid {
            return State::Running;
        }
        if libc::WIFSTOPPED(status) {
            return State::Stopped;
        }
        self.reaped = Some(status);
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == KILLED_AT_DEADLINE {
            State::KilledAtDeadline
        } else {
            State::Gone
        }
    }

    /// Tells the keeper to exit without killing anything (the command never
    /// started, or is dead and reaped). It is not reaped.
    pub fn dismiss(&mut self) {
        if self.fd >= 0 {
            send(self.fd, STAND_DOWN, 0);
        }
        self.close();
    }

    /// Once the command is dead and reaped: tells the keeper to exit without
    /// killing anything, and reaps it (waiting at most a moment). Its exit
    /// status, if it was reaped.
    pub async fn stand_down(mut self) -> Option<i32> {
        self.dismiss();
        if let Some(status) = self.reaped {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        let until = Instant::now() + Duration::from_millis(200);
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own child, with a valid out pointer.
            let reaped = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if reaped == self.pid {
                return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            }
            if reaped < 0 || Instant::now() >= until {
                tracing::debug!(keeper = self.pid, "the keeper did not exit at once");
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn close(&mut self) {
        if self.fd >= 0 {
            // SAFETY: closing a descriptor of ours, once.
            unsafe { libc::close(self.fd) };
            self.fd = -1;
        }
    }
}

impl Drop for Keeper {
    /// Without a stand-down the pipe just closes: the keeper kills the group.
    fn drop(&mut self) {
        self.close();
    }
}

/// Writes one record; whether it went out whole. Async-signal-safe.
fn send(fd: libc::c_int, tag: u64, value: u64) -> bool {
    let mut record = [0u8; 16];
    record[..8].copy_from_slice(&tag.to_ne_bytes());
    record[8..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: writes 16 bytes from a buffer of 16 bytes.
    let written = unsafe { libc::write(fd, record.as_ptr().cast(), record.len()) };
    written == record.len() as isize
}

/// CLOCK_MONOTONIC now, in nanoseconds. Async-signal-safe.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// `instant` on CLOCK_MONOTONIC (which `Instant` reads on Linux), in
/// nanoseconds. The clock is read before `Instant::now()`, so the result
/// errs early, never late.
fn monotonic_ns_at(instant: Instant) -> u64 {
    let clock = monotonic_ns();
    let now = Instant::now();
    if instant >= now {
        clock.saturating_add((instant - now).as_nanos() as u64)
    } else {
        clock.saturating_sub((now - instant).as_nanos() as u64)
    }
}

/// What the keeper knows of tenure, read before the fork.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct Tenure {
    pid: libc::pid_t,
    group: libc::pid_t,
    /// tenure's argument area (start, end), to be overwritten with the
    /// keeper's own name, if known.
    arguments: Option<(usize, usize)>,
}

impl Tenure {
    fn new(pid: libc::pid_t, group: libc::pid_t) -> Tenure {
        Tenure {
            pid,
            group,
            arguments: argument_area(),
        }
    }
}

/// The memory /proc/PID/cmdline shows (fields 48 and 49 of /proc/self/stat).
#[cfg(target_os = "linux")]
fn argument_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (the state).
    let mut fields = rest.split_whitespace().skip(48 - 3);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start > 0 && end > start && end - start < 1 << 20).then_some((start, end))
}

#[cfg(not(target_os = "linux"))]
fn argument_area() -> Option<(usize, usize)> {
    None
}

/// The keeper's name, where `ps`, `pgrep` and `pkill` read it. Not tenure's:
/// a `pkill -STOP tenure` must leave the keeper running.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const NAME: &std::ffi::CStr = c"lease-keeper";

/// Takes the keeper's own name (Linux; elsewhere it keeps tenure's).
///
/// # Safety
/// Only in the keeper: overwrites tenure's argument strings in this
/// process's copy of the stack.
#[cfg(target_os = "linux")]
unsafe fn rename(tenure: &Tenure) {
    // SAFETY: prctl with a NUL-terminated name; the argument area is this
    // process's own (copied at the fork) and nothing here reads it.
    unsafe {
        let zero: libc::c_ulong = 0;
        libc::prctl(
            libc::PR_SET_NAME,
            NAME.as_ptr() as libc::c_ulong,
            zero,
            zero,
            zero,
        );
        if let Some((start, end)) = tenure.arguments {
            let area = std::slice::from_raw_parts_mut(start as *mut u8, end - start);
            area.fill(0);
            let name = NAME.to_bytes();
            let length = name.len().min(area.len() - 1);
            area[..length].copy_from_slice(&name[..length]);
        }
    }
}

#[cfg(not(target_os = "linux"))]
unsafe fn rename(_tenure: &Tenure) {}

/// A close-on-exec pipe: `[read, write]`.
fn pipe() -> io::Result<[libc::c_int; 2]> {
    let mut fds = [0 as libc::c_int; 2];
    #[cfg(target_os = "linux")]
    // SAFETY: pipe2 writes two descriptors into the array we pass.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    #[cfg(not(target_os = "linux"))]
    // SAFETY: pipe writes two descriptors into the array we pass; fcntl on
    // them. (Not atomic with a fork elsewhere: tenure's other children
    // start from the main thread too.)
    let made = unsafe {
        let made = libc::pipe(fds.as_mut_ptr());
        if made == 0 {
            for fd in fds {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        made
    };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fds)
}

/// The last OS error's number. Async-signal-safe: reads errno, allocates nothing.
fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// How often the keeper looks at what tenure started (Linux; a pass over
/// /proc per level of tenure's subtree: 0.3 % of a core with 150
/// processes on the host, measured). Work that leaves the group and whose
/// parent exits less than this before tenure is SIGKILLed can escape.
const LOOK_EVERY_NS: u64 = 500_000_000;

/// What the records waiting in the pipe said.
enum Heard {
    /// Nothing more for now.
    Nothing,
    /// tenure is gone without a word.
    Closed,
    /// Stand down.
    StandDown,
}

/// The keeper's life, in the child of the fork: async-signal-safe calls
/// only, no allocation, nothing of tenure's runtime.
///
/// # Safety
/// Call only in a freshly forked child; it never returns.
unsafe fn keep(pipe: libc::c_int, mut deadline_ns: u64, tenure: &Tenure) -> ! {
    // SAFETY (whole body): system calls on our own descriptors, stack
    // buffers and constants.
    unsafe {
        rename(tenure);
        // A group of its own: the terminal's SIGINT and SIGTSTP, sent to
        // tenure's foreground group, do not reach it.
        libc::setpgid(0, 0);
        // tenure's signal handlers belong to its runtime: none here.
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        for signal in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGTERM,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Hold no descriptor of tenure's (sockets, the pipes of a caller
        // waiting for tenure's output to end): only the pipe.
        close_all_but(pipe);
        // Reads return what is there and never block: the pipe is drained
        // before each judgement.
        let flags = libc::fcntl(pipe, libc::F_GETFL);
        libc::fcntl(pipe, libc::F_SETFL, flags | libc::O_NONBLOCK);

        let mut group: libc::pid_t = 0;
        let me = libc::getpid();
        // What tenure started, as last seen: when tenure dies, its
        // adoptees go to another reaper at once, out of sight under tenure.
        let mut known = crate::descendants::Known::new();
        let mut looked_ns = 0u64;
        // The group (never 0, our own, or 1 / -1, everyone), every live
        // descendant of tenure's but us, and what was last seen under it.
        let kill = |group: libc::pid_t, known: &crate::descendants::Known| {
            crate::descendants::kill_all(tenure.pid, tenure.group, me, group);
            known.kill(me);
        };
        let mut buffer = [0u8; 16 * 32];
        let mut filled = 0usize;
        loop {
            // Everything waiting first: the newest deadline is the one to judge.
            let heard = loop {
                let read = libc::read(
                    pipe,
                    buffer.as_mut_ptr().add(filled).cast(),
                    buffer.len() - filled,
                );
                if read == 0 {
                    break Heard::Closed;
                }
                if read < 0 {
                    match errno() {
                        libc::EINTR => continue,
                        libc::EAGAIN => break Heard::Nothing,
                        _ => break Heard::Closed,
                    }
                }
                filled += read as usize;
                let whole = filled / 16 * 16;
                let mut at = 0;
                let mut stand_down = false;
                while at < whole {
                    let mut tag = [0u8; 8];
                    let mut value = [0u8; 8];
                    tag.copy_from_slice(&buffer[at..at + 8]);
                    value.copy_from_slice(&buffer[at + 8..at + 16]);
                    match u64::from_ne_bytes(tag) {
                        GROUP => group = u64::from_ne_bytes(value) as libc::pid_t,
                        DEADLINE => deadline_ns = u64::from_ne_bytes(value),
                        STAND_DOWN => stand_down = true,
                        _ => {}
                    }
                    at += 16;
                }
                buffer.copy_within(whole..filled, 0);
                filled -= whole;
                if stand_down {
                    break Heard::StandDown;
                }
            };
            match heard {
                Heard::StandDown => libc::_exit(STOOD_DOWN),
                Heard::Closed => {
                    // tenure is gone without a word: what it started may
                    // not outlive it.
                    kill(group, &known);
                    libc::_exit(KILLED_ON_EOF);
                }
                Heard::Nothing => {}
            }
            let mut now = monotonic_ns();
            if now.saturating_sub(looked_ns) >= LOOK_EVERY_NS {
                known.keep(&crate::descendants::Descendants::of(
                    tenure.pid,
                    tenure.group,
                    me,
                ));
                looked_ns = now;
                now = monotonic_ns();
            }
            let wait_ms = if now < deadline_ns {
                let next = (deadline_ns - now).min(LOOK_EVERY_NS);
                next.div_ceil(1_000_000) as i32
            } else if group > 0 {
                kill(group, &known);
                libc::_exit(KILLED_AT_DEADLINE);
            } else {
                // Past the deadline before the command told its group (it
                // does before it execs): wait for that, or a stand-down.
                -1
            };
            let mut poll = libc::pollfd {
                fd: pipe,
                events: libc::POLLIN,
                revents: 0,
            };
            // Timed out, interrupted or readable: the loop drains and judges.
            libc::poll(&mut poll, 1, wait_ms);
        }
    }
}

/// close_range(2) (Linux 5.9); -1 where there is none.
#[cfg(target_os = "linux")]
unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) -> libc::c_long {
    // SAFETY: closes descriptors only.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_uint) }
}

#[cfg(not(target_os = "linux"))]
unsafe fn close_range(_first: libc::c_uint, _last: libc::c_uint) -> libc::c_long {
    -1
}

/// Closes every descriptor but `keep`. Async-signal-safe.
unsafe fn close_all_but(keep: libc::c_int) {
    // SAFETY: closing descriptors; this process uses none but `keep`.
    unsafe {
        let keep = keep as libc::c_uint;
        let all = |first: libc::c_uint, last: libc::c_uint| {
            if first > last {
                return;
            }
            if close_range(first, last) != 0 {
                // Kernels before 5.9: one by one, up to the limit.
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
                let top = (limit.rlim_cur.min(65_536) as libc::c_uint).min(last);
                let mut fd = first;
                while fd <= top {
                    libc::close(fd as libc::c_int);
                    fd += 1;
                }
            }
        };
        if keep > 0 {
            all(0, keep - 1);
        }
        all(keep + 1, libc::c_uint::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn announce(keeper: &Keeper, group: libc::pid_t) {
        assert!(send(keeper.fd, GROUP, group as u64));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_keeper_kills_the_group_at_a_deadline_that_was_not_extended() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        let mut child = sleeper();
        let started = std::time::Instant::now();
        let keeper = Keeper::start(Instant::now() + Duration::from_millis(200)).unwrap();
        announce(&keeper, child.id() as libc::pid_t);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(190), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        unsafe { libc::waitpid(keeper.pid(), &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), KILLED_AT_DEADLINE);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_extended_deadline_holds_and_a_stand_down_kills_nothing() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        let mut child = sleeper();
        let mut keeper = Keeper::start(Instant::now() + Duration::from_millis(100)).unwrap();
        announce(&keeper, child.id() as libc::pid_t);
        keeper.extend(Instant::now() + Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "killed despite the extension"
        );
        assert_eq!(keeper.stand_down().await, Some(STOOD_DOWN));
        assert!(
            child.try_wait().unwrap().is_none(),
            "killed by a stand-down"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Writes `records` in one write(2): the keeper finds all or none.
    fn send_at_once(keeper: &Keeper, records: &[(u64, u64)]) {
        let mut buffer = Vec::new();
        for (tag, value) in records {
            buffer.extend_from_slice(&tag.to_ne_bytes());
            buffer.extend_from_slice(&value.to_ne_bytes());
        }
        // SAFETY: writes the bytes of a buffer we own.
        let written = unsafe { libc::write(keeper.fd, buffer.as_ptr().cast(), buffer.len()) };
        assert_eq!(written, buffer.len() as isize);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_keeper_whose_deadline_passed_before_it_knew_the_group_kills_the_group() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        let mut child = sleeper();
        // The deadline passes before the command announces its group (tenure
        // held up between the keeper's start and the command's).
        let keeper = Keeper::start(Instant::now() - Duration::from_millis(1)).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            send(keeper.fd, GROUP, child.id() as u64),
            "the keeper is gone: it exited at its deadline before it read the group"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait().unwrap()));
        let status = rx.recv_timeout(Duration::from_secs(2));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.ok().and_then(|s| s.signal()),
            Some(libc::SIGKILL),
            "the keeper let the command run: it exited at its deadline before it read the group"
        );
        // Its kill looks for this process's other children until it exits:
        // the next test must not start before.
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        unsafe { libc::waitpid(keeper.pid(), &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), KILLED_AT_DEADLINE);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_keeper_reads_its_backlog_before_it_judges_the_deadline() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        let mut child = sleeper();
        // A backlog: the deadline it was started with has passed, a later
        // one waits in the pipe with the group.
        let mut keeper = Keeper::start(Instant::now() - Duration::from_millis(1)).unwrap();
        let later = monotonic_ns_at(Instant::now() + Duration::from_secs(30));
        send_at_once(&keeper, &[(GROUP, child.id() as u64), (DEADLINE, later)]);
        keeper.sent = later;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "killed on a stale deadline"
        );
        assert_eq!(
            keeper.stand_down().await,
            Some(STOOD_DOWN),
            "the keeper judged the stale deadline before it read the newer one"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_keeper_whose_pipe_closes_kills_the_group_at_once() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        let mut child = sleeper();
        let keeper = Keeper::start(Instant::now() + Duration::from_secs(30)).unwrap();
        announce(&keeper, child.id() as libc::pid_t);
        let pid = keeper.pid();
        drop(keeper);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), KILLED_ON_EOF);
    }
}
