//! The tenure waiters a Lease names as next in line, in labels, and how
//! long each holds back once the Lease is free.
//!
//! A Lease names at most [`NOMINEES`] waiters, each by a label
//! `tenure.dev/next-<tag>: "<order>"` (`tag`: 16 hex digits drawn per
//! wait; `order`: when it joined, in microseconds since the Unix epoch),
//! lowest order first. Each waiter watches the Lease with the label
//! selector `tenure.dev/next-<tag>`: an API server sends it the Lease's
//! changes only while the Lease names it, so the others hear nothing of
//! renewals, releases or take-overs. A label is never authority for
//! safety: every take-over is still a compare-and-swap on what its writer
//! judged free or expired; a label only decides who tries first.
//! client-go ignores labels (and keeps them when it writes a Lease it read).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;

use crate::queue::Entry;

/// How many waiters a Lease names: the first acts at once; the second
/// takes over from a first that is gone, one [`grace`] later.
pub(crate) const NOMINEES: usize = 2;

const PREFIX: &str = "tenure.dev/next-";

/// The label naming the waiter `tag`.
pub(crate) fn label(tag: &str) -> String {
    format!("{PREFIX}{tag}")
}

/// A waiter the Lease names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub tag: String,
    pub order: u64,
}

/// The waiters `lease` names, first in line first.
pub(crate) fn named(lease: &Lease) -> Vec<Named> {
    let labels = lease.metadata.labels.iter().flatten();
    let mut named: Vec<Named> = labels
        .filter_map(|(key, value)| {
            let tag = key.strip_prefix(PREFIX)?;
            Some(Named {
                tag: tag.to_owned(),
                order: value.parse().unwrap_or(u64::MAX),
            })
        })
        .collect();
    named.sort_by(|a, b| (a.order, &a.tag).cmp(&(b.order, &b.tag)));
    named
}

/// Where `tag` stands among the waiters `lease` names.
pub(crate) fn position(lease: &Lease, tag: &str) -> Option<usize> {
    named(lease).iter().position(|n| n.tag == tag)
}

/// Names waiter `tag` (of `order`) in `lease`.
pub(crate) fn name(lease: &mut Lease, tag: &str, order: u64) {
    let labels = lease.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(label(tag), order.to_string());
}

/// No longer names waiter `tag` in `lease`.
pub(crate) fn unname(lease: &mut Lease, tag: &str) {
    if let Some(labels) = lease.metadata.labels.as_mut() {
        labels.remove(&label(tag));
        if labels.is_empty() {
            lease.metadata.labels = None;
        }
    }
}

/// Names waiters of `queue`, first in line first, until `lease` names
/// [`NOMINEES`]; never one of `passed` (the writer, and those it skipped).
pub(crate) fn fill(lease: &mut Lease, queue: &[Entry], passed: &[String]) {
    for entry in queue {
        if named(lease).len() >= NOMINEES {
            return;
        }
        let known = named(lease).iter().any(|n| n.tag == entry.tag);
        if !known && !passed.contains(&entry.tag) {
            name(lease, &entry.tag, entry.order);
        }
    }
}

/// What a waiter `me` writes into `lease` as it takes it over: it no
/// longer names `me` nor the waiters before it in line (they had their
/// turn and let it pass: gone, or too slow), and names waiters of `queue`
/// in their place. Returns the waiters it passed over.
pub(crate) fn hand_on(lease: &mut Lease, me: &str, queue: &[Entry]) -> Vec<String> {
    let named = named(lease);
    let before = named
        .iter()
        .position(|n| n.tag == me)
        .unwrap_or(named.len());
    let skipped: Vec<String> = named[..before].iter().map(|n| n.tag.clone()).collect();
    let mut passed = skipped.clone();
    passed.push(me.to_owned());
    for tag in &passed {
        unname(lease, tag);
    }
    fill(lease, queue, &passed);
    skipped
}

/// How long the waiters after the first let pass, each, before they try a
/// free Lease themselves: long enough for the first to hear of it and
/// write, short against the TTL.
pub(crate) fn grace(ttl: Duration) -> Duration {
    (ttl / 8).clamp(Duration::from_millis(250), Duration::from_secs(2))
}

/// How long after the Lease became free (released, or expired by our own
/// clock) a waiter holds back: at `position` in line, one [`grace`] for
/// each waiter before it; not named, until every named one had its turn
/// (none: not at all, the waiters race by compare-and-swap as client-go
/// candidates do).
pub(crate) fn hold_back(position: Option<usize>, named: usize, ttl: Duration) -> Duration {
    let turns = position.unwrap_or(named);
    grace(ttl) * turns as u32
}

/// A new tag for one wait.
pub(crate) fn new_tag() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Now, in microseconds since the Unix epoch: a waiter's place in line.
pub(crate) fn now_order() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: &str, order: u64) -> Entry {
        Entry {
            tag: tag.to_owned(),
            order,
            identity: format!("id-{tag}"),
        }
    }

    #[test]
    fn a_take_over_unnames_its_writer_and_those_before_it_and_fills_the_line() {
        let mut lease = Lease::default();
        name(&mut lease, "b", 20);
        name(&mut lease, "a", 10);
        assert_eq!(position(&lease, "a"), Some(0));
        assert_eq!(position(&lease, "b"), Some(1));
        let queue = [
            entry("a", 10),
            entry("b", 20),
            entry("c", 30),
            entry("d", 40),
        ];

        // The first takes over: the second stays, the next one joins it.
        let mut first = lease.clone();
        assert!(hand_on(&mut first, "a", &queue).is_empty());
        let tags: Vec<_> = named(&first).into_iter().map(|n| n.tag).collect();
        assert_eq!(tags, ["b", "c"]);

        // The second takes over: the first let its turn pass and is skipped.
        let mut second = lease.clone();
        assert_eq!(hand_on(&mut second, "b", &queue), ["a"]);
        let tags: Vec<_> = named(&second).into_iter().map(|n| n.tag).collect();
        assert_eq!(tags, ["c", "d"]);

        // Someone not named: every named one let its turn pass.
        let mut other = lease.clone();
        assert_eq!(hand_on(&mut other, "x", &[]), ["a", "b"]);
        assert!(other.metadata.labels.is_none());
    }

    #[test]
    fn waiters_hold_back_a_grace_per_waiter_before_them() {
        let ttl = Duration::from_secs(4);
        assert_eq!(hold_back(Some(0), 2, ttl), Duration::ZERO);
        assert_eq!(hold_back(Some(1), 2, ttl), Duration::from_millis(500));
        assert_eq!(hold_back(None, 2, ttl), Duration::from_secs(1));
        assert_eq!(hold_back(None, 0, ttl), Duration::ZERO);
        assert_eq!(grace(Duration::from_secs(60)), Duration::from_secs(2));
        assert_eq!(grace(Duration::from_secs(1)), Duration::from_millis(250));
    }
}
