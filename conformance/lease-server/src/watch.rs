//! `?watch=1`: etcd's watch as kube watch events, one JSON object a line.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use etcd_client::{EventType, GetOptions, WatchOptions};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::selector::Selector;
use super::status;
use super::store::{decode, key, prefix, revision, Store};
use super::BOOKMARK_INTERVAL;

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = serde_json::to_vec(&json!({ "type": kind, "object": object })).expect("JSON");
    text.push(b'\n');
    Bytes::from(text)
}

fn bookmark(revision: i64) -> Bytes {
    line(
        "BOOKMARK",
        &json!({
            "kind": "Lease",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": { "resourceVersion": revision.to_string() },
        }),
    )
}

fn expired(message: String) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Expired", "code": 410,
    })
}

fn is_compacted(e: &etcd_client::Error) -> bool {
    e.to_string().contains("compacted")
}

/// etcd's current revision, if the key `watch_key` is unchanged since `rv`
/// (it exists and was last written at or before `rv`): a watch of it from
/// `rv` can then start after the current revision, with nothing missed.
///
/// Why: etcd serves a watch that starts at or before its current revision
/// from its "unsynced" group, which a background loop catches up every
/// 100 ms (`watchResyncInterval`, mvcc/watchable_store.go), and holds that
/// watch's new events until then, so a change made in the first 100 ms
/// reached the watcher up to 100 ms late. kube-apiserver serves watches from
/// its watch cache (cacher.go), which sends a new event to every watcher at
/// once, however recently it started. A waiting candidate watches from the
/// resourceVersion it just read; where other objects were written since,
/// this server made the first hand-over after it queued up to 100 ms slower
/// than kube-apiserver would.
async fn unchanged_since(
    store: &Store,
    watch_key: &str,
    rv: i64,
) -> Result<Option<i64>, etcd_client::Error> {
    let got = store.read(watch_key, None).await?;
    let current = revision(got.header());
    Ok(match got.kvs().first() {
        Some(kv) if kv.mod_revision() <= rv && rv <= current => Some(current),
        _ => None,
    })
}

/// A 200 watch answer that carries `event` and ends.
fn ended_with(event: Bytes) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(event))
        .expect("response")
}

/// What a watch is of: a namespace's Leases, or the one named there, that
/// its label selector selects.
pub(crate) struct Target {
    pub(crate) ns: String,
    pub(crate) name: Option<String>,
    pub(crate) labels: Selector,
}

/// The event a watcher whose selector is `labels` gets of a change, as
/// kube-apiserver's watch cache makes it (`cacheWatcher.convertToWatchEvent`,
/// staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go): ADDED
/// if the object passes the selector now and did not before (or did not
/// exist), MODIFIED if it passes both times, DELETED with the object as it
/// was (at the change's resourceVersion) if it passed before and no longer
/// does (or was deleted), and nothing if it passes neither time.
fn event_for(labels: &Selector, event: &etcd_client::Event) -> Option<Bytes> {
    let kv = event.kv()?;
    let revision = kv.mod_revision();
    let prev = event.prev_kv().map(|p| decode(p.value(), revision));
    let old_passes = match &prev {
        Some(prev) => labels.matches(prev),
        // etcd leaves the previous value out once it is compacted: the
        // object existed (version > 1, or a delete), and without a selector
        // it passed; with one, what it was is unknown and it is taken as
        // not passing.
        None => {
            labels.is_everything() && (event.event_type() == EventType::Delete || kv.version() > 1)
        }
    };
    let current = match event.event_type() {
        EventType::Put => Some(decode(kv.value(), revision)),
        EventType::Delete => None,
    };
    let cur_passes = current.as_ref().is_some_and(|c| labels.matches(c));
    match (cur_passes, old_passes) {
        (true, false) => Some(line("ADDED", current.as_ref()?)),
        (true, true) => Some(line("MODIFIED", current.as_ref()?)),
        (false, true) => Some(line(
            "DELETED",
            &prev.unwrap_or_else(|| decode(b"{}", revision)),
        )),
        (false, false) => None,
    }
}

pub(crate) async fn watch(
    store: Store,
    target: Target,
    rv: Option<i64>,
    bookmarks: bool,
    timeout: Duration,
    user_agent: String,
) -> Response {
    let Target { ns, name, labels } = target;
    let (watch_key, with_prefix) = match &name {
        Some(name) => (key(&ns, name), false),
        None => (prefix(&ns), true),
    };
    let mut initial = Vec::new();
    let start = match rv {
        Some(rv) => {
            // Is `rv` still in etcd's history? (kube answers 410 Gone if not.)
            let mut options = GetOptions::new().with_revision(rv).with_count_only();
            if with_prefix {
                options = options.with_prefix();
            }
            if let Err(e) = store.read(&watch_key, Some(options)).await {
                if is_compacted(&e) {
                    // kube-apiserver answers 200 and ends the watch with one
                    // ERROR event, Status 410 Expired: the cacher's
                    // newErrWatcher ("once we have passed authn/authz/admission,
                    // and successfully parsed a resource version, we should
                    // treat all other errors as terminal watch errors and not
                    // an HTTP error response"), and without the cache the
                    // etcd3 watcher, which sends the compaction as an error
                    // event (staging/src/k8s.io/apiserver/pkg/storage/cacher/
                    // cacher.go, .../storage/etcd3/watcher.go).
                    let message = format!("too old resource version: {rv}");
                    return ended_with(line("ERROR", &expired(message)));
                }
                if !e.to_string().contains("future revision") {
                    return status::etcd_failure(e);
                }
            }
            match &name {
                Some(_) => match unchanged_since(&store, &watch_key, rv).await {
                    Ok(Some(current)) => current + 1,
                    Ok(None) => rv + 1,
                    Err(e) => return status::etcd_failure(e),
                },
                None => rv + 1,
            }
        }
        None => match store.list(&ns, name.as_deref()).await {
            Ok((items, revision)) => {
                let selected = items.iter().filter(|o| labels.matches(o));
                initial = selected.map(|o| line("ADDED", o)).collect();
                revision + 1
            }
            Err(e) => return status::etcd_failure(e),
        },
    };
    let mut options = WatchOptions::new()
        .with_start_revision(start)
        .with_prev_key();
    if with_prefix {
        options = options.with_prefix();
    }
    let (mut watcher, mut stream) = match store.watch(&watch_key, options).await {
        Ok(stream) => stream.split(),
        Err(e) => return status::etcd_failure(e),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let events = store.clone();
    let mut expiries = store.expiries();
    let target = name.clone().map(|name| (ns.clone(), name, user_agent));
    let open = store.watch_opened(&expiries, target);
    tokio::spawn(async move {
        let _open = open;
        for line in initial {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(BOOKMARK_INTERVAL);
        tick.tick().await;
        loop {
            let answer = tokio::select! {
                _ = &mut deadline => return,
                _ = tick.tick(), if bookmarks => {
                    if watcher.request_progress().await.is_err() { return; }
                    continue;
                }
                _ = tx.closed() => return,
                _ = expiries.changed() => {
                    // As kube-apiserver ends a watch that etcd cancelled for compaction.
                    let message = format!("too old resource version: {start}");
                    let _ = tx.send(line("ERROR", &expired(message))).await;
                    return;
                }
                answer = stream.message() => answer,
            };
            let Ok(Some(answer)) = answer else { return };
            if answer.canceled() {
                if answer.compact_revision() > 0 {
                    let message = format!(
                        "too old resource version: {start} ({})",
                        answer.compact_revision()
                    );
                    let _ = tx.send(line("ERROR", &expired(message))).await;
                }
                return;
            }
            if answer.events().is_empty() {
                let send = bookmarks && !answer.created();
                if send && tx.send(bookmark(revision(answer.header()))).await.is_err() {
                    return;
                }
                continue;
            }
            for event in answer.events() {
                // Only the events sent are counted as served.
                let Some(text) = event_for(&labels, event) else {
                    continue;
                };
                if tx.send(text).await.is_err() {
                    return;
                }
                events.count_served();
            }
        }
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(body))
        .expect("response")
}
