//! The machine lock across processes: timing cases ([`Quiet::Machine`](super::Quiet))
//! of one test binary run with no case of another binary running, so the
//! backend targets may run side by side without skewing each other's figures.
//!
//! Two `flock(2)` files under `target/conformance/`: every case holds
//! `machine.lock` shared, a timing case holds it exclusively; `turnstile.lock`
//! is taken briefly on the way in, and held by a timing case until it has the
//! machine, so a stream of ordinary cases in other processes cannot starve it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::report::conformance_dir;

/// Set by scripts/test for the processes it runs under a shared hold of
/// `machine.lock` (its fourth lane).
const HELD_BY_PARENT: &str = "TENURE_MACHINE_LOCK_HELD";

/// A held lock on the machine; released on drop (closing the file).
#[derive(Debug)]
pub(crate) struct MachineLock {
    _file: Option<File>,
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
}

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor this function's caller owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn take_blocking(exclusive: bool) -> io::Result<File> {
    let dir = conformance_dir();
    std::fs::create_dir_all(&dir)?;
    let turnstile = open(&dir.join("turnstile.lock"))?;
    let machine = open(&dir.join("machine.lock"))?;
    flock(&turnstile, libc::LOCK_EX)?;
    flock(
        &machine,
        if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        },
    )?;
    drop(turnstile);
    Ok(machine)
}

impl MachineLock {
    /// Takes the machine, shared or exclusively; where the lock files cannot
    /// be used (a read-only target directory), goes on without, saying so.
    ///
    /// A process started under a shared hold of the lock (scripts/test's
    /// fourth lane sets `TENURE_MACHINE_LOCK_HELD`) would wait forever for
    /// it exclusively, and so would every other lane's timing case: it
    /// panics at once instead, naming the fix.
    pub(crate) async fn take(exclusive: bool) -> MachineLock {
        if exclusive && std::env::var_os(HELD_BY_PARENT).is_some() {
            panic!(
                "a timing case cannot take the machine lock exclusively in a process run under \
                 a shared hold of it ({HELD_BY_PARENT} is set): run this test target in one of \
                 scripts/test's suite lanes"
            );
        }
        match tokio::task::spawn_blocking(move || take_blocking(exclusive)).await {
            Ok(Ok(file)) => MachineLock { _file: Some(file) },
            Ok(Err(e)) => {
                eprintln!("tenure-conformance: no machine lock across processes ({e})");
                MachineLock { _file: None }
            }
            Err(e) => {
                eprintln!("tenure-conformance: no machine lock across processes ({e})");
                MachineLock { _file: None }
            }
        }
    }
}
