//! `?watch=1`: etcd's watch as kube watch events, one JSON object a line.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use etcd_client::{EventType, GetOptions, WatchOptions};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::status;
use super::store::{decode, key, prefix, Store};
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

/// A 200 watch answer that carries `event` and ends.
fn ended_with(event: Bytes) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(event))
        .expect("response")
}

pub(crate) async fn watch(
    store: Store,
    ns: String,
    name: Option<String>,
    rv: Option<i64>,
    bookmarks: bool,
    timeout: Duration,
) -> Response {
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
            let got = super::store::sent(|| {
                let (mut kv, options) = (store.client().kv_client(), options.clone());
                let key = watch_key.clone();
                async move { kv.get(key, Some(options)).await }
            })
            .await;
            if let Err(e) = got {
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
                    return status::internal(format!("etcd: {e}"));
                }
            }
            rv + 1
        }
        None => match store.list(&ns, name.as_deref()).await {
            Ok((items, revision)) => {
                initial = items.iter().map(|o| line("ADDED", o)).collect();
                revision + 1
            }
            Err(e) => return status::internal(format!("etcd: {e}")),
        },
    };
    let mut options = WatchOptions::new()
        .with_start_revision(start)
        .with_prev_key();
    if with_prefix {
        options = options.with_prefix();
    }
    let watching = super::store::sent(|| {
        let (mut client, options) = (store.client().watch_client(), options.clone());
        let key = watch_key.clone();
        async move { client.watch(key, Some(options)).await }
    })
    .await;
    let (mut watcher, mut stream) = match watching {
        Ok(stream) => stream.split(),
        Err(e) => return status::internal(format!("etcd: {e}")),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let events = store.clone();
    let mut expiries = store.expiries();
    let open = store.watch_opened(&expiries);
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
                if bookmarks && !answer.created() {
                    let revision = answer.header().map_or(0, |h| h.revision());
                    if tx.send(bookmark(revision)).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            for event in answer.events() {
                let Some(kv) = event.kv() else { continue };
                let text = match event.event_type() {
                    EventType::Put => {
                        let kind = if kv.version() == 1 {
                            "ADDED"
                        } else {
                            "MODIFIED"
                        };
                        line(kind, &decode(kv.value(), kv.mod_revision()))
                    }
                    EventType::Delete => {
                        let prev = event.prev_kv().map(|p| p.value()).unwrap_or(b"{}");
                        line("DELETED", &decode(prev, kv.mod_revision()))
                    }
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
