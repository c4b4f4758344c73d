//! The command line: subcommands, flags, and how durations are read.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::failure::Failure;

const AFTER_HELP: &str = "\
Backends (--backend URL):
  memory://                              in-process (one tenure process only; for trying it out)
  etcd://[user:password@]host:port[,host:port...][/prefix/]   (etcds:// or ?tls=true&ca=FILE for TLS)
  zk://[user:password@]host:port[,host:port...][/base/path][?session_timeout=6s]
  kube://[/path/to/kubeconfig][?namespace=ns&context=name]
  redis://[:password@]host:port[,host:port...][/prefix]?allow_unfenced=true
                                         Redlock: no fencing token; the command gets none
Instead of --backend: --backend-file FILE (its first line), else the
TENURE_BACKEND environment variable (keeps credentials out of `ps`).

Examples:
  # Run a cron-like job on exactly one host at a time; the others wait:
  tenure run --backend etcd://10.0.0.1:2379 --key nightly-report -- ./report.sh

  # Keep a controller running on one replica, campaigning again after it exits:
  tenure run --backend zk://zk1:2181/services --key reconciler --ttl 10s --respawn -- ./controller

  # Lead without a command, like `etcdctl elect`: print a line, hold until Ctrl-C:
  tenure campaign --backend etcd://10.0.0.1:2379 nightly-report

  # Who leads? (exit status 0: someone leads, 1: vacant, 2: error)
  tenure status --backend etcd://10.0.0.1:2379 --key nightly-report

  # Follow leadership changes as JSON lines:
  tenure watch --backend etcd://10.0.0.1:2379 --key nightly-report --json

Logs go to standard error: warnings by default, -v for info, -vv for debug
(RUST_LOG, if set, overrides).";

const RUN_AFTER_HELP: &str = "\
The command starts only once this process leads the key, with
TENURE_FENCING_TOKEN (on backends that fence), TENURE_KEY and TENURE_IDENTITY
in its environment, in a process group of its own. On Linux tenure adopts the
orphans of what the command starts (a child subreaper): all it started counts,
wherever it went (setsid, double forks, timeout, job-control shells), and the
term lasts until all of it has exited. If leadership is lost, or renewals fail
until the lease's local deadline comes close, the group and all the command
started get SIGTERM, and SIGKILL --kill-margin before that deadline at the
latest: they are dead before anyone else can be granted the key. If tenure
itself is killed, the command is killed too (Linux: PR_SET_PDEATHSIG). SIGINT
and SIGTERM are forwarded; tenure waits for the command and all it started,
resigns and exits.

If tenure is stopped (SIGSTOP, a debugger) or dies, a keeper process
(`lease-keeper`) kills the command's group and all it started at the deadline;
SIGTSTP (Ctrl-Z) stops the command's group, then tenure.

Exit status: the command's own (128+N if signal N killed it); 75 if leadership
was lost (without --respawn); 124 if --timeout passed before it led; 2 if
tenure failed (bad arguments, unreachable backend); 126/127 if the command
could not be started.

Examples:
  tenure run --backend etcd://127.0.0.1:2379 --key billing -- ./bill --since yesterday
  tenure run --backend etcd://127.0.0.1:2379 --key billing --ttl 5s --respawn -- sh -c 'exec ./worker --token \"$TENURE_FENCING_TOKEN\"'
  tenure run --backend-file /etc/tenure/backend --key billing --timeout 1m --shell -- './bill > /var/log/bill.log'";

const CAMPAIGN_AFTER_HELP: &str = "\
Prints `leading KEY as IDENTITY token=N` on standard output once this
process leads, and holds the lease (renewing it) until SIGINT or SIGTERM,
then resigns and exits 0. If leadership is lost it prints `lost KEY: REASON`
and exits 75; with --timeout, 124 if it did not lead in time.

Examples:
  tenure campaign --backend etcd://127.0.0.1:2379 billing
  TENURE_BACKEND=etcd://127.0.0.1:2379 tenure campaign -k billing -i host-a --timeout 30s";

/// Make any program leader-only, and see who leads.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// More logging on standard error: -v info, -vv debug, -vvv trace.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Campaign for a key; run a command while leading, kill it when leadership ends.
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Campaign for a key without a command: print a line when leading,
    /// hold the lease until interrupted (like `etcdctl elect`).
    #[command(after_help = CAMPAIGN_AFTER_HELP)]
    Campaign(CampaignArgs),
    /// Print who leads a key; exit 0 if someone does, 1 if vacant, 2 on error.
    Status(StatusArgs),
    /// Print a line each time the leader of a key changes.
    Watch(WatchArgs),
}

/// The environment variable that holds the backend's URL when neither
/// `--backend` nor `--backend-file` gives it.
pub const BACKEND_ENV: &str = "TENURE_BACKEND";

/// Where the backend is.
#[derive(Debug, Args)]
pub struct Backend {
    /// The backend's URL: memory://, etcd://..., zk://..., kube://...
    /// [else --backend-file, else $TENURE_BACKEND]. A URL on the command
    /// line shows in `ps`: keep credentials in the file or the variable.
    #[arg(long, short = 'b', value_name = "URL")]
    pub backend: Option<String>,

    /// A file whose first line is the backend's URL (used when --backend
    /// is not given).
    #[arg(long, value_name = "FILE")]
    pub backend_file: Option<PathBuf>,

    /// How long to try reaching the backend before giving up.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration)]
    pub connect_timeout: Duration,
}

impl Backend {
    /// The backend's URL: --backend, else the first line of --backend-file,
    /// else $TENURE_BACKEND.
    pub fn url(&self) -> Result<String, Failure> {
        self.url_from(std::env::var_os(BACKEND_ENV))
    }

    fn url_from(&self, env: Option<OsString>) -> Result<String, Failure> {
        if let Some(url) = &self.backend {
            return Ok(url.clone());
        }
        if let Some(path) = &self.backend_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::new(format!("invalid backend-file: cannot read {path:?}: {e}"))
            })?;
            let url = text.lines().next().unwrap_or("").trim();
            if url.is_empty() {
                return Err(Failure::new(format!(
                    "invalid backend-file: {path:?} holds no URL on its first line"
                )));
            }
            return Ok(url.to_owned());
        }
        match env {
            Some(value) => {
                let url = value
                    .into_string()
                    .map_err(|_| Failure::new(format!("invalid {BACKEND_ENV}: not UTF-8")))?;
                let url = url.trim();
                if url.is_empty() {
                    return Err(Failure::new(format!("invalid {BACKEND_ENV}: empty")));
                }
                Ok(url.to_owned())
            }
            None => Err(Failure::new(format!(
                "missing backend: give --backend URL, --backend-file FILE or set {BACKEND_ENV}"
            ))),
        }
    }
}

/// Where the election is.
#[derive(Debug, Args)]
pub struct Election {
    #[command(flatten)]
    pub backend: Backend,

    /// The election key: one leader per key.
    #[arg(long, short = 'k')]
    pub key: String,
}

/// Who stands for election, and for how long a lease (run, campaign).
#[derive(Debug, Args)]
pub struct Candidate {
    /// This candidate's identity, unique among the key's candidates
    /// [default: POD_NAME, else host name and pid].
    #[arg(long, short = 'i')]
    pub identity: Option<String>,

    /// The lease's TTL: a crashed leader's successor waits about this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub ttl: Duration,
}

/// `tenure run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub election: Election,

    #[command(flatten)]
    pub candidate: Candidate,

    /// How long before the lease's local deadline the command is SIGKILLed
    /// when renewals fail (SIGTERM goes out twice as long before it); at
    /// most TTL/4 [default: TTL/10, at least 50ms, at most TTL/4].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub kill_margin: Option<Duration>,

    /// When the command exits (or leadership is lost), campaign again and
    /// start it anew instead of exiting.
    #[arg(long)]
    pub respawn: bool,

    /// With --respawn: how long to wait after the command ends before
    /// campaigning again (a command that fails at once does not spin).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration)]
    pub respawn_delay: Duration,

    /// Give up campaigning after this long and exit with status 124
    /// (each campaign, with --respawn) [default: wait for ever].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub timeout: Option<Duration>,

    /// Run the command with `/bin/sh -c`, its words joined by spaces (as
    /// `consul lock` does by default): pipes, redirections, $VARIABLES.
    #[arg(long)]
    pub shell: bool,

    /// Give the command no standard input (/dev/null), as `consul lock`
    /// does without -pass-stdin [default: tenure's own].
    #[arg(long)]
    pub no_stdin: bool,

    /// The command and its arguments, after `--`.
    #[arg(
        required = true,
        last = true,
        value_name = "COMMAND",
        num_args = 1..,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// `tenure campaign`.
#[derive(Debug, Args)]
pub struct CampaignArgs {
    #[command(flatten)]
    pub backend: Backend,

    /// The election key (or give it as NAME).
    #[arg(long, short = 'k', value_name = "KEY", conflicts_with = "name")]
    pub key: Option<String>,

    /// The election key.
    #[arg(value_name = "NAME", required_unless_present = "key")]
    pub name: Option<String>,

    #[command(flatten)]
    pub candidate: Candidate,

    /// Give up campaigning after this long and exit with status 124
    /// [default: wait for ever].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub timeout: Option<Duration>,
}

impl CampaignArgs {
    /// The key, from --key or NAME.
    pub fn key(&self) -> &str {
        self.key
            .as_deref()
            .or(self.name.as_deref())
            .unwrap_or_default()
    }
}

/// `tenure status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub election: Election,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `tenure watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub election: Election,

    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    /// The kill margin: as given, else TTL/10, at least 50 ms, at most TTL/4.
    pub fn kill_margin(&self) -> Duration {
        let ttl = self.candidate.ttl;
        self.kill_margin
            .unwrap_or_else(|| (ttl / 10).max(Duration::from_millis(50)).min(ttl / 4))
    }
}

/// Reads a duration such as `10s`, `1500ms` or `1m 30s`.
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}); try 10s or 1500ms"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tenure").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_read_as_humans_write_them() {
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(duration("10").unwrap_err().contains("\"10\""));
        assert!(duration("fast").is_err());
    }

    #[test]
    fn run_takes_the_command_after_the_double_dash() {
        let cli = parse(&[
            "run",
            "--backend",
            "memory://",
            "--key",
            "k",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo --not-a-flag",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run: {cli:?}")
        };
        assert_eq!(run.candidate.ttl, Duration::from_secs(2));
        assert_eq!(run.command, ["sh", "-c", "echo --not-a-flag"]);
        assert!(!run.respawn);
        assert_eq!(run.election.backend.connect_timeout, Duration::from_secs(5));
    }

    #[test]
    fn run_without_a_command_is_refused() {
        let error = parse(&["run", "--backend", "memory://", "--key", "k"]).unwrap_err();
        assert!(error.to_string().contains("COMMAND"), "{error}");
        let error = parse(&["run", "--backend", "memory://", "--key", "k", "--"]).unwrap_err();
        assert!(error.to_string().contains("COMMAND"), "{error}");
    }

    #[test]
    fn a_bad_ttl_names_the_flag() {
        let error = parse(&[
            "run",
            "-b",
            "memory://",
            "-k",
            "k",
            "--ttl",
            "soon",
            "--",
            "true",
        ])
        .unwrap_err()
        .to_string();
        assert!(error.contains("--ttl"), "{error}");
        assert!(error.contains("soon"), "{error}");
    }

    #[test]
    fn the_kill_margin_defaults_to_a_tenth_of_the_ttl_within_bounds() {
        let margin = |args: &[&str]| {
            let mut all = vec!["run", "-b", "memory://", "-k", "k"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--", "true"]);
            match parse(&all).unwrap().command {
                Command::Run(run) => run.kill_margin(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(margin(&[]), Duration::from_secs(1));
        assert_eq!(margin(&["--ttl", "1s"]), Duration::from_millis(100));
        assert_eq!(margin(&["--ttl", "200ms"]), Duration::from_millis(50));
        assert_eq!(margin(&["--ttl", "100ms"]), Duration::from_millis(25));
        assert_eq!(
            margin(&["--ttl", "1s", "--kill-margin", "300ms"]),
            Duration::from_millis(300)
        );
    }

    #[test]
    fn verbosity_counts_and_is_global() {
        let cli = parse(&["-v", "status", "-b", "memory://", "-k", "k"]).unwrap();
        assert_eq!(cli.verbose, 1);
        let cli = parse(&["status", "-b", "memory://", "-k", "k", "-vv"]).unwrap();
        assert_eq!(cli.verbose, 2);
    }

    #[test]
    fn the_backend_comes_from_the_flag_else_the_file_else_the_environment() {
        let dir = std::env::temp_dir().join(format!("tenure-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("backend");
        std::fs::write(&file, "etcd://from-file:2379\n# a comment\n").unwrap();
        let backend = |flag: Option<&str>, file: Option<&std::path::Path>| Backend {
            backend: flag.map(str::to_owned),
            backend_file: file.map(std::path::Path::to_owned),
            connect_timeout: Duration::from_secs(5),
        };
        let env = || Some(OsString::from("etcd://from-env:2379"));
        let url = |b: Backend, env: Option<OsString>| b.url_from(env).map_err(|f| f.message);
        assert_eq!(
            url(backend(Some("etcd://flag:2379"), Some(&file)), env()).unwrap(),
            "etcd://flag:2379"
        );
        assert_eq!(
            url(backend(None, Some(&file)), env()).unwrap(),
            "etcd://from-file:2379"
        );
        assert_eq!(
            url(backend(None, None), env()).unwrap(),
            "etcd://from-env:2379"
        );
        let missing = url(backend(None, Some(&dir.join("none"))), env()).unwrap_err();
        assert!(
            missing.starts_with("invalid backend-file: cannot read"),
            "{missing}"
        );
        std::fs::write(&file, "\n").unwrap();
        let empty = url(backend(None, Some(&file)), env()).unwrap_err();
        assert!(empty.starts_with("invalid backend-file:"), "{empty}");
        let blank = url(backend(None, None), Some(OsString::from(" "))).unwrap_err();
        assert_eq!(blank, "invalid TENURE_BACKEND: empty");
        let none = url(backend(None, None), None).unwrap_err();
        assert!(none.starts_with("missing backend:"), "{none}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn campaign_takes_the_key_as_a_flag_or_a_name() {
        let key = |args: &[&str]| match parse(args).map(|cli| cli.command) {
            Ok(Command::Campaign(c)) => Ok(c.key().to_owned()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            key(&["campaign", "-b", "memory://", "billing"]).unwrap(),
            "billing"
        );
        assert_eq!(
            key(&["campaign", "-b", "memory://", "-k", "billing"]).unwrap(),
            "billing"
        );
        assert!(key(&["campaign", "-b", "memory://"]).is_err());
        assert!(key(&["campaign", "-b", "memory://", "-k", "a", "b"]).is_err());
    }
}
