//! `tenure-bench`: tenure's backends and their peers measured side by side
//! on the same servers in one run; writes BENCHMARKS.md, a chart and JSON.
//!
//! ```text
//! tenure-bench [--quick] [--only etcd,zk,...] [--report PATH] [--out DIR]
//! tenure-bench candidate KIND URL KEY TTL_MS     (a candidate process)
//! tenure-bench scale-child URL KEYS SECS TTL_MS  (the scale measure's child)
//! tenure-bench render [--quick] [RESULTS] [REPORT] (the report again, from JSON)
//! ```

mod candidate;
mod chart;
mod deploy;
mod figures;
mod machine;
mod peers;
mod plan;
mod process;
mod report;
mod run;
mod scale;
mod tenure_measures;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = runtime.block_on(async {
        match args.first().map(String::as_str) {
            Some("candidate") => candidate::main(&args[1..]).await,
            Some("scale-child") => scale::child(&args[1..]).await,
            Some("render") => report::render(&args[1..]),
            _ => run::main(&args).await,
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
