#![doc = include_str!("../README.md")]

mod args;
mod child;
mod connect;
mod failure;
mod report;
mod run;
mod signals;
mod status;
mod supervise;
mod watch;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use args::{Cli, Command};

// One thread: the command is started from this, the main thread, which
// lives as long as tenure does (Linux sends the parent-death signal when the
// *thread* that started the child ends). Renewals run on the library's own
// heartbeat thread.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let outcome = match cli.command {
        Command::Run(args) => run::run(args).await,
        Command::Status(args) => status::status(args).await,
        Command::Watch(args) => watch::watch(args).await,
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("tenure: error: {failure}");
            ExitCode::from(failure.code)
        }
    }
}

/// Logs to standard error: warnings, or more with each -v; RUST_LOG wins.
fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
