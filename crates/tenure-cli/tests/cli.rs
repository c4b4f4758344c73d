//! The `tenure` binary end to end: bad input, the memory backend, and a real
//! etcd in a container (one for the whole file, started by the first case
//! that needs it). Cases run one at a time unless `--test-threads` says
//! otherwise: they time hand-overs in milliseconds.

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Trial};
use serde_json::Value;
use support::{etcd, finish, lines, now_ns, process_gone, scratch, tenure, wait_until};
use support::{process_state, signal_status};
use support::{Background, Outcome};

/// The TTL of the etcd cases: etcd's smallest.
const TTL: &str = "1s";
/// Bound on how long a command-line error may take.
const QUICK: Duration = Duration::from_secs(10);

fn main() {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let trials = vec![
        Trial::test(
            "help_shows_backends_and_examples",
            help_shows_backends_and_examples,
        ),
        Trial::test(
            "a_url_without_a_scheme_is_refused_naming_the_url",
            a_url_without_a_scheme_is_refused_naming_the_url,
        ),
        Trial::test(
            "an_unknown_scheme_is_refused_naming_it",
            an_unknown_scheme_is_refused_naming_it,
        ),
        Trial::test(
            "run_without_a_command_is_refused",
            run_without_a_command_is_refused,
        ),
        Trial::test(
            "an_unreachable_etcd_fails_within_the_connect_timeout_naming_the_address",
            an_unreachable_etcd_fails_within_the_connect_timeout_naming_the_address,
        ),
        Trial::test(
            "a_command_that_is_not_found_exits_127",
            a_command_that_is_not_found_exits_127,
        ),
        Trial::test(
            "status_of_a_vacant_key_exits_1",
            status_of_a_vacant_key_exits_1,
        ),
        Trial::test(
            "watch_prints_the_current_state_and_stops_on_sigterm",
            watch_prints_the_current_state_and_stops_on_sigterm,
        ),
        Trial::test(
            "run_exports_a_token_that_parses_back",
            run_exports_a_token_that_parses_back,
        ),
        Trial::test(
            "run_passes_key_identity_and_token_and_the_exit_status",
            run_passes_key_identity_and_token_and_the_exit_status,
        ),
        Trial::test(
            "sigterm_is_passed_on_and_tenure_exits_with_the_commands_status",
            sigterm_is_passed_on_and_tenure_exits_with_the_commands_status,
        ),
        Trial::test(
            "sigtstp_stops_the_command_and_a_term_that_ran_out_meanwhile_kills_it",
            sigtstp_stops_the_command_and_a_term_that_ran_out_meanwhile_kills_it,
        ),
        Trial::test(
            "sigtstp_then_sigcont_within_the_term_continues_the_command",
            sigtstp_then_sigcont_within_the_term_continues_the_command,
        ),
        Trial::test(
            "a_command_that_changed_credentials_dies_with_a_sigkilled_tenure",
            a_command_that_changed_credentials_dies_with_a_sigkilled_tenure,
        ),
        Trial::test(
            "an_inherited_ignored_sighup_stays_ignored",
            an_inherited_ignored_sighup_stays_ignored,
        ),
        Trial::test(
            "a_command_stopped_by_sigttin_ends_the_term",
            a_command_stopped_by_sigttin_ends_the_term,
        ),
        Trial::test(
            "the_backend_url_comes_from_the_flag_else_the_file_else_the_environment",
            the_backend_url_comes_from_the_flag_else_the_file_else_the_environment,
        ),
        Trial::test(
            "shell_runs_the_words_with_sh_and_no_stdin_gives_none",
            shell_runs_the_words_with_sh_and_no_stdin_gives_none,
        ),
        Trial::test(
            "campaign_prints_when_leading_and_holds_until_sigterm",
            campaign_prints_when_leading_and_holds_until_sigterm,
        ),
        Trial::test(
            "etcd_timeout_gives_up_campaigning_with_status_124",
            etcd_timeout_gives_up_campaigning_with_status_124,
        ),
        Trial::test(
            "etcd_a_ttl_below_the_minimum_is_refused_naming_ttl",
            etcd_a_ttl_below_the_minimum_is_refused_naming_ttl,
        ),
        Trial::test(
            "etcd_two_runs_never_overlap_and_tokens_increase",
            etcd_two_runs_never_overlap_and_tokens_increase,
        ),
        Trial::test(
            "etcd_sigkill_of_the_leader_kills_its_command_and_the_standby_takes_over_within_ttl",
            etcd_sigkill_of_the_leader_kills_its_command_and_the_standby_takes_over_within_ttl,
        ),
        Trial::test(
            "etcd_sigterm_hands_over_within_100ms",
            etcd_sigterm_hands_over_within_100ms,
        ),
        Trial::test(
            "etcd_a_leader_cut_off_from_etcd_kills_its_command_before_the_lease_can_expire",
            etcd_a_leader_cut_off_from_etcd_kills_its_command_before_the_lease_can_expire,
        ),
        Trial::test(
            "etcd_sigstop_of_the_leader_kills_its_command_before_the_standby_starts",
            etcd_sigstop_of_the_leader_kills_its_command_before_the_standby_starts,
        ),
        Trial::test(
            "etcd_a_standard_error_nobody_reads_holds_up_no_kill",
            etcd_a_standard_error_nobody_reads_holds_up_no_kill,
        ),
        Trial::test(
            "etcd_status_and_watch_follow_a_led_key",
            etcd_status_and_watch_follow_a_led_key,
        ),
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

/// Waits for the command of the candidate `identity` to start.
fn started_by(out: &Path, identity: &str, limit: Duration) -> Result<Started, support::Failed> {
    wait_until(&format!("{identity}'s command to start"), limit, || {
        started(out).into_iter().find(|s| s.identity == identity)
    })
}

/// `tenure run` on the shared etcd, `SLEEPER` as the command.
fn sleeper(
    etcd: &etcd::Etcd,
    key: &str,
    identity: &str,
    dir: &Path,
) -> Result<Background, support::Failed> {
    let mut command = tenure([
        "run",
        "-v",
        "--backend",
        &etcd.url(),
        "--key",
        key,
        "--identity",
        identity,
        "--ttl",
        TTL,
        "--",
        "sh",
        "-c",
        SLEEPER,
    ]);
    command.env("OUT", dir.join("started"));
    Background::start(identity, command, dir)
}

fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

// ---- bad input ----

fn help_shows_backends_and_examples() -> Outcome {
    let help = finish(tenure(["--help"]), QUICK)?;
    ensure!(help.code() == Some(0), "{help:?}");
    for needle in [
        "Examples:",
        "etcd://",
        "zk://",
        "kube://",
        "tenure run",
        "tenure status",
        "tenure watch",
    ] {
        ensure!(
            help.stdout.contains(needle),
            "--help lacks {needle:?}:\n{}",
            help.stdout
        );
    }
    let help = finish(tenure(["run", "--help"]), QUICK)?;
    for needle in [
        "TENURE_FENCING_TOKEN",
        "SIGKILL",
        "Exit status",
        "--respawn",
        "--ttl",
    ] {
        ensure!(
            help.stdout.contains(needle),
            "run --help lacks {needle:?}:\n{}",
            help.stdout
        );
    }
    Ok(())
}

fn a_url_without_a_scheme_is_refused_naming_the_url() -> Outcome {
    let out = finish(
        tenure(["status", "--backend", "127.0.0.1:2379", "--key", "k"]),
        QUICK,
    )?;
    ensure!(out.code() == Some(2), "{out:?}");
    ensure!(
        out.stderr.contains("invalid url") && out.stderr.contains("127.0.0.1:2379"),
        "{}",
        out.stderr
    );
    let out = finish(
        tenure(["run", "-b", "etcd://", "-k", "k", "--", "true"]),
        QUICK,
    )?;
    ensure!(out.code() == Some(2), "{out:?}");
    ensure!(
        out.stderr.contains("invalid url") && out.stderr.contains("\"etcd://\""),
        "{}",
        out.stderr
    );
    Ok(())
}

fn an_unknown_scheme_is_refused_naming_it() -> Outcome {
    let out = finish(
        tenure(["run", "-b", "consul://h:8500", "-k", "k", "--", "true"]),
        QUICK,
    )?;
    ensure!(out.code() == Some(2), "{out:?}");
    ensure!(
        out.stderr.contains("unknown scheme \"consul\""),
        "{}",
        out.stderr
    );
    Ok(())
}

fn run_without_a_command_is_refused() -> Outcome {
    for args in [
        &["run", "-b", "memory://", "-k", "k"][..],
        &["run", "-b", "memory://", "-k", "k", "--"][..],
    ] {
        let out = finish(tenure(args), QUICK)?;
        ensure!(out.code() == Some(2), "{args:?}: {out:?}");
        ensure!(out.stderr.contains("COMMAND"), "{args:?}: {}", out.stderr);
    }
    Ok(())
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
        ensure!(out.code() == Some(2), "{args:?}: {out:?}");
        ensure!(out.stderr.contains(&address), "{args:?}: {}", out.stderr);
        ensure!(
            out.took < Duration::from_secs(4),
            "{args:?} took {:?}",
            out.took
        );
    }
    Ok(())
}

fn a_command_that_is_not_found_exits_127() -> Outcome {
    let out = finish(
        tenure([
            "run",
            "-b",
            "memory://",
            "-k",
            "k",
            "--",
            "/no/such/program",
        ]),
        QUICK,
    )?;
    ensure!(out.code() == Some(127), "{out:?}");
    ensure!(out.stderr.contains("/no/such/program"), "{}", out.stderr);
    Ok(())
}

// ---- memory:// (one process) ----

fn status_of_a_vacant_key_exits_1() -> Outcome {
    let out = finish(
        tenure(["status", "-b", "memory://", "-k", "billing"]),
        QUICK,
    )?;
    ensure!(out.code() == Some(1), "{out:?}");
    ensure!(out.stdout.contains("vacant"), "{}", out.stdout);
    let out = finish(
        tenure(["status", "-b", "memory://", "-k", "billing", "--json"]),
        QUICK,
    )?;
    ensure!(out.code() == Some(1), "{out:?}");
    let value: Value =
        serde_json::from_str(&out.stdout).map_err(|e| format!("{e}: {}", out.stdout))?;
    ensure!(
        value["leader"].is_null() && value["key"] == "billing",
        "{value}"
    );
    Ok(())
}

fn watch_prints_the_current_state_and_stops_on_sigterm() -> Outcome {
    let dir = scratch("watch-memory");
    let mut watch = Background::start(
        "watch",
        tenure(["watch", "-b", "memory://", "-k", "billing", "--json"]),
        &dir,
    )?;
    let line = wait_until("the first line", QUICK, || {
        watch.stdout().lines().next().map(str::to_owned)
    })?;
    let value: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
    ensure!(
        value["event"] == "vacant" && value["key"] == "billing",
        "{value}"
    );
    watch.signal(libc::SIGTERM);
    let (status, _) = watch.wait(QUICK)?;
    ensure!(status.code() == Some(0), "{status:?}: {}", watch.stderr());
    Ok(())
}

fn run_passes_key_identity_and_token_and_the_exit_status() -> Outcome {
    let script = r#"test "$TENURE_KEY" = job && test "$TENURE_IDENTITY" = me && test "$TENURE_FENCING_TOKEN" -gt 0 && exit 7"#;
    let mut command = tenure([
        "run",
        "-b",
        "memory://",
        "-k",
        "job",
        "-i",
        "me",
        "--",
        "sh",
        "-c",
        script,
    ]);
    // A stale token in tenure's own environment must not reach the command.
    command.env("TENURE_FENCING_TOKEN", "0");
    let out = finish(command, QUICK)?;
    ensure!(out.code() == Some(7), "{out:?}");
    Ok(())
}

fn run_exports_a_token_that_parses_back() -> Outcome {
    let dir = scratch("token-parses");
    let out = dir.join("token");
    let mut command = tenure([
        "run",
        "-b",
        "memory://",
        "-k",
        "job",
        "--",
        "sh",
        "-c",
        r#"printf %s "$TENURE_FENCING_TOKEN" > "$OUT""#,
    ]);
    command.env("OUT", &out);
    let status = finish(command, QUICK)?;
    ensure!(status.code() == Some(0), "{status:?}");
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
    let mut command = tenure([
        "run",
        "-b",
        "memory://",
        "-k",
        "job",
        "--",
        "sh",
        "-c",
        script,
    ]);
    command.env("OUT", &out);
    let mut run = Background::start("run", command, &dir)?;
    wait_until("the command to start", QUICK, || {
        lines(&out).contains(&"started".to_owned()).then_some(())
    })?;
    run.signal(libc::SIGTERM);
    let (status, _) = run.wait(QUICK)?;
    ensure!(status.code() == Some(3), "{status:?}: {}", run.stderr());
    ensure!(
        lines(&out).contains(&"term".to_owned()),
        "{:?}",
        lines(&out)
    );
    Ok(())
}

/// `tenure run` on the memory backend with a command that prints its pid
/// and sleeps; returns it and the pid.
fn pid_printer(
    name: &str,
    dir: &Path,
    extra: &[&str],
    command: &[&str],
) -> Result<(Background, libc::pid_t), support::Failed> {
    let mut args = vec!["run", "-b", "memory://", "-k", "job"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    args.extend_from_slice(&["sh", "-c", "echo $$; exec sleep 600"]);
    let run = Background::start(name, tenure(&args), dir)?;
    let pid = wait_until("the command's pid", QUICK, || {
        run.stdout()
            .lines()
            .next()?
            .trim()
            .parse::<libc::pid_t>()
            .ok()
    })?;
    Ok((run, pid))
}

/// Whether the process is stopped (job control or SIGSTOP), or gone.
fn stopped_or_gone(pid: libc::pid_t) -> bool {
    process_gone(pid) || matches!(process_state(pid), Some('T' | 't'))
}

fn sigtstp_stops_the_command_and_a_term_that_ran_out_meanwhile_kills_it() -> Outcome {
    let dir = scratch("sigtstp");
    let (mut run, pid) = pid_printer("run", &dir, &["--ttl", "1s"], &[])?;
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
    let (status, _) = run.wait(QUICK)?;
    ensure!(
        status.code() == Some(75),
        "tenure exited with {status:?}: {}",
        run.stderr()
    );
    ensure!(process_gone(pid), "the command outlived tenure");
    Ok(())
}

fn sigtstp_then_sigcont_within_the_term_continues_the_command() -> Outcome {
    let dir = scratch("sigtstp-cont");
    let (mut run, pid) = pid_printer("run", &dir, &["--ttl", "10s"], &[])?;
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
    let (status, _) = run.wait(QUICK)?;
    ensure!(
        status.code() == Some(143),
        "tenure exited with {status:?}: {}",
        run.stderr()
    );
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
    let (mut run, pid) = pid_printer("run", &dir, &[], &setpriv)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    ensure!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534")),
        "the command did not change its user:\n{status}"
    );
    run.signal(libc::SIGKILL);
    run.wait(QUICK)?;
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
    let mut command = tenure([
        "run",
        "-b",
        "memory://",
        "-k",
        "job",
        "--",
        "sh",
        "-c",
        "echo $$; exec sleep 600",
    ]);
    // As `nohup` starts it.
    // SAFETY: signal(2) is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut run = Background::start("run", command, &dir)?;
    let pid = wait_until("the command's pid", QUICK, || {
        run.stdout()
            .lines()
            .next()?
            .trim()
            .parse::<libc::pid_t>()
            .ok()
    })?;
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
    let (status, _) = run.wait(QUICK)?;
    ensure!(
        status.code() == Some(143),
        "tenure exited with {status:?}: {}",
        run.stderr()
    );
    Ok(())
}

fn a_command_stopped_by_sigttin_ends_the_term() -> Outcome {
    // As a command that reads the terminal from a background group is stopped.
    let out = finish(
        tenure([
            "run",
            "-b",
            "memory://",
            "-k",
            "job",
            "--",
            "sh",
            "-c",
            "kill -TTIN $$; echo went on",
        ]),
        Duration::from_secs(5),
    )?;
    ensure!(out.code() == Some(143), "{out:?}");
    ensure!(
        out.stderr.contains("stopped for using the terminal"),
        "{}",
        out.stderr
    );
    Ok(())
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
    let out = status(
        &["-b", "memory://", "--backend-file", "/no/such/file"],
        Some("consul://x"),
    )?;
    ensure!(out.code() == Some(1), "flag: {out:?}");
    let out = status(&["--backend-file", &file], Some("consul://x"))?;
    ensure!(out.code() == Some(1), "file: {out:?}");
    let out = status(&[], Some("memory://"))?;
    ensure!(out.code() == Some(1), "environment: {out:?}");
    // Each source's errors name it.
    let out = status(&[], Some("consul://x"))?;
    ensure!(
        out.code() == Some(2) && out.stderr.contains("unknown scheme \"consul\""),
        "{out:?}"
    );
    let out = status(&["--backend-file", "/no/such/file"], None)?;
    ensure!(
        out.code() == Some(2)
            && out.stderr.contains("invalid backend-file")
            && out.stderr.contains("/no/such/file"),
        "{out:?}"
    );
    let out = status(&[], None)?;
    ensure!(
        out.code() == Some(2)
            && out.stderr.contains("missing backend")
            && out.stderr.contains("--backend")
            && out.stderr.contains("TENURE_BACKEND"),
        "{out:?}"
    );
    Ok(())
}

fn shell_runs_the_words_with_sh_and_no_stdin_gives_none() -> Outcome {
    let dir = scratch("shell");
    let out = finish(
        tenure([
            "run",
            "-b",
            "memory://",
            "-k",
            "job",
            "--shell",
            "--",
            "exit",
            "$((3",
            "+",
            "4))",
        ]),
        QUICK,
    )?;
    ensure!(out.code() == Some(7), "--shell: {out:?}");
    let input = dir.join("input");
    std::fs::write(&input, "from tenure's stdin\n")?;
    for (flag, expected) in [(None, "from tenure's stdin\n"), (Some("--no-stdin"), "")] {
        let mut args = vec!["run", "-b", "memory://", "-k", "job"];
        args.extend(flag);
        args.extend(["--", "cat"]);
        let mut command = tenure(&args);
        command.stdin(std::fs::File::open(&input)?);
        let out = finish(command, QUICK)?;
        ensure!(
            out.code() == Some(0) && out.stdout == expected,
            "{flag:?}: {out:?}"
        );
    }
    Ok(())
}

fn campaign_prints_when_leading_and_holds_until_sigterm() -> Outcome {
    let dir = scratch("campaign");
    let mut campaign = Background::start(
        "campaign",
        tenure(["campaign", "-b", "memory://", "-i", "me", "billing"]),
        &dir,
    )?;
    let line = wait_until("the leading line", QUICK, || {
        campaign.stdout().lines().next().map(str::to_owned)
    })?;
    ensure!(line.starts_with("leading billing as me token="), "{line}");
    ensure!(!process_gone(campaign.pid), "campaign did not hold");
    campaign.signal(libc::SIGTERM);
    let (status, _) = campaign.wait(QUICK)?;
    ensure!(
        status.code() == Some(0),
        "{status:?}: {}",
        campaign.stderr()
    );
    Ok(())
}

// ---- a real etcd ----

fn etcd_a_ttl_below_the_minimum_is_refused_naming_ttl() -> Outcome {
    let etcd = etcd::shared();
    for ttl in ["500ms", "1500ms"] {
        let out = finish(
            tenure([
                "run",
                "-b",
                &etcd.url(),
                "-k",
                "k",
                "--ttl",
                ttl,
                "--",
                "true",
            ]),
            QUICK,
        )?;
        ensure!(out.code() == Some(2), "{ttl}: {out:?}");
        ensure!(out.stderr.contains("invalid ttl"), "{ttl}: {}", out.stderr);
    }
    ensure!(etcd.candidates("k") == 0, "an invalid run wrote to etcd");
    Ok(())
}

fn etcd_two_runs_never_overlap_and_tokens_increase() -> Outcome {
    let etcd = etcd::shared();
    let dir = scratch("alternate");
    let out = dir.join("intervals");
    // Each term: `<token> <start ns> <end ns> <identity>`, 300 ms of "work".
    let script = r#"start=$(date +%s%N); sleep 0.3; echo "$TENURE_FENCING_TOKEN $start $(date +%s%N) $TENURE_IDENTITY" >> "$OUT""#;
    let mut runs = Vec::new();
    for identity in ["a", "b"] {
        let mut command = tenure([
            "run",
            "--backend",
            &etcd.url(),
            "--key",
            "alternate",
            "--identity",
            identity,
            "--ttl",
            TTL,
            "--respawn",
            "--respawn-delay",
            "0s",
            "--",
            "sh",
            "-c",
            script,
        ]);
        command.env("OUT", &out);
        runs.push(Background::start(identity, command, &dir)?);
    }
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
    let etcd = etcd::shared();
    let dir = scratch("sigkill");
    let out = dir.join("started");
    let key = "failover";
    let mut a = sleeper(&etcd, key, "a", &dir)?;
    let first = started_by(&out, "a", QUICK)?;
    let mut b = sleeper(&etcd, key, "b", &dir)?;
    wait_until("b to queue up", QUICK, || {
        (etcd.candidates(key) == 2).then_some(())
    })?;
    let killed_at = now_ns();
    a.signal(libc::SIGKILL);
    a.wait(QUICK)?;
    wait_until("a's command to die with a", Duration::from_secs(1), || {
        process_gone(first.pid).then_some(())
    })?;
    let second = started_by(&out, "b", Duration::from_secs(5))?;
    let takeover = Duration::from_nanos((second.at_ns - killed_at).max(0) as u64);
    println!(
        "    take-over after SIGKILL of the leader: {} ms (TTL {TTL})",
        takeover.as_millis()
    );
    ensure!(
        takeover < Duration::from_secs(2),
        "b took over {takeover:?} after a was killed; TTL + 1 s is the bound"
    );
    ensure!(
        second.token > first.token,
        "tokens: a {} then b {}",
        first.token,
        second.token
    );
    b.signal(libc::SIGTERM);
    b.wait(QUICK)?;
    Ok(())
}

fn etcd_sigterm_hands_over_within_100ms() -> Outcome {
    let etcd = etcd::shared();
    let dir = scratch("sigterm");
    let out = dir.join("started");
    let key = "handover";
    let mut a = sleeper(&etcd, key, "a", &dir)?;
    let first = started_by(&out, "a", QUICK)?;
    let mut b = sleeper(&etcd, key, "b", &dir)?;
    wait_until("b to queue up", QUICK, || {
        (etcd.candidates(key) == 2).then_some(())
    })?;
    a.signal(libc::SIGTERM);
    let (status, exited_at) = a.wait(QUICK)?;
    // The command (sleep) died of the forwarded SIGTERM: 128 + 15.
    ensure!(
        status.code() == Some(143),
        "a exited with {status:?}: {}",
        a.stderr()
    );
    ensure!(process_gone(first.pid), "a's command outlived a");
    let second = started_by(&out, "b", QUICK)?;
    let exited_ns = exited_at
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i128;
    let handover_ms = (second.at_ns - exited_ns) as f64 / 1e6;
    println!("    hand-over after SIGTERM: b's command started {handover_ms:.1} ms after a exited");
    ensure!(
        handover_ms < 100.0,
        "b's command started {handover_ms:.1} ms after a exited"
    );
    ensure!(
        second.token > first.token,
        "tokens: a {} then b {}",
        first.token,
        second.token
    );
    b.signal(libc::SIGTERM);
    b.wait(QUICK)?;
    Ok(())
}

fn etcd_status_and_watch_follow_a_led_key() -> Outcome {
    let etcd = etcd::shared();
    let dir = scratch("observed");
    let out = dir.join("started");
    let key = "observed";
    let url = etcd.url();

    let vacant = finish(tenure(["status", "-b", &url, "-k", key]), QUICK)?;
    ensure!(vacant.code() == Some(1), "{vacant:?}");

    let mut leader = sleeper(&etcd, key, "a", &dir)?;
    let term = started_by(&out, "a", QUICK)?;
    let status = finish(tenure(["status", "-b", &url, "-k", key]), QUICK)?;
    ensure!(status.code() == Some(0), "{status:?}");
    ensure!(status.stdout.contains("leader:  a\n"), "{}", status.stdout);
    ensure!(
        status
            .stdout
            .contains(&format!("token:   {}\n", term.token)),
        "{}",
        status.stdout
    );
    ensure!(
        status.stdout.contains("when this command looked"),
        "{}",
        status.stdout
    );
    let json = finish(tenure(["status", "-b", &url, "-k", key, "--json"]), QUICK)?;
    let value: Value =
        serde_json::from_str(&json.stdout).map_err(|e| format!("{e}: {}", json.stdout))?;
    ensure!(
        value["leader"]["identity"] == "a" && value["leader"]["token"] == term.token,
        "{value}"
    );

    let mut watch = Background::start(
        "watch",
        tenure(["watch", "-b", &url, "-k", key, "--json"]),
        &dir,
    )?;
    let events = |watch: &Background| -> Vec<Value> {
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
    leader.signal(libc::SIGTERM);
    leader.wait(QUICK)?;
    let second = wait_until("watch to see the vacancy", QUICK, || {
        events(&watch).into_iter().nth(1)
    })?;
    ensure!(second["event"] == "vacant", "{second}");
    watch.signal(libc::SIGTERM);
    let (status, _) = watch.wait(QUICK)?;
    ensure!(
        status.code() == Some(0),
        "watch: {status:?}: {}",
        watch.stderr()
    );
    let text = finish(tenure(["status", "-b", &url, "-k", key]), QUICK)?;
    ensure!(text.code() == Some(1), "after the leader left: {text:?}");
    Ok(())
}

fn etcd_a_leader_cut_off_from_etcd_kills_its_command_before_the_lease_can_expire() -> Outcome {
    let etcd = etcd::shared();
    let dir = scratch("paused");
    let out = dir.join("started");
    // The command ignores SIGTERM (and so does the sleep it becomes): only
    // SIGKILL stops it.
    let script = format!("trap '' TERM; {SLEEPER}");
    let mut command = tenure([
        "run",
        "-v",
        "--backend",
        &etcd.url(),
        "--key",
        "paused",
        "--identity",
        "a",
        "--ttl",
        TTL,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    command.env("OUT", &out);
    let mut a = Background::start("a", command, &dir)?;
    let term = started_by(&out, "a", QUICK)?;
    let paused = etcd.pause();
    // No renewal can succeed from here on, so the lease's local deadline is
    // at most one TTL away (the server's own expiry is later still).
    let frozen = Instant::now();
    let dead = wait_until("the command to be killed", Duration::from_secs(3), || {
        process_gone(term.pid).then(Instant::now)
    })?;
    let after = dead - frozen;
    println!(
        "    command SIGKILLed {} ms after etcd froze (TTL {TTL})",
        after.as_millis()
    );
    ensure!(
        after < Duration::from_secs(1),
        "the command outlived the TTL: {after:?}"
    );
    let (status, _) = a.wait(Duration::from_secs(15))?;
    ensure!(
        status.code() == Some(75),
        "tenure exited with {status:?}: {}",
        a.stderr()
    );
    ensure!(a.stderr().contains("SIGKILL"), "{}", a.stderr());
    drop(paused);
    Ok(())
}

fn etcd_sigstop_of_the_leader_kills_its_command_before_the_standby_starts() -> Outcome {
    let etcd = etcd::shared();
    let dir = scratch("sigstop");
    let out = dir.join("started");
    let key = "stopped";
    let mut a = sleeper(&etcd, key, "a", &dir)?;
    let first = started_by(&out, "a", QUICK)?;
    let mut b = sleeper(&etcd, key, "b", &dir)?;
    wait_until("b to queue up", QUICK, || {
        (etcd.candidates(key) == 2).then_some(())
    })?;
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
    let second = started_by(&out, "b", Duration::from_secs(5))?;
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
    let (status, _) = a.wait(QUICK)?;
    ensure!(
        status.code() == Some(75),
        "a exited with {status:?}: {}",
        a.stderr()
    );
    b.signal(libc::SIGTERM);
    b.wait(QUICK)?;
    Ok(())
}

fn etcd_timeout_gives_up_campaigning_with_status_124() -> Outcome {
    let etcd = etcd::shared();
    let dir = scratch("timeout");
    let out = dir.join("started");
    let key = "busy";
    let mut a = sleeper(&etcd, key, "a", &dir)?;
    started_by(&out, "a", QUICK)?;
    let url = etcd.url();
    let run = finish(
        tenure([
            "run",
            "-b",
            &url,
            "-k",
            key,
            "--ttl",
            TTL,
            "--timeout",
            "500ms",
            "--",
            "true",
        ]),
        QUICK,
    )?;
    ensure!(run.code() == Some(124), "run: {run:?}");
    ensure!(run.stderr.contains("--timeout"), "{}", run.stderr);
    ensure!(run.took < Duration::from_secs(3), "run took {:?}", run.took);
    let campaign = finish(
        tenure([
            "campaign",
            "-b",
            &url,
            "-k",
            key,
            "--ttl",
            TTL,
            "--timeout",
            "500ms",
        ]),
        QUICK,
    )?;
    ensure!(campaign.code() == Some(124), "campaign: {campaign:?}");
    ensure!(campaign.stdout.is_empty(), "{campaign:?}");
    ensure!(
        etcd.candidates(key) == 1,
        "a timed-out candidate stayed queued"
    );
    a.signal(libc::SIGTERM);
    a.wait(QUICK)?;
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

use std::os::unix::fs::OpenOptionsExt;

fn etcd_a_standard_error_nobody_reads_holds_up_no_kill() -> Outcome {
    let etcd = etcd::shared();
    let dir = scratch("stderr-full");
    let out = dir.join("started");
    let script = format!("trap '' TERM; {SLEEPER}");
    let mut command = tenure([
        "run",
        "--backend",
        &etcd.url(),
        "--key",
        "stderr-full",
        "--identity",
        "a",
        "--ttl",
        TTL,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let (mut pipe, write) = FullPipe::new()?;
    command
        .env("OUT", &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(write));
    let mut a = command.spawn()?;
    let term = started_by(&out, "a", QUICK)?;
    // A log shipper that stalled: every line tenure writes now blocks.
    pipe.fill();
    let paused = etcd.pause();
    let frozen = Instant::now();
    let dead = wait_until("the command to be killed", Duration::from_secs(3), || {
        process_gone(term.pid).then(Instant::now)
    });
    drop(paused);
    let _ = a.kill();
    drop(pipe.read);
    let _ = a.wait();
    let after = dead? - frozen;
    println!(
        "    with standard error full: command SIGKILLed {} ms after etcd froze (TTL {TTL})",
        after.as_millis()
    );
    ensure!(
        after < Duration::from_secs(1),
        "the command outlived the TTL: {after:?}"
    );
    Ok(())
}
