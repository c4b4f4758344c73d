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

use crate::queue::{self, Entry};

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

/// How many waiters of the queue a release names besides those the Lease
/// names already (see [`reserve`]).
///
/// One: each reserve costs a graceful change about three requests and
/// watch events (told of the release, of the take-over that no longer
/// names it, and its read after), 17.6 per change in `tests/herd.rs` with
/// two against 12.8 with one; one is enough for a line whose named
/// waiters are both gone.
pub(crate) const RESERVES: usize = 1;

/// Names waiters of `queue`, first in line first, until `lease` names
/// `up_to`; never one of `passed` (the writer, and those it skipped), nor
/// one whose entry expired (queue.rs: a waiter gone long ago).
fn name_from(lease: &mut Lease, queue: &[Entry], passed: &[String], up_to: usize) {
    let now = queue::unix_now();
    for entry in queue {
        if named(lease).len() >= up_to {
            return;
        }
        let known = named(lease).iter().any(|n| n.tag == entry.tag);
        if !known && !passed.contains(&entry.tag) && !entry.expired(now) {
            name(lease, &entry.tag, entry.order);
        }
    }
}

/// Names waiters of `queue`, first in line first, until `lease` names
/// [`NOMINEES`]; never one of `passed` (the writer, and those it skipped),
/// nor one whose entry expired.
pub(crate) fn fill(lease: &mut Lease, queue: &[Entry], passed: &[String]) {
    name_from(lease, queue, passed, NOMINEES);
}

/// What a holder's release writes into `lease` besides: up to
/// [`RESERVES`] more waiters of `queue` (not `holder`), so that the release
/// reaches someone in the queue too. The named waiters hear of it and take
/// their turns, one [`grace`] apart; if they are all gone (crashed, cut
/// off, named from a line read long ago), the reserves' turns come next,
/// where before the Lease stayed free until a queued waiter's next
/// periodic look, seconds to minutes later. The take-over after it names
/// [`NOMINEES`] again ([`hand_on`]).
pub(crate) fn reserve(lease: &mut Lease, queue: &[Entry], holder: &str) {
    let line = named(lease);
    let up_to = line.len().max(NOMINEES) + RESERVES;
    let now = queue::unix_now();
    // After every waiter the Lease names, whenever the reserve joined (an
    // entry older than theirs must not put it first: the named ones would
    // hold back for it).
    let mut after = line.iter().map(|n| n.order).max().unwrap_or(0);
    for entry in queue {
        if named(lease).len() >= up_to {
            return;
        }
        let known = line.iter().any(|n| n.tag == entry.tag);
        if !known && entry.identity != holder && !entry.expired(now) {
            after = entry.order.max(after.saturating_add(1));
            name(lease, &entry.tag, after);
        }
    }
}

/// What a waiter `me` writes into `lease` as it takes it over: it no
/// longer names `me` nor the waiters before it in line (they had their
/// turn and let it pass: gone, or too slow), nor any after the first
/// [`NOMINEES`] (reserves a release named), and names waiters of `queue`
/// in their place. Returns the waiters it passed over.
pub(crate) fn hand_on(lease: &mut Lease, me: &str, queue: &[Entry]) -> Vec<String> {
    let line = named(lease);
    let before = line.iter().position(|n| n.tag == me).unwrap_or(line.len());
    let skipped: Vec<String> = line[..before].iter().map(|n| n.tag.clone()).collect();
    let mut passed = skipped.clone();
    passed.push(me.to_owned());
    for tag in &passed {
        unname(lease, tag);
    }
    // A release named reserves: the line is [`NOMINEES`] long again, the
    // last ones named no longer (they stay in the queue).
    for extra in named(lease).iter().skip(NOMINEES) {
        unname(lease, &extra.tag);
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
            expires: queue::unix_now() + 60,
        }
    }

    fn tags(lease: &Lease) -> Vec<String> {
        named(lease).into_iter().map(|n| n.tag).collect()
    }

    #[test]
    fn a_release_names_reserves_from_the_queue_and_a_take_over_trims_them() {
        assert_eq!(RESERVES, 1, "the cases below name one reserve");
        let mut lease = Lease::default();
        name(&mut lease, "a", 10);
        name(&mut lease, "b", 20);
        let mut gone = entry("c", 30);
        gone.expires = queue::unix_now() - 1;
        let mut holder = entry("h", 5);
        holder.identity = "holder".to_owned();
        let queue = [
            holder,
            entry("a", 10),
            gone,
            entry("d", 40),
            entry("e", 50),
            entry("f", 60),
        ];
        reserve(&mut lease, &queue, "holder");
        // Not the holder's own entry, nor an expired one.
        assert_eq!(tags(&lease), ["a", "b", "d"]);
        // After the named ones, however early its entry joined.
        let mut early = Lease::default();
        name(&mut early, "a", 10);
        name(&mut early, "b", 20);
        reserve(&mut early, &[entry("x", 1)], "holder");
        assert_eq!(tags(&early), ["a", "b", "x"]);
        assert_eq!(position(&lease, "d"), Some(2));
        let ttl = Duration::from_secs(2);
        assert_eq!(hold_back(Some(2), 3, ttl), grace(ttl) * 2);

        // The first takes over: two named again. (A taker's line leaves
        // the holder out.)
        let line = &queue[1..];
        let mut first = lease.clone();
        assert!(hand_on(&mut first, "a", line).is_empty());
        assert_eq!(tags(&first), ["b", "d"]);
        // The reserve takes over: those before it are passed over.
        let mut reserve_took = lease.clone();
        assert_eq!(hand_on(&mut reserve_took, "d", line), ["a", "b"]);
        assert_eq!(tags(&reserve_took), ["e", "f"]);
        // A release after a client-go take-over that kept a reserve named:
        // a take-over trims the line to two, the last ones no longer named.
        let mut kept = lease.clone();
        name(&mut kept, "e", 50);
        assert!(hand_on(&mut kept, "a", line).is_empty());
        assert_eq!(tags(&kept), ["b", "d"]);
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
