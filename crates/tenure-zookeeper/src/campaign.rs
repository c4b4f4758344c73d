//! One candidacy: create our node, look where it stands, wait on the node
//! ahead of it, and claim leadership once it is the lowest.
//!
//! Round trips per step (each a single request unless said otherwise):
//! - create (a write through the quorum leader);
//! - a look: a `sync` and, sent right behind it, one multi-read of the
//!   children and our node, and the list of our session's ephemeral nodes
//!   under the election (see [`latch::position`]); the lowest node claims.
//!   Our session's candidate nodes that no live candidacy claims (a
//!   withdrawal that never landed) are deleted first, a write only then;
//! - arming: exists-and-watch on the predecessor, and once, on our own node
//!   (two requests sent together);
//! - after the predecessor goes: one `sync`, when it was the only node ahead
//!   of ours (see [`first_after_predecessor`]); otherwise `sync` plus a
//!   multi-read, and wait again;
//! - withdrawal (an error, or the campaign dropped): a delete, retried
//!   until the node is gone or the session ended (see [`Withdrawal`]).
//! - once granted: an exists-and-watch on our node, off the grant's path,
//!   which the holder keeps while it leads (see [`own`](crate::own)).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tenure_core::hosted::{bounded, CleanupOnDrop};
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, FencingToken, Lease, LeaseHandle, LossSignal, Result,
};
use tokio::time::Instant;
use zookeeper_client::{Client, EventType, WatchedEvent};

use crate::error::{map, unavailable};
use crate::granted::ZkGrant;
use crate::latch::{self, OurNode};
use crate::session::{Claim, Session};
use crate::Settings;

/// Campaigns once on `session`: granted, held by another (`Once`), or an
/// error (after which our node is withdrawn). Closing the session ends the
/// campaign at once, with a retryable error.
pub(crate) async fn acquire(
    session: Arc<Session>,
    candidacy: &Candidacy,
    mode: AcquireMode,
    settings: Settings,
) -> Result<Acquisition> {
    let client = session.client()?;
    session
        .unless_closed(campaign(&session, &client, candidacy, mode, settings))
        .await
        .unwrap_or_else(|| Err(unavailable("the ZooKeeper session was closed")))
}

async fn campaign(
    session: &Arc<Session>,
    client: &Client,
    candidacy: &Candidacy,
    mode: AcquireMode,
    settings: Settings,
) -> Result<Acquisition> {
    let election = latch::election_path(&settings.base_path, candidacy.key().as_str());
    if mode == AcquireMode::Once {
        // Read first: a held election costs no write. After a sync, so that a
        // follower behind the quorum cannot show a released leader as holding.
        if let Some(children) =
            latch::children_synced(client, session, &election, &settings).await?
        {
            if let Some(info) = latch::leader(client, &election, &children, &settings).await? {
                return Ok(Acquisition::Held(info));
            }
        }
    }
    let prefix = latch::node_prefix();
    let identity = candidacy.identity().as_str();
    // From here on, leaving (error, or the future dropped, even before the
    // create's answer) withdraws our node; until it is known gone, the
    // session's sweeps leave it alone.
    let mut guard = CleanupOnDrop::arm(
        Withdrawal {
            claim: session.claim(&prefix),
            session: session.clone(),
            election: election.clone(),
            prefix: prefix.clone(),
            path: None,
            settings: settings.clone(),
        },
        |withdrawal| Box::pin(withdrawal.run()),
    );
    let node = latch::create(client, &election, &prefix, identity, &settings).await?;
    guard.state_mut().path = Some(node.path.clone());
    // A node past the sequence wrap would sort first: withdraw it (the guard).
    latch::check_sequence(&election, &node.name)?;
    if node.owner != session.id() {
        return Err(unavailable("our node belongs to an earlier session"));
    }
    let grant = |guard: CleanupOnDrop<Withdrawal>, sent_at: Instant| {
        // The candidacy leads: its claim goes on to the held lease.
        let claim = guard.disarm().claim;
        let signal = LossSignal::new();
        let held = ZkGrant::new(
            session.clone(),
            claim,
            &node,
            sent_at,
            candidacy.ttl(),
            settings.clone(),
            signal.clone(),
        );
        let token = Some(FencingToken::new(node.czxid as u64));
        // The lease counts from a `sync`'s send time, less the lead by which
        // the quorum leader's view of the session may lag (see
        // `ZooKeeperBackend::expiry_lead`).
        Acquisition::Granted(
            Lease::new(candidacy.clone(), token, sent_at, LeaseHandle::new(held))
                .with_expiry_lead(settings.expiry_lead)
                .with_loss_signal(signal),
        )
    };
    let mut own_watch: Option<OwnWatch<'_>> = None;
    loop {
        let sent_at = Instant::now();
        let position = latch::position(client, session, &election, &node, &settings).await?;
        // CURATOR-696: never claim leadership on a node that vanished or
        // belongs to an ended session; the caller re-enters with a new node.
        let index = position
            .children
            .iter()
            .position(|c| *c == node.name)
            .filter(|_| position.ours)
            .ok_or_else(|| {
                unavailable("our candidate node vanished or its session ended while waiting")
            })?;
        if index == 0 {
            return Ok(grant(guard, sent_at));
        }
        if mode == AcquireMode::Once {
            let ahead = &position.children[..index];
            if let Some(info) = latch::leader(client, &election, ahead, &settings).await? {
                guard.clean_up_now(settings.request_timeout).await;
                return Ok(Acquisition::Held(info));
            }
            continue;
        }
        // Watch the predecessor only (herd-free) and, sent right behind it and
        // armed once, our own node, so that its deletion (by hand, or the
        // session's end) ends the wait at once.
        let pred = format!("{election}/{}", position.children[index - 1]);
        let pred_watch = bounded(
            "exists and watch",
            settings.request_timeout,
            client.check_and_watch_stat(&pred),
        );
        let own = own_watch.get_or_insert_with(|| watch_own(client, &node.path, &settings));
        let (stat, watcher) = pred_watch.await?.map_err(map)?;
        let pred_gone = match stat {
            None => true,
            Some(_) => {
                let (event, from_predecessor) = tokio::select! {
                    event = watcher.changed() => (event, true),
                    event = own => {
                        own_watch = None;
                        match event {
                            Ok(Some(event)) => (event, false),
                            // Our node was gone when the watch was set, or
                            // the connection failed under the request (it is
                            // still in flight while we wait): the next look
                            // tells, and arms it again.
                            Ok(None) => continue,
                            Err(e) if e.is_retryable() => continue,
                            Err(e) => return Err(e),
                        }
                    }
                };
                if event.event_type == EventType::Session && event.session_state.is_terminated() {
                    return Err(unavailable("the ZooKeeper session ended while waiting"));
                }
                from_predecessor && event.event_type == EventType::NodeDeleted
            }
        };
        // The only node ahead of ours is gone (it was gone already, or went
        // while we waited): one `sync` may prove that we lead. Anything else
        // takes a full look.
        if pred_gone && index == 1 {
            let sent_at = Instant::now();
            if first_after_predecessor(client, &election, &node, &mut own_watch, &settings).await? {
                return Ok(grant(guard, sent_at));
            }
        }
    }
}

/// Whether our node leads now that the only node ahead of it is deleted,
/// proven with one `sync` instead of a `sync` and a read:
///
/// - lowest: the last look listed exactly one node ahead of ours, and it is
///   gone. Nodes ahead of ours never reappear: a lower sequence was created
///   before ours, so every look since our create listed it, and a deleted
///   sequence is never reused while our node keeps the election node alive.
/// - our node still exists: its watch, set (and answered, node present)
///   before this `sync` was sent, has not fired. The server delivers a watch
///   event before the answer of any request it serves after the change, and
///   the `sync` is answered only once our server has applied everything the
///   quorum leader had committed when the sync reached it; the client hands
///   out events and answers in the order they arrive. So a deletion of our
///   node committed before that point would show here.
/// - owned by our current session: ephemeralOwner never changes; it was our
///   session's at the create, and the client still has that session.
/// - the session alive as of this `sync`'s send time: had the leader ended
///   it before the sync reached it, our server would have applied the close
///   (deleting our node, and dropping our connection) before answering.
///
/// Anything less (the watch fired, the session ended) sends the candidate
/// back to a full look.
async fn first_after_predecessor(
    client: &Client,
    election: &str,
    node: &OurNode,
    own_watch: &mut Option<OwnWatch<'_>>,
    settings: &Settings,
) -> Result<bool> {
    bounded("sync", settings.request_timeout, client.sync(election))
        .await?
        .map_err(map)?;
    let quiet = match own_watch.as_mut() {
        Some(watch) => watch.as_mut().now_or_never().is_none(),
        None => false,
    };
    if !quiet {
        *own_watch = None; // spent (or never set): the next look re-arms it
    }
    Ok(quiet && client.session_id().0 == node.owner && !client.state().is_terminated())
}

/// The watch on our own node: its first event, `None` if the node was
/// already gone when the watch was set.
type OwnWatch<'a> = Pin<Box<dyn Future<Output = Result<Option<WatchedEvent>>> + Send + 'a>>;

/// Sets the watch on our own node now (the request goes out at once) and
/// returns its first event.
fn watch_own<'a>(client: &'a Client, path: &str, settings: &Settings) -> OwnWatch<'a> {
    let set = bounded(
        "exists and watch",
        settings.request_timeout,
        client.check_and_watch_stat(path),
    );
    Box::pin(async move {
        match set.await?.map_err(map)? {
            (Some(_), watcher) => Ok(Some(watcher.changed().await)),
            (None, _) => Ok(None),
        }
    })
}

/// Deleting a withdrawn candidate's node: by its path once known, else
/// found by its uuid prefix (the create may have landed without its
/// answer). Retried until the node is gone or the session has ended (which
/// takes the node with it): a node left behind while the session lives on
/// would sit in the queue, a standby behind it waiting for a ghost.
struct Withdrawal {
    session: Arc<Session>,
    /// ZkGrant until the node is known gone.
    claim: Claim,
    election: String,
    prefix: String,
    path: Option<String>,
    settings: Settings,
}

impl Withdrawal {
    async fn run(self) {
        // A closed session takes the node with it.
        let session = self.session.clone();
        session.unless_closed(self.until_gone()).await;
        drop(self.claim);
    }

    async fn until_gone(&self) {
        let mut pause = Duration::from_millis(50);
        let mut attempts = 0u32;
        loop {
            let Ok(client) = self.session.client() else {
                return;
            };
            if self.session.ended() {
                return;
            }
            let error = match self.attempt(&client).await {
                Ok(()) => {
                    if attempts > 0 {
                        tracing::info!(
                            election = self.election,
                            attempts,
                            "a candidacy's withdrawal landed after retries"
                        );
                    }
                    return;
                }
                Err(error) => error,
            };
            attempts += 1;
            if attempts == 1 {
                tracing::warn!(election = self.election, %error, "could not withdraw a candidacy yet; retrying until it is gone or the session ends");
            } else {
                tracing::debug!(election = self.election, %error, attempts, "withdrawing a candidacy failed again");
            }
            drop(client);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    async fn attempt(&self, client: &Client) -> Result<()> {
        let path = match &self.path {
            Some(path) => path.clone(),
            None => {
                match latch::find(client, &self.election, &self.prefix, &self.settings).await? {
                    Some(node) => node.path,
                    None => return Ok(()),
                }
            }
        };
        latch::delete(client, &path, &self.settings).await
    }
}
