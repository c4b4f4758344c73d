//! Keeping one etcd lease alive, on a keep-alive stream opened on demand
//! on one member at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use crate::error::{map, Route, BACKEND};
use crate::members::Members;
use crate::Settings;
use tenure_core::{Error, Result};

/// One lease's keep-alive stream. A broken stream is reopened on the next call.
///
/// Answers on the stream carry nothing that ties them to a request, so a
/// call abandoned between sending its keep-alive and reading the answer
/// (its future dropped) would leave that answer for the next call to take as
/// its own, counting an old renewal from a later send. `in_flight` marks
/// such a call; the next one drops the stream and opens a fresh one.
pub(crate) struct KeepAlive {
    lease_id: i64,
    /// The open stream and the member it is on.
    stream: Option<(usize, LeaseKeeper, LeaseKeepAliveStream)>,
    in_flight: bool,
    /// The member that answered the last keep-alive.
    last: Option<usize>,
}

/// What a keep-alive told us.
pub(crate) enum Kept {
    /// The lease lives on; the deadline may count from `sent_at`.
    Alive { sent_at: Instant },
    /// The lease is gone on the server.
    Expired,
}

impl KeepAlive {
    pub(crate) fn new(lease_id: i64) -> Self {
        KeepAlive {
            lease_id,
            stream: None,
            in_flight: false,
            last: None,
        }
    }

    fn reset(&mut self) {
        self.stream = None;
        self.in_flight = false;
    }

    /// Sends one keep-alive through `member` (whose client is `client`) and
    /// waits for its answer.
    async fn keep_alive(
        &mut self,
        client: &Client,
        member: usize,
        settings: &Settings,
    ) -> Result<Kept> {
        if self.stream.as_ref().is_some_and(|(on, _, _)| *on != member) {
            self.reset();
        }
        if self.in_flight {
            // An earlier call gave up before its answer came: that answer may
            // still arrive on this stream. Start over on a new one.
            tracing::debug!(
                lease_id = self.lease_id,
                "keep-alive stream reset after an abandoned renewal"
            );
            self.reset();
        }
        let sent_at = Instant::now();
        let lease_id = self.lease_id;
        let result = match self.stream.as_mut() {
            // Opening the stream sends a keep-alive and reads its answer
            // (etcd-client refuses a lease that is gone): that is this call's
            // renewal.
            None => settings
                .unary(client, "keep-alive", || {
                    let mut leases = client.lease_client();
                    async move { leases.keep_alive(lease_id).await }
                })
                .await
                .map(|(keeper, stream)| {
                    self.stream = Some((member, keeper, stream));
                    Some(true)
                }),
            Some((_, keeper, stream)) => {
                // Messages on an open stream carry no token: nothing to refresh.
                let in_flight = &mut self.in_flight;
                let sent = async {
                    *in_flight = true;
                    keeper.keep_alive().await?;
                    let answer = stream.message().await?;
                    *in_flight = false;
                    Ok::<_, etcd_client::Error>(answer.map(|answer| answer.ttl() > 0))
                };
                match tokio::time::timeout(settings.request_timeout, sent).await {
                    Ok(answer) => answer.map_err(map),
                    Err(_) => Err(Error::Timeout {
                        operation: "keep-alive",
                        after: settings.request_timeout,
                    }),
                }
            }
        };
        match result {
            Ok(Some(true)) => Ok(Kept::Alive { sent_at }),
            Ok(Some(false)) => Ok(Kept::Expired),
            Err(Error::Backend { source, .. } | Error::Unavailable { source, .. })
                if source
                    .downcast_ref::<etcd_client::Error>()
                    .is_some_and(crate::error::is_lease_not_found) =>
            {
                self.reset();
                Ok(Kept::Expired)
            }
            Ok(None) => {
                self.reset();
                Err(Error::unavailable(
                    BACKEND,
                    "keep-alive stream closed by the server",
                ))
            }
            Err(error) => {
                self.reset();
                Err(error)
            }
        }
    }
}

/// What a renewal found.
pub(crate) enum Renewed {
    /// The lease lives on; the deadline may count from `sent_at`. For each
    /// key asked about, in order, whether it is still ours, or the server's
    /// refusal to read it (that key's alone).
    Alive {
        sent_at: Instant,
        ours: Vec<Result<bool>>,
    },
    /// The lease is gone on the server.
    Expired,
}

/// Below this, what is left before the deadline is not worth a try.
const LAST_TRY: Duration = Duration::from_millis(10);

/// A try shorter than this would not leave a loaded member time to answer:
/// below it, the try gets all that is left.
const MIN_TRY: Duration = Duration::from_millis(50);

/// Keeps the lease alive before `deadline` (its holder's local deadline,
/// past which the Elector no longer waits), and then reads whether each of
/// `keys` (name, create revision) is still ours ([`read_ours`], in
/// transactions of at most `max_txn_ops` gets).
///
/// One member at a time: the one that answered last ([`Members::pick`]).
/// A try that fails or times out sets its member aside, and the next one
/// goes to another. Each try's keep-alive gets two thirds of the time left
/// where there is another member (even one set aside: a member that
/// refused a connection a while ago may serve now): a frozen member, or a
/// follower whose forward hangs on a leader that is gone, costs a try and
/// not the lease, and later tries, shorter, reach the servers' new leader
/// once they have one. The read after the keep-alive gets as long again,
/// within the deadline.
///
/// No try waits past the request timeout. With one member each try, and
/// for a call made with no time left (a caller of the backend renewing
/// late) its only try, gets all of it: an answer after the deadline still
/// renews, counted from its send.
pub(crate) async fn renew(
    keep: &mut KeepAlive,
    members: &Members,
    settings: &Settings,
    deadline: Instant,
    keys: &[(String, i64)],
    max_txn_ops: &AtomicUsize,
) -> Result<Renewed> {
    let late = deadline <= Instant::now();
    let several = members.len() > 1;
    let mut tries = 0;
    loop {
        let member = members.pick(keep.last);
        let left = deadline.saturating_duration_since(Instant::now());
        // With one member there is nowhere else to go: a try may take the
        // request timeout, as an answer after the deadline still renews
        // (from its send) for a caller of the backend itself.
        let whole = match late || !several {
            true => settings.request_timeout,
            false => left.min(settings.request_timeout),
        };
        // Two thirds of what is left, each try, while that is worth a try
        // and there is another member to go to; else all of it.
        let bound = match several && whole * 2 / 3 >= MIN_TRY {
            true => whole * 2 / 3,
            false => whole,
        };
        let this_try = Settings {
            key_prefix: settings.key_prefix.clone(),
            request_timeout: bound,
            route: Route::ThisMember,
        };
        let attempt = async {
            let client = members.client_within(member, bound).await?;
            match keep.keep_alive(&client, member, &this_try).await? {
                Kept::Expired => Ok::<_, Error>(Renewed::Expired),
                Kept::Alive { sent_at } if keys.is_empty() => Ok(Renewed::Alive {
                    sent_at,
                    ours: Vec::new(),
                }),
                // The read gets as long as the keep-alive had (a slow link
                // takes two round trips), within the deadline: a member that
                // answered the keep-alive may still hang on a linearizable
                // read (a leader cut off from its peers renews leases on its
                // own until it steps down).
                Kept::Alive { sent_at } => {
                    let read = Settings {
                        key_prefix: settings.key_prefix.clone(),
                        route: Route::ThisMember,
                        request_timeout: match late || !several {
                            true => bound,
                            false => deadline
                                .saturating_duration_since(Instant::now())
                                .min(bound),
                        },
                    };
                    let ours = read_ours(&client, keys, &read, max_txn_ops).await?;
                    Ok(Renewed::Alive { sent_at, ours })
                }
            }
        };
        let error = match attempt.await {
            Ok(renewed) => {
                keep.last = Some(member);
                return Ok(renewed);
            }
            Err(error) if error.is_retryable() => error,
            Err(error) => return Err(error),
        };
        members.avoid(member);
        tries += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        if late || left < LAST_TRY || tries >= 2 * members.len() {
            return Err(error);
        }
        tracing::debug!(member, %error, ?left, "a keep-alive try failed; trying another member");
    }
}

/// Whether each of `keys` is still ours, in read-only transactions of at
/// most `max_txn_ops` gets: etcd's default `--max-txn-ops` is 128, and a
/// server started with less refuses a longer transaction as a whole
/// ("too many operations in txn request"); the limit is then halved, for
/// good, and the keys read again. etcd also refuses a whole transaction
/// for one get the user may not make (an election whose permissions
/// differ from the others' of the client): those keys are read again one
/// by one, and only the keys refused carry the refusal (their terms end;
/// the others go on).
pub(crate) async fn read_ours(
    client: &Client,
    keys: &[(String, i64)],
    settings: &Settings,
    max_txn_ops: &AtomicUsize,
) -> Result<Vec<Result<bool>>> {
    let mut found = Vec::with_capacity(keys.len());
    let mut rest = keys;
    while !rest.is_empty() {
        let n = max_txn_ops.load(Ordering::SeqCst).clamp(1, rest.len());
        let (chunk, after) = rest.split_at(n);
        match crate::election::still_ours_all(client, chunk, settings).await {
            Ok(ours) => found.extend(ours.into_iter().map(Ok)),
            Err(e) if n > 1 && crate::error::is_too_many_ops(&e) => {
                let lower = n / 2;
                max_txn_ops.fetch_min(lower, Ordering::SeqCst);
                tracing::info!(
                    max_txn_ops = lower,
                    "etcd refused a transaction of {n} operations (its --max-txn-ops is lower);                      reading in transactions of {lower}"
                );
                continue;
            }
            Err(e) if n > 1 && crate::error::is_refused(&e) => {
                for key in chunk {
                    let one = std::slice::from_ref(key);
                    match crate::election::still_ours_all(client, one, settings).await {
                        Ok(ours) => found.push(Ok(ours.first().copied().unwrap_or(false))),
                        Err(e) if crate::error::is_refused(&e) => found.push(Err(e)),
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) if crate::error::is_refused(&e) => found.push(Err(e)),
            Err(e) => return Err(e),
        }
        rest = after;
    }
    Ok(found)
}

/// Revokes a lease (deleting every key attached to it), ignoring "not found".
pub(crate) async fn revoke(client: &Client, lease_id: i64, settings: &Settings) -> Result<()> {
    let revoked = settings.unary(client, "revoke", || {
        let mut leases = client.lease_client();
        async move {
            match leases.revoke(lease_id).await {
                Err(e) if crate::error::is_lease_not_found(&e) => Ok(()),
                Err(e) => Err(e),
                Ok(_) => Ok(()),
            }
        }
    });
    revoked.await
}
