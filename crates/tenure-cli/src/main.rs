#![doc = include_str!("../README.md")]

// DESIGN. The `tenure` command: any program made leader-only, over any
// backend URL, with the Elector from tenure-core.
//
//   args.rs       the command line
//   connect.rs    a client from the URL, an elector on the key, bounded
//   run.rs        `tenure run`: campaign, run while leading, step down
//   supervise.rs  one term: the command is dead before the term's deadline
//   keeper.rs     a process beside the command that kills it at the deadline
//                 even if tenure itself is stopped
//   child.rs      the command's process group
//   descendants.rs  what the command started, wherever it went (Linux: tenure
//                 adopts the orphans, and reads its subtree from /proc)
//   signals.rs    which signals stop tenure, which are passed on
//   campaign.rs   `tenure campaign`: lead without a command
//   status.rs, watch.rs, report.rs   `tenure status` and `tenure watch`, and
//                 how they print
//   failure.rs    tenure's own failures and their exit statuses
//   logging.rs    logging that never holds up a kill

mod args;
mod campaign;
mod child;
mod connect;
mod descendants;
mod failure;
mod keeper;
mod logging;
mod report;
mod run;
mod signals;
mod status;
mod supervise;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

// One thread: the command is started from this, the main thread, which
// lives as long as tenure does (Linux sends the parent-death signal when the
// *thread* that started the child ends). Renewals run on the library's own
// heartbeat thread.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let drain = init_logging(cli.verbose);
    let outcome = match cli.command {
        Command::Run(args) => run::run(args).await,
        Command::Campaign(args) => campaign::campaign(args).await,
        Command::Status(args) => status::status(args).await,
        Command::Watch(args) => watch::watch(args).await,
    };
    // What is still queued is written now (for a moment at most).
    drop(drain);
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("tenure: error: {failure}");
            ExitCode::from(failure.code)
        }
    }
}

/// Logs to standard error: warnings, or more with each -v; RUST_LOG wins.
/// A full standard error drops lines rather than block (see `logging`).
fn init_logging(verbose: u8) -> logging::Drain {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let (subscriber, drain) = logging::subscriber(level, std::io::stderr());
    // Only fails if a subscriber was set already: none was. (Also takes
    // the `log` records of the clients.)
    let _ = tracing_subscriber::util::SubscriberInitExt::try_init(subscriber);
    drain
}
