//! What tenure started, wherever it went. A process group is not a prison:
//! `setsid`, a daemonizing fork, `timeout(1)`, job-control shells and `sudo`
//! with a pty move the command's work out of its group, and a parent that
//! exits leaves its children to be adopted. On Linux tenure becomes a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), so every orphan among the
//! command's descendants is adopted by tenure rather than by init; then
//! "what tenure started" is exactly tenure's process subtree, read from
//! /proc. Elsewhere nothing here finds anything, and only the command's
//! group is signalled.
//!
//! Everything here is async-signal-safe and allocates nothing (system
//! calls on stack buffers): the keeper, a fork of tenure's that never
//! execs, uses it too.

/// The descendants one look holds at most; a kill looks again until none
/// is left, so more are killed over several looks.
pub const CAPACITY: usize = 1024;

/// One process of tenure's subtree.
#[derive(Clone, Copy, Debug, Default)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub struct Member {
    pub pid: libc::pid_t,
    /// Its process group.
    pub pgid: libc::pid_t,
    /// Running (or stopped), not a zombie.
    pub alive: bool,
    /// Its parent.
    pub ppid: libc::pid_t,
    /// When it started (clock ticks after boot): with the pid, it names
    /// the process even after the pid is reused.
    pub started: u64,
}

/// The processes descended from tenure at one look: its children (but the
/// keeper, and its helpers in its own process group) and theirs,
/// recursively; zombies included, as not alive.
pub struct Descendants {
    members: [Member; CAPACITY],
    len: usize,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Descendants {
    /// Looks through /proc for the descendants of `root` (tenure's pid),
    /// whose own process group is `root_group`; `keeper` (a pid, and a group
    /// of its own) is left out with its group.
    pub fn of(root: libc::pid_t, root_group: libc::pid_t, keeper: libc::pid_t) -> Descendants {
        let mut found = Descendants {
            members: [Member::default(); CAPACITY],
            len: 0,
        };
        imp::look(root, root_group, keeper, &mut found);
        found
    }

    /// Every member.
    pub fn iter(&self) -> impl Iterator<Item = &Member> {
        self.members[..self.len].iter()
    }

    /// How many are alive (not zombies).
    pub fn alive(&self) -> usize {
        self.iter().filter(|m| m.alive).count()
    }

    /// Whether `pid` is a member.
    fn contains(&self, pid: libc::pid_t) -> bool {
        self.iter().any(|m| m.pid == pid)
    }

    /// Adds a member; whether there was room.
    fn push(&mut self, member: Member) -> bool {
        if self.len == CAPACITY {
            return false;
        }
        self.members[self.len] = member;
        self.len += 1;
        true
    }
}

/// SIGKILLs the process group `group` (if above 1) and every live
/// descendant of `root` (see [`Descendants::of`]), and looks again until a
/// look finds none alive that was not killed already. A process cannot fork
/// once SIGKILL is pending for it (the kernel checks before the child is
/// attached), so what a killed process started before shows up in the next
/// look. Returns without waiting for the killed to be gone.
pub fn kill_all(
    root: libc::pid_t,
    root_group: libc::pid_t,
    keeper: libc::pid_t,
    group: libc::pid_t,
) {
    if group > 1 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    let mut killed = [0 as libc::pid_t; CAPACITY];
    let mut count = 0usize;
    // Bounded: each look kills at least one more process, or ends.
    for _ in 0..100_000 {
        let look = Descendants::of(root, root_group, keeper);
        let mut new = false;
        for member in look.iter().filter(|m| m.alive) {
            if killed[..count].contains(&member.pid) {
                continue;
            }
            // SAFETY: as above.
            unsafe { libc::kill(member.pid, libc::SIGKILL) };
            new = true;
            if count < CAPACITY {
                killed[count] = member.pid;
                count += 1;
            }
        }
        if !new {
            return;
        }
    }
}

/// What one look found, kept for a later kill: pid and start time of each
/// live member. While tenure lives, every live descendant stays in its
/// subtree (an orphan is adopted by tenure), so the newest look holds all
/// of them; once tenure is gone they are handed to another reaper, and this
/// is how the keeper still knows them.
pub struct Known {
    members: [(libc::pid_t, u64); CAPACITY],
    len: usize,
}

impl Known {
    /// Nothing known yet.
    pub fn new() -> Known {
        Known {
            members: [(0, 0); CAPACITY],
            len: 0,
        }
    }

    /// Keeps the live members of `look`, in place of what was known.
    pub fn keep(&mut self, look: &Descendants) {
        self.len = 0;
        for member in look.iter().filter(|m| m.alive) {
            if self.len == CAPACITY {
                break;
            }
            self.members[self.len] = (member.pid, member.started);
            self.len += 1;
        }
    }

    /// SIGKILLs each known process that is still the same process (same
    /// start time), and everything under it (see [`kill_all`]); `keeper`
    /// is spared.
    pub fn kill(&self, keeper: libc::pid_t) {
        for &(pid, started) in &self.members[..self.len] {
            if pid == keeper || imp::started(pid) != Some(started) {
                continue;
            }
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // Every child of it counts (no group of its own is spared).
            kill_all(pid, -1, keeper, 0);
        }
    }
}

/// Makes tenure adopt the orphans of the processes it starts (Linux:
/// `PR_SET_CHILD_SUBREAPER`). Elsewhere: `Unsupported`.
pub fn adopt_orphans() -> std::io::Result<()> {
    imp::adopt_orphans()
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{Descendants, Member};

    pub fn adopt_orphans() -> std::io::Result<()> {
        // SAFETY: prctl with integer arguments only.
        let done =
            unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
        if done == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Fills `found`: one pass over /proc per level of the tree.
    pub fn look(
        root: libc::pid_t,
        root_group: libc::pid_t,
        keeper: libc::pid_t,
        found: &mut Descendants,
    ) {
        loop {
            let before = found.len;
            each_process(|member| {
                if member.pid == root || found.contains(member.pid) {
                    return;
                }
                let adopted = if member.ppid == root {
                    member.pid != keeper && member.pgid != keeper && member.pgid != root_group
                } else {
                    found.contains(member.ppid)
                };
                if adopted {
                    found.push(member);
                }
            });
            if found.len == before {
                return;
            }
        }
    }

    /// Calls `f` with every process in /proc (that did not exit meanwhile).
    fn each_process(mut f: impl FnMut(Member)) {
        // SAFETY: open, getdents64 and close on our own descriptor and a
        // stack buffer of the length passed.
        unsafe {
            let dir = libc::open(
                c"/proc".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if dir < 0 {
                return;
            }
            let mut entries = [0u8; 4096];
            loop {
                let read = libc::syscall(
                    libc::SYS_getdents64,
                    dir,
                    entries.as_mut_ptr(),
                    entries.len(),
                );
                if read <= 0 {
                    break;
                }
                let mut at = 0usize;
                // struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
                while at + 19 < read as usize {
                    let reclen = u16::from_ne_bytes([entries[at + 16], entries[at + 17]]) as usize;
                    if reclen == 0 {
                        break;
                    }
                    let end = (at + reclen).min(read as usize);
                    if let Some(pid) = decimal(&entries[at + 19..end]) {
                        if let Some(member) = stat(pid) {
                            f(member);
                        }
                    }
                    at += reclen;
                }
            }
            libc::close(dir);
        }
    }

    /// A NUL-terminated name that is a positive decimal number.
    fn decimal(name: &[u8]) -> Option<libc::pid_t> {
        let mut value: libc::pid_t = 0;
        let mut digits = 0;
        for &byte in name {
            if byte == 0 {
                break;
            }
            if !byte.is_ascii_digit() {
                return None;
            }
            value = value
                .checked_mul(10)?
                .checked_add((byte - b'0') as libc::pid_t)?;
            digits += 1;
        }
        (digits > 0 && value > 0).then_some(value)
    }

    /// Parent, group and state of `pid`, from /proc/<pid>/stat.
    fn stat(pid: libc::pid_t) -> Option<Member> {
        let mut path = [0u8; 32];
        let prefix = b"/proc/";
        path[..prefix.len()].copy_from_slice(prefix);
        let mut at = prefix.len();
        let mut digits = [0u8; 12];
        let mut n = 0;
        let mut rest = pid;
        while rest > 0 {
            digits[n] = b'0' + (rest % 10) as u8;
            rest /= 10;
            n += 1;
        }
        while n > 0 {
            n -= 1;
            path[at] = digits[n];
            at += 1;
        }
        path[at..at + 5].copy_from_slice(b"/stat");
        let mut text = [0u8; 1024];
        // SAFETY: a NUL-terminated path in a buffer of ours; read into a
        // buffer of the length passed; closing our own descriptor.
        let read = unsafe {
            let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let read = libc::read(fd, text.as_mut_ptr().cast(), text.len());
            libc::close(fd);
            read
        };
        if read <= 0 {
            return None;
        }
        let text = &text[..read as usize];
        // "pid (comm) S ppid pgrp ...": the comm may hold anything, so
        // read on from the last ')'.
        let close = text.iter().rposition(|&b| b == b')')?;
        let mut fields = text[close + 1..]
            .split(|&b| b == b' ')
            .filter(|f| !f.is_empty());
        let state = *fields.next()?.first()?;
        let ppid = decimal_or_zero(fields.next()?);
        let pgid = decimal_or_zero(fields.next()?);
        // starttime is field 22; pgrp (just read) is field 5.
        let started = fields.nth(22 - 6).map_or(0, decimal_u64);
        Some(Member {
            pid,
            pgid,
            alive: state != b'Z' && state != b'X' && state != b'x',
            ppid,
            started,
        })
    }

    /// When `pid` started, if it exists.
    pub fn started(pid: libc::pid_t) -> Option<u64> {
        stat(pid).map(|member| member.started)
    }

    /// A decimal field as u64; 0 if it is not one.
    fn decimal_u64(field: &[u8]) -> u64 {
        let mut value: u64 = 0;
        for &byte in field {
            if !byte.is_ascii_digit() {
                return 0;
            }
            value = value
                .saturating_mul(10)
                .saturating_add((byte - b'0') as u64);
        }
        value
    }

    /// A decimal field; 0 if it is not one (a parent 0: no parent).
    fn decimal_or_zero(field: &[u8]) -> libc::pid_t {
        decimal(field).unwrap_or(0)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::Descendants;

    pub fn adopt_orphans() -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    pub fn started(_pid: libc::pid_t) -> Option<u64> {
        None
    }

    /// No /proc to read, and orphans go to init: only the group is known.
    pub fn look(
        _root: libc::pid_t,
        _root_group: libc::pid_t,
        _keeper: libc::pid_t,
        _found: &mut Descendants,
    ) {
    }
}

/// The unit tests share one process, and "what tenure started" is every
/// process it started: a test that signals or kills what it started must
/// not run beside another test's processes. Each test that starts one holds this.
#[cfg(test)]
pub static PROCESSES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn me() -> (libc::pid_t, libc::pid_t) {
        // SAFETY: getpid and getpgrp have no preconditions.
        unsafe { (libc::getpid(), libc::getpgrp()) }
    }

    #[test]
    fn a_grandchild_in_a_session_of_its_own_is_a_descendant_and_is_killed() {
        let _one_at_a_time = crate::descendants::PROCESSES.blocking_lock();
        use std::os::unix::process::CommandExt;
        // The root (tenure's stand-in) is a shell of ours, in a group of
        // its own; its child moves to a session of its own and forks.
        let mut root = std::process::Command::new("sh")
            .args(["-c", "setsid sh -c 'sleep 30 & echo $!; wait' & wait"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(root.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let sleeper: libc::pid_t = line.trim().parse().unwrap();
        let pid = root.id() as libc::pid_t;
        let look = Descendants::of(pid, pid, 0);
        let pids: Vec<_> = look.iter().map(|m| m.pid).collect();
        assert!(pids.contains(&sleeper), "{pids:?}");
        assert_eq!(look.alive(), 2, "{:?}", look.iter().collect::<Vec<_>>());
        kill_all(pid, pid, 0, 0);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Descendants::of(pid, pid, 0).alive() > 0 {
            assert!(
                std::time::Instant::now() < until,
                "a descendant outlived kill_all"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        root.kill().unwrap();
        root.wait().unwrap();
    }

    #[test]
    fn processes_in_tenures_own_group_and_the_keeper_are_left_out() {
        let _one_at_a_time = crate::descendants::PROCESSES.blocking_lock();
        let (root, group) = me();
        // Started the way a library's helper would be: in our own group.
        let mut helper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let look = Descendants::of(root, group, 0);
        assert!(look.iter().all(|m| m.pid != helper.id() as libc::pid_t));
        helper.kill().unwrap();
        helper.wait().unwrap();
    }
}
