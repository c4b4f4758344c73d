//! The waiting line of an election: a sibling Lease, `<key>-queue`, whose
//! annotations list the tenure waiters not yet named on the Lease
//! (nominees.rs), so that whoever takes the Lease over can name the next
//! ones. Joining and leaving are JSON merge patches of one annotation each,
//! without a resourceVersion: they never conflict with each other, nor with
//! the Lease's renewals, which are writes to another object. Nothing in it
//! is authority for anything: a stale entry costs a waiter named in vain
//! one grace (nominees.rs) at most.
//!
//! Entries expire. Each says until when (wall clock, in seconds) it stands
//! unless its waiter writes it again: [`lifetime`] after it was written. A
//! waiter writes it again at one of its periodic looks once half of that
//! has gone, and joins again at a look that finds it missing (passed over,
//! the queue Lease deleted); so an entry whose waiter crashed is left out
//! of the line after a while, and whoever takes the Lease over or leaves
//! the queue deletes it. Without that, the queue Lease grew by an entry
//! for every waiter that crashed, until kube-apiserver's limit on the
//! total size of an object's annotations (256 KiB) refused every join.
//! Clocks of different hosts disagree: an entry only decides who is named
//! first, never who may write, so a clock that is off costs order, not
//! safety.

use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Map, Value};
use tenure_core::hosted::bounded;
use tenure_core::Result;

use crate::error::{self, refused, Refused};
use crate::observe;

/// The annotation of a waiter's entry: `tenure.dev/waiter-<tag>`, its value
/// `<order>,<expires> <identity>` (`<order> <identity>` as tenure wrote it
/// before entries expired: then it expires a [`lifetime`] after `order`).
const ENTRY: &str = "tenure.dev/waiter-";
/// The annotation naming the election a queue Lease belongs to.
const QUEUE_FOR: &str = "tenure.dev/queue-for";
const SUFFIX: &str = "-queue";
/// The longest name a Lease may have.
const MAX_NAME: usize = 253;

/// A waiter in line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub tag: String,
    /// When it joined: microseconds since the Unix epoch.
    pub order: u64,
    pub identity: String,
    /// Until when the entry stands unless written again: seconds since the
    /// Unix epoch.
    pub expires: u64,
}

impl Entry {
    /// Whether it had expired at `now` (seconds since the Unix epoch).
    pub fn expired(&self, now: u64) -> bool {
        self.expires <= now
    }

    fn value(&self) -> String {
        format!("{},{} {}", self.order, self.expires, self.identity)
    }
}

/// Now, in seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The longest average period between a waiter's looks at a Lease that
/// does not name it (waiting.rs), for `ttl`.
pub(crate) fn longest_look(ttl: Duration) -> Duration {
    (ttl * 10).max(Duration::from_secs(60))
}

/// How long an entry stands after it was written: four of the longest
/// average periods between looks, so a waiter that writes it again at a
/// look once half of that has gone (a look comes at most one and a half
/// periods after the one before) keeps it standing, with a period to
/// spare for a look that failed or a clock that is off.
pub(crate) fn lifetime(ttl: Duration) -> Duration {
    longest_look(ttl) * 4
}

/// The queue Lease of election `key`: `<key>-queue`, or, where that would
/// be longer than a Lease name may be, the key cut short, a hash of it
/// (64-bit FNV-1a, in hex) and `-queue`.
pub(crate) fn name_for(key: &str) -> String {
    if key.len() + SUFFIX.len() <= MAX_NAME {
        return format!("{key}{SUFFIX}");
    }
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let keep = MAX_NAME - SUFFIX.len() - 17;
    let cut = key[..keep].trim_end_matches(['-', '.']);
    format!("{cut}-{hash:016x}{SUFFIX}")
}

/// The waiters a queue Lease lists (of waiters with `ttl`), first in line
/// first, expired ones too.
pub(crate) fn entries(queue: &Lease, ttl: Duration) -> Vec<Entry> {
    let annotations = queue.metadata.annotations.iter().flatten();
    let mut entries: Vec<Entry> = annotations
        .filter_map(|(key, value)| {
            let tag = key.strip_prefix(ENTRY)?;
            let (times, identity) = value.split_once(' ').unwrap_or((value, ""));
            let (order, expires) = match times.split_once(',') {
                Some((order, expires)) => (order.parse().ok()?, expires.parse().ok()?),
                None => {
                    let order: u64 = times.parse().ok()?;
                    (order, order / 1_000_000 + lifetime(ttl).as_secs())
                }
            };
            Some(Entry {
                tag: tag.to_owned(),
                order,
                identity: identity.to_owned(),
                expires,
            })
        })
        .collect();
    entries.sort_by(|a, b| (a.order, &a.tag).cmp(&(b.order, &b.tag)));
    entries
}

/// The tags of the entries of `line` that had expired by now.
pub(crate) fn expired(line: &[Entry]) -> Vec<String> {
    let now = unix_now();
    line.iter()
        .filter(|e| e.expired(now))
        .map(|e| e.tag.clone())
        .collect()
}

fn entry_patch(set: &[(&str, Value)]) -> Value {
    let annotations: Map<String, Value> = set
        .iter()
        .map(|(tag, value)| (format!("{ENTRY}{tag}"), value.clone()))
        .collect();
    json!({ "metadata": { "annotations": annotations } })
}

/// A join that failed: why, and how long the server asked us to stay away.
pub(crate) struct JoinFailed {
    pub error: tenure_core::Error,
    pub retry_after: Option<Duration>,
}

impl From<tenure_core::Error> for JoinFailed {
    fn from(error: tenure_core::Error) -> Self {
        JoinFailed {
            error,
            retry_after: None,
        }
    }
}

/// A merge patch of queue Lease `name`, sent raw so that a refusal's
/// `Retry-After` can be read (kube-client keeps neither it nor the Status's
/// `details.retryAfterSeconds`).
async fn patch(
    api: &Api<Lease>,
    name: &str,
    patch: &Value,
    after: Duration,
) -> std::result::Result<Lease, observe::Failure> {
    let request = kube::core::Request::new(api.resource_url())
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .map_err(|e| observe::Failure::from(kube::Error::BuildRequest(e)))?;
    let client = api.clone().into_client();
    let sent = async {
        let body = observe::send(&client, request, "patch queue").await?;
        let bytes = body
            .collect()
            .await
            .map_err(|e| observe::Failure::from(kube::Error::Service(e.into())))?
            .to_bytes();
        serde_json::from_slice::<Lease>(&bytes)
            .map_err(|e| observe::Failure::from(kube::Error::SerdeError(e)))
    };
    match tokio::time::timeout(after, sent).await {
        Ok(answer) => answer,
        Err(_) => Err(observe::Failure::from(kube::Error::Service(
            format!("patching the queue timed out after {after:?}").into(),
        ))),
    }
}

/// Whether `failure` is kube-apiserver's 422 for annotations over their
/// total size limit.
fn too_large(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 422 && e.message.contains("Too long"))
}

/// Puts waiter `entry` in line for `key` (or writes its entry again),
/// creating the queue Lease if there is none, and deletes the entries of
/// `stale` (expired, as a line read before showed them); the line as it is
/// then. A merge patch does not conflict with other writes on
/// kube-apiserver (it is applied again to the newer object), but a server
/// may give up on one after a while: it is tried again after a short random
/// pause. Refused because the annotations would be over kube-apiserver's
/// limit, it reads the line, deletes every expired entry with it, and tries
/// once more.
pub(crate) async fn join(
    api: &Api<Lease>,
    key: &str,
    entry: &Entry,
    stale: &[String],
    ttl: Duration,
    after: Duration,
) -> std::result::Result<Vec<Entry>, JoinFailed> {
    let name = name_for(key);
    let value = entry.value();
    let mut stale: Vec<String> = stale.iter().filter(|t| **t != entry.tag).cloned().collect();
    let mut pruned = false;
    for _ in 0..8 {
        let mut set: Vec<(&str, Value)> = stale.iter().map(|t| (t.as_str(), Value::Null)).collect();
        set.push((&entry.tag, json!(value)));
        match patch(api, &name, &entry_patch(&set), after).await {
            Ok(queue) => return Ok(entries(&queue, ttl)),
            Err(failure) => {
                let (error, retry_after) = failure.into_parts();
                if too_large(&error) && !pruned {
                    pruned = true;
                    let line = read(api, key, ttl, after).await?;
                    stale = expired(&line);
                    continue;
                }
                match refused(error) {
                    Refused::NotFound => {}
                    Refused::Conflict => {
                        let pause = Duration::from_millis(50).mul_f64(rand::random::<f64>());
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    Refused::Other(error) => return Err(JoinFailed { error, retry_after }),
                }
            }
        }
        let queue = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                annotations: Some(
                    [
                        (QUEUE_FOR.to_owned(), key.to_owned()),
                        (format!("{ENTRY}{}", entry.tag), value.clone()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(Default::default()),
        };
        let created = bounded(
            "create queue",
            after,
            api.create(&PostParams::default(), &queue),
        )
        .await?;
        match created {
            Ok(queue) => return Ok(entries(&queue, ttl)),
            // Created meanwhile by another waiter: patch it.
            Err(e) => match refused(e) {
                Refused::Conflict | Refused::NotFound => continue,
                Refused::Other(e) => return Err(e.into()),
            },
        }
    }
    Err(
        tenure_core::Error::unavailable(error::BACKEND, "joining the queue kept conflicting")
            .into(),
    )
}

/// Takes waiters `tags` out of line for `key`, and with them every entry
/// that had expired (as the answer shows them: a second patch); the line as
/// it is then (empty if there is no queue Lease).
pub(crate) async fn leave(
    api: &Api<Lease>,
    key: &str,
    tags: &[String],
    ttl: Duration,
    after: Duration,
) -> Result<Vec<Entry>> {
    let mut tags = tags.to_vec();
    for _ in 0..2 {
        let set: Vec<(&str, Value)> = tags.iter().map(|t| (t.as_str(), Value::Null)).collect();
        let patched = bounded(
            "leave queue",
            after,
            api.patch(
                &name_for(key),
                &PatchParams::default(),
                &Patch::Merge(entry_patch(&set)),
            ),
        )
        .await?;
        let line = match patched {
            Ok(queue) => entries(&queue, ttl),
            Err(e) => match refused(e) {
                Refused::NotFound => return Ok(Vec::new()),
                Refused::Conflict => {
                    return Err(tenure_core::Error::unavailable(
                        error::BACKEND,
                        "a merge patch of the queue Lease conflicted",
                    ))
                }
                Refused::Other(e) => return Err(e),
            },
        };
        tags = expired(&line);
        if tags.is_empty() {
            return Ok(line);
        }
    }
    let line = read(api, key, ttl, after).await?;
    Ok(line)
}

/// The line for `key` (empty if there is no queue Lease).
pub(crate) async fn read(
    api: &Api<Lease>,
    key: &str,
    ttl: Duration,
    after: Duration,
) -> Result<Vec<Entry>> {
    let queue = bounded("read queue", after, api.get_opt(&name_for(key)))
        .await?
        .map_err(error::map)?;
    Ok(queue.as_ref().map(|q| entries(q, ttl)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_name_is_a_lease_name_however_long_the_key() {
        assert_eq!(name_for("billing"), "billing-queue");
        let long = format!("{}.{}", "a".repeat(200), "b-".repeat(26));
        let name = name_for(&long);
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert!(name.ends_with("-queue"), "{name}");
        assert!(!name.contains(".-") && !name.contains("--"), "{name}");
        assert_ne!(name_for(&format!("{long}x")), name);
    }

    #[test]
    fn entries_are_read_first_in_line_first() {
        let mut queue = Lease::default();
        queue.metadata.annotations = Some(
            [
                (QUEUE_FOR.to_owned(), "k".to_owned()),
                (format!("{ENTRY}bb"), "20 pod b".to_owned()),
                (format!("{ENTRY}aa"), "10 a".to_owned()),
                (format!("{ENTRY}cc"), "not a number".to_owned()),
                (format!("{ENTRY}dd"), "30,1000 pod d".to_owned()),
            ]
            .into(),
        );
        let ttl = Duration::from_secs(2);
        let got = entries(&queue, ttl);
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].tag.as_str(), got[0].order), ("aa", 10));
        assert_eq!(got[1].identity, "pod b");
        // Written before entries expired: a lifetime after it joined.
        assert_eq!(got[1].expires, lifetime(ttl).as_secs());
        assert_eq!((got[2].tag.as_str(), got[2].expires), ("dd", 1_000));
        assert_eq!(got[2].identity, "pod d");
        assert!(got[2].expired(1_000) && !got[2].expired(999));
        assert_eq!(got[2].value(), "30,1000 pod d");
    }
}
