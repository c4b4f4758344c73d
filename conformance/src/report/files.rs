//! Writing reports under `target/conformance/`: one file per case, merged
//! into `<backend>.json` and `<backend>.md` after every case.
//!
//! Cases of one backend may finish at once in several threads or processes:
//! each writes its own file (write, then rename), and the merge runs under a
//! lock (a mutex in the process, a lock directory across processes).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use super::{markdown, CaseReport};

/// `<target>/conformance`: `CARGO_TARGET_DIR` if set, else the cargo target
/// directory the running test binary lives in, else `./target`.
pub fn conformance_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("conformance");
    }
    let exe = std::env::current_exe().ok();
    let target = exe
        .as_deref()
        .and_then(|exe| exe.ancestors().find(|d| d.join("CACHEDIR.TAG").is_file()))
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("conformance")
}

fn file_name(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, contents)?;
    fs::rename(&tmp, path)
}

/// Holds the cross-process lock (a directory) while alive.
struct DirLock(PathBuf);

impl DirLock {
    fn take(path: PathBuf) -> io::Result<DirLock> {
        let start = SystemTime::now();
        loop {
            match fs::create_dir(&path) {
                Ok(()) => return Ok(DirLock(path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    // A holder that died leaves the directory behind: break it after a while.
                    let age = fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok());
                    if age.is_some_and(|a| a > Duration::from_secs(10)) {
                        let _ = fs::remove_dir(&path);
                    } else if start.elapsed().unwrap_or_default() > Duration::from_secs(20) {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "report lock busy"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// Removes case files a previous run left, once per backend per process, so
/// the merged report shows this run only.
fn start_run(dir: &Path, backend: &str) -> io::Result<()> {
    static STARTED: OnceLock<(SystemTime, Mutex<HashSet<String>>)> = OnceLock::new();
    let (since, seen) = STARTED.get_or_init(|| (SystemTime::now(), Mutex::default()));
    if !seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(backend.to_owned())
    {
        return Ok(());
    }
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let old = fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < *since);
        if old && path.extension().is_some_and(|e| e == "json") {
            fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Records one case and rewrites the backend's merged report; returns the
/// markdown file's path.
pub fn record(report: &CaseReport) -> io::Result<PathBuf> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let root = conformance_dir();
    let backend = file_name(&report.backend);
    let dir = root.join(&backend);
    fs::create_dir_all(&dir)?;
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let _lock = DirLock::take(root.join(format!(".{backend}.lock")))?;
    start_run(&dir, &backend)?;
    let json = serde_json::to_vec_pretty(report).map_err(io::Error::other)?;
    write_atomic(
        &dir.join(format!("{}.json", file_name(&report.case))),
        &json,
    )?;

    let mut reports = Vec::new();
    for entry in fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            if let Ok(r) = serde_json::from_slice::<CaseReport>(&fs::read(&path)?) {
                reports.push(r);
            }
        }
    }
    let order = |r: &CaseReport| {
        crate::suite::CASE_NAMES
            .iter()
            .position(|c| *c == r.case)
            .unwrap_or(usize::MAX)
    };
    reports.sort_by(|a, b| order(a).cmp(&order(b)).then_with(|| a.case.cmp(&b.case)));
    let merged = serde_json::to_vec_pretty(&reports).map_err(io::Error::other)?;
    write_atomic(&root.join(format!("{backend}.json")), &merged)?;
    let md = root.join(format!("{backend}.md"));
    write_atomic(&md, markdown(&report.backend, &reports).as_bytes())?;
    Ok(md)
}
