//! `tenure-bench`: tenure's backends and their peers measured side by side
//! on the same servers in one run; writes BENCHMARKS.md, a chart and JSON.
//!
//! ```text
//! tenure-bench [--quick] [--only etcd,zk,...] [--report PATH] [--out DIR]
//! tenure-bench scale-child URL KEYS SECS TTL_MS  (the scale measure's child)
//! tenure-bench render [--quick] [RESULTS] [REPORT] (the report again, from JSON)
//! ```
//!
//! Crash failover runs `tenure-bench-candidate` processes, built beside
//! this binary (`src/bin/tenure-bench-candidate.rs`).

// DESIGN. Measures tenure and its peers on the same servers in one run.
//
//   main.rs            the command line (clap)
//   plan.rs            how much to measure: full or --quick
//   deploy.rs          the servers per backend, their clients and counters
//   run.rs             every deployment: tenure and its peers, then the report
//   tenure_measures.rs tenure's in-process measures
//   floor.rs           the protocol's floor: a hand-over's fewest requests,
//                      timed with raw clients on the same servers
//   sampling.rs        fresh keys, warm-up and timing loops every measure shares
//   process.rs         candidates in processes (crash failover, hand-over)
//   bin/tenure-bench-candidate.rs   the bench's own candidate process,
//                      driven over the conformance process protocol
//   scale.rs           many keys in one process (scale-child)
//   peers/             what people would otherwise pick (etcd's election API,
//                      etcdctl elect, Curator, rslock, kube-lease-manager,
//                      kube-coordinate) and the ones not run
//   figures.rs, report.rs, chart.rs   what was measured, BENCHMARKS.md, SVG
//   machine.rs, error.rs

mod chart;
mod deploy;
mod error;
mod figures;
mod floor;
mod machine;
mod peers;
mod plan;
mod process;
mod report;
mod run;
mod sampling;
mod scale;
mod tenure_measures;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// tenure's backends and their peers, measured side by side on the same
/// servers in one run; writes BENCHMARKS.md, a chart and JSON.
#[derive(Debug, Parser)]
#[command(name = "tenure-bench", args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

/// What the bench run measures, and where it writes.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Fewer samples and smaller herds: a check that everything runs, not
    /// figures to publish.
    #[arg(long)]
    pub quick: bool,
    /// Only these deployments' servers.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = ["memory", "etcd", "zk", "kube", "redis"]
    )]
    pub only: Vec<String>,
    /// Where the report goes (default BENCHMARKS.md; a quick run's under
    /// --out, so it never overwrites the published one).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Where the JSON results and the chart go.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The scale measure's child: KEYS leaderships for SECS seconds.
    ScaleChild {
        url: String,
        keys: usize,
        secs: u64,
        ttl_ms: u64,
    },
    /// The report again, from the JSON results of a run.
    Render {
        /// The results of a quick run (its report goes under target/bench).
        #[arg(long)]
        quick: bool,
        /// The results (default target/bench/results.json).
        results: Option<PathBuf>,
        /// Where the report goes.
        report: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = runtime.block_on(async {
        match cli.command {
            Some(Command::ScaleChild {
                url,
                keys,
                secs,
                ttl_ms,
            }) => scale::child(&url, keys, secs, ttl_ms).await,
            Some(Command::Render {
                quick,
                results,
                report,
            }) => report::render(quick, results, report),
            None => run::main(cli.run).await,
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    #[test]
    fn the_run_and_its_subcommands_parse_as_documented() {
        let cli = Cli::try_parse_from(["tenure-bench", "--quick", "--only", "etcd,zk"]).unwrap();
        assert!(cli.command.is_none() && cli.run.quick);
        assert_eq!(cli.run.only, ["etcd", "zk"]);
        assert_eq!(cli.run.out, std::path::Path::new("target/bench"));
        let cli = Cli::try_parse_from([
            "tenure-bench",
            "scale-child",
            "zk://h",
            "1000",
            "30",
            "5000",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::ScaleChild {
                keys: 1000,
                secs: 30,
                ..
            })
        ));
        let cli = Cli::try_parse_from(["tenure-bench", "render", "--quick", "r.json"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Render { quick: true, .. })
        ));
    }

    #[test]
    fn bad_arguments_are_refused_naming_them() {
        for (args, names) in [
            (&["tenure-bench", "--only", "etcd,mongo"][..], "mongo"),
            (&["tenure-bench", "--colour"][..], "--colour"),
            (
                &["tenure-bench", "candidate", "u", "k", "1"][..],
                "candidate",
            ),
            (
                &["tenure-bench", "scale-child", "u", "many", "1", "1"][..],
                "many",
            ),
        ] {
            let error = Cli::try_parse_from(args).unwrap_err().to_string();
            assert!(error.contains(names), "{args:?}: {error}");
        }
    }
}
