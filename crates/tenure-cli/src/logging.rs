//! Logging that never holds up a kill: lines go to standard error through a
//! bounded queue and a thread of their own; when the queue is full (standard
//! error is a pipe nobody reads: a stalled log shipper, Docker's blocking
//! log mode) lines are dropped, and counted, rather than block the thread
//! that logs (the supervisor about to signal the command, the renewer).

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Lines queued at most; more are dropped.
const QUEUE: usize = 1024;
/// How long tenure waits at exit for queued lines to be written.
const DRAIN_AT_EXIT: Duration = Duration::from_secs(1);

/// What the writing thread is sent.
enum Message {
    /// One whole line.
    Line(Vec<u8>),
    /// Say so once every line before this one is written.
    Flush(mpsc::Sender<()>),
}

/// Writes whole log lines to `inner` on a thread of its own; never blocks.
#[derive(Clone)]
pub struct NonBlocking {
    lines: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
}

/// Waits (a bounded time) for the queued lines to be written when dropped.
pub struct Drain {
    lines: SyncSender<Message>,
}

impl NonBlocking {
    /// Starts the writing thread.
    pub fn new<W: Write + Send + 'static>(mut inner: W) -> (NonBlocking, Drain) {
        let (lines, queued) = mpsc::sync_channel::<Message>(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        // Without a thread every line is dropped (counted); nothing blocks.
        let _ = std::thread::Builder::new()
            .name("tenure-log".to_owned())
            .spawn(move || {
                for message in queued {
                    let line = match message {
                        Message::Line(line) => line,
                        Message::Flush(done) => {
                            let _ = done.send(());
                            continue;
                        }
                    };
                    let lost = counted.swap(0, Ordering::Relaxed);
                    if lost > 0 {
                        let note = format!(
                            "tenure: {lost} log line(s) dropped: standard error was not being read\n"
                        );
                        let _ = inner.write_all(note.as_bytes());
                    }
                    let _ = inner.write_all(&line);
                    let _ = inner.flush();
                }
            });
        let drain = Drain {
            lines: lines.clone(),
        };
        (NonBlocking { lines, dropped }, drain)
    }

    /// Lines dropped since the last one written.
    #[cfg(test)]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Write for NonBlocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.lines.try_send(Message::Line(buf.to_vec())) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for NonBlocking {
    type Writer = NonBlocking;

    fn make_writer(&'a self) -> NonBlocking {
        self.clone()
    }
}

impl Drop for Drain {
    /// Waits until the lines queued so far are written, for
    /// [`DRAIN_AT_EXIT`] at most (standard error may never be read).
    fn drop(&mut self) {
        let until = Instant::now() + DRAIN_AT_EXIT;
        let (done, written) = mpsc::channel();
        let mut flush = Message::Flush(done);
        loop {
            match self.lines.try_send(flush) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= until {
                        return;
                    }
                    flush = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let _ = written.recv_timeout(until.saturating_duration_since(Instant::now()));
    }
}

/// The subscriber tenure logs through: `level` unless RUST_LOG says
/// otherwise, lines written to `writer` without ever blocking the caller.
pub fn subscriber<W: Write + Send + 'static>(
    level: &str,
    writer: W,
) -> (impl tracing::Subscriber + Send + Sync, Drain) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let (writer, drain) = NonBlocking::new(writer);
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .finish();
    (subscriber, drain)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A writer whose writes never return: standard error as a full pipe.
    pub struct Stuck;

    impl Write for Stuck {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            loop {
                std::thread::park();
            }
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_writer_that_never_returns_drops_lines_instead_of_blocking() {
        let (mut writer, drain) = NonBlocking::new(Stuck);
        let started = std::time::Instant::now();
        for _ in 0..QUEUE * 3 {
            writer.write_all(b"a line\n").unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        // At most one line is with the stuck writer and QUEUE wait in the
        // queue: the rest were dropped (counted since the writer last
        // took a line).
        assert!(writer.dropped() > 0, "{}", writer.dropped());
        // Its thread never finishes: do not wait for it.
        std::mem::forget(drain);
    }

    #[test]
    fn lines_reach_the_writer_in_order() {
        #[derive(Clone)]
        struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let out = Shared(Arc::default());
        let (mut writer, drain) = NonBlocking::new(out.clone());
        writer.write_all(b"one\n").unwrap();
        writer.write_all(b"two\n").unwrap();
        // The writer lives on (as in the global subscriber): the drain
        // waits for the lines, not for the thread to end.
        let started = Instant::now();
        drop(drain);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(&*out.0.lock().unwrap(), b"one\ntwo\n");
        drop(writer);
    }
}
