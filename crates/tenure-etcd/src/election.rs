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

pub(crate) async fn position(
    client: &Client,
    prefix: &str,
    create_revision: i64,
    settings: &Settings,
) -> Result<Position> {
    let options = GetOptions::new()
        .with_prefix()
        .with_max_create_revision(create_revision)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(2);
    let mut answer = bounded(
        "get",
        settings.request_timeout,
        client.kv_client().get(prefix, Some(options)),
    )
    .await?;
    let revision = answer.header().map_or(0, |h| h.revision());
    let kvs = answer.take_kvs();
    Ok(Position {
        ours_exists: kvs.iter().any(|kv| kv.create_revision() == create_revision),
        predecessor: kvs
            .into_iter()
            .find(|kv| kv.create_revision() < create_revision),
        revision,
    })
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

/// Resolves when `key` is deleted at or after `from_revision`. A compacted or
/// cancelled watch resolves too: the caller re-reads and decides.
pub(crate) async fn deleted(client: &Client, key: &str, from_revision: i64) -> Result<()> {
    let options = WatchOptions::new()
        .with_start_revision(from_revision)
        .with_filters([WatchFilterType::NoPut]);
    let mut stream = client
        .watch_client()
        .watch(key, Some(options))
        .await
        .map_err(map)?;
    while let Some(answer) = stream.message().await.map_err(map)? {
        if answer.canceled()
            || answer
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
        {
            return Ok(());
        }
    }
    Err(tenure_core::Error::Unavailable {
        backend: BACKEND,
        source: "watch stream ended".into(),
    })
}
