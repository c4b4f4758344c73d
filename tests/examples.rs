//! The examples keep working: runs the compiled `sqlite_fencing` example on
//! the memory backend (no server needed) and checks its outcome.
//!
//! `cargo test` builds the examples before it runs any test, but does not
//! run them; this test runs the binary it built. With a target filter
//! (`cargo test --test examples`) cargo builds no examples, so build them
//! first: `cargo build --examples --all-features`.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// How long the example may take: it waits out one 2 s TTL.
const LIMIT: Duration = Duration::from_secs(60);

/// `target/<profile>/examples/<name>`, next to this test's own binary
/// (`target/<profile>/deps/examples-<hash>`).
fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

fn modified(path: &std::path::Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs the example binary `name` with `args`; its exit status and output.
fn run_example(name: &str, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let binary = example_binary(name);
    assert!(
        binary.exists(),
        "{} does not exist: build the examples first with \
         `cargo build --examples --all-features`",
        binary.display()
    );
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{name}.rs"));
    assert!(
        modified(&binary) >= modified(&source),
        "{} is older than {}: rebuild it with `cargo build --examples --all-features`",
        binary.display(),
        source.display()
    );
    let mut child = Command::new(&binary)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).map(|_| text)
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("piped stderr")));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the example's status") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("{name} did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().expect("stdout reader").expect("stdout");
    let stderr = stderr.join().expect("stderr reader").expect("stderr");
    (status, stdout, stderr)
}

#[test]
fn sqlite_fencing_example_refuses_the_stale_write() {
    let (status, stdout, stderr) = run_example("sqlite_fencing", &["memory://"]);
    assert!(
        status.success(),
        "sqlite_fencing exited with {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("replica-a's late write: REFUSED by the database"),
        "the stale write was not reported refused:\n{stdout}"
    );
    assert!(
        stdout.contains("account 1: balance 650, fence_token 2"),
        "the account shows a write other than the three fenced ones:\n{stdout}"
    );
}
