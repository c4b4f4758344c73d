//! A holder watches its own key: deleted out of band (`etcdctl del`, an
//! operator's cleanup, `etcdctl lease revoke`), the term ends at once rather
//! than at the next renewal, up to a third of the TTL later.
//!
//! Every holder of one client shares one watch stream, each key a watch of
//! its own on it (by a watch id we choose, etcd 3.4+): a thousand
//! leaderships cost one stream, not a thousand (each with its buffers).
//!
//! A stream keeps the token it was opened with: once that lapses, etcd
//! refuses every watch created on it (watch id −1, whoever's it was;
//! [`crate::election::refused`]). The driver then logs in again and opens
//! the stream anew with every watch, from each key's creation on, so a
//! delete meanwhile is replayed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{
    Client, EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponseStream,
};
use tenure_core::{LossReason, LossSignal};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::election::{log_in_again, refused};
use crate::Settings;

/// The first pause before the stream is opened again after it broke (or a
/// watch was refused), doubling up to a second until a watch is created.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The watches of one client's holders: one stream, driven by one task
/// started on first use (on the current runtime, the heartbeat runtime,
/// which drives the client).
pub(crate) struct OwnKeys {
    client: Client,
    settings: Settings,
    next_id: AtomicI64,
    driver: Mutex<Option<mpsc::UnboundedSender<Command>>>,
}

/// The watch of one holder's key; it stops when this is dropped (with the
/// lease's last handle).
pub(crate) struct OwnKeyWatch {
    id: i64,
    commands: mpsc::UnboundedSender<Command>,
}

impl Drop for OwnKeyWatch {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Cancel { id: self.id });
    }
}

enum Command {
    Watch {
        id: i64,
        key: Watched,
    },
    Cancel {
        id: i64,
    },
    /// What a look at a key found (sent by the look's own task).
    Looked {
        id: i64,
        found: tenure_core::Result<Looked>,
        after_cancel: bool,
    },
}

struct Watched {
    key: String,
    create_revision: i64,
    /// Watched from this revision on: a delete since then is in the
    /// history a new watch replays.
    from: i64,
    signal: LossSignal,
    /// Its watch's id on the stream (0 while it has none). A new watch
    /// gets a new id: etcd keeps the id of a watch it cancelled for
    /// compaction, and refuses it to another.
    watch_id: i64,
}

/// The keys watched (by their handle's id), and which watch is whose.
#[derive(Default)]
struct Watches {
    keys: HashMap<i64, Watched>,
    by_watch: HashMap<i64, i64>,
    last_watch: i64,
}

impl Watches {
    /// A new watch id for the key of `handle`.
    fn renumber(&mut self, handle: i64) -> Option<(i64, &Watched)> {
        let key = self.keys.get_mut(&handle)?;
        self.by_watch.remove(&key.watch_id);
        self.last_watch += 1;
        key.watch_id = self.last_watch;
        self.by_watch.insert(key.watch_id, handle);
        Some((key.watch_id, key))
    }

    /// The handle whose watch `watch_id` is.
    fn handle(&self, watch_id: i64) -> Option<i64> {
        self.by_watch.get(&watch_id).copied()
    }

    /// Forgets the key of `handle`; its watch id, if it had one.
    fn remove(&mut self, handle: i64) -> Option<(i64, Watched)> {
        let key = self.keys.remove(&handle)?;
        self.by_watch.remove(&key.watch_id);
        Some((key.watch_id, key))
    }
}

impl OwnKeys {
    pub(crate) fn new(client: Client, settings: Settings) -> Self {
        OwnKeys {
            client,
            settings,
            next_id: AtomicI64::new(1),
            driver: Mutex::new(None),
        }
    }

    /// Starts watching `key`, created at `create_revision`: its deletion
    /// fires `signal` with [`LossReason::Deleted`].
    pub(crate) fn watch(
        &self,
        key: String,
        create_revision: i64,
        signal: LossSignal,
    ) -> OwnKeyWatch {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let commands = {
            let mut driver = self.driver.lock().unwrap_or_else(|e| e.into_inner());
            match driver.as_ref() {
                Some(commands) if !commands.is_closed() => commands.clone(),
                _ => {
                    let (commands, received) = mpsc::unbounded_channel();
                    let (client, settings) = (self.client.clone(), self.settings.clone());
                    tokio::spawn(drive(client, settings, commands.downgrade(), received));
                    *driver = Some(commands.clone());
                    commands
                }
            }
        };
        let key = Watched {
            key,
            create_revision,
            // Watched from just after the key's creation: a delete that came
            // before the watch was open is in the history it replays.
            from: create_revision + 1,
            signal,
            watch_id: 0,
        };
        let _ = commands.send(Command::Watch { id, key });
        OwnKeyWatch { id, commands }
    }
}

fn options(id: i64, from: i64) -> WatchOptions {
    WatchOptions::new()
        .with_watch_id(id)
        .with_start_revision(from)
        .with_filters([WatchFilterType::NoPut])
}

/// The stream: its request half, and its response half.
type Stream = (WatchRequestSender, WatchResponseStream);

/// Drives the stream until every handle (and the client's [`OwnKeys`]) is
/// gone: opens it (again, after a break, with every watch), adds and
/// cancels watches, and fires the signal of a key found deleted.
async fn drive(
    client: Client,
    settings: Settings,
    looks: mpsc::WeakUnboundedSender<Command>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut watches = Watches::default();
    let mut stream: Option<Stream> = None;
    let mut reopen_at: Option<Instant> = Some(Instant::now());
    // Back to the first pause once a watch is created.
    let mut pause = FIRST_PAUSE;
    // Set when etcd refused a watch: log in again before opening.
    let mut log_in = false;
    loop {
        if stream.is_none()
            && !watches.keys.is_empty()
            && reopen_at.is_some_and(|at| at <= Instant::now())
        {
            match open(&client, &settings, &mut watches, log_in).await {
                Ok(opened) => {
                    stream = Some(opened);
                    reopen_at = None;
                    log_in = false;
                }
                Err(error) => {
                    tracing::debug!(%error, retry_in = ?pause, "watch of our own keys failed; watching again");
                    reopen_at = Some(Instant::now() + pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { return };
                let requests = stream.as_mut().map(|(requests, _)| requests);
                let sent = match command {
                    Command::Watch { id, key } => {
                        watches.keys.insert(id, key);
                        watch(requests, &mut watches, id).await
                    }
                    Command::Cancel { id } => match watches.remove(id) {
                        Some((watch_id, _)) if !watches.keys.is_empty() => cancel(requests, watch_id).await,
                        Some(_) => true,
                        None => true,
                    },
                    Command::Looked { id, found, after_cancel } => match found {
                        _ if !watches.keys.contains_key(&id) => true,
                        Ok(Looked::Gone) => match fire(&mut watches, id) {
                            Some(watch_id) if !watches.keys.is_empty() => cancel(requests, watch_id).await,
                            Some(_) => true,
                            None => true,
                        },
                        // Compacted past `from`: watch again from just
                        // after the revision read.
                        Ok(Looked::OursAt(revision)) if after_cancel => {
                            if let Some(key) = watches.keys.get_mut(&id) {
                                key.from = key.from.max(revision + 1);
                            }
                            watch(requests, &mut watches, id).await
                        }
                        Ok(Looked::OursAt(_)) => true,
                        Err(error) => {
                            tracing::debug!(%error, "a look at our own key failed");
                            if after_cancel {
                                if let Some(key) = watches.keys.get(&id) {
                                    spawn_look(&client, &settings, &looks, id, key, true, pause);
                                }
                            }
                            true
                        }
                    },
                };
                if watches.keys.is_empty() {
                    // Nothing left to watch: the stream is closed rather
                    // than its last watch cancelled (no message either
                    // way), and opened again for the next key.
                    stream = None;
                    reopen_at = Some(Instant::now());
                } else if !sent {
                    stream = None;
                    reopen_at = Some(Instant::now() + pause);
                }
            }
            message = async {
                match stream.as_mut() {
                    Some((_, responses)) => responses.message().await,
                    None => std::future::pending().await,
                }
            } => match message {
                Ok(Some(answer)) => {
                    if let Some(reason) = refused(&answer) {
                        // Id -1, whoever's it was: every watch is created
                        // again, on a stream opened with a new token (a
                        // delete meanwhile is in the history it replays).
                        tracing::debug!(reason, retry_in = ?pause, "etcd refused a watch of our own keys; logging in again and watching anew");
                        stream = None;
                        log_in = true;
                        reopen_at = Some(Instant::now() + pause);
                        pause = (pause * 2).min(Duration::from_secs(1));
                        continue;
                    }
                    if answer.created() {
                        pause = FIRST_PAUSE;
                    }
                    let watch_id = answer.watch_id();
                    let Some(id) = watches.handle(watch_id) else { continue };
                    if answer.events().iter().any(|e| e.event_type() == EventType::Delete) {
                        fire(&mut watches, id);
                        if watches.keys.is_empty() {
                            stream = None;
                            reopen_at = Some(Instant::now());
                        } else if let Some((requests, _)) = stream.as_mut() {
                            let _ = requests.cancel(watch_id).await;
                        }
                    } else if answer.canceled() {
                        // Compacted past `from`: look instead,
                        // then watch again, with a new id, from what the
                        // look read.
                        watches.by_watch.remove(&watch_id);
                        if let Some(key) = watches.keys.get(&id) {
                            spawn_look(&client, &settings, &looks, id, key, true, Duration::ZERO);
                        }
                    } else if answer.created() {
                        // A watch starting at a revision etcd has passed is
                        // caught up by a loop that runs every 100 ms: a delete
                        // between the grant and the watch would reach us that
                        // late. Once the watch exists, look once.
                        if let Some(key) = watches.keys.get(&id) {
                            spawn_look(&client, &settings, &looks, id, key, false, Duration::ZERO);
                        }
                    }
                }
                Ok(None) | Err(_) => {
                    if let Err(error) = message {
                        tracing::debug!(%error, retry_in = ?pause, "watch of our own keys broke; watching again");
                    }
                    stream = None;
                    reopen_at = Some(Instant::now() + pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            },
            _ = async {
                match reopen_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

/// Adds a watch, with a new id, of the key of `handle` to the stream, if
/// open; false if that failed (the stream is broken).
async fn watch(
    requests: Option<&mut WatchRequestSender>,
    watches: &mut Watches,
    handle: i64,
) -> bool {
    let Some((watch_id, key)) = watches.renumber(handle) else {
        return true;
    };
    match requests {
        Some(requests) => requests
            .watch(key.key.clone(), Some(options(watch_id, key.from)))
            .await
            .is_ok(),
        None => true,
    }
}

/// Cancels a watch on the stream, if open; false if that failed.
async fn cancel(requests: Option<&mut WatchRequestSender>, watch_id: i64) -> bool {
    match requests {
        Some(requests) => requests.cancel(watch_id).await.is_ok(),
        None => true,
    }
}

/// Opens the stream with a watch, each with a new id, for every key;
/// after logging in again if `log_in` (a stream's token is the one it is
/// opened with).
async fn open(
    client: &Client,
    settings: &Settings,
    watches: &mut Watches,
    log_in: bool,
) -> tenure_core::Result<Stream> {
    let handles: Vec<i64> = watches.keys.keys().copied().collect();
    let Some((&first, rest)) = handles.split_first() else {
        return Err(tenure_core::Error::unavailable(
            crate::error::BACKEND,
            "no key to watch",
        ));
    };
    let (first_watch, first_key) = match watches.renumber(first) {
        Some((watch_id, key)) => (watch_id, key.key.clone()),
        None => unreachable!("a handle just listed"),
    };
    let from = watches.keys[&first].from;
    if log_in {
        log_in_again(client, settings.request_timeout).await?;
    }
    let stream = crate::error::watch_opened(settings.route, settings.request_timeout, || {
        let mut client = client.watch_client();
        let (key, options) = (first_key.clone(), options(first_watch, from));
        async move { client.watch(key, Some(options)).await }
    })
    .await
    .map_err(crate::error::map)?;
    let (mut requests, responses) = stream.split();
    for &handle in rest {
        if !watch(Some(&mut requests), watches, handle).await {
            return Err(tenure_core::Error::unavailable(
                crate::error::BACKEND,
                "the watch stream closed as it opened",
            ));
        }
    }
    Ok((requests, responses))
}

/// Fires the signal of the key of `handle`, and forgets it; its watch id.
fn fire(watches: &mut Watches, handle: i64) -> Option<i64> {
    let (watch_id, key) = watches.remove(handle)?;
    tracing::debug!(key = key.key, "our key was deleted");
    key.signal.fire(LossReason::Deleted);
    Some(watch_id)
}

/// Looks at a key in a task of its own, after `pause`; the answer comes
/// back to the driver as a command.
fn spawn_look(
    client: &Client,
    settings: &Settings,
    looks: &mpsc::WeakUnboundedSender<Command>,
    id: i64,
    key: &Watched,
    after_cancel: bool,
    pause: Duration,
) {
    let Some(looks) = looks.upgrade() else {
        return;
    };
    let (client, settings) = (client.clone(), settings.clone());
    let (name, create_revision) = (key.key.clone(), key.create_revision);
    tokio::spawn(async move {
        tokio::time::sleep(pause).await;
        let found = look(&client, &name, create_revision, &settings).await;
        let _ = looks.send(Command::Looked {
            id,
            found,
            after_cancel,
        });
    });
}

enum Looked {
    Gone,
    OursAt(i64),
}

/// Reads our key: gone (or recreated by someone else), or still ours as of
/// a revision.
async fn look(
    client: &Client,
    key: &str,
    create_revision: i64,
    settings: &Settings,
) -> tenure_core::Result<Looked> {
    let now = settings.get(client, key, None).await?;
    let ours = now
        .kvs()
        .iter()
        .any(|kv| kv.create_revision() == create_revision);
    Ok(match (ours, now.header()) {
        (false, _) => Looked::Gone,
        (true, Some(h)) => Looked::OursAt(h.revision()),
        (true, None) => Looked::OursAt(create_revision),
    })
}
