//! `labelSelector` on list and watch, and the counters, as kube-apiserver
//! keeps them.
//!
//! Upstream sources (kubernetes/kubernetes): staging/src/k8s.io/apiserver/
//! pkg/storage/cacher/cache_watcher.go (`convertToWatchEvent`: which event,
//! if any, a watcher with a selector gets of a change) and
//! staging/src/k8s.io/apimachinery/pkg/labels/selector.go (selector syntax).

use std::time::Duration;

use serde_json::{json, Value};
mod common;

use common::{answer_of, assert_status, fixture, Fixture};

fn lease(name: &str, holder: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name, "labels": labels },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10 },
    })
}

impl Fixture {
    async fn post(&self, body: &Value) -> (u16, Value) {
        answer_of(self.http.post(self.url(None)).json(body)).await
    }
    async fn put(&self, name: &str, body: &Value) -> (u16, Value) {
        answer_of(self.http.put(self.url(Some(name))).json(body)).await
    }
    async fn delete(&self, name: &str) -> (u16, Value) {
        answer_of(self.http.delete(self.url(Some(name)))).await
    }
    /// The names a list with `selector` answers, sorted.
    async fn names(&self, selector: &str) -> Vec<String> {
        let url = format!("{}?labelSelector={}", self.url(None), encoded(selector));
        let request = self.http.get(url);
        let (code, list) = answer_of(request).await;
        assert_eq!(code, 200, "{selector}: {list}");
        let items = list["items"].as_array().unwrap();
        let mut names: Vec<String> = items
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }
}

/// `text` percent-encoded for a query string.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn rv(object: &Value) -> &str {
    object["metadata"]["resourceVersion"].as_str().unwrap()
}

/// A watch's events, one JSON object a line.
struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Events {
    async fn next(&mut self) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let event = serde_json::from_slice(&self.buffer[..end]).unwrap();
                self.buffer.drain(..=end);
                return event;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("an event in time")
                .unwrap()
                .expect("the stream open");
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// The next event is `kind` of Lease `name`; returns its object.
    async fn expect(&mut self, kind: &str, name: &str) -> Value {
        let event = self.next().await;
        assert_eq!(event["type"], kind, "{event}");
        assert_eq!(event["object"]["metadata"]["name"], name, "{event}");
        event["object"].clone()
    }
}

/// Waits until `served()` reaches `expected`, then checks it stays there.
async fn assert_served(f: &Fixture, expected: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while f.server.served() < expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.server.served(), expected, "requests + watch events sent");
}

/// A watch with a labelSelector gets what kube-apiserver's watch cache
/// sends (`convertToWatchEvent`): ADDED when an object comes to match,
/// MODIFIED while it matches, DELETED, with the object as it was before
/// the change but the change's resourceVersion, when it stops matching or
/// is deleted, and nothing of objects that match neither before nor after.
/// Only the events sent are counted as served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_gets_only_the_events_its_label_selector_selects() {
    let f = fixture().await;
    assert_eq!(
        f.post(&lease("pre", "x", json!({"app": "web"}))).await.0,
        201
    );
    assert_eq!(
        f.post(&lease("other", "x", json!({"app": "db"}))).await.0,
        201
    );

    let url = format!("{}?watch=1&labelSelector=app%3Dweb", f.url(None));
    let response = f.http.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut events = Events {
        response,
        buffer: Vec::new(),
    };
    // The initial state: only the Lease that matches.
    events.expect("ADDED", "pre").await;
    let served = f.server.served();

    let (_, a) = f.post(&lease("a", "x", json!({"app": "web"}))).await;
    events.expect("ADDED", "a").await;
    let (_, b) = f.post(&lease("b", "x", json!({"app": "db"}))).await;
    let mut next = a.clone();
    next["spec"]["holderIdentity"] = json!("y");
    let (code, a) = f.put("a", &next).await;
    assert_eq!(code, 200, "{a}");
    assert_eq!(
        events.expect("MODIFIED", "a").await["spec"]["holderIdentity"],
        "y"
    );
    // Relabelled out of the selector: DELETED, the object as it was.
    let mut next = a.clone();
    next["metadata"]["labels"] = json!({"app": "db"});
    let (code, relabelled) = f.put("a", &next).await;
    assert_eq!(code, 200, "{relabelled}");
    let gone = events.expect("DELETED", "a").await;
    assert_eq!(gone["metadata"]["labels"]["app"], "web", "{gone}");
    assert_eq!(rv(&gone), rv(&relabelled), "the change's resourceVersion");
    // Relabelled into the selector: ADDED (b's own create sent nothing).
    let mut next = b.clone();
    next["metadata"]["labels"] = json!({"app": "web"});
    assert_eq!(f.put("b", &next).await.0, 200);
    events.expect("ADDED", "b").await;
    assert_eq!(f.delete("b").await.0, 200);
    events.expect("DELETED", "b").await;
    // The delete of a Lease that does not match sends nothing.
    assert_eq!(f.delete("a").await.0, 200);
    assert_eq!(f.post(&lease("c", "x", json!({"app": "web"}))).await.0, 201);
    events.expect("ADDED", "c").await;

    // Eight requests, six events sent (the four changes filtered out
    // were not sent, nor counted).
    assert_served(&f, served + 8 + 6).await;
}

/// A list with a labelSelector answers only the Leases it selects, with
/// apimachinery's syntax: equality, inequality, exists, not exists, in,
/// notin, commas as AND; an unparsable selector is 400 BadRequest, on list
/// and watch alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_answers_only_what_its_label_selector_selects() {
    let f = fixture().await;
    for (name, labels) in [
        ("web-front", json!({"app": "web", "tier": "front"})),
        ("web-back", json!({"app": "web", "tier": "back"})),
        ("db", json!({"app": "db"})),
        ("bare", json!({})),
    ] {
        assert_eq!(f.post(&lease(name, "x", labels)).await.0, 201);
    }
    let cases: [(&str, &[&str]); 11] = [
        ("", &["bare", "db", "web-back", "web-front"]),
        ("app=web", &["web-back", "web-front"]),
        ("app==db", &["db"]),
        ("app!=web", &["bare", "db"]),
        ("tier", &["web-back", "web-front"]),
        ("!tier", &["bare", "db"]),
        ("app in (db, web)", &["db", "web-back", "web-front"]),
        ("app notin (web)", &["bare", "db"]),
        ("app=web,tier=front", &["web-front"]),
        ("app=web,tier notin (front)", &["web-back"]),
        ("app=nothing", &[]),
    ];
    for (selector, expected) in cases {
        assert_eq!(f.names(selector).await, expected, "{selector:?}");
    }
    for bad in ["app in web", "=web", "app=web,", "app in (a", "-app"] {
        let url = format!("{}?labelSelector={}", f.url(None), encoded(bad));
        let request = f.http.get(url);
        assert_status(&answer_of(request).await, 400, "BadRequest");
        let url = format!("{}?watch=1&labelSelector={}", f.url(None), encoded(bad));
        let request = f.http.get(url);
        assert_status(&answer_of(request).await, 400, "BadRequest");
    }
}

/// The write count counts only writes etcd committed, as etcd's own
/// counts of puts and deletes do: a 409 whose transaction's compare failed
/// (a create of a Lease that exists, an update raced by another) wrote
/// nothing and is not counted, nor is a stale PUT refused before etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_committed_writes_are_counted() {
    let f = fixture().await;
    let (code, created) = f.post(&lease("w", "x", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(f.server.writes(), 1);

    // A create etcd refuses (its transaction's compare fails).
    assert_status(
        &f.post(&lease("w", "y", json!({}))).await,
        409,
        "AlreadyExists",
    );
    assert_eq!(f.server.writes(), 1, "a refused create was counted");

    // A good PUT counts; the same PUT again is stale.
    let mut next = created.clone();
    next["spec"]["holderIdentity"] = json!("y");
    let (code, updated) = f.put("w", &next).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(f.server.writes(), 2);
    assert_status(&f.put("w", &next).await, 409, "Conflict");
    assert_eq!(f.server.writes(), 2, "a stale PUT was counted");

    // PUTs racing from one resourceVersion: one commits, the others are
    // 409 (refused on a read, or by etcd's compare), and one write counts.
    let racing = (0..8).map(|i| {
        let mut next = updated.clone();
        next["spec"]["holderIdentity"] = json!(format!("racer-{i}"));
        let (http, url) = (f.http.clone(), f.url(Some("w")));
        tokio::spawn(async move { answer_of(http.put(url).json(&next)).await })
    });
    let mut codes = Vec::new();
    for answer in futures::future::join_all(racing).await {
        let answer = answer.unwrap();
        if answer.0 != 200 {
            assert_status(&answer, 409, "Conflict");
        }
        codes.push(answer.0);
    }
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 1, "{codes:?}");
    assert_eq!(f.server.writes(), 3, "only the committed PUT counts");

    assert_eq!(f.delete("w").await.0, 200);
    assert_eq!(f.server.writes(), 4);
}
