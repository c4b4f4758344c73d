//! The command line: subcommands, flags, and how durations are read.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
Backends (--backend URL):
  memory://                              in-process (one tenure process only; for trying it out)
  etcd://[user:password@]host:port[,host:port...][/prefix/]   (etcds:// or ?tls=true&ca=FILE for TLS)
  zk://[user:password@]host:port[,host:port...][/base/path][?session_timeout_ms=N]
  kube://[/path/to/kubeconfig][?namespace=ns&context=name]
  redis://[:password@]host:port[,host:port...][/prefix]?allow_unfenced=true
                                         Redlock: no fencing token; the command gets none

Examples:
  # Run a cron-like job on exactly one host at a time; the others wait:
  tenure run --backend etcd://10.0.0.1:2379 --key nightly-report -- ./report.sh

  # Keep a controller running on one replica, campaigning again after it exits:
  tenure run --backend zk://zk1:2181/services --key reconciler --ttl 10s --respawn -- ./controller

  # Who leads? (exit status 0: someone leads, 1: vacant, 2: error)
  tenure status --backend etcd://10.0.0.1:2379 --key nightly-report

  # Follow leadership changes as JSON lines:
  tenure watch --backend etcd://10.0.0.1:2379 --key nightly-report --json

Logs go to standard error: warnings by default, -v for info, -vv for debug
(RUST_LOG, if set, overrides).";

const RUN_AFTER_HELP: &str = "\
The command starts only once this process leads the key, with
TENURE_FENCING_TOKEN (on backends that fence), TENURE_KEY and TENURE_IDENTITY
in its environment, in a process group of its own. If leadership is lost, or
renewals fail until the lease's local deadline comes close, the group gets
SIGTERM, and SIGKILL --kill-margin before that deadline at the latest: the
command is dead before anyone else can be granted the key. If tenure itself is
killed, the command is killed too (Linux: PR_SET_PDEATHSIG). SIGINT and SIGTERM
are forwarded; tenure waits for the command, resigns and exits.

Exit status: the command's own (128+N if signal N killed it); 75 if leadership
was lost (without --respawn); 2 if tenure failed (bad arguments, unreachable
backend); 126/127 if the command could not be started.

Examples:
  tenure run --backend etcd://127.0.0.1:2379 --key billing -- ./bill --since yesterday
  tenure run --backend etcd://127.0.0.1:2379 --key billing --ttl 5s --respawn -- sh -c 'exec ./worker --token \"$TENURE_FENCING_TOKEN\"'";

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
    /// Print who leads a key; exit 0 if someone does, 1 if vacant, 2 on error.
    Status(StatusArgs),
    /// Print a line each time the leader of a key changes.
    Watch(WatchArgs),
}

/// Where the election is.
#[derive(Debug, Args)]
pub struct Election {
    /// The backend's URL: memory://, etcd://..., zk://..., kube://...
    #[arg(long, short = 'b', value_name = "URL")]
    pub backend: String,

    /// The election key: one leader per key.
    #[arg(long, short = 'k')]
    pub key: String,

    /// How long to try reaching the backend before giving up.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration)]
    pub connect_timeout: Duration,
}

/// `tenure run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub election: Election,

    /// This candidate's identity, unique among the key's candidates
    /// [default: POD_NAME, else host name and pid].
    #[arg(long, short = 'i')]
    pub identity: Option<String>,

    /// The lease's TTL: a crashed leader's successor waits about this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub ttl: Duration,

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
        self.kill_margin.unwrap_or_else(|| {
            (self.ttl / 10)
                .max(Duration::from_millis(50))
                .min(self.ttl / 4)
        })
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
        assert_eq!(run.ttl, Duration::from_secs(2));
        assert_eq!(run.command, ["sh", "-c", "echo --not-a-flag"]);
        assert!(!run.respawn);
        assert_eq!(run.election.connect_timeout, Duration::from_secs(5));
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
}
