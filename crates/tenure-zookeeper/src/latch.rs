//! Curator LeaderLatch's recipe, node for node.
//!
//! Each candidate creates an ephemeral sequential node
//! `<election>/_c_<uuid>-latch-<seq>` (Curator's protected-mode name, data =
//! its identity). The leader is the node with the lowest sequence (Curator
//! sorts by the text after `latch-`); a waiting candidate watches only the
//! node just before its own (herd-free). Only such latch nodes are
//! candidates: the election node of a nested key (`k/b`'s `b` under `k`) is
//! not, so elections `k` and `k/b` are independent.

use tenure_core::hosted::bounded;
use tenure_core::{CandidateId, FencingToken, LeaderInfo, LossReason, Result};
use zookeeper_client::{Client, Error as ZkError, MultiReadResult, Stat};

use crate::error::{map, unavailable};
use crate::session::Session;
use crate::Settings;

/// Curator's lock name: the sequence follows it.
const LOCK_NAME: &str = "latch-";

/// Curator's protected-mode prefix, which every tenure node name starts with.
const PROTECTED: &str = "_c_";

/// The election's path: the base path, then the key.
pub(crate) fn election_path(base: &str, key: &str) -> String {
    format!("{}/{key}", base.trim_end_matches('/'))
}

/// A fresh protected-mode prefix, `_c_<uuid>-latch-` (the server appends the sequence).
pub(crate) fn node_prefix() -> String {
    let r: u128 = rand::random();
    // A version 4 UUID, as Java's UUID.randomUUID() prints it.
    let r = (r & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let h = format!("{r:032x}");
    format!(
        "{PROTECTED}{}-{}-{}-{}-{}-{LOCK_NAME}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Whether a child of an election node is a candidate's node: Curator's
/// `latch-<sequence>`, or with its protected-mode prefix
/// `_c_<uuid>-latch-<sequence>` (tenure's). Nothing else under an election
/// node is a candidate: above all not the election node of a nested key
/// (`k/b`'s node `b` is a child of `k`'s), so elections `k` and `k/b` are
/// independent.
pub(crate) fn is_candidate(name: &str) -> bool {
    let Some(i) = name.rfind(LOCK_NAME) else {
        return false;
    };
    let (head, sequence) = (&name[..i], &name[i + LOCK_NAME.len()..]);
    // ZooKeeper appends `%010d` of a signed counter.
    let digits = sequence.strip_prefix('-').unwrap_or(sequence);
    let sequence_ok = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    let head_ok = head.is_empty() || (head.starts_with(PROTECTED) && head.ends_with('-'));
    sequence_ok && head_ok
}

/// A candidate node's name up to its sequence (`_c_<uuid>-latch-`).
pub(crate) fn prefix_of(name: &str) -> Option<&str> {
    let end = name.rfind(LOCK_NAME)? + LOCK_NAME.len();
    is_candidate(name).then(|| &name[..end])
}

/// The text Curator sorts a candidate by: what follows the last `latch-`.
fn sort_key(name: &str) -> &str {
    match name.rfind(LOCK_NAME) {
        Some(i) => &name[i + LOCK_NAME.len()..],
        None => name,
    }
}

/// The candidates among an election's children, in Curator's order: the
/// leader first. Other children (nested elections) are left out.
pub(crate) fn candidates(children: Vec<String>) -> Vec<String> {
    let mut candidates: Vec<String> = children.into_iter().filter(|c| is_candidate(c)).collect();
    candidates.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    candidates
}

/// How close to the wrap a sequence draws a warning: a million creates left.
const SEQUENCE_WARN_FROM: i64 = i32::MAX as i64 - (1 << 20);

/// ZooKeeper numbers an election's children with a signed 32-bit counter
/// of the election node's own: after 2^31 creates under one election node
/// the next sequence is negative, and its `-` sorts it before every other
/// (Curator sorts the text, and so does tenure): that node would lead while
/// the holder still does. A candidate whose node got a negative sequence
/// must not campaign; the error says how to reset the counter. Near the
/// wrap, a warning.
pub(crate) fn check_sequence(election: &str, name: &str) -> Result<()> {
    let sequence = sort_key(name);
    if sequence.starts_with('-') {
        return Err(tenure_core::Error::backend(
            crate::error::BACKEND,
            format!(
                "the election node {election} has had 2^31 candidate nodes: ZooKeeper's \
                 sequence counter wrapped, and a node numbered {sequence} would sort before \
                 the holder's; delete {election} while nobody holds it (its counter starts \
                 again at 0)"
            ),
        ));
    }
    if sequence
        .parse::<i64>()
        .is_ok_and(|n| n >= SEQUENCE_WARN_FROM)
    {
        tracing::warn!(
            election,
            sequence,
            "the election node's sequence counter nears its wrap at 2^31; delete the \
             election node while nobody holds it to reset it"
        );
    }
    Ok(())
}

/// Who a candidate node says leads: identity from its data (the node name
/// when it is not a valid identity, as Curator's default empty id), token
/// from its czxid.
pub(crate) fn leader_info(name: &str, data: &[u8], stat: &Stat) -> Result<LeaderInfo> {
    let identity = String::from_utf8_lossy(data);
    Ok(LeaderInfo {
        identity: CandidateId::new(identity.as_ref()).or_else(|_| CandidateId::new(name))?,
        token: Some(FencingToken::new(stat.czxid as u64)),
    })
}

/// Sends a `sync` on `path` and, right behind it, the reads `read` makes,
/// within the request deadline: the reads then see every change the quorum
/// had committed when the sync was sent (a follower behind the quorum, or
/// cut off from it, cannot answer from a stale view). Both answers.
async fn after_sync<R, F>(
    client: &Client,
    path: &str,
    operation: &'static str,
    settings: &Settings,
    read: impl FnOnce() -> F,
) -> Result<(Result<(), ZkError>, R)>
where
    F: std::future::Future<Output = R>,
{
    bounded(operation, settings.request_timeout, async {
        // Sent here, in this order: the reads follow the sync.
        let sync = client.sync(path);
        let read = read();
        Ok::<_, ZkError>(futures::join!(sync, read))
    })
    .await?
    .map_err(map)
}

/// The election's candidates as of after a `sync` sent just before the read
/// (pipelined: one round trip through the quorum leader), `None` if the
/// election node does not exist. Unlike a plain read on a follower, this
/// view holds every change committed before the sync was sent, such as a
/// release that another client saw answered. Our session's nodes that no
/// live candidacy claims are deleted first and left out (see [`sweep`]).
pub(crate) async fn children_synced(
    client: &Client,
    session: &Session,
    election: &str,
    settings: &Settings,
) -> Result<Option<Vec<String>>> {
    let (synced, (listed, ephemerals)) =
        after_sync(client, election, "sync and list children", settings, || {
            futures::future::join(
                client.list_children(election),
                client.list_ephemerals(election),
            )
        })
        .await?;
    match (synced, listed) {
        (Err(ZkError::NoNode), _) | (Ok(()), Err(ZkError::NoNode)) => Ok(None),
        (Err(e), _) | (Ok(()), Err(e)) => Err(map(e)),
        (Ok(()), Ok(children)) => {
            let children = candidates(children);
            sweep(client, session, election, children, ephemerals, settings)
                .await
                .map(Some)
        }
    }
}

/// Deletes the nodes our session owns under `election` (`ephemerals`, read
/// with the children) that are tenure candidate nodes no live candidacy of
/// the session claims: withdrawals that never landed, which would otherwise
/// sit in the queue, and might lead it, for the session's whole life.
/// Returns `candidates` without them. A live candidacy claims its node from
/// before its create is sent until the node is known gone, so no node in
/// use is taken for one.
async fn sweep(
    client: &Client,
    session: &Session,
    election: &str,
    candidates: Vec<String>,
    ephemerals: Result<Vec<String>, ZkError>,
    settings: &Settings,
) -> Result<Vec<String>> {
    let ephemerals = ephemerals.map_err(map)?;
    let dir = format!("{election}/");
    let orphans: Vec<&str> = ephemerals
        .iter()
        .filter_map(|path| path.strip_prefix(&dir))
        .filter(|name| {
            !name.contains('/')
                && name.starts_with(PROTECTED)
                && is_candidate(name)
                && !session.claims(name)
        })
        .collect();
    for name in &orphans {
        let path = format!("{election}/{name}");
        tracing::warn!(
            path,
            "deleting a node of this session that no candidacy tracks (a withdrawal that never landed)"
        );
        match bounded(
            "delete",
            settings.request_timeout,
            client.delete(&path, None),
        )
        .await?
        {
            Ok(()) | Err(ZkError::NoNode) => {}
            Err(e) => return Err(map(e)),
        }
    }
    Ok(candidates
        .into_iter()
        .filter(|c| !orphans.contains(&c.as_str()))
        .collect())
}

/// The current leader among `candidates` (in order): the first whose data can be read.
pub(crate) async fn leader(
    client: &Client,
    election: &str,
    children: &[String],
    settings: &Settings,
) -> Result<Option<LeaderInfo>> {
    for name in children {
        let path = format!("{election}/{name}");
        match bounded("get data", settings.request_timeout, client.get_data(&path)).await? {
            Ok((data, stat)) => return Ok(Some(leader_info(name, &data, &stat)?)),
            Err(ZkError::NoNode) => continue,
            Err(e) => return Err(map(e)),
        }
    }
    Ok(None)
}

/// Our node as created: its name, czxid and the session that owns it.
#[derive(Clone, Debug)]
pub(crate) struct OurNode {
    pub name: String,
    pub path: String,
    pub czxid: i64,
    pub owner: i64,
}

/// Creates our node, creating the election's parents when they are missing
/// (also when they vanished during an outage: CURATOR-724). A create whose
/// answer was lost is recovered by finding our node by its uuid prefix.
pub(crate) async fn create(
    client: &Client,
    election: &str,
    prefix: &str,
    identity: &str,
    settings: &Settings,
) -> Result<OurNode> {
    use zookeeper_client::{Acls, CreateMode};
    let path = format!("{election}/{prefix}");
    let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let mut last = None;
    for _ in 0..3 {
        let created = bounded(
            "create",
            settings.request_timeout,
            client.create(&path, identity.as_bytes(), &options),
        )
        .await;
        match created {
            Ok(Ok((stat, seq))) => {
                let name = format!("{prefix}{seq}");
                return Ok(OurNode {
                    path: format!("{election}/{name}"),
                    name,
                    czxid: stat.czxid,
                    owner: stat.ephemeral_owner,
                });
            }
            Ok(Err(ZkError::NoNode)) => {
                let parents = CreateMode::Container.with_acls(Acls::anyone_all());
                match bounded(
                    "mkdir",
                    settings.request_timeout,
                    client.mkdir(election, &parents),
                )
                .await?
                {
                    Ok(()) | Err(ZkError::NodeExists) => {}
                    Err(e) => return Err(map(e)),
                }
            }
            Ok(Err(e)) if !answer_lost(&e) => return Err(map(e)),
            // The answer was lost (the connection failed under the request,
            // or our own deadline passed): did it land?
            other => {
                tracing::debug!(result = ?other, "a create's answer was lost; looking for our node");
                if let Some(found) = find(client, election, prefix, settings).await? {
                    return Ok(found);
                }
                last = Some(match other {
                    Ok(Err(e)) => map(e),
                    Err(e) => e,
                    Ok(Ok(_)) => unreachable!("handled above"),
                });
            }
        }
    }
    Err(last.unwrap_or_else(|| unavailable("the election node kept vanishing")))
}

/// Whether a request's answer was lost rather than refused: the request
/// may have been applied. zookeeper-client reports `ConnectionLoss` for a
/// connection it closed itself, `Custom` for one that failed under the
/// request (a reset, an I/O error, no answer within the connection
/// timeout), and `Timeout` for one that outlived its own deadline.
fn answer_lost(error: &ZkError) -> bool {
    matches!(
        error,
        ZkError::ConnectionLoss | ZkError::Custom(_) | ZkError::Timeout
    )
}

/// Our node by its uuid prefix, if a create landed, looked for after a
/// `sync`: a create whose answer was lost may have landed through a server
/// other than the one we ask now, which may not have applied it yet.
pub(crate) async fn find(
    client: &Client,
    election: &str,
    prefix: &str,
    settings: &Settings,
) -> Result<Option<OurNode>> {
    let (synced, listed) = after_sync(client, election, "sync and list children", settings, || {
        client.list_children(election)
    })
    .await?;
    let children = match (synced, listed) {
        (Err(ZkError::NoNode), _) | (Ok(()), Err(ZkError::NoNode)) => return Ok(None),
        (Err(e), _) | (Ok(()), Err(e)) => return Err(map(e)),
        (Ok(()), Ok(children)) => children,
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(prefix)) else {
        return Ok(None);
    };
    let path = format!("{election}/{name}");
    match bounded("exists", settings.request_timeout, client.check_stat(&path)).await? {
        Ok(Some(stat)) => Ok(Some(OurNode {
            name,
            path,
            czxid: stat.czxid,
            owner: stat.ephemeral_owner,
        })),
        Ok(None) => Ok(None),
        Err(e) => Err(map(e)),
    }
}

/// Where our node stands.
pub(crate) struct Position {
    /// Our node exists, is the one we created, and its ephemeralOwner is the
    /// client's current session (CURATOR-696).
    pub ours: bool,
    /// The candidates in order (see [`candidates`]).
    pub children: Vec<String>,
}

/// Reads the election's children and our node in one multi-read (one
/// request, one consistent snapshot) after a `sync` sent just before it, so
/// that a follower cut off from the quorum cannot answer from a stale view;
/// a claim on this look counts from the sync's send time.
pub(crate) async fn position(
    client: &Client,
    session: &Session,
    election: &str,
    node: &OurNode,
    settings: &Settings,
) -> Result<Position> {
    let mut reader = client.new_multi_reader();
    reader.add_get_children(election).map_err(map)?;
    reader.add_get_data(&node.path).map_err(map)?;
    let (synced, (read, ephemerals)) =
        after_sync(client, election, "sync and read", settings, || {
            futures::future::join(reader.commit(), client.list_ephemerals(election))
        })
        .await?;
    synced.map_err(map)?;
    let mut read = read.map_err(map)?.into_iter();
    let children = match read.next() {
        Some(MultiReadResult::Children { children }) => candidates(children),
        Some(MultiReadResult::Error {
            err: ZkError::NoNode,
        }) => Vec::new(),
        Some(MultiReadResult::Error { err }) => return Err(map(err)),
        other => return Err(unexpected(other)),
    };
    let ours = match read.next() {
        Some(MultiReadResult::Data { stat, .. }) => {
            stat.czxid == node.czxid && stat.ephemeral_owner == client.session_id().0
        }
        Some(MultiReadResult::Error {
            err: ZkError::NoNode,
        }) => false,
        Some(MultiReadResult::Error { err }) => return Err(map(err)),
        other => return Err(unexpected(other)),
    };
    let children = sweep(client, session, election, children, ephemerals, settings).await?;
    Ok(Position { ours, children })
}

/// A multi-read answer that does not match its request.
fn unexpected(result: Option<MultiReadResult>) -> tenure_core::Error {
    tenure_core::Error::backend(
        crate::error::BACKEND,
        format!("unexpected multi-read result {result:?}"),
    )
}

/// A node of ours, as a renewal checks it: its path, and the creation
/// and owner it must still have.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub path: String,
    pub czxid: i64,
    pub owner: i64,
}

/// Whether `stat` (of `node`'s path, read on `client`) is still our node.
fn ours(client: &Client, node: &Node, stat: &Stat) -> std::result::Result<(), LossReason> {
    if stat.czxid == node.czxid
        && stat.ephemeral_owner == node.owner
        && client.session_id().0 == node.owner
    {
        Ok(())
    } else {
        // The path is ours alone (it bears our uuid): another session owns it now.
        Err(LossReason::TakenOver)
    }
}

/// Whether our node is still ours, read after a `sync`: deleted, taken
/// over, or lost with our session, the reason.
pub(crate) async fn still_ours(
    client: &Client,
    node: &Node,
    settings: &Settings,
) -> Result<std::result::Result<(), LossReason>> {
    let (synced, stat) = after_sync(client, &node.path, "sync and exists", settings, || {
        client.check_stat(&node.path)
    })
    .await?;
    match (synced, stat) {
        (Err(ZkError::SessionExpired), _) | (_, Err(ZkError::SessionExpired)) => {
            Ok(Err(LossReason::Revoked))
        }
        (Err(ZkError::NoNode), _) | (_, Ok(None)) => Ok(Err(LossReason::Deleted)),
        (Err(e), _) | (_, Err(e)) => Err(map(e)),
        (Ok(()), Ok(Some(stat))) => Ok(ours(client, node, &stat)),
    }
}

/// Nodes read by one multi-read request: well within the server's 1 MB
/// packet limit (a node's answer is its stat and an identity).
const MULTI_READ: usize = 256;

/// [`still_ours`] for many nodes at once: one `sync`, then one multi-read
/// for every [`MULTI_READ`] nodes, pipelined behind it. A verdict per node,
/// in order.
pub(crate) async fn still_ours_all(
    client: &Client,
    nodes: &[Node],
    settings: &Settings,
) -> Vec<Result<std::result::Result<(), LossReason>>> {
    let Some(first) = nodes.first() else {
        return Vec::new();
    };
    // The whole batch failed alike: the same error for every node.
    let each =
        |error: &dyn Fn() -> tenure_core::Error| nodes.iter().map(|_| Err(error())).collect();
    let read = after_sync(client, &first.path, "sync and multi-read", settings, || {
        let chunks: Vec<_> = nodes
            .chunks(MULTI_READ)
            .map(|chunk| {
                let mut reader = client.new_multi_reader();
                let added = chunk.iter().try_for_each(|n| reader.add_get_data(&n.path));
                // Sent here, behind the sync.
                let committed = added.map(|()| reader.commit());
                async move {
                    match committed {
                        Ok(commit) => commit.await,
                        Err(e) => Err(e),
                    }
                }
            })
            .collect();
        futures::future::join_all(chunks)
    })
    .await;
    let (synced, chunks) = match read {
        Ok(answers) => answers,
        // The request deadline passed (the only error `after_sync` has).
        Err(tenure_core::Error::Timeout { operation, after }) => {
            return each(&|| tenure_core::Error::Timeout { operation, after })
        }
        Err(error) => {
            let message = error.to_string();
            return each(&|| {
                tenure_core::Error::unavailable(crate::error::BACKEND, message.clone())
            });
        }
    };
    match synced {
        Err(ZkError::SessionExpired) => {
            return nodes.iter().map(|_| Ok(Err(LossReason::Revoked))).collect()
        }
        Err(e) => return each(&|| map(e.clone())),
        Ok(()) => {}
    }
    let mut verdicts = Vec::with_capacity(nodes.len());
    for (chunk, answer) in nodes.chunks(MULTI_READ).zip(chunks) {
        match answer {
            Err(ZkError::SessionExpired) => {
                verdicts.extend(chunk.iter().map(|_| Ok(Err(LossReason::Revoked))))
            }
            Err(e) => verdicts.extend(chunk.iter().map(|_| Err(map(e.clone())))),
            Ok(results) if results.len() != chunk.len() => {
                verdicts.extend(chunk.iter().map(|_| {
                    Err(unavailable(
                        "a multi-read answered for another number of nodes",
                    ))
                }))
            }
            Ok(results) => {
                for (node, result) in chunk.iter().zip(results) {
                    verdicts.push(match result {
                        MultiReadResult::Data { stat, .. } => Ok(ours(client, node, &stat)),
                        MultiReadResult::Error {
                            err: ZkError::NoNode,
                        } => Ok(Err(LossReason::Deleted)),
                        MultiReadResult::Error {
                            err: ZkError::SessionExpired,
                        } => Ok(Err(LossReason::Revoked)),
                        MultiReadResult::Error { err } => Err(map(err)),
                        _ => Err(unavailable(
                            "a multi-read answered something other than a node's data",
                        )),
                    });
                }
            }
        }
    }
    verdicts
}

/// Deletes our node by its (unique, uuid-bearing) path. tenure never
/// writes it after its creation, so the delete asks for version 0; a node
/// whose data someone set since (an operator's `set`, a tool tagging nodes)
/// is refused that way for ever, so on `BadVersion` the node is looked at
/// again and deleted at the version it has, as long as our session still
/// owns it (a node another session owns is not ours to delete). Gone
/// already is fine.
pub(crate) async fn delete(client: &Client, node_path: &str, settings: &Settings) -> Result<()> {
    let mut version = 0;
    loop {
        match bounded(
            "delete",
            settings.request_timeout,
            client.delete(node_path, Some(version)),
        )
        .await?
        {
            Ok(()) | Err(ZkError::NoNode) | Err(ZkError::SessionExpired) => return Ok(()),
            Err(ZkError::BadVersion) => {}
            Err(e) => return Err(map(e)),
        }
        let stat = match bounded(
            "exists",
            settings.request_timeout,
            client.check_stat(node_path),
        )
        .await?
        {
            Ok(Some(stat)) => stat,
            Ok(None) | Err(ZkError::NoNode) | Err(ZkError::SessionExpired) => return Ok(()),
            Err(e) => return Err(map(e)),
        };
        if stat.ephemeral_owner != client.session_id().0 {
            return Ok(());
        }
        tracing::debug!(
            path = node_path,
            version = stat.version,
            "our node's data was set by someone else; deleting it at its version"
        );
        version = stat.version;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_latch_nodes_are_candidates() {
        let prefix = node_prefix();
        assert!(is_candidate(&format!("{prefix}0000000007")));
        assert!(is_candidate("latch-0000000007"));
        assert!(is_candidate("latch--2147483648"));
        for other in [
            "b",
            "latch-",
            "latch-b",
            "latch-0000000007x",
            "x-latch-0000000007",
            "_c_x-latch-",
            "0000000007",
        ] {
            assert!(!is_candidate(other), "{other}");
        }
    }

    #[test]
    fn a_node_numbered_past_the_sequence_wrap_refuses_to_campaign() {
        assert!(check_sequence("/k", "_c_1-latch-0000000007").is_ok());
        assert!(check_sequence("/k", "_c_1-latch-2147483647").is_ok());
        let refused = check_sequence("/k", "_c_1-latch--2147483648")
            .expect_err("a wrapped sequence sorts first");
        assert!(!refused.is_retryable());
        let message = std::error::Error::source(&refused).unwrap().to_string();
        assert!(
            message.contains("/k") && message.contains("wrapped"),
            "{message}"
        );
    }

    #[test]
    fn candidates_leave_nested_elections_out_and_sort_by_sequence() {
        let names = vec![
            "b".to_owned(),
            "_c_2-latch-0000000003".to_owned(),
            "latch-0000000002".to_owned(),
            "_c_1-latch-0000000001".to_owned(),
            "0000000000".to_owned(),
        ];
        assert_eq!(
            candidates(names),
            [
                "_c_1-latch-0000000001",
                "latch-0000000002",
                "_c_2-latch-0000000003"
            ]
        );
    }
}
