//! The leader's command: started in a process group of its own, killed with
//! tenure (Linux), signalled as a group together with whatever it started
//! that left the group (Linux, see `descendants`).

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;

use crate::descendants::{self, Descendants};
use crate::failure::Failure;
use crate::keeper::{self, Keeper};

/// A started command. Its process group (the command and whatever it starts
/// without leaving the group) is what gets signalled.
pub struct Child {
    process: tokio::process::Child,
    /// The process group: the command's pid.
    group: libc::pid_t,
    /// The keeper that kills the group if tenure cannot, if any.
    keeper: Option<Keeper>,
    /// A keeper killed the group at its deadline (found so before its stand-down).
    keeper_killed: bool,
    /// tenure's pid and process group: the root of what it started.
    me: libc::pid_t,
    my_group: libc::pid_t,
}

/// How to start a command, beyond its arguments and environment.
#[derive(Default)]
pub struct Launch {
    /// A keeper the command tells its process group before it execs: from
    /// its first instruction on, the keeper can kill it.
    pub keeper: Option<Keeper>,
    /// Give the command no standard input (/dev/null).
    pub no_stdin: bool,
}

impl Child {
    /// Starts `command` (program and arguments) in tenure's own environment
    /// with `env` set (`Some`) or removed (`None`), in a new process group. On Linux the command gets
    /// SIGKILL when tenure dies, even by SIGKILL.
    ///
    /// Call it from the runtime's main thread (the `main` future, not a
    /// spawned task): Linux sends the parent-death signal when the *thread*
    /// that started the child ends, and only the main thread lives as long
    /// as tenure does.
    pub fn spawn(
        command: &[OsString],
        env: &[(&str, Option<String>)],
        launch: Launch,
    ) -> Result<Child, Failure> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Failure::new("no command to run"))?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args);
        for (name, value) in env {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        cmd.process_group(0).kill_on_drop(true);
        if launch.no_stdin {
            cmd.stdin(std::process::Stdio::null());
        }
        die_with_parent(&mut cmd);
        if let Some(keeper) = &launch.keeper {
            // SAFETY: the announcer makes one write(2) and getpid(2), both
            // async-signal-safe, and allocates nothing.
            unsafe {
                cmd.pre_exec(keeper.announcer());
            }
        }
        let spawned = cmd.spawn();
        let mut keeper = launch.keeper;
        if spawned.is_err() {
            // The command never ran: the pid it announced is gone already.
            if let Some(keeper) = &mut keeper {
                keeper.dismiss();
            }
        }
        let process = spawned.map_err(|error| {
            let program = program.to_string_lossy();
            match error.kind() {
                io::ErrorKind::NotFound => {
                    Failure::with_code(127, format!("cannot start {program:?}: not found"))
                }
                io::ErrorKind::PermissionDenied => {
                    Failure::with_code(126, format!("cannot start {program:?}: permission denied"))
                }
                _ => Failure::with_code(126, format!("cannot start {program:?}: {error}")),
            }
        })?;
        let group = process
            .id()
            .and_then(|pid| libc::pid_t::try_from(pid).ok())
            .ok_or_else(|| Failure::new("the command exited before its pid was known"))?;
        if let Some(keeper) = &keeper {
            tracing::debug!(
                pid = group,
                keeper = keeper.pid(),
                "the command started, kept"
            );
        }
        Ok(Child {
            process,
            group,
            keeper,
            keeper_killed: false,
            // SAFETY: getpid and getpgrp have no preconditions.
            me: unsafe { libc::getpid() },
            // SAFETY: as above.
            my_group: unsafe { libc::getpgrp() },
        })
    }

    /// The keeper's pid, or 0.
    fn keeper_pid(&self) -> libc::pid_t {
        self.keeper.as_ref().map_or(0, Keeper::pid)
    }

    /// What tenure started, at one look (nothing but on Linux).
    pub fn descendants(&self) -> Descendants {
        Descendants::of(self.me, self.my_group, self.keeper_pid())
    }

    /// How many processes tenure started are alive (the command included
    /// while it runs). Always 0 but on Linux.
    pub fn alive(&self) -> usize {
        self.descendants().alive()
    }

    /// Sends `signal` to the command's group and to every live process
    /// tenure started that left the group (once each).
    pub fn signal_all(&self, signal: libc::c_int) {
        self.signal_group(signal);
        for member in self.descendants().iter() {
            if member.alive && member.pgid != self.group {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(member.pid, signal) };
            }
        }
    }

    /// SIGKILLs the group and everything tenure started, until a look finds
    /// nothing alive that was not killed (see `descendants::kill_all`); the
    /// killed may take a moment to be gone: see [`Child::alive`].
    pub fn kill_all(&self) {
        descendants::kill_all(self.me, self.my_group, self.keeper_pid(), self.group);
        for member in self.descendants().iter().filter(|m| m.alive) {
            // SAFETY: kill with signal 0 only checks.
            let refused = unsafe { libc::kill(member.pid, 0) } != 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
            if refused {
                tracing::error!(
                    pid = member.pid,
                    "cannot kill a process the command started (another user's): the term lasts until it exits; run tenure as that user, as root or with CAP_KILL"
                );
            }
        }
    }

    /// Reaps the adopted orphans that exited (the command itself is waited
    /// for by [`Child::wait`], the keeper by its own code).
    pub fn reap_adopted(&self) {
        for member in self.descendants().iter() {
            if !member.alive && member.ppid == self.me && member.pid != self.group {
                let mut status = 0;
                // SAFETY: waitpid on a child of ours that exited, with a
                // valid out pointer.
                unsafe { libc::waitpid(member.pid, &mut status, libc::WNOHANG) };
            }
        }
    }

    /// Makes sure a keeper stands by: continues a stopped one, replaces a
    /// dead one (told the group and `deadline`). An error if none can: the
    /// term must then end.
    pub fn check_keeper(&mut self, deadline: tokio::time::Instant) -> Result<(), String> {
        let Some(current) = &mut self.keeper else {
            return Ok(());
        };
        let pid = current.pid();
        match current.state() {
            keeper::State::Running => Ok(()),
            keeper::State::Stopped => {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGCONT) };
                tracing::warn!(keeper = pid, "the keeper was stopped; continued it");
                Ok(())
            }
            keeper::State::KilledAtDeadline => {
                // Its work is done: the group and the rest are dead.
                self.keeper_killed = true;
                Ok(())
            }
            keeper::State::Gone => {
                let started = Keeper::start(deadline).and_then(|new| {
                    new.announce(self.group)?;
                    Ok(new)
                });
                match started {
                    Ok(new) => {
                        tracing::warn!(
                            keeper = pid,
                            new = new.pid(),
                            "the keeper died; a new one took over"
                        );
                        self.keeper = Some(new);
                        Ok(())
                    }
                    Err(error) => {
                        self.keeper = None;
                        Err(format!(
                            "the keeper (pid {pid}) died and no other could start ({error})"
                        ))
                    }
                }
            }
        }
    }

    /// Tells the keeper (if any) the deadline past which it kills the group.
    pub fn keep_until(&mut self, deadline: tokio::time::Instant) {
        if let Some(keeper) = &mut self.keeper {
            keeper.extend(deadline);
        }
    }

    /// Once the command is reaped: lets the keeper go without a kill.
    /// Whether the keeper had killed the group at its deadline.
    pub async fn release_keeper(&mut self) -> bool {
        match self.keeper.take() {
            Some(keeper) => {
                keeper.stand_down().await == Some(keeper::KILLED_AT_DEADLINE) || self.keeper_killed
            }
            None => self.keeper_killed,
        }
    }

    /// The signal that stopped the command, if it is stopped now (without
    /// consuming the state change: tokio's reaper still sees the exit).
    pub fn stopped_by(&self) -> Option<libc::c_int> {
        // SAFETY: waitid writes into the siginfo we pass; WNOWAIT leaves
        // the child's state to be waited for again.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WSTOPPED | libc::WNOHANG | libc::WNOWAIT;
            if libc::waitid(libc::P_PID, self.group as libc::id_t, &mut info, flags) != 0 {
                return None;
            }
            (info.si_code == libc::CLD_STOPPED && info.si_pid() == self.group)
                .then(|| info.si_status())
        }
    }

    /// The command's pid (and process group id).
    pub fn pid(&self) -> libc::pid_t {
        self.group
    }

    /// Sends `signal` to the command's process group. A group that is gone
    /// already is no error.
    pub fn signal_group(&self, signal: libc::c_int) {
        // SAFETY: kill has no memory-safety preconditions.
        let result = unsafe { libc::kill(-self.group, signal) };
        if result != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::ESRCH) {
                tracing::warn!(group = self.group, signal, %error, "cannot signal the command");
            }
        }
    }

    /// Waits for the command to exit.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.process.wait().await
    }
}

/// The exit status tenure passes on for a command's: its code, or 128 + the
/// signal that killed it (as shells report it).
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => 1,
    }
}

/// Makes the command get SIGKILL when tenure dies, and closes the race where
/// tenure died before that was set up.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let setup = move || {
        // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid are async-signal-safe
        // system calls that touch no memory of ours.
        unsafe {
            let sigkill = libc::SIGKILL as libc::c_ulong;
            if libc::prctl(libc::PR_SET_PDEATHSIG, sigkill, 0 as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // tenure may have died between fork and prctl: then nobody
            // would send the signal, so do not start at all.
            if libc::getppid() != parent {
                return Err(io::Error::other("tenure exited before the command started"));
            }
        }
        Ok(())
    };
    // SAFETY: the closure only makes async-signal-safe system calls and
    // allocates nothing on success.
    unsafe {
        cmd.pre_exec(setup);
    }
}

/// Elsewhere the command outlives a tenure that is killed with SIGKILL.
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut tokio::process::Command) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn exit_codes_pass_through_and_signals_become_128_plus() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_command_gets_the_environment_and_its_own_group() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        // Field 5 of /proc/<pid>/stat is the process group.
        let script = "test \"$TENURE_KEY\" = k && test -z \"${HOME+set}\" && test \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$";
        let mut child = Child::spawn(
            &["sh".into(), "-c".into(), script.into()],
            &[("TENURE_KEY", Some("k".to_owned())), ("HOME", None)],
            Launch::default(),
        )
        .unwrap();
        assert!(child.pid() > 0);
        assert!(child.wait().await.unwrap().success());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_missing_program_is_127() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        let failure = Child::spawn(&["/no/such/program".into()], &[], Launch::default())
            .err()
            .unwrap();
        assert_eq!(failure.code, 127);
        assert!(failure.message.contains("/no/such/program"), "{failure}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn signalling_the_group_reaches_the_command() {
        let _one_at_a_time = crate::descendants::PROCESSES.lock().await;
        let mut child =
            Child::spawn(&["sleep".into(), "30".into()], &[], Launch::default()).unwrap();
        child.signal_group(libc::SIGTERM);
        let status = child.wait().await.unwrap();
        assert_eq!(exit_code(status), 143);
        // Gone now: no error, no panic.
        child.signal_group(libc::SIGKILL);
    }
}
