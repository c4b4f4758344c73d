#![doc = include_str!("../README.md")]

mod args;
mod campaign;
mod child;
mod connect;
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
