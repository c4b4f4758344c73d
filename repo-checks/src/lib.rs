//! Checks of the workspace's own packaging, run by the README's test
//! command (`scripts/test`) as this crate's tests:
//!
//! - `tests/build_graph.rs`: the facade's default build and the quickstart's
//!   build graph never need protoc, Docker or Kubernetes crates.
//! - `tests/rust_version.rs`: every crate's `rust-version` is the lowest its
//!   dependency tree allows.
//! - `tests/k8s_openapi_choice.rs`: an application that picks another
//!   Kubernetes version than this workspace does still builds with tenure's
//!   `kube` feature (no library here chooses it).
//!
//! Each shells out to the cargo that runs the tests.

use std::path::PathBuf;
use std::process::Command;

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo-checks sits in the workspace root")
        .to_path_buf()
}

/// The workspace's target directory (`CARGO_TARGET_DIR` if set).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        })
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// A `cargo` command (the cargo running these tests) in the workspace root.
pub fn cargo(args: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(args).current_dir(workspace_root());
    command
}

/// Runs `command`, panicking with its stderr unless it succeeds; its stdout.
pub fn stdout_of(mut command: Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo prints UTF-8")
}

/// `name version` of every package in `cargo tree`'s output for `args`
/// (one per line, deduplicated).
pub fn tree(args: &[&str]) -> Vec<(String, String)> {
    let mut command = cargo(&["tree", "--locked", "--prefix", "none", "--format", "{p}"]);
    command.args(args);
    let mut packages: Vec<(String, String)> = stdout_of(command)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some((name.to_owned(), version.to_owned()))
        })
        .collect();
    packages.sort();
    packages.dedup();
    packages
}
