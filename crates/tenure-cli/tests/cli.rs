//! The `tenure` binary end to end: bad input, the memory backend, and a real
//! etcd in a container (one for the whole file, started by the first case
//! that needs it). Cases run one at a time unless `--test-threads` says
//! otherwise: they time hand-overs in milliseconds.

mod support;

use std::net::TcpListener;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Trial};
use support::escape::{escapee, ticks, Escape, Reaper};
use support::{children_of, epoch_ns, mentions_all, process_state, signal_status};
use support::{etcd, finish, json, lines, now_ns, process_gone, scratch, tenure, wait_until};
use support::{Background, Failed, Outcome};

/// The TTL of the etcd cases: etcd's smallest.
const TTL: &str = "1s";
/// Bound on how long a command-line error may take.
const QUICK: Duration = Duration::from_secs(10);

/// A [`Trial`] per case, named after its function.
macro_rules! trials {
    ($($case:ident),* $(,)?) => {
        vec![$(Trial::test(stringify!($case), $case)),*]
    };
}

fn main() {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let trials = trials![
        help_shows_backends_and_examples,
        a_url_without_a_scheme_is_refused_naming_the_url,
        an_unknown_scheme_is_refused_naming_it,
        run_without_a_command_is_refused,
        an_unreachable_etcd_fails_within_the_connect_timeout_naming_the_address,
        a_command_that_is_not_found_exits_127,
        status_of_a_vacant_key_exits_1,
        watch_prints_the_current_state_and_stops_on_sigterm,
        run_exports_a_token_that_parses_back,
        run_passes_key_identity_and_token_and_the_exit_status,
        sigterm_is_passed_on_and_tenure_exits_with_the_commands_status,
        sigtstp_stops_the_command_and_a_term_that_ran_out_meanwhile_kills_it,
        sigtstp_then_sigcont_within_the_term_continues_the_command,
        a_command_that_changed_credentials_dies_with_a_sigkilled_tenure,
        an_inherited_ignored_sighup_stays_ignored,
        a_command_stopped_by_sigttin_ends_the_term,
        the_backend_url_comes_from_the_flag_else_the_file_else_the_environment,
        shell_runs_the_words_with_sh_and_no_stdin_gives_none,
        campaign_prints_when_leading_and_holds_until_sigterm,
        etcd_timeout_gives_up_campaigning_with_status_124,
        etcd_a_ttl_below_the_minimum_is_refused_naming_ttl,
        etcd_two_runs_never_overlap_and_tokens_increase,
        etcd_sigkill_of_the_leader_kills_its_command_and_the_standby_takes_over_within_ttl,
        etcd_sigterm_hands_over_within_100ms,
        etcd_a_leader_cut_off_from_etcd_kills_its_command_before_the_lease_can_expire,
        etcd_sigstop_of_the_leader_kills_its_command_before_the_standby_starts,
        etcd_a_standard_error_nobody_reads_holds_up_no_kill,
        etcd_status_and_watch_follow_a_led_key,
        setsid_work_keeps_the_term_until_it_ends,
        double_forked_work_keeps_the_term_until_it_ends,
        work_under_timeout_keeps_the_term_until_it_ends,
        job_control_work_keeps_the_term_until_it_ends,
        etcd_setsid_work_dies_before_the_standby_runs,
        etcd_double_forked_work_dies_before_the_standby_runs,
        etcd_work_under_timeout_dies_before_the_standby_runs,
        etcd_job_control_work_dies_before_the_standby_runs,
        etcd_sigstop_of_the_leader_kills_work_under_timeout_before_the_standby_runs,
        the_keeper_is_not_matched_by_pkill_patterns_for_tenure,
        a_killed_keeper_is_replaced_and_still_kills_at_the_deadline,
        a_sigkilled_tenure_leaves_no_setsid_work_running,
        a_sigkilled_tenure_leaves_no_work_under_timeout_running,
        tenure_exits_only_once_its_commands_group_is_gone,
    ];
    let conclusion = libtest_mimic::run(&args, trials);
    etcd::stop();
    conclusion.exit();
}

/// Writes `<identity> <token> <pid> <start ns>` to $OUT, then sleeps as the same process.
const SLEEPER: &str =
    r#"echo "$TENURE_IDENTITY $TENURE_FENCING_TOKEN $$ $(date +%s%N)" >> "$OUT"; exec sleep 600"#;

/// One line of [`SLEEPER`]'s.
#[derive(Debug)]
struct Started {
    identity: String,
    token: u64,
    pid: libc::pid_t,
    at_ns: i128,
}

fn started(out: &Path) -> Vec<Started> {
    lines(out)
        .iter()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            Some(Started {
                identity: f.next()?.to_owned(),
                token: f.next()?.parse().ok()?,
                pid: f.next()?.parse().ok()?,
                at_ns: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// Fails unless b's term (`second`) started less than `bound` after the
/// moment `since_ns` (ns since the epoch, `what` in the messages), with a
/// greater token than a's (`first`).
fn took_over_within(
    first: &Started,
    second: &Started,
    since_ns: i128,
    what: &str,
    bound: Duration,
) -> Outcome {
    let after_ms = (second.at_ns - since_ns) as f64 / 1e6;
    println!("    b's command started {after_ms:.1} ms after {what} (TTL {TTL})");
    ensure!(
        after_ms < bound.as_secs_f64() * 1e3,
        "b's command started {after_ms:.1} ms after {what}; the bound is {bound:?}"
    );
    ensure!(
        second.token > first.token,
        "tokens: a {} then b {}",
        first.token,
        second.token
    );
    Ok(())
}

/// Candidates for one key on the shared etcd, `tenure run`s whose commands
/// write to `$OUT` in a scratch directory of the case's own.
struct Election {
    etcd: Arc<etcd::Etcd>,
    key: &'static str,
    dir: PathBuf,
}

impl Election {
    /// The election of `key`, the case's files under a directory named for `test`.
    fn new(test: &str, key: &'static str) -> Election {
        Election {
            etcd: etcd::shared(),
            key,
            dir: scratch(test),
        }
    }

    /// The file the commands write to ($OUT).
    fn out(&self) -> PathBuf {
        self.dir.join("out")
    }

    /// `tenure run` for `identity` with the etcd cases' TTL and `flags`,
    /// its command `sh -c <script>`.
    fn run(&self, identity: &str, flags: &[&str], script: &str) -> Command {
        self.run_words(identity, flags, &["sh", "-c", script])
    }

    /// `tenure run` for `identity` with the etcd cases' TTL and `flags`,
    /// its command `words`.
    fn run_words(&self, identity: &str, flags: &[&str], words: &[&str]) -> Command {
        let url = self.etcd.url();
        let mut args = vec![
            "run",
            "--backend",
            &url,
            "--key",
            self.key,
            "--identity",
            identity,
            "--ttl",
            TTL,
        ];
        args.extend_from_slice(flags);
        args.push("--");
        args.extend_from_slice(words);
        let mut command = tenure(args);
        command.env("OUT", self.out());
        command
    }

    /// `tenure run -v` for `identity` in the background, `script` its command.
    fn start(&self, identity: &str, script: &str) -> Result<Background, Failed> {
        Background::start(identity, self.run(identity, &["-v"], script), &self.dir)
    }

    /// [`Election::start`] with [`SLEEPER`] as the command.
    fn sleeper(&self, identity: &str) -> Result<Background, Failed> {
        self.start(identity, SLEEPER)
    }

    /// Waits for the command of the candidate `identity` to start.
    fn started_by(&self, identity: &str, limit: Duration) -> Result<Started, Failed> {
        wait_until(&format!("{identity}'s command to start"), limit, || {
            started(&self.out())
                .into_iter()
                .find(|s| s.identity == identity)
        })
    }

    /// Sleepers `a`, leading (its command started), and `b`, queued behind it.
    fn leader_and_standby(&self) -> Result<(Background, Started, Background), Failed> {
        let a = self.sleeper("a")?;
        let first = self.started_by("a", QUICK)?;
        let b = self.sleeper("b")?;
        wait_until("b to queue up", QUICK, || {
            (self.etcd.candidates(self.key) == 2).then_some(())
        })?;
        Ok((a, first, b))
    }

    /// Freezes etcd under a leader whose command is `pid` and checks that
    /// the command is SIGKILLed within the TTL (printed after `prefix`);
    /// etcd stays frozen until the returned guard is dropped.
    fn freeze_under(&self, pid: libc::pid_t, prefix: &str) -> Result<etcd::Paused<'_>, Failed> {
        let paused = self.etcd.pause();
        // No renewal can succeed from here on, so the lease's local deadline is
        // at most one TTL away (the server's own expiry is later still).
        let frozen = Instant::now();
        let dead = wait_until("the command to be killed", Duration::from_secs(3), || {
            process_gone(pid).then(Instant::now)
        })?;
        let after = dead - frozen;
        println!(
            "    {prefix}command SIGKILLed {} ms after etcd froze (TTL {TTL})",
            after.as_millis()
        );
        ensure!(
            after < Duration::from_secs(1),
            "the command outlived the TTL: {after:?}"
        );
        Ok(paused)
    }
}

/// `tenure run` on the memory backend, key `job`, with `flags`; `command` after `--`.
fn memory_run(flags: &[&str], command: &[&str]) -> Command {
    let mut args = vec!["run", "-b", "memory://", "-k", "job"];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(command);
    tenure(args)
}

/// `tenure args` in the background, named for its subcommand, its output
/// in a scratch directory named for `test`.
fn in_background(test: &str, args: &[&str]) -> Result<Background, Failed> {
    Background::start(args[0], tenure(args), &scratch(test))
}

/// Runs `tenure args`, which must refuse them (status 2) naming each of `mentions`.
fn refused(args: &[&str], mentions: &[&str]) -> Outcome {
    finish(tenure(args), QUICK)?.exits_with(2, mentions)
}

fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

// ---- bad input ----

fn help_shows_backends_and_examples() -> Outcome {
    let help = finish(tenure(["--help"]), QUICK)?;
    ensure!(help.code() == Some(0), "{help:?}");
    mentions_all(
        "--help",
        &help.stdout,
        &[
            "Examples:",
            "etcd://",
            "zk://",
            "kube://",
            "tenure run",
            "tenure status",
            "tenure watch",
        ],
    )?;
    let help = finish(tenure(["run", "--help"]), QUICK)?;
    mentions_all(
        "run --help",
        &help.stdout,
        &[
            "TENURE_FENCING_TOKEN",
            "SIGKILL",
            "Exit status",
            "--respawn",
            "--ttl",
        ],
    )
}

fn a_url_without_a_scheme_is_refused_naming_the_url() -> Outcome {
    refused(
        &["status", "--backend", "127.0.0.1:2379", "--key", "k"],
        &["invalid url", "127.0.0.1:2379"],
    )?;
    refused(
        &["run", "-b", "etcd://", "-k", "k", "--", "true"],
        &["invalid url", "\"etcd://\""],
    )
}

fn an_unknown_scheme_is_refused_naming_it() -> Outcome {
    refused(
        &["run", "-b", "consul://h:8500", "-k", "k", "--", "true"],
        &["unknown scheme \"consul\""],
    )
}

fn run_without_a_command_is_refused() -> Outcome {
    refused(&["run", "-b", "memory://", "-k", "k"], &["COMMAND"])?;
    refused(&["run", "-b", "memory://", "-k", "k", "--"], &["COMMAND"])
}

fn an_unreachable_etcd_fails_within_the_connect_timeout_naming_the_address() -> Outcome {
    let address = format!("127.0.0.1:{}", closed_port());
    let url = format!("etcd://{address}");
    for args in [
        vec![
            "run",
            "-b",
            &url,
            "-k",
            "k",
            "--connect-timeout",
            "1s",
            "--",
            "true",
        ],
        vec!["status", "-b", &url, "-k", "k", "--connect-timeout", "1s"],
        vec!["watch", "-b", &url, "-k", "k", "--connect-timeout", "1s"],
    ] {
        let out = finish(tenure(&args), Duration::from_secs(10))?;
        out.exits_with(2, &[address.as_str()])?;
        ensure!(
            out.took < Duration::from_secs(4),
            "{args:?} took {:?}",
            out.took
        );
    }
    Ok(())
}

fn a_command_that_is_not_found_exits_127() -> Outcome {
    let out = finish(memory_run(&[], &["/no/such/program"]), QUICK)?;
    out.exits_with(127, &["/no/such/program"])
}

// ---- memory:// (one process) ----

fn status_of_a_vacant_key_exits_1() -> Outcome {
    let out = finish(
        tenure(["status", "-b", "memory://", "-k", "billing"]),
        QUICK,
    )?;
    out.exits_with(1, &[])?;
    ensure!(out.stdout.contains("vacant"), "{}", out.stdout);
    let out = finish(
        tenure(["status", "-b", "memory://", "-k", "billing", "--json"]),
        QUICK,
    )?;
    out.exits_with(1, &[])?;
    let value = json(&out.stdout)?;
    ensure!(
        value["leader"].is_null() && value["key"] == "billing",
        "{value}"
    );
    Ok(())
}

fn watch_prints_the_current_state_and_stops_on_sigterm() -> Outcome {
    let mut watch = in_background(
        "watch-memory",
        &["watch", "-b", "memory://", "-k", "billing", "--json"],
    )?;
    let value = json(&watch.first_line("the first line", QUICK)?)?;
    ensure!(
        value["event"] == "vacant" && value["key"] == "billing",
        "{value}"
    );
    watch.signal(libc::SIGTERM);
    watch.exits_with(0, QUICK)?;
    Ok(())
}

fn run_passes_key_identity_and_token_and_the_exit_status() -> Outcome {
    let script = r#"test "$TENURE_KEY" = job && test "$TENURE_IDENTITY" = me && test "$TENURE_FENCING_TOKEN" -gt 0 && exit 7"#;
    let mut command = memory_run(&["-i", "me"], &["sh", "-c", script]);
    // A stale token in tenure's own environment must not reach the command.
    command.env("TENURE_FENCING_TOKEN", "0");
    finish(command, QUICK)?.exits_with(7, &[])
}

fn run_exports_a_token_that_parses_back() -> Outcome {
    let dir = scratch("token-parses");
    let out = dir.join("token");
    let script = r#"printf %s "$TENURE_FENCING_TOKEN" > "$OUT""#;
    let mut command = memory_run(&[], &["sh", "-c", script]);
    command.env("OUT", &out);
    finish(command, QUICK)?.exits_with(0, &[])?;
    let text = std::fs::read_to_string(&out)?;
    let token: tenure::FencingToken = text.parse()?;
    ensure!(
        token.to_string() == text,
        "{text:?} printed back as {token}"
    );
    Ok(())
}

fn sigterm_is_passed_on_and_tenure_exits_with_the_commands_status() -> Outcome {
    let dir = scratch("sigterm-memory");
    let out = dir.join("out");
    let script = r#"trap 'echo term >> "$OUT"; exit 3' TERM; echo started >> "$OUT"; while :; do sleep 0.05; done"#;
    let mut command = memory_run(&[], &["sh", "-c", script]);
    command.env("OUT", &out);
    let mut run = Background::start("run", command, &dir)?;
    wait_until("the command to start", QUICK, || {
        lines(&out).contains(&"started".to_owned()).then_some(())
    })?;
    run.signal(libc::SIGTERM);
    run.exits_with(3, QUICK)?;
    ensure!(
        lines(&out).contains(&"term".to_owned()),
        "{:?}",
        lines(&out)
    );
    Ok(())
}

/// `tenure run` on the memory backend with `flags`, its command `wrapper`
/// running a shell that prints its pid and sleeps.
fn pid_printing_run(flags: &[&str], wrapper: &[&str]) -> Command {
    let mut command = wrapper.to_vec();
    command.extend(["sh", "-c", "echo $$; exec sleep 600"]);
    memory_run(flags, &command)
}

/// The pid that the command of a [`pid_printing_run`] printed.
fn printed_pid(run: &Background) -> Result<libc::pid_t, Failed> {
    wait_until("the command's pid", QUICK, || {
        run.stdout().lines().next()?.trim().parse().ok()
    })
}

/// A [`pid_printing_run`] in the background, and its command's pid.
fn pid_printer(
    dir: &Path,
    flags: &[&str],
    wrapper: &[&str],
) -> Result<(Background, libc::pid_t), Failed> {
    let run = Background::start("run", pid_printing_run(flags, wrapper), dir)?;
    let pid = printed_pid(&run)?;
    Ok((run, pid))
}

/// Whether the process is stopped (job control or SIGSTOP), or gone.
fn stopped_or_gone(pid: libc::pid_t) -> bool {
    process_gone(pid) || matches!(process_state(pid), Some('T' | 't'))
}

fn sigtstp_stops_the_command_and_a_term_that_ran_out_meanwhile_kills_it() -> Outcome {
    let dir = scratch("sigtstp");
    let (mut run, pid) = pid_printer(&dir, &["--ttl", "1s"], &[])?;
    run.signal(libc::SIGTSTP);
    // Past the term's end (1 s) and the local deadline it is killed at.
    std::thread::sleep(Duration::from_millis(1500));
    let state = process_state(pid);
    ensure!(
        stopped_or_gone(pid),
        "1.5 s after SIGTSTP to tenure (--ttl 1s) its command is still running (state {state:?})"
    );
    ensure!(
        matches!(process_state(run.pid), Some('T')),
        "tenure did not stop on SIGTSTP: state {:?}",
        process_state(run.pid)
    );
    // Continued after its term: the command is dead, tenure says the lease
    // was lost.
    run.signal(libc::SIGCONT);
    run.exits_with(75, QUICK)?;
    ensure!(process_gone(pid), "the command outlived tenure");
    Ok(())
}

fn sigtstp_then_sigcont_within_the_term_continues_the_command() -> Outcome {
    let dir = scratch("sigtstp-cont");
    let (mut run, pid) = pid_printer(&dir, &["--ttl", "10s"], &[])?;
    run.signal(libc::SIGTSTP);
    wait_until("the command to stop", QUICK, || {
        matches!(process_state(pid), Some('T')).then_some(())
    })?;
    wait_until("tenure to stop", QUICK, || {
        matches!(process_state(run.pid), Some('T')).then_some(())
    })?;
    run.signal(libc::SIGCONT);
    wait_until("the command to go on", QUICK, || {
        matches!(process_state(pid), Some('S' | 'R')).then_some(())
    })?;
    run.signal(libc::SIGTERM);
    run.exits_with(143, QUICK)?;
    Ok(())
}

fn a_command_that_changed_credentials_dies_with_a_sigkilled_tenure() -> Outcome {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        println!("    skipped: needs root (setpriv --reuid changes the command's user)");
        return Ok(());
    }
    if !Path::new("/usr/bin/setpriv").exists() && !Path::new("/bin/setpriv").exists() {
        println!("    skipped: setpriv (util-linux) is not installed");
        return Ok(());
    }
    let dir = scratch("setpriv");
    // A credential change clears the parent-death signal (prctl(2)).
    let setpriv = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let (mut run, pid) = pid_printer(&dir, &[], &setpriv)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    ensure!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534")),
        "the command did not change its user:\n{status}"
    );
    run.end(libc::SIGKILL, QUICK)?;
    let gone = wait_until(
        "the command to die with tenure",
        Duration::from_secs(2),
        || process_gone(pid).then_some(()),
    );
    if gone.is_err() {
        support::signal(pid, libc::SIGKILL);
    }
    gone
}

fn an_inherited_ignored_sighup_stays_ignored() -> Outcome {
    use std::os::unix::process::CommandExt;
    let dir = scratch("nohup");
    let mut command = pid_printing_run(&[], &[]);
    // As `nohup` starts it.
    // SAFETY: signal(2) is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut run = Background::start("run", command, &dir)?;
    let pid = printed_pid(&run)?;
    ensure!(
        signal_status(pid, "SigIgn").is_some_and(|mask| mask & (1 << (libc::SIGHUP - 1)) != 0),
        "the command of a tenure started with SIGHUP ignored does not ignore it: SigIgn {:x?}",
        signal_status(pid, "SigIgn")
    );
    ensure!(
        signal_status(run.pid, "SigCgt").is_some_and(|mask| mask & (1 << (libc::SIGHUP - 1)) == 0),
        "tenure catches the SIGHUP it inherited ignored"
    );
    run.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(200));
    ensure!(
        !process_gone(pid) && !process_gone(run.pid),
        "SIGHUP ended tenure or its command: {}",
        run.stderr()
    );
    run.signal(libc::SIGTERM);
    run.exits_with(143, QUICK)?;
    Ok(())
}

fn a_command_stopped_by_sigttin_ends_the_term() -> Outcome {
    // As a command that reads the terminal from a background group is stopped.
    let command = memory_run(&[], &["sh", "-c", "kill -TTIN $$; echo went on"]);
    let out = finish(command, Duration::from_secs(5))?;
    out.exits_with(143, &["stopped for using the terminal"])
}

fn the_backend_url_comes_from_the_flag_else_the_file_else_the_environment() -> Outcome {
    let dir = scratch("backend-url");
    let file = dir.join("backend");
    std::fs::write(&file, "memory://\n")?;
    let file = file.to_str().ok_or("a UTF-8 path")?.to_owned();
    let status = |args: &[&str], env: Option<&str>| {
        let mut all = vec!["status", "-k", "job"];
        all.extend_from_slice(args);
        let mut command = tenure(&all);
        command.env_remove("TENURE_BACKEND");
        if let Some(url) = env {
            command.env("TENURE_BACKEND", url);
        }
        finish(command, QUICK)
    };
    // The flag wins over the file and the variable, the file over the variable.
    status(
        &["-b", "memory://", "--backend-file", "/no/such/file"],
        Some("consul://x"),
    )?
    .exits_with(1, &[])?;
    status(&["--backend-file", &file], Some("consul://x"))?.exits_with(1, &[])?;
    status(&[], Some("memory://"))?.exits_with(1, &[])?;
    // Each source's errors name it.
    status(&[], Some("consul://x"))?.exits_with(2, &["unknown scheme \"consul\""])?;
    status(&["--backend-file", "/no/such/file"], None)?
        .exits_with(2, &["invalid backend-file", "/no/such/file"])?;
    status(&[], None)?.exits_with(2, &["missing backend", "--backend", "TENURE_BACKEND"])
}

fn shell_runs_the_words_with_sh_and_no_stdin_gives_none() -> Outcome {
    let dir = scratch("shell");
    let words = ["exit", "$((3", "+", "4))"];
    finish(memory_run(&["--shell"], &words), QUICK)?.exits_with(7, &[])?;
    let input = dir.join("input");
    std::fs::write(&input, "from tenure's stdin\n")?;
    for (flags, expected) in [
        (&[][..], "from tenure's stdin\n"),
        (&["--no-stdin"][..], ""),
    ] {
        let mut command = memory_run(flags, &["cat"]);
        command.stdin(std::fs::File::open(&input)?);
        let out = finish(command, QUICK)?;
        out.exits_with(0, &[])?;
        ensure!(out.stdout == expected, "{flags:?}: {out:?}");
    }
    Ok(())
}

fn campaign_prints_when_leading_and_holds_until_sigterm() -> Outcome {
    let mut campaign = in_background(
        "campaign",
        &["campaign", "-b", "memory://", "-i", "me", "billing"],
    )?;
    let line = campaign.first_line("the leading line", QUICK)?;
    ensure!(line.starts_with("leading billing as me token="), "{line}");
    ensure!(!process_gone(campaign.pid), "campaign did not hold");
    campaign.signal(libc::SIGTERM);
    campaign.exits_with(0, QUICK)?;
    Ok(())
}

// ---- a real etcd ----

fn etcd_a_ttl_below_the_minimum_is_refused_naming_ttl() -> Outcome {
    let etcd = etcd::shared();
    let url = etcd.url();
    for ttl in ["500ms", "1500ms"] {
        refused(
            &["run", "-b", &url, "-k", "k", "--ttl", ttl, "--", "true"],
            &["invalid ttl"],
        )?;
    }
    ensure!(etcd.candidates("k") == 0, "an invalid run wrote to etcd");
    Ok(())
}

fn etcd_two_runs_never_overlap_and_tokens_increase() -> Outcome {
    let election = Election::new("alternate", "alternate");
    // Each term: `<token> <start ns> <end ns> <identity>`, 300 ms of "work".
    let script = r#"start=$(date +%s%N); sleep 0.3; echo "$TENURE_FENCING_TOKEN $start $(date +%s%N) $TENURE_IDENTITY" >> "$OUT""#;
    let respawn = ["--respawn", "--respawn-delay", "0s"];
    let mut runs = Vec::new();
    for identity in ["a", "b"] {
        let command = election.run(identity, &respawn, script);
        runs.push(Background::start(identity, command, &election.dir)?);
    }
    let out = election.out();
    wait_until("six terms", Duration::from_secs(20), || {
        (lines(&out).len() >= 6).then_some(())
    })?;
    for run in &runs {
        run.signal(libc::SIGTERM);
    }
    for run in &mut runs {
        run.wait(QUICK)?;
    }
    let mut terms: Vec<(u64, i128, i128, String)> = Vec::new();
    for line in lines(&out) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = (|| {
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                f.get(3)?.to_string(),
            ))
        })();
        terms.push(parsed.ok_or_else(|| format!("bad line {line:?}"))?);
    }
    terms.sort_by_key(|t| t.1);
    for pair in terms.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        ensure!(
            earlier.2 <= later.1,
            "two commands ran at once: {earlier:?} and {later:?}"
        );
        ensure!(
            earlier.0 < later.0,
            "tokens did not increase: {earlier:?} then {later:?}"
        );
    }
    for identity in ["a", "b"] {
        ensure!(
            terms.iter().any(|t| t.3 == identity),
            "{identity} never led: {terms:?}"
        );
    }
    println!(
        "    {} terms, alternating between a and b, none overlapping",
        terms.len()
    );
    Ok(())
}

fn etcd_sigkill_of_the_leader_kills_its_command_and_the_standby_takes_over_within_ttl() -> Outcome {
    let election = Election::new("sigkill", "failover");
    let (mut a, first, mut b) = election.leader_and_standby()?;
    let killed_at = now_ns();
    a.end(libc::SIGKILL, QUICK)?;
    wait_until("a's command to die with a", Duration::from_secs(1), || {
        process_gone(first.pid).then_some(())
    })?;
    let second = election.started_by("b", Duration::from_secs(5))?;
    // TTL + 1 s.
    let bound = Duration::from_secs(2);
    took_over_within(&first, &second, killed_at, "the SIGKILL of a", bound)?;
    b.end(libc::SIGTERM, QUICK)?;
    Ok(())
}

fn etcd_sigterm_hands_over_within_100ms() -> Outcome {
    let election = Election::new("sigterm", "handover");
    let (mut a, first, mut b) = election.leader_and_standby()?;
    a.signal(libc::SIGTERM);
    // The command (sleep) died of the forwarded SIGTERM: 128 + 15.
    let exited_at = a.exits_with(143, QUICK)?;
    ensure!(process_gone(first.pid), "a's command outlived a");
    let second = election.started_by("b", QUICK)?;
    let exited_ns = exited_at
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i128;
    let bound = Duration::from_millis(100);
    took_over_within(&first, &second, exited_ns, "a exited on SIGTERM", bound)?;
    b.end(libc::SIGTERM, QUICK)?;
    Ok(())
}

fn etcd_status_and_watch_follow_a_led_key() -> Outcome {
    let election = Election::new("observed", "observed");
    let (key, url) = (election.key, election.etcd.url());
    let status = || finish(tenure(["status", "-b", &url, "-k", key]), QUICK);

    status()?.exits_with(1, &[])?;

    let mut leader = election.sleeper("a")?;
    let term = election.started_by("a", QUICK)?;
    let text = status()?;
    text.exits_with(0, &[])?;
    mentions_all(
        "status",
        &text.stdout,
        &[
            "leader:  a\n",
            &format!("token:   {}\n", term.token),
            "when this command looked",
        ],
    )?;
    let out = finish(tenure(["status", "-b", &url, "-k", key, "--json"]), QUICK)?;
    let value = json(&out.stdout)?;
    ensure!(
        value["leader"]["identity"] == "a" && value["leader"]["token"] == term.token,
        "{value}"
    );

    let mut watch = Background::start(
        "watch",
        tenure(["watch", "-b", &url, "-k", key, "--json"]),
        &election.dir,
    )?;
    let events = |watch: &Background| -> Vec<serde_json::Value> {
        watch
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let first = wait_until("watch's first line", QUICK, || {
        events(&watch).into_iter().next()
    })?;
    ensure!(
        first["event"] == "elected" && first["identity"] == "a" && first["token"] == term.token,
        "{first}"
    );
    leader.end(libc::SIGTERM, QUICK)?;
    let second = wait_until("watch to see the vacancy", QUICK, || {
        events(&watch).into_iter().nth(1)
    })?;
    ensure!(second["event"] == "vacant", "{second}");
    watch.signal(libc::SIGTERM);
    watch.exits_with(0, QUICK)?;
    // After the leader left.
    status()?.exits_with(1, &[])
}

fn etcd_a_leader_cut_off_from_etcd_kills_its_command_before_the_lease_can_expire() -> Outcome {
    let election = Election::new("paused", "paused");
    // The command ignores SIGTERM (and so does the sleep it becomes): only
    // SIGKILL stops it.
    let mut a = election.start("a", &format!("trap '' TERM; {SLEEPER}"))?;
    let term = election.started_by("a", QUICK)?;
    let paused = election.freeze_under(term.pid, "")?;
    a.exits_with(75, Duration::from_secs(15))?;
    ensure!(a.stderr().contains("SIGKILL"), "{}", a.stderr());
    drop(paused);
    Ok(())
}

fn etcd_a_standard_error_nobody_reads_holds_up_no_kill() -> Outcome {
    let election = Election::new("stderr-full", "stderr-full");
    let mut command = election.run("a", &[], &format!("trap '' TERM; {SLEEPER}"));
    let (mut pipe, write) = FullPipe::new()?;
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(write));
    let mut a = command.spawn()?;
    let term = election.started_by("a", QUICK)?;
    // A log shipper that stalled: every line tenure writes now blocks.
    pipe.fill();
    let killed = election
        .freeze_under(term.pid, "with standard error full: ")
        .map(drop);
    let _ = a.kill();
    drop(pipe.read);
    let _ = a.wait();
    killed
}

fn etcd_sigstop_of_the_leader_kills_its_command_before_the_standby_starts() -> Outcome {
    let election = Election::new("sigstop", "stopped");
    let (mut a, first, mut b) = election.leader_and_standby()?;
    // When a's command is gone (dead, even if unreaped), to the millisecond.
    let pid = first.pid;
    let (tx, gone) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if process_gone(pid) {
                let _ = tx.send(now_ns());
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let stopped_at = now_ns();
    a.signal(libc::SIGSTOP);
    let second = election.started_by("b", Duration::from_secs(5))?;
    let after_ms = |ns: i128| (ns - stopped_at) as f64 / 1e6;
    let Ok(gone_at) = gone.try_recv() else {
        support::signal(pid, libc::SIGKILL);
        a.signal(libc::SIGKILL);
        return Err(format!(
            "b's command started {:.0} ms after a's tenure was stopped, while a's command was still running",
            after_ms(second.at_ns)
        )
        .into());
    };
    println!(
        "    SIGSTOP of the leader's tenure: its command dead after {:.0} ms, the standby's started after {:.0} ms (TTL {TTL})",
        after_ms(gone_at),
        after_ms(second.at_ns)
    );
    ensure!(
        gone_at < second.at_ns,
        "b's command started before a's was dead"
    );
    ensure!(
        after_ms(gone_at) < 1000.0,
        "a's command outlived the TTL: {:.0} ms",
        after_ms(gone_at)
    );
    a.signal(libc::SIGCONT);
    a.exits_with(75, QUICK)?;
    b.end(libc::SIGTERM, QUICK)?;
    Ok(())
}

fn etcd_timeout_gives_up_campaigning_with_status_124() -> Outcome {
    let election = Election::new("timeout", "busy");
    let (key, url) = (election.key, election.etcd.url());
    let mut a = election.sleeper("a")?;
    election.started_by("a", QUICK)?;
    let flags = ["-b", &url, "-k", key, "--ttl", TTL, "--timeout", "500ms"];
    let run = finish(
        tenure([&["run"][..], &flags, &["--", "true"]].concat()),
        QUICK,
    )?;
    run.exits_with(124, &["--timeout"])?;
    ensure!(run.took < Duration::from_secs(3), "run took {:?}", run.took);
    let campaign = finish(tenure([&["campaign"][..], &flags].concat()), QUICK)?;
    campaign.exits_with(124, &[])?;
    ensure!(campaign.stdout.is_empty(), "{campaign:?}");
    ensure!(
        election.etcd.candidates(key) == 1,
        "a timed-out candidate stayed queued"
    );
    a.end(libc::SIGTERM, QUICK)?;
    Ok(())
}

/// A pipe of one page for tenure's standard error, and a second, non-blocking
/// way in (its own open file description: tenure's end stays blocking) for
/// the test to fill it with.
struct FullPipe {
    read: std::os::fd::OwnedFd,
    filler: std::fs::File,
}

impl FullPipe {
    fn new() -> Result<(FullPipe, std::os::fd::OwnedFd), support::Failed> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error().to_string().into());
        }
        // SAFETY: both descriptors are fresh and ours.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on our own descriptor.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
        let filler = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(format!("/proc/self/fd/{}", write.as_raw_fd()))?;
        Ok((FullPipe { read, filler }, write))
    }

    /// Writes until the pipe takes no more.
    fn fill(&mut self) {
        use std::io::Write;
        while self.filler.write(&[b'x'; 512]).is_ok() {}
    }
}

// ---- what the command starts, wherever it goes ----

/// Work that escaped the command's process group (`escape`), ignores
/// SIGTERM and lasts a second: SIGTERM to tenure does not end it, and
/// tenure's term ends (tenure exits) only once the work has ended by itself.
fn the_term_lasts_until_work_escaped_by(escape: Escape) -> Outcome {
    if let Some(program) = escape.missing() {
        println!("    skipped: {program} is not installed");
        return Ok(());
    }
    let dir = scratch(&format!("escape-{escape:?}"));
    let out = dir.join("out");
    let mut command = memory_run(&["-v"], escape.command());
    // 100 ticks of at least 10 ms: a second at least.
    command.env("OUT", &out).env("ESCAPEE", escapee(Some(100)));
    let mut run = Background::start("run", command, &dir)?;
    let pid = wait_until("the escaped loop to start", QUICK, || {
        ticks(&out).first().map(|t| t.pid)
    })?;
    let _reaper = Reaper(pid);
    run.signal(libc::SIGTERM);
    let (status, exited) = run.wait(QUICK)?;
    let exited_ns = epoch_ns(exited);
    let alive = !process_gone(pid);
    let all = ticks(&out);
    let after = all.iter().filter(|t| t.at_ns > exited_ns).count();
    let end = all.iter().find(|t| t.end).copied();
    ensure!(
        !alive && after == 0,
        "tenure exited ({status}) while the loop its command started ({escape:?}, pid {pid}) ran on: {after} ticks after, alive: {alive}; tenure's log:\n{}",
        run.stderr()
    );
    ensure!(
        end.is_some_and(|end| end.at_ns <= exited_ns),
        "the loop its command started ({escape:?}, pid {pid}) was killed, not waited for ({} ticks of 100, tenure exited {status}); tenure's log:\n{}",
        all.len(),
        run.stderr()
    );
    println!(
        "    tenure ({status}) exited {:.0} ms after its command's {escape:?} loop ended",
        (exited_ns - end.map_or(0, |e| e.at_ns)) as f64 / 1e6
    );
    Ok(())
}

fn setsid_work_keeps_the_term_until_it_ends() -> Outcome {
    the_term_lasts_until_work_escaped_by(Escape::Setsid)
}

fn double_forked_work_keeps_the_term_until_it_ends() -> Outcome {
    the_term_lasts_until_work_escaped_by(Escape::DoubleFork)
}

fn work_under_timeout_keeps_the_term_until_it_ends() -> Outcome {
    the_term_lasts_until_work_escaped_by(Escape::Timeout)
}

fn job_control_work_keeps_the_term_until_it_ends() -> Outcome {
    the_term_lasts_until_work_escaped_by(Escape::JobControl)
}

/// How the leader loses its term in [`escaped_work_dies_before_the_standby_runs`].
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// etcd is frozen: no renewal succeeds, tenure kills at its deadline.
    EtcdFrozen,
    /// tenure is stopped (SIGSTOP): its keeper kills at its deadline.
    TenureStopped,
}

/// Leader a's command leaves work running forever outside its group
/// (`escape`), ignoring SIGTERM; b waits. While that work runs a leads (b's
/// command does not start); once a loses its term (`loss`) the work is
/// SIGKILLed within the TTL, and none of its ticks comes after b's start.
fn escaped_work_dies_before_the_standby_runs(
    escape: Escape,
    loss: Loss,
    key: &'static str,
) -> Outcome {
    if let Some(program) = escape.missing() {
        println!("    skipped: {program} is not installed");
        return Ok(());
    }
    let election = Election::new(key, key);
    let work = election.dir.join("work");
    let mut command = election.run_words("a", &["-v"], escape.command());
    command.env("OUT", &work).env("ESCAPEE", escapee(None));
    let mut a = Background::start("a", command, &election.dir)?;
    let pid = wait_until("a's escaped loop to start", QUICK, || {
        ticks(&work).first().map(|t| t.pid)
    })?;
    let _reaper = Reaper(pid);
    let mut b = election.sleeper("b")?;
    wait_until("b to queue up (or lead)", QUICK, || {
        (election.etcd.candidates(key) == 2 || !started(&election.out()).is_empty()).then_some(())
    })?;
    if let Some(second) = started(&election.out()).first() {
        let late = ticks(&work)
            .iter()
            .filter(|t| t.at_ns >= second.at_ns)
            .count();
        return Err(format!(
            "b's command started while a's {escape:?} loop (pid {pid}, alive: {}) was a's to run: {late} of its ticks came after; a's log:\n{}",
            !process_gone(pid),
            a.stderr()
        )
        .into());
    }
    let lost = Instant::now();
    let paused = match loss {
        Loss::EtcdFrozen => Some(election.etcd.pause()),
        Loss::TenureStopped => {
            a.signal(libc::SIGSTOP);
            None
        }
    };
    let dead = wait_until(
        "a's escaped loop to be killed",
        Duration::from_secs(3),
        || process_gone(pid).then(Instant::now),
    );
    drop(paused);
    let after = dead? - lost;
    println!(
        "    a's {escape:?} loop SIGKILLed {} ms after {loss:?} (TTL {TTL})",
        after.as_millis()
    );
    ensure!(
        after < Duration::from_secs(1),
        "a's {escape:?} loop outlived the TTL: {after:?}"
    );
    let second = election.started_by("b", Duration::from_secs(5))?;
    let late = ticks(&work)
        .iter()
        .filter(|t| t.at_ns >= second.at_ns)
        .count();
    ensure!(
        late == 0,
        "{late} ticks of a's {escape:?} loop came after b's command started"
    );
    if let Loss::TenureStopped = loss {
        a.signal(libc::SIGCONT);
    }
    a.exits_with(75, QUICK)?;
    b.end(libc::SIGTERM, QUICK)?;
    Ok(())
}

fn etcd_setsid_work_dies_before_the_standby_runs() -> Outcome {
    escaped_work_dies_before_the_standby_runs(Escape::Setsid, Loss::EtcdFrozen, "esc-setsid")
}

fn etcd_double_forked_work_dies_before_the_standby_runs() -> Outcome {
    escaped_work_dies_before_the_standby_runs(Escape::DoubleFork, Loss::EtcdFrozen, "esc-fork")
}

fn etcd_work_under_timeout_dies_before_the_standby_runs() -> Outcome {
    escaped_work_dies_before_the_standby_runs(Escape::Timeout, Loss::EtcdFrozen, "esc-timeout")
}

fn etcd_job_control_work_dies_before_the_standby_runs() -> Outcome {
    escaped_work_dies_before_the_standby_runs(Escape::JobControl, Loss::EtcdFrozen, "esc-jobs")
}

fn etcd_sigstop_of_the_leader_kills_work_under_timeout_before_the_standby_runs() -> Outcome {
    escaped_work_dies_before_the_standby_runs(Escape::Timeout, Loss::TenureStopped, "esc-stop")
}

/// The keeper of the `tenure` process `tenure` whose command is `command`:
/// its other child.
fn keeper_of(tenure: libc::pid_t, command: libc::pid_t) -> Result<libc::pid_t, Failed> {
    wait_until("tenure's keeper", QUICK, || {
        children_of(tenure).into_iter().find(|&pid| pid != command)
    })
}

/// The pids `pgrep args` lists.
fn pgrep(args: &[&str]) -> Result<Vec<libc::pid_t>, Failed> {
    let out = Command::new("pgrep").args(args).output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect())
}

fn the_keeper_is_not_matched_by_pkill_patterns_for_tenure() -> Outcome {
    if !Path::new("/usr/bin/pgrep").exists() {
        println!("    skipped: pgrep is not installed");
        return Ok(());
    }
    let dir = scratch("keeper-name");
    let (mut run, pid) = pid_printer(&dir, &["--ttl", "10s"], &[])?;
    let keeper = keeper_of(run.pid, pid)?;
    for pattern in [&["tenure"][..], &["-f", "tenure run"]] {
        let matched = pgrep(pattern)?;
        ensure!(
            matched.contains(&run.pid),
            "pgrep {pattern:?} does not find tenure itself ({matched:?})"
        );
        ensure!(
            !matched.contains(&keeper),
            "pgrep {pattern:?} (as pkill would) matches tenure's keeper {keeper} ({:?}, {:?})",
            std::fs::read_to_string(format!("/proc/{keeper}/comm")).unwrap_or_default(),
            std::fs::read(format!("/proc/{keeper}/cmdline")).unwrap_or_default()
        );
    }
    run.end(libc::SIGTERM, QUICK)?;
    Ok(())
}

fn a_killed_keeper_is_replaced_and_still_kills_at_the_deadline() -> Outcome {
    let dir = scratch("keeper-killed");
    let (mut run, pid) = pid_printer(&dir, &["--ttl", "1s"], &[])?;
    let _reaper = Reaper(pid);
    let first = keeper_of(run.pid, pid)?;
    support::signal(first, libc::SIGKILL);
    // Renewals come every TTL/3: tenure hears of the keeper's death by then.
    let second = wait_until("a new keeper", Duration::from_secs(3), || {
        children_of(run.pid)
            .into_iter()
            .find(|&p| p != pid && p != first && !process_gone(p))
    })?;
    let stopped = Instant::now();
    run.signal(libc::SIGSTOP);
    let dead = wait_until(
        "the command to be killed by the new keeper",
        Duration::from_secs(3),
        || process_gone(pid).then(Instant::now),
    );
    run.signal(libc::SIGCONT);
    let after = dead? - stopped;
    println!(
        "    keeper {first} killed, {second} took over; command killed {} ms after tenure stopped (TTL 1s)",
        after.as_millis()
    );
    ensure!(
        after < Duration::from_secs(1),
        "the command outlived the TTL: {after:?}"
    );
    run.exits_with(75, QUICK)?;
    let warned = run.stderr().matches("keeper").count();
    ensure!(
        warned >= 1,
        "no word of the keeper's death: {}",
        run.stderr()
    );
    Ok(())
}

/// tenure is SIGKILLed (the OOM killer) while work its command started
/// outside the group (`escape`) runs: the keeper kills that work too, at once.
fn a_sigkilled_tenure_leaves_no_work_running(escape: Escape) -> Outcome {
    if let Some(program) = escape.missing() {
        println!("    skipped: {program} is not installed");
        return Ok(());
    }
    let dir = scratch(&format!("sigkill-{escape:?}"));
    let out = dir.join("out");
    let mut command = memory_run(&["-v"], escape.command());
    command.env("OUT", &out).env("ESCAPEE", escapee(None));
    let mut run = Background::start("run", command, &dir)?;
    let pid = wait_until("the escaped loop to start", QUICK, || {
        ticks(&out).first().map(|t| t.pid)
    })?;
    let _reaper = Reaper(pid);
    // The keeper looks at what tenure started every 500 ms: let it look
    // twice after the loop left the group.
    std::thread::sleep(Duration::from_millis(1200));
    let killed = Instant::now();
    run.end(libc::SIGKILL, QUICK)?;
    let dead = wait_until(
        "the escaped loop to die with tenure",
        Duration::from_secs(2),
        || process_gone(pid).then(Instant::now),
    )?;
    println!(
        "    {escape:?} loop dead {} ms after the SIGKILL of tenure",
        (dead - killed).as_millis()
    );
    Ok(())
}

fn a_sigkilled_tenure_leaves_no_setsid_work_running() -> Outcome {
    a_sigkilled_tenure_leaves_no_work_running(Escape::Setsid)
}

fn a_sigkilled_tenure_leaves_no_work_under_timeout_running() -> Outcome {
    a_sigkilled_tenure_leaves_no_work_running(Escape::Timeout)
}

/// A process that takes a while to die: it maps and touches 512 MiB in
/// small pages (the kernel frees them after SIGKILL or SIGTERM, ~180 ms
/// here), writes its pid to $OUT, and sleeps.
const SLOW_TO_DIE: &str = r#"
import mmap, os, time
size = 512 << 20
m = mmap.mmap(-1, size)
m.madvise(mmap.MADV_NOHUGEPAGE)
for i in range(0, size, 4096):
    m[i] = 1
with open(os.environ["OUT"], "w") as out:
    out.write(str(os.getpid()))
time.sleep(600)
"#;

fn tenure_exits_only_once_its_commands_group_is_gone() -> Outcome {
    let python = Command::new("python3")
        .arg("-c")
        .arg("import mmap")
        .output();
    if !python.is_ok_and(|out| out.status.success()) {
        println!("    skipped: python3 is not installed");
        return Ok(());
    }
    let dir = scratch("slow-to-die");
    let out = dir.join("pid");
    let script = dir.join("slow.py");
    std::fs::write(&script, SLOW_TO_DIE)?;
    // The slow process is in the command's group, not the command: tenure
    // does not wait for it by waiting for the command.
    let mut command = memory_run(&["-v"], &["sh", "-c", r#"python3 "$SLOW" & wait"#]);
    command.env("OUT", &out).env("SLOW", &script);
    let mut run = Background::start("run", command, &dir)?;
    let pid: libc::pid_t = wait_until("the slow process to be ready", QUICK, || {
        std::fs::read_to_string(&out).ok()?.trim().parse().ok()
    })?;
    let _reaper = Reaper(pid);
    let signalled = std::time::SystemTime::now();
    run.signal(libc::SIGTERM);
    let (status, exited) = run.wait(QUICK)?;
    let state = process_state(pid);
    ensure!(
        process_gone(pid),
        "tenure exited ({status}) while a process of its command's group (pid {pid}, state {state:?}) was still dying: it resigned before the group was gone; its log:\n{}",
        run.stderr()
    );
    println!(
        "    tenure exited {} ms after SIGTERM, once its group's slow process was gone",
        exited
            .duration_since(signalled)
            .unwrap_or_default()
            .as_millis()
    );
    Ok(())
}
