//! Contract point 1: bad input gets `InvalidArgument` naming the field,
//! before anything is sent, so nothing is left on the server.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{
    AcquireMode, Candidacy, CandidateId, ElectionKey, Elector, Error, KeyRule, LeaseBackend,
    MAX_KEY_LEN,
};

use super::context::{Context, Cx, Failure, Step};
use crate::report::Property;

fn names_field<T: std::fmt::Debug>(result: &tenure_core::Result<T>, field: &str) -> bool {
    matches!(result, Err(Error::InvalidArgument { field: f, .. }) if *f == field)
}

/// Checks `result` is `InvalidArgument` for `field`.
fn rejected<T: std::fmt::Debug>(
    cx: &Cx,
    what: &str,
    field: &str,
    result: tenure_core::Result<T>,
) -> Step {
    cx.check(Property::Contract, names_field(&result, field), || {
        format!("{what}: expected InvalidArgument naming {field:?}, got {result:?}")
    })
}

/// The servers' counters before bad input is given: writes, and requests
/// of any kind (reads and watches opened too: "before anything is sent"),
/// where the factory counts them.
struct Before {
    writes: Option<u64>,
    requests: Option<u64>,
    /// What reading the request counter itself costs (a Redis `INFO` is a
    /// command of its own): measured as two readings back to back.
    reading: u64,
}

/// A counter's reading, where the factory keeps the counter.
fn counter(read: Option<tenure_core::Result<u64>>, which: &str) -> Step<Option<u64>> {
    read.transpose()
        .ctx(format_args!("reading the {which} counter"))
}

/// Server writes now, where the factory can count them.
async fn writes(cx: &Cx) -> Step<Option<u64>> {
    counter(cx.factory().server_writes().await, "write")
}

/// Server requests now, where the factory can count them.
async fn requests(cx: &Cx) -> Step<Option<u64>> {
    counter(cx.factory().server_requests().await, "request")
}

/// Reads the counters; the request counter last, twice, so that nothing
/// but the bad calls lies between its second reading and the next.
async fn counters(cx: &Cx) -> Step<Before> {
    let writes = writes(cx).await?;
    let first = requests(cx).await?;
    let requests = requests(cx).await?;
    let reading = first.zip(requests).map_or(0, |(a, b)| b.saturating_sub(a));
    Ok(Before {
        writes,
        requests,
        reading,
    })
}

/// Proves the bad calls sent nothing: the request counter moved by no more
/// than one reading of it costs, the write counter did not move, and `key`
/// is unknown. A factory without a request counter (a real Kubernetes
/// cluster) is checked on writes alone, and the report says so.
async fn nothing_written(cx: &Cx, before: Before, key: Option<&ElectionKey>) -> Step {
    let after = requests(cx).await?;
    match (before.requests, after) {
        (Some(b), Some(a)) => {
            let sent = a.saturating_sub(b).saturating_sub(before.reading);
            cx.check(Property::Contract, sent == 0, || {
                format!(
                    "the servers served {sent} requests for refused input (their counter went from {b} to {a}, {} of that the counter's own reading)",
                    before.reading
                )
            })?;
        }
        _ => cx.note("requests not counted: the factory has no request counter"),
    }
    let after = writes(cx).await?;
    let before = before.writes;
    cx.check(Property::Contract, before == after, || {
        format!("server writes went from {before:?} to {after:?}")
    })?;
    if let Some(key) = key {
        if let Some(exists) = cx.factory().key_exists(key).await {
            let exists = exists.ctx("looking the key up")?;
            cx.check(Property::Contract, !exists, || {
                format!("the server keeps state for {key:?}")
            })?;
        }
    }
    Ok(())
}

/// Both acquire modes and watch refuse a candidacy for `field`; nothing is written.
async fn backend_refuses(cx: &Cx, candidacy: &Candidacy, field: &str) -> Step {
    let client = cx.client().await?;
    let before = counters(cx).await?;
    for mode in [AcquireMode::Once, AcquireMode::Wait] {
        let result = cx
            .within(
                cx.timing().round_trip,
                "a refused acquire",
                client.backend.acquire(candidacy, mode),
            )
            .await?;
        rejected(
            cx,
            &format!("acquire ({mode:?})"),
            field,
            result.map(|_| ()),
        )?;
    }
    if field == "key" {
        let watched = client.backend.watch(candidacy.key()).await;
        rejected(cx, "watch", field, watched.map(|_| ()))?;
    }
    nothing_written(cx, before, Some(candidacy.key())).await
}

/// The Elector builder refuses the setting for `field`.
fn builder_refuses(
    cx: &Cx,
    backend: Arc<dyn LeaseBackend>,
    field: &str,
    edit: impl FnOnce(tenure_core::ElectorBuilder) -> tenure_core::ElectorBuilder,
) -> Step {
    let builder = Elector::builder(backend)
        .key(cx.new_key().as_str())
        .identity("builder")
        .ttl(cx.ttl())
        .allow_unfenced();
    rejected(
        cx,
        "Elector::builder",
        field,
        edit(builder).build().map(|_| ()),
    )
}

/// An empty key cannot be made, in the API or the Elector builder.
pub async fn empty_key_is_invalid_argument(cx: Cx) -> Step {
    let before = counters(&cx).await?;
    rejected(&cx, "ElectionKey::new(\"\")", "key", ElectionKey::new(""))?;
    builder_refuses(&cx, cx.client().await?.backend, "key", |b| b.key(""))?;
    nothing_written(&cx, before, None).await
}

/// A key the backend's key rule forbids is refused before anything is sent.
pub async fn key_breaking_backend_rule_is_invalid_argument(cx: Cx) -> Step {
    let bad = match cx.caps().key_rule {
        KeyRule::PathSegments => "tc//empty-segment",
        KeyRule::Dns1123Subdomain => "tc.Upper_Case",
        KeyRule::Any => {
            return Err(Failure::Skip(
                "the backend stores every valid ElectionKey".into(),
            ))
        }
        other => return Err(Failure::Skip(format!("no bad key known for {other:?}"))),
    };
    let key = ElectionKey::new(bad).ctx("a key valid for ElectionKey")?;
    let candidacy = Candidacy::new(key, cx.identity("a"), cx.ttl()).ctx("candidacy")?;
    backend_refuses(&cx, &candidacy, "key").await?;
    builder_refuses(&cx, cx.client().await?.backend, "key", |b| b.key(bad))
}

/// A key longer than the backend (or any backend) allows is refused.
pub async fn key_over_backend_max_len_is_invalid_argument(cx: Cx) -> Step {
    let max = cx.caps().max_key_len;
    if max >= MAX_KEY_LEN {
        let before = counters(&cx).await?;
        rejected(
            &cx,
            "ElectionKey::new(too long)",
            "key",
            ElectionKey::new("k".repeat(MAX_KEY_LEN + 1)),
        )?;
        return nothing_written(&cx, before, None).await;
    }
    let key = ElectionKey::new("k".repeat(max + 1)).ctx("a key of max_key_len + 1 bytes")?;
    let candidacy = Candidacy::new(key, cx.identity("a"), cx.ttl()).ctx("candidacy")?;
    backend_refuses(&cx, &candidacy, "key").await
}

/// A zero TTL is refused by the candidacy and by the Elector builder.
pub async fn ttl_zero_is_invalid_argument(cx: Cx) -> Step {
    let before = counters(&cx).await?;
    rejected(
        &cx,
        "Candidacy::new(ttl 0)",
        "ttl",
        Candidacy::new(cx.new_key(), cx.identity("a"), Duration::ZERO),
    )?;
    builder_refuses(&cx, cx.client().await?.backend, "ttl", |b| {
        b.ttl(Duration::ZERO)
    })?;
    nothing_written(&cx, before, None).await
}

/// A TTL below the backend's minimum is refused before anything is sent.
pub async fn ttl_below_backend_minimum_is_invalid_argument(cx: Cx) -> Step {
    let ttl = cx.caps().min_ttl / 2;
    if ttl.is_zero() {
        return Err(Failure::Skip("the backend has no minimum TTL".into()));
    }
    let candidacy = Candidacy::new(cx.new_key(), cx.identity("a"), ttl).ctx("candidacy")?;
    backend_refuses(&cx, &candidacy, "ttl").await?;
    builder_refuses(&cx, cx.client().await?.backend, "ttl", |b| b.ttl(ttl))
}

/// A TTL above the backend's maximum (`Capabilities::max_ttl`: a ZooKeeper
/// lease is its session, whose timeout the client fixed) is refused before
/// anything is sent, by the backend and by the Elector builder. The TTL
/// tried is the backend's granularity above the maximum, rounded to the
/// granularity, so that nothing but the maximum refuses it.
pub async fn ttl_above_backend_maximum_is_invalid_argument(cx: Cx) -> Step {
    let Some(max) = cx.caps().max_ttl else {
        return Err(Failure::Skip("the backend has no maximum TTL".into()));
    };
    let g = cx.caps().ttl_granularity.as_nanos().max(1);
    let ttl = Duration::from_nanos(((max.as_nanos() / g + 1) * g) as u64);
    let candidacy = Candidacy::new(cx.new_key(), cx.identity("a"), ttl).ctx("candidacy")?;
    backend_refuses(&cx, &candidacy, "ttl").await?;
    builder_refuses(&cx, cx.client().await?.backend, "ttl", |b| b.ttl(ttl))
}

/// A TTL that is not a whole multiple of the backend's granularity is refused.
pub async fn ttl_off_granularity_is_invalid_argument(cx: Cx) -> Step {
    let half = cx.caps().ttl_granularity / 2;
    if half.is_zero() {
        return Err(Failure::Skip("the backend takes any TTL".into()));
    }
    let ttl = cx.ttl() + half;
    let candidacy = Candidacy::new(cx.new_key(), cx.identity("a"), ttl).ctx("candidacy")?;
    backend_refuses(&cx, &candidacy, "ttl").await?;
    builder_refuses(&cx, cx.client().await?.backend, "ttl", |b| b.ttl(ttl))
}

/// An empty identity cannot be made, in the API or the Elector builder.
pub async fn empty_identity_is_invalid_argument(cx: Cx) -> Step {
    let before = counters(&cx).await?;
    rejected(
        &cx,
        "CandidateId::new(\"\")",
        "identity",
        CandidateId::new(""),
    )?;
    builder_refuses(&cx, cx.client().await?.backend, "identity", |b| {
        b.identity("")
    })?;
    nothing_written(&cx, before, None).await
}

/// The Elector builder refuses a renewal interval that leaves no room
/// before the deadline (equal to or above the TTL).
pub async fn elector_rejects_renew_interval_not_below_ttl(cx: Cx) -> Step {
    let before = counters(&cx).await?;
    let backend = cx.client().await?.backend;
    let ttl = cx.ttl();
    builder_refuses(&cx, backend.clone(), "renew_interval", |b| {
        b.renew_interval(ttl)
    })?;
    builder_refuses(&cx, backend.clone(), "renew_interval", |b| {
        b.renew_interval(ttl * 2)
    })?;
    builder_refuses(&cx, backend, "renew_interval", |b| {
        b.renew_interval(Duration::ZERO)
    })?;
    nothing_written(&cx, before, None).await
}
