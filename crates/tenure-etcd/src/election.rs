//! The election recipe of etcd's `concurrency.Election`, key for key.
//!
//! Each candidate puts `<prefix><election>/<lease id in hex>` (value: its
//! identity) bound to its own lease. The leader is the key with the lowest
//! create revision; a waiting candidate watches only the deletion of the key
//! created just before its own (herd-free). Keys of nested elections
//! (`<prefix><election>/b/...`) lie in the same range and are skipped.

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp,
    WatchFilterType, WatchOptions,
};
use std::time::Duration;

use tenure_core::{CandidateId, FencingToken, LeaderInfo, Result, MAX_IDENTITY_LEN};

use crate::error::{map, Route, BACKEND};
use crate::members::Via;
use crate::Settings;

/// The key prefix shared by an election's candidates (ends with `/`).
pub(crate) fn election_prefix(settings: &Settings, key: &str) -> String {
    format!("{}{}/", settings.key_prefix, key)
}

/// Who a candidate key says leads: identity from the value, token from the create revision.
pub(crate) fn leader_info(kv: &KeyValue) -> LeaderInfo {
    LeaderInfo {
        identity: shown_identity(kv.value()),
        token: Some(FencingToken::new(kv.create_revision() as u64)),
    }
}

/// Another candidate's value as an identity to show. Reading it never fails:
/// a Go service or `etcdctl elect` may propose any bytes (a JSON document of
/// a kilobyte, binary), and only our own identity is held to
/// [`MAX_IDENTITY_LEN`] bytes of text, before we send it. Shown lossily: bad
/// UTF-8 replaced, control characters escaped, surrounding white space
/// trimmed, cut to [`MAX_IDENTITY_LEN`] bytes ending in `…`.
pub(crate) fn shown_identity(value: &[u8]) -> CandidateId {
    let text = String::from_utf8_lossy(value);
    let mut shown = String::new();
    for c in text.trim().chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    if shown.len() > MAX_IDENTITY_LEN {
        let mut cut = MAX_IDENTITY_LEN - '…'.len_utf8();
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.truncate(shown.trim_end().len());
        shown.push('…');
    }
    CandidateId::new(&shown)
        .unwrap_or_else(|_| CandidateId::new("(empty)").expect("a valid identity"))
}

/// Whether `key` is a candidate of the election under `prefix`: the prefix
/// and one more segment (`<prefix><lease id>`, as `concurrency.Election`
/// names it). The prefix `a/` as a range also holds election `a/b`'s keys
/// `a/b/<lease id>`; those belong to that election, not to this one.
pub(crate) fn is_candidate(prefix: &str, key: &[u8]) -> bool {
    key.strip_prefix(prefix.as_bytes())
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/'))
}

/// Keys per page once a page held only nested elections' keys.
const PAGE: i64 = 64;

/// Walks the keys under `prefix` in create-revision `order` (at most
/// `max_create_revision`, if given), calling `visit` on each until it
/// returns true; returns the revision read at.
///
/// The first read is one linearizable request for `first_page` keys, which
/// is all it takes unless keys of nested elections (`<prefix>b/...`) come
/// first; only then do further pages follow, read at the first one's
/// revision so that the walk sees one state of the store.
async fn walk(
    via: Via<'_>,
    prefix: &str,
    settings: &Settings,
    order: SortOrder,
    max_create_revision: Option<i64>,
    first_page: i64,
    mut visit: impl FnMut(&KeyValue) -> bool,
) -> Result<i64> {
    let mut revision = None;
    let mut limit = first_page;
    // The create revision of the last key visited, and the keys visited at
    // it: a page starts there again, since one transaction may create
    // several keys at one revision.
    let mut boundary: Option<(i64, Vec<Vec<u8>>)> = None;
    loop {
        let mut options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, order)
            .with_limit(limit);
        if let Some(max) = max_create_revision {
            options = options.with_max_create_revision(max);
        }
        if let Some((at, _)) = &boundary {
            options = match order {
                SortOrder::Descend => options.with_max_create_revision(*at),
                _ => options.with_min_create_revision(*at),
            };
        }
        if let Some(revision) = revision {
            options = options.with_revision(revision);
        }
        let mut answer = via.get(prefix.as_bytes(), Some(options), settings).await?;
        let read_at = *revision.get_or_insert(answer.header().map_or(0, |h| h.revision()));
        let more = answer.more();
        let mut fresh = 0;
        for kv in answer.take_kvs() {
            let created = kv.create_revision();
            match &mut boundary {
                Some((at, seen)) if *at == created => {
                    if seen.iter().any(|k| k == kv.key()) {
                        continue;
                    }
                    seen.push(kv.key().to_vec());
                }
                _ => boundary = Some((created, vec![kv.key().to_vec()])),
            }
            fresh += 1;
            if visit(&kv) {
                return Ok(read_at);
            }
        }
        if !more {
            return Ok(read_at);
        }
        // A page of nothing new: more keys share one create revision than a
        // page holds; read the rest whole (no limit).
        limit = if fresh == 0 { 0 } else { PAGE };
    }
}

/// The current leader of the election (the candidate key with the lowest
/// create revision) and the revision read at: one linearizable read.
pub(crate) async fn leader<'a>(
    via: impl Into<Via<'a>>,
    prefix: &str,
    settings: &Settings,
) -> Result<(Option<KeyValue>, i64)> {
    let mut leader = None;
    let revision = walk(
        via.into(),
        prefix,
        settings,
        SortOrder::Ascend,
        None,
        1,
        |kv| {
            if is_candidate(prefix, kv.key()) {
                leader = Some(kv.clone());
            }
            leader.is_some()
        },
    )
    .await?;
    Ok((leader, revision))
}

/// Where our key stands: whether it still exists with our create revision
/// (etcd#11456, etcd#19597), the candidate key created just before it (if
/// any), and the revision read at.
pub(crate) struct Position {
    pub ours_exists: bool,
    pub predecessor: Option<KeyValue>,
    /// The predecessor is first in line: it leads, and we are next.
    pub predecessor_leads: bool,
    pub revision: i64,
}

/// Reads our position in one linearizable read (keys created up to ours,
/// newest first, three of them: ours, our predecessor, and whether anyone
/// is before it), never from history: a read as of the
/// predecessor's deletion would still show our key if it went afterwards
/// (deleted by hand, its lease revoked, or etcd#15247's stalled leader
/// revoking it), and we would claim leadership on a key that is gone while
/// the candidate after us claims it too.
pub(crate) async fn position<'a>(
    via: impl Into<Via<'a>>,
    prefix: &str,
    create_revision: i64,
    settings: &Settings,
) -> Result<Position> {
    let (mut ours_exists, mut predecessor, mut before_it) = (false, None, false);
    let revision = walk(
        via.into(),
        prefix,
        settings,
        SortOrder::Descend,
        Some(create_revision),
        3,
        |kv| {
            if kv.create_revision() == create_revision {
                ours_exists = true;
            } else if kv.create_revision() < create_revision && is_candidate(prefix, kv.key()) {
                if predecessor.is_none() {
                    predecessor = Some(kv.clone());
                } else {
                    before_it = true;
                }
            }
            before_it
        },
    )
    .await?;
    Ok(Position {
        ours_exists,
        predecessor_leads: predecessor.is_some() && !before_it,
        predecessor,
        revision,
    })
}

/// Creates our key if it does not exist; returns its create revision.
/// Safe to send twice: a create whose first answer was lost finds the key.
pub(crate) async fn create_key<'a>(
    via: impl Into<Via<'a>>,
    key: &str,
    identity: &str,
    lease_id: i64,
    settings: &Settings,
) -> Result<i64> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            identity,
            Some(etcd_client::PutOptions::new().with_lease(lease_id)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let answer = via.into().txn(&txn, settings).await?;
    if answer.succeeded() {
        return Ok(answer.header().map_or(0, |h| h.revision()));
    }
    // The key was there already (a retried create whose first answer was lost).
    for op in answer.op_responses() {
        if let etcd_client::TxnOpResponse::Get(get) = op {
            if let Some(kv) = get.kvs().first() {
                return Ok(kv.create_revision());
            }
        }
    }
    Err(tenure_core::Error::backend(
        BACKEND,
        "create-if-absent transaction returned neither success nor the key",
    ))
}

/// Operations per transaction: etcd's default `--max-txn-ops`.
pub(crate) const MAX_TXN_OPS: usize = 128;

/// Whether each key (name, create revision) still exists with that create
/// revision (etcd#11456, etcd#19597): one linearizable read for one key, a
/// read-only transaction of gets per [`MAX_TXN_OPS`] keys for more.
pub(crate) async fn still_ours_all<'a>(
    via: impl Into<Via<'a>>,
    keys: &[(String, i64)],
    settings: &Settings,
) -> Result<Vec<bool>> {
    let via = via.into();
    let ours = |kvs: &[KeyValue], create_revision: i64| {
        kvs.first()
            .is_some_and(|kv| kv.create_revision() == create_revision)
    };
    if let [(key, create_revision)] = keys {
        let answer = via
            .get(
                key.as_bytes(),
                Some(GetOptions::new().with_keys_only()),
                settings,
            )
            .await?;
        return Ok(vec![ours(answer.kvs(), *create_revision)]);
    }
    let mut found = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(MAX_TXN_OPS) {
        let txn = Txn::new().and_then(
            chunk
                .iter()
                .map(|(key, _)| TxnOp::get(key.as_str(), Some(GetOptions::new().with_keys_only())))
                .collect::<Vec<_>>(),
        );
        let answer = via.txn(&txn, settings).await?;
        let gets = answer.op_responses().into_iter().map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let mut answered = 0;
        for ((_, create_revision), get) in chunk.iter().zip(gets) {
            answered += 1;
            found.push(get.is_some_and(|get| ours(get.kvs(), *create_revision)));
        }
        if answered != chunk.len() {
            return Err(tenure_core::Error::backend(
                BACKEND,
                "a transaction of reads returned fewer answers than it asked",
            ));
        }
    }
    Ok(found)
}

/// Deletes `key` whatever its create revision: only for a name that no one
/// else ever uses (a withdrawn candidacy's, whose create revision is not
/// known because its create was never answered).
pub(crate) async fn delete_by_name<'a>(
    via: impl Into<Via<'a>>,
    key: &str,
    settings: &Settings,
) -> Result<()> {
    via.into()
        .unary(settings, |client, settings| async move {
            settings
                .unary(&client, "delete", || {
                    let mut kv = client.kv_client();
                    async move { kv.delete(key, None).await }
                })
                .await
        })
        .await?;
    Ok(())
}

/// Deletes our key only if it is still the one we created (etcd#22082).
pub(crate) async fn delete_if_ours<'a>(
    via: impl Into<Via<'a>>,
    key: &str,
    create_revision: i64,
    settings: &Settings,
) -> Result<()> {
    let txn = Txn::new()
        .when([Compare::create_revision(
            key,
            CompareOp::Equal,
            create_revision,
        )])
        .and_then([TxnOp::delete(key, None)]);
    via.into().txn(&txn, settings).await?;
    Ok(())
}

/// Resolves when `key` (created at `create_revision`) is deleted at or after
/// `from_revision`, or when the watch was cancelled (compaction): either way
/// the caller reads its position again.
///
/// A watch that starts at a revision the server has already passed is served
/// by etcd's catch-up loop, which runs every 100 ms; so once the watch exists
/// we look once, and a predecessor that left in between is seen at once.
///
/// A watch etcd refuses ([`refused`]) is neither: the client logs in again
/// and watches anew, once; refused again, the error says why (retryable if
/// for the token, as after an auth-store change racing the login).
pub(crate) async fn deleted<'a>(
    via: impl Into<Via<'a>>,
    key: &[u8],
    create_revision: i64,
    from_revision: i64,
    settings: &Settings,
) -> Result<()> {
    let via = via.into();
    let options = WatchOptions::new()
        .with_start_revision(from_revision)
        .with_filters([WatchFilterType::NoPut]);
    // On one member of several: the one that answered last, unless set
    // aside (one that fails the watch is, and the caller comes back).
    // Opening may hang on a frozen member: bounded (the waiter next in line
    // does not wait for it meanwhile; it looks for itself).
    let (client, member) = via.watch_client(settings.request_timeout).await?;
    let on_member = Settings {
        key_prefix: settings.key_prefix.clone(),
        request_timeout: settings.request_timeout,
        route: match member {
            Some(_) => Route::ThisMember,
            None => settings.route,
        },
    };
    let mut logged_in = false;
    'watch: loop {
        let watched = async {
            let opened =
                crate::error::watch_opened(on_member.route, on_member.request_timeout, || {
                    let (mut watches, options) = (client.watch_client(), options.clone());
                    async move { watches.watch(key.to_vec(), Some(options)).await }
                });
            let mut stream =
                tenure_core::hosted::bounded("watch", on_member.request_timeout, opened)
                    .await?
                    .map_err(map)?;
            let mut looked = false;
            while let Some(answer) = stream.message().await.map_err(map)? {
                if let Some(reason) = refused(&answer) {
                    return Ok(Some(reason.to_owned()));
                }
                if answer.canceled()
                    || answer
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete)
                {
                    return Ok(None);
                }
                if answer.created() && !looked {
                    looked = true;
                    let now = on_member.get(&client, key, None).await?;
                    if !now
                        .kvs()
                        .iter()
                        .any(|kv| kv.create_revision() == create_revision)
                    {
                        return Ok(None);
                    }
                }
            }
            Err(tenure_core::Error::unavailable(
                BACKEND,
                "watch stream ended",
            ))
        }
        .await;
        let reason = match watched {
            Ok(None) => return Ok(()),
            Ok(Some(reason)) => reason,
            Err(error) => {
                if let (Some(member), true) = (member, error.is_retryable()) {
                    if let Via::Members(members) = via {
                        members.avoid(member);
                    }
                }
                return Err(error);
            }
        };
        if logged_in {
            return Err(refusal(&reason, key));
        }
        tracing::debug!(
            reason,
            "etcd refused the watch of our predecessor; logging in again"
        );
        log_in_again(&client, settings.request_timeout).await?;
        logged_in = true;
        continue 'watch;
    }
}

/// Why etcd refused to create a watch, if `answer` is such a refusal:
/// "created" and "canceled" at once, with a reason (and, since etcd 3.4.21
/// and 3.5.5, watch id −1 whatever id was asked for). The reasons: a token
/// it no longer takes ("invalid auth token": expired, or a simple token
/// unused for `--auth-token-ttl`; "revision of auth store is old"; earlier
/// releases said "permission denied" for both), no right to read the key,
/// or a watch id in use. A stream's token is the one it was opened with,
/// so every watch created on it later is refused once that token lapses,
/// however fresh the client's token is by then. It is neither a watch
/// created nor an event: the watch must be created again, on a stream
/// opened after logging in again. (A watch cancelled for compaction comes
/// as an answer of its own, after its "created".)
pub(crate) fn refused(answer: &etcd_client::WatchResponse) -> Option<&str> {
    (answer.created() && answer.canceled()).then(|| answer.cancel_reason())
}

/// Whether a watch refusal's reason is the stream's token: logging in
/// again is the cure.
fn refused_for_token(reason: &str) -> bool {
    matches!(
        reason,
        "etcdserver: invalid auth token" | "etcdserver: revision of auth store is old"
    )
}

/// The error of a watch of `key` refused again after logging in again:
/// retryable if still for the token (the auth store changed again), not
/// otherwise (no right to read the key: waiting cannot cure that).
fn refusal(reason: &str, key: &[u8]) -> tenure_core::Error {
    let message = format!(
        "etcd refused to watch {}: {reason}",
        String::from_utf8_lossy(key)
    );
    match refused_for_token(reason) {
        true => tenure_core::Error::unavailable(BACKEND, message),
        false => tenure_core::Error::backend(BACKEND, message),
    }
}

/// Logs `client` in again (a new token for the streams it opens from now
/// on), within `within`. Nothing happens without credentials.
pub(crate) async fn log_in_again(client: &Client, within: Duration) -> Result<()> {
    tenure_core::hosted::bounded("authenticate", within, client.refresh_token())
        .await?
        .map_err(map)
}

#[cfg(test)]
mod tests {
    use super::{is_candidate, shown_identity};

    #[test]
    fn any_value_shows_as_a_bounded_identity() {
        let long = "é".repeat(300);
        let shown = shown_identity(long.as_bytes());
        assert!(shown.as_str().len() <= tenure_core::MAX_IDENTITY_LEN);
        assert!(shown.as_str().ends_with('…'));
        assert_eq!(shown_identity(b"\xff\x00a").as_str(), "\u{fffd}\\u{0}a");
        assert_eq!(shown_identity(b"  ").as_str(), "(empty)");
        assert_eq!(shown_identity(b"replica-a").as_str(), "replica-a");
    }

    #[test]
    fn only_one_segment_after_the_prefix_is_a_candidate() {
        assert!(is_candidate("a/", b"a/694d7b2f5a1c0e04"));
        assert!(!is_candidate("a/", b"a/b/694d7b2f5a1c0e04"));
        assert!(!is_candidate("a/", b"a/"));
        assert!(!is_candidate("a/", b"ab/694d"));
        assert!(is_candidate("tenure/a/b/", b"tenure/a/b/694d"));
    }
}
