//! The waiting line of an election: a sibling Lease, `<key>-queue`, whose
//! annotations list the tenure waiters not yet named on the Lease
//! (nominees.rs), so that whoever takes the Lease over can name the next
//! ones. Joining and leaving are JSON merge patches of one annotation each,
//! without a resourceVersion: they never conflict with each other, nor with
//! the Lease's renewals, which are writes to another object. Nothing in it
//! is authority for anything: a stale entry costs a waiter named in vain
//! one grace (nominees.rs) at most.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Map, Value};
use tenure_core::hosted::bounded;
use tenure_core::Result;

use crate::error::{self, refused, Refused};

/// The annotation of a waiter's entry: `tenure.dev/waiter-<tag>`, its value
/// `<order> <identity>`.
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
    pub order: u64,
    pub identity: String,
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

/// The waiters a queue Lease lists, first in line first.
pub(crate) fn entries(queue: &Lease) -> Vec<Entry> {
    let annotations = queue.metadata.annotations.iter().flatten();
    let mut entries: Vec<Entry> = annotations
        .filter_map(|(key, value)| {
            let tag = key.strip_prefix(ENTRY)?;
            let (order, identity) = value.split_once(' ').unwrap_or((value, ""));
            Some(Entry {
                tag: tag.to_owned(),
                order: order.parse().ok()?,
                identity: identity.to_owned(),
            })
        })
        .collect();
    entries.sort_by(|a, b| (a.order, &a.tag).cmp(&(b.order, &b.tag)));
    entries
}

fn entry_patch(set: &[(&str, Value)]) -> Patch<Value> {
    let annotations: Map<String, Value> = set
        .iter()
        .map(|(tag, value)| (format!("{ENTRY}{tag}"), value.clone()))
        .collect();
    Patch::Merge(json!({ "metadata": { "annotations": annotations } }))
}

/// Puts waiter `tag` (`identity`, joining at `order`) in line for `key`,
/// creating the queue Lease if there is none; the line as it is then. A
/// merge patch does not conflict with other writes on kube-apiserver (it
/// is applied again to the newer object), but a server may give up on
/// one after a while: it is tried again after a short random pause.
pub(crate) async fn join(
    api: &Api<Lease>,
    key: &str,
    entry: &Entry,
    after: Duration,
) -> Result<Vec<Entry>> {
    let name = name_for(key);
    let value = format!("{} {}", entry.order, entry.identity);
    let patch = entry_patch(&[(&entry.tag, json!(value))]);
    for _ in 0..8 {
        let patched = bounded(
            "join queue",
            after,
            api.patch(&name, &PatchParams::default(), &patch),
        )
        .await?;
        match patched {
            Ok(queue) => return Ok(entries(&queue)),
            Err(e) => match refused(e) {
                Refused::NotFound => {}
                Refused::Conflict => {
                    let pause = Duration::from_millis(50).mul_f64(rand::random::<f64>());
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Refused::Other(e) => return Err(e),
            },
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
            Ok(queue) => return Ok(entries(&queue)),
            // Created meanwhile by another waiter: patch it.
            Err(e) => match refused(e) {
                Refused::Conflict | Refused::NotFound => continue,
                Refused::Other(e) => return Err(e),
            },
        }
    }
    Err(tenure_core::Error::unavailable(
        error::BACKEND,
        "joining the queue kept conflicting",
    ))
}

/// Takes waiters `tags` out of line for `key`; the line as it is then
/// (empty if there is no queue Lease).
pub(crate) async fn leave(
    api: &Api<Lease>,
    key: &str,
    tags: &[String],
    after: Duration,
) -> Result<Vec<Entry>> {
    let set: Vec<(&str, Value)> = tags.iter().map(|t| (t.as_str(), Value::Null)).collect();
    let patched = bounded(
        "leave queue",
        after,
        api.patch(&name_for(key), &PatchParams::default(), &entry_patch(&set)),
    )
    .await?;
    match patched {
        Ok(queue) => Ok(entries(&queue)),
        Err(e) => match refused(e) {
            Refused::NotFound => Ok(Vec::new()),
            Refused::Conflict => Err(tenure_core::Error::unavailable(
                error::BACKEND,
                "a merge patch of the queue Lease conflicted",
            )),
            Refused::Other(e) => Err(e),
        },
    }
}

/// The line for `key` (empty if there is no queue Lease).
pub(crate) async fn read(api: &Api<Lease>, key: &str, after: Duration) -> Result<Vec<Entry>> {
    let queue = bounded("read queue", after, api.get_opt(&name_for(key)))
        .await?
        .map_err(error::map)?;
    Ok(queue.as_ref().map(entries).unwrap_or_default())
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
            ]
            .into(),
        );
        let got = entries(&queue);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].tag.as_str(), got[0].order), ("aa", 10));
        assert_eq!(got[1].identity, "pod b");
    }
}
