//! The election recipe of etcd's `concurrency.Election`, key for key.
//!
//! Each candidate puts `<prefix><election>/<lease id in hex>` (value: its
//! identity) bound to its own lease. The leader is the key with the lowest
//! create revision; a waiting candidate watches only the deletion of the key
//! created just before its own (herd-free).

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp,
    WatchFilterType, WatchOptions,
};
use tenure_core::{CandidateId, FencingToken, LeaderInfo, Result};

use crate::error::{bounded, map, BACKEND};
use crate::Settings;

/// The key prefix shared by an election's candidates (ends with `/`).
pub(crate) fn election_prefix(settings: &Settings, key: &str) -> String {
    format!("{}{}/", settings.key_prefix, key)
}

/// A candidate's own key, as `concurrency.Election` names it.
pub(crate) fn candidate_key(prefix: &str, lease_id: i64) -> String {
    format!("{prefix}{lease_id:x}")
}

/// Who a candidate key says leads: identity from the value, token from the create revision.
pub(crate) fn leader_info(kv: &KeyValue) -> Result<LeaderInfo> {
    let identity = String::from_utf8_lossy(kv.value());
    Ok(LeaderInfo {
        identity: CandidateId::new(identity.as_ref())
            .or_else(|_| CandidateId::new(format!("{:?}", identity)))?,
        token: Some(FencingToken::new(kv.create_revision() as u64)),
    })
}

/// The current leader of the election (lowest create revision) and the revision read at.
pub(crate) async fn leader(
    client: &Client,
    prefix: &str,
    settings: &Settings,
) -> Result<(Option<KeyValue>, i64)> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let mut answer = bounded(
        "get",
        settings.request_timeout,
        client.kv_client().get(prefix, Some(options)),
    )
    .await?;
    let revision = answer.header().map_or(0, |h| h.revision());
    Ok((answer.take_kvs().into_iter().next(), revision))
}

/// Where our key stands, in one linearizable read: whether it still exists
/// with our create revision (etcd#11456, etcd#19597), the key created just
/// before it (if any), and the revision read at.
pub(crate) struct Position {
    pub ours_exists: bool,
    pub predecessor: Option<KeyValue>,
    pub revision: i64,
}

///
/// With `at`, the read is of the store as it was at that revision (the
/// predecessor's deletion): immutable history, so any member that has
/// applied it may serve it without a quorum round; keys created later have
/// higher create revisions and cannot come before ours. Without `at`, or if
/// the member has not applied it yet (or compacted it), a linearizable read.
pub(crate) async fn position(
    client: &Client,
    prefix: &str,
    create_revision: i64,
    at: Option<i64>,
    settings: &Settings,
) -> Result<Position> {
    if let Some(at) = at {
        let options = queue_options(create_revision)
            .with_revision(at)
            .with_serializable();
        let mut kv = client.kv_client();
        let read = kv.get(prefix, Some(options));
        if let Ok(Ok(answer)) = tokio::time::timeout(settings.request_timeout, read).await {
            return Ok(Position::from_answer(answer, create_revision));
        }
    }
    let options = queue_options(create_revision);
    let answer = bounded(
        "get",
        settings.request_timeout,
        client.kv_client().get(prefix, Some(options)),
    )
    .await?;
    Ok(Position::from_answer(answer, create_revision))
}

/// Keys created up to ours, newest first, at most two: ours and the one before.
fn queue_options(create_revision: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_max_create_revision(create_revision)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(2)
}

impl Position {
    fn from_answer(mut answer: etcd_client::GetResponse, create_revision: i64) -> Position {
        let revision = answer.header().map_or(0, |h| h.revision());
        let kvs = answer.take_kvs();
        Position {
            ours_exists: kvs.iter().any(|kv| kv.create_revision() == create_revision),
            predecessor: kvs
                .into_iter()
                .find(|kv| kv.create_revision() < create_revision),
            revision,
        }
    }
}

/// Creates our key if it does not exist; returns its create revision.
pub(crate) async fn create_key(
    client: &Client,
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
    let answer = bounded("txn", settings.request_timeout, client.kv_client().txn(txn)).await?;
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
    Err(tenure_core::Error::Backend {
        backend: BACKEND,
        source: "create-if-absent transaction returned neither success nor the key".into(),
    })
}

/// Whether our key still exists with our create revision (etcd#11456, etcd#19597).
pub(crate) async fn still_ours(
    client: &Client,
    key: &str,
    create_revision: i64,
    settings: &Settings,
) -> Result<bool> {
    let answer = bounded(
        "get",
        settings.request_timeout,
        client.kv_client().get(key, None),
    )
    .await?;
    Ok(answer
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == create_revision))
}

/// Deletes our key only if it is still the one we created (etcd#22082).
pub(crate) async fn delete_if_ours(
    client: &Client,
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
    bounded("txn", settings.request_timeout, client.kv_client().txn(txn)).await?;
    Ok(())
}

/// Resolves when `key` (created at `create_revision`) is deleted at or after
/// `from_revision`, with a revision at which it is known to be gone; `None`
/// when the watch was cancelled (compaction) and the caller must re-read.
///
/// A watch that starts at a revision the server has already passed is served
/// by etcd's catch-up loop, which runs every 100 ms; so once the watch exists
/// we look once, and a predecessor that left in between is seen at once.
pub(crate) async fn deleted(
    client: &Client,
    key: &str,
    create_revision: i64,
    from_revision: i64,
    settings: &Settings,
) -> Result<Option<i64>> {
    let options = WatchOptions::new()
        .with_start_revision(from_revision)
        .with_filters([WatchFilterType::NoPut]);
    let mut stream = client
        .watch_client()
        .watch(key, Some(options))
        .await
        .map_err(map)?;
    let mut looked = false;
    while let Some(answer) = stream.message().await.map_err(map)? {
        if let Some(event) = answer
            .events()
            .iter()
            .find(|e| e.event_type() == EventType::Delete)
        {
            let at = event.kv().map(|kv| kv.mod_revision());
            return Ok(at.or(answer.header().map(|h| h.revision())));
        }
        if answer.canceled() {
            return Ok(None);
        }
        if answer.created() && !looked {
            looked = true;
            let now = bounded(
                "get",
                settings.request_timeout,
                client.kv_client().get(key, None),
            )
            .await?;
            if !now
                .kvs()
                .iter()
                .any(|kv| kv.create_revision() == create_revision)
            {
                return Ok(now.header().map(|h| h.revision()));
            }
        }
    }
    Err(tenure_core::Error::Unavailable {
        backend: BACKEND,
        source: "watch stream ended".into(),
    })
}
