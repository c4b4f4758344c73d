//! The Lease API test server answers as kube-apiserver does, over a real etcd.

use serde_json::{json, Value};
mod common;

use common::{answer_of, assert_status, fixture, Fixture};

fn lease(name: &str, holder: &str, duration: i64, transitions: i64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "leaseTransitions": transitions,
        }
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
}

fn rv(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A watch's events, one JSON object a line.
struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Events {
    fn new(response: reqwest::Response) -> Events {
        Events {
            response,
            buffer: Vec::new(),
        }
    }

    /// The next event, which must come by `deadline`.
    async fn next(&mut self, deadline: tokio::time::Instant) -> Value {
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_update_delete_and_their_failures() {
    let f = fixture().await;
    assert_status(&f.get("a").await, 404, "NotFound");

    let (code, created) = f.post(&lease("a", "x", 2, 0)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["holderIdentity"], "x");
    assert_status(&f.post(&lease("a", "y", 2, 0)).await, 409, "AlreadyExists");

    let (code, read) = f.get("a").await;
    assert_eq!(code, 200);
    assert_eq!(rv(&read), rv(&created));

    // Update with the observed resourceVersion: ok, and it moves.
    let mut next = read.clone();
    next["spec"]["holderIdentity"] = json!("y");
    let (code, updated) = f.put("a", &next).await;
    assert_eq!(code, 200, "{updated}");
    assert!(rv(&updated).parse::<i64>().unwrap() > rv(&read).parse::<i64>().unwrap());

    // The same stale resourceVersion again: 409 Conflict.
    assert_status(&f.put("a", &next).await, 409, "Conflict");

    // Without a resourceVersion: 422.
    let mut unconditional = updated.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let answer = f.put("a", &unconditional).await;
    assert_status(&answer, 422, "Invalid");
    assert_eq!(
        answer.1["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );

    let (code, deleted) = f.delete("a").await;
    assert_eq!(code, 200);
    assert_eq!(deleted["spec"]["holderIdentity"], "y");
    assert_status(&f.delete("a").await, 404, "NotFound");
    // A PUT of the deleted Lease with its uid: the uid precondition fails.
    let answer = f.put("a", &updated).await;
    assert_status(&answer, 409, "Conflict");
    let message = answer.1["message"].as_str().unwrap();
    assert!(
        message.contains("Precondition failed: UID in precondition"),
        "{message}"
    );
    // Without one, the PUT creates it: Leases allow create-on-update
    // (pkg/registry/coordination/lease/strategy.go, AllowCreateOnUpdate).
    let mut fresh = updated.clone();
    let meta = fresh["metadata"].as_object_mut().unwrap();
    meta.remove("uid");
    meta.remove("resourceVersion");
    let (code, recreated) = f.put("a", &fresh).await;
    assert_eq!(code, 201, "{recreated}");
    assert_eq!(recreated["spec"]["holderIdentity"], "y");
    assert_ne!(recreated["metadata"]["uid"], updated["metadata"]["uid"]);
    // Four committed etcd writes: the create by POST, the update, the
    // delete, the create by PUT. The second POST's transaction was refused
    // by etcd (AlreadyExists) and wrote nothing; the stale PUT, the 422, the
    // second delete and the PUT with a failed precondition were refused on
    // a read, before any write.
    assert_eq!(f.server.writes(), 4);
}

/// A stale PUT is refused with 409 before any etcd write, as kube-apiserver's
/// `GuaranteedUpdate` does when the state it holds is current
/// (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go; the registry's
/// `Store.Update` compares resourceVersions before anything is written): the
/// server's write counter counts writes that could commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_put_is_refused_before_any_write() {
    let f = fixture().await;
    let (_, created) = f.post(&lease("s", "x", 2, 0)).await;
    let mut next = created.clone();
    next["spec"]["holderIdentity"] = json!("y");
    assert_eq!(f.put("s", &next).await.0, 200);
    let writes = f.server.writes();
    assert_status(&f.put("s", &next).await, 409, "Conflict");
    assert_eq!(f.server.writes(), writes, "a stale PUT was written to etcd");
}

/// DELETE honours the preconditions of its DeleteOptions (uid,
/// resourceVersion): 409 Conflict, "Precondition failed", if the stored
/// Lease does not meet them (storage.Preconditions.Check, which etcd3's
/// conditionalDelete runs; storeerr.InterpretDeleteError makes it a
/// Conflict); deleted if it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_honours_its_preconditions() {
    let f = fixture().await;
    let (_, created) = f.post(&lease("d", "x", 2, 0)).await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let delete = |preconditions: Value| {
        let body =
            json!({ "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions });
        answer_of(f.http.delete(f.url(Some("d"))).json(&body))
    };
    for (preconditions, wrong) in [
        (
            json!({ "uid": "not-its-uid" }),
            "UID in precondition: not-its-uid",
        ),
        (
            json!({ "uid": uid, "resourceVersion": "1" }),
            "ResourceVersion in precondition: 1",
        ),
    ] {
        let answer = delete(preconditions).await;
        assert_status(&answer, 409, "Conflict");
        let message = answer.1["message"].as_str().unwrap();
        assert!(message.contains(wrong), "{message}");
        assert_eq!(
            f.get("d").await.0,
            200,
            "deleted despite a failed precondition"
        );
    }
    let (code, _) = delete(json!({ "uid": uid, "resourceVersion": rv(&created) })).await;
    assert_eq!(code, 200);
    assert_status(&f.get("d").await, 404, "NotFound");
}

/// What tenure's resourceVersion fencing tokens rest on (KEP-5504): a Lease
/// deleted and created again gets a resourceVersion above every one it had
/// before; and annotations are kept as written, through updates by clients
/// that keep them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_versions_increase_across_delete_and_create_and_annotations_round_trip() {
    let f = fixture().await;
    let mut body = lease("r", "x", 2, 0);
    body["metadata"]["annotations"] = json!({ "tenure.dev/fencing-token": "7" });
    let (code, created) = f.post(&body).await;
    assert_eq!(code, 201, "{created}");
    let mut next = created.clone();
    next["spec"]["holderIdentity"] = json!("y");
    let (_, updated) = f.put("r", &next).await;
    assert_eq!(
        updated["metadata"]["annotations"]["tenure.dev/fencing-token"],
        "7"
    );
    let (_, read) = f.get("r").await;
    assert_eq!(
        read["metadata"]["annotations"],
        created["metadata"]["annotations"]
    );
    let before: i64 = rv(&updated).parse().unwrap();
    f.delete("r").await;
    let (code, again) = f.post(&lease("r", "z", 2, 0)).await;
    assert_eq!(code, 201, "{again}");
    let after: i64 = rv(&again).parse().unwrap();
    assert!(
        after > before,
        "resourceVersion {after} after re-creation, {before} before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_leases_are_422() {
    let f = fixture().await;
    for (body, field) in [
        (lease("Bad_Name", "x", 2, 0), "metadata.name"),
        (lease("a", "x", 0, 0), "spec.leaseDurationSeconds"),
        (lease("a", "x", -1, 0), "spec.leaseDurationSeconds"),
        (lease("a", "x", 2, -1), "spec.leaseTransitions"),
    ] {
        let answer = f.post(&body).await;
        assert_status(&answer, 422, "Invalid");
        assert_eq!(answer.1["details"]["causes"][0]["field"], field);
    }
    // Nothing was written.
    assert_status(&f.get("a").await, 404, "NotFound");
    // An update to leaseDurationSeconds 0 is refused too (kubernetes#88194).
    let (_, created) = f.post(&lease("a", "x", 2, 0)).await;
    let mut zero = created.clone();
    zero["spec"]["leaseDurationSeconds"] = json!(0);
    assert_status(&f.put("a", &zero).await, 422, "Invalid");
}

/// Labels and annotations are validated as kube-apiserver's
/// `ValidateObjectMeta` does (apimachinery's api/validation/objectmeta.go
/// and apis/meta/v1/validation): every key a qualified name (an optional
/// DNS-1123 subdomain prefix and `/`, a name part of at most 63
/// alphanumeric characters, `-`, `_` or `.`; annotation keys whatever
/// their case), every label value at most 63 such characters or empty,
/// and the annotations' keys and values together at most 256 KiB
/// (`TotalAnnotationSizeLimitB`, 262,144 bytes: 422 "Too long", reason
/// `FieldValueTooLong`), on every write: create, update and patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_and_annotations_are_validated_as_kube_apiserver_does() {
    let f = fixture().await;
    let with = |labels: Value, annotations: Value| {
        let mut body = lease("m", "x", 2, 0);
        body["metadata"]["labels"] = labels;
        body["metadata"]["annotations"] = annotations;
        body
    };
    let refused = [
        (
            with(json!({ "bad key": "v" }), json!(null)),
            "metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            with(json!({ "Bad_Prefix/k": "v" }), json!(null)),
            "metadata.labels: Invalid value: \"Bad_Prefix/k\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        (
            with(json!({ "k": "v".repeat(64) }), json!(null)),
            "must be no more than 63 bytes",
        ),
        (
            with(json!({ "k": "-v" }), json!(null)),
            "a valid label must be an empty string or consist of alphanumeric characters",
        ),
        (
            with(json!({ format!("a/{}", "n".repeat(64)): "v" }), json!(null)),
            "name part must be no more than 63 bytes",
        ),
        (
            with(json!(null), json!({ "a/b/c": "v" })),
            "metadata.annotations: Invalid value: \"a/b/c\": a valid label key must consist of",
        ),
        (
            with(json!(null), json!({ "k": "v".repeat(256 * 1024) })),
            "metadata.annotations: Too long: must have at most 262144 bytes",
        ),
    ];
    for (body, message) in refused {
        let answer = f.post(&body).await;
        assert_status(&answer, 422, "Invalid");
        let got = answer.1["message"].as_str().unwrap();
        assert!(got.contains(message), "{got}\nwanted: {message}");
    }
    let answer = f
        .post(&with(json!(null), json!({ "k": "v".repeat(256 * 1024) })))
        .await;
    assert_eq!(
        answer.1["details"]["causes"][0]["reason"], "FieldValueTooLong",
        "{}",
        answer.1
    );
    assert_status(&f.get("m").await, 404, "NotFound");

    // At the limits: an empty label value, an annotation key in capitals,
    // annotations of exactly 256 KiB.
    let key = "Example.com/Key";
    let at_limit = "v".repeat(256 * 1024 - key.len());
    let (code, created) = f
        .post(&with(
            json!({ "example.com/k": "" }),
            json!({ key: at_limit }),
        ))
        .await;
    assert_eq!(code, 201, "{created}");
    // A patch that would pass the limit is refused and writes nothing.
    let writes = f.server.writes();
    let (code, refused) = answer_of(
        f.http
            .patch(f.url(Some("m")))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"metadata":{"annotations":{"more":"x"}}}"#),
    )
    .await;
    assert_eq!(code, 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("Too long: must have at most 262144 bytes"),
        "{refused}"
    );
    assert_eq!(f.server.writes(), writes, "a refused patch was written");
    // So is an update.
    let mut update = created.clone();
    update["metadata"]["annotations"]["more"] = json!("x");
    assert_status(&f.put("m", &update).await, 422, "Invalid");
    assert_eq!(f.server.writes(), writes, "a refused update was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_watch_report_changes_with_bookmarks() {
    let f = fixture().await;
    let (_, created) = f.post(&lease("w", "x", 2, 0)).await;
    let list: Value = f
        .http
        .get(f.url(None))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["kind"], "LeaseList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    let watch_url = format!(
        "{}?watch=1&fieldSelector=metadata.name%3Dw&allowWatchBookmarks=true&resourceVersion={}",
        f.url(None),
        rv(&created)
    );
    let response = f.http.get(watch_url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut next = created.clone();
    next["spec"]["holderIdentity"] = json!("y");
    let (_, updated) = f.put("w", &next).await;
    f.delete("w").await;

    let mut seen = Vec::new();
    let mut events = Events::new(response);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !seen.contains(&"BOOKMARK".to_owned()) || !seen.contains(&"DELETED".to_owned()) {
        let event = events.next(deadline).await;
        if event["type"] == "MODIFIED" {
            assert_eq!(rv(&event["object"]), rv(&updated));
        }
        seen.push(event["type"].as_str().unwrap().to_owned());
    }
    let changes: Vec<_> = seen.iter().filter(|t| *t != "BOOKMARK").collect();
    assert_eq!(changes, ["MODIFIED", "DELETED"]);
}

/// A watch from a compacted resourceVersion is answered as kube-apiserver
/// answers it: HTTP 200 and one ERROR event, Status 410 Expired, then the
/// end of the stream (the cacher's newErrWatcher: "once we have passed
/// authn/authz/admission, and successfully parsed a resource version, we
/// should treat all other errors as terminal watch errors and not an HTTP
/// error response"; the etcd3 watcher sends the compaction as an error event
/// too: staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go,
/// .../storage/etcd3/watcher.go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_compacted_resource_version_is_one_error_event() {
    let f = fixture().await;
    let (_, created) = f.post(&lease("c", "x", 2, 0)).await;
    let mut object = created.clone();
    for holder in ["y", "z"] {
        object["spec"]["holderIdentity"] = json!(holder);
        object = f.put("c", &object).await.1;
    }
    let etcd = tenure_lease_server::etcd_client_for_tests(&f.server)
        .await
        .unwrap();
    etcd.clone()
        .compact(rv(&object).parse::<i64>().unwrap(), None)
        .await
        .unwrap();
    let url = format!("{}?watch=1&resourceVersion={}", f.url(None), rv(&created));
    let r = f.http.get(url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = tokio::time::timeout(std::time::Duration::from_secs(5), r.text())
        .await
        .expect("the watch ended after its ERROR event")
        .unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{text}");
    let event: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(event["type"], "ERROR", "{event}");
    assert_eq!(event["object"]["kind"], "Status");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_restarts_on_its_port_and_kube_client_reaches_it() {
    let f = fixture().await;
    f.post(&lease("k", "x", 2, 0)).await;
    f.server.kill();
    assert!(f.http.get(f.url(Some("k"))).send().await.is_err());
    f.server.restart().await.unwrap();
    let config = f.server.kube_config().await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::default_namespaced(client);
    let lease = api.get("k").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("x"));
}

/// The knob for answers that may follow a committed write: the next write
/// is committed to etcd, then answered with the chosen status (here 504
/// as kube-apiserver's timeout filter words it, then 500 as its etcd
/// client's "request timed out"); the writes after it are answered as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_answered_with_an_error_after_commit_is_committed() {
    let f = fixture().await;
    f.server.answer_next_write_after_commit(
        504,
        "Timeout: request did not complete within requested timeout - context deadline exceeded",
    );
    let answer = f.post(&lease("m", "x", 2, 0)).await;
    assert_status(&answer, 504, "Timeout");
    let (code, created) = f.get("m").await;
    assert_eq!(code, 200, "the create answered 504 was not committed");
    assert_eq!(created["spec"]["holderIdentity"], "x");

    f.server
        .answer_next_write_after_commit(500, "etcdserver: request timed out");
    let mut next = created.clone();
    next["spec"]["holderIdentity"] = json!("y");
    assert_status(&f.put("m", &next).await, 500, "InternalError");
    let (_, updated) = f.get("m").await;
    assert_eq!(updated["spec"]["holderIdentity"], "y");
    assert!(rv(&updated).parse::<i64>().unwrap() > rv(&created).parse::<i64>().unwrap());

    // Only the next write: the one after it is answered as usual.
    next = updated.clone();
    next["spec"]["holderIdentity"] = json!("z");
    let (code, written) = f.put("m", &next).await;
    assert_eq!(code, 200, "{written}");
}

/// The knobs for refused reads: 403 as RBAC without the verb answers it
/// (apiserver's responsewriters.Forbidden wording), 429 with a retry delay
/// in both the `Retry-After` header and the Status's
/// `details.retryAfterSeconds`, as kube-apiserver's
/// responsewriters.ErrorNegotiated writes them; the other requests are
/// served meanwhile, and all of them again once the knob is cleared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_say_why_and_when_to_come_back() {
    use std::time::Duration;
    use tenure_lease_server::Requests;
    let f = fixture().await;
    f.post(&lease("k", "x", 2, 0)).await;
    let watch = format!("{}?watch=1&fieldSelector=metadata.name%3Dk", f.url(None));
    f.server.refuse(Requests::Watch, 403, None);
    let answer = answer_of(f.http.get(&watch)).await;
    assert_status(&answer, 403, "Forbidden");
    let message = answer.1["message"].as_str().unwrap();
    assert!(
        message.contains("cannot watch resource \"leases\""),
        "{message}"
    );
    assert_eq!(f.get("k").await.0, 200, "a get was refused with the watch");

    f.server
        .refuse(Requests::List, 429, Some(Duration::from_secs(2)));
    let r = f.http.get(f.url(None)).send().await.unwrap();
    assert_eq!(r.headers()["retry-after"], "2");
    let answer = (r.status().as_u16(), r.json().await.unwrap());
    assert_status(&answer, 429, "TooManyRequests");
    assert_eq!(answer.1["details"]["retryAfterSeconds"], 2);

    f.server.refuse(Requests::Get, 403, None);
    assert_status(&f.get("k").await, 403, "Forbidden");
    for requests in [Requests::Get, Requests::List, Requests::Watch] {
        f.server.stop_refusing(requests);
    }
    assert_eq!(f.get("k").await.0, 200);
    let r = f.http.get(f.url(None)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// The knob for refused writes: the next update (PUT) or patch is refused
/// once, with a `Retry-After` where asked, and writes nothing; the one
/// after it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_once_writes_nothing_and_the_next_is_served() {
    use std::time::Duration;
    use tenure_lease_server::Requests;
    let f = fixture().await;
    let (_, created) = f.post(&lease("w", "x", 2, 0)).await;
    let writes = f.server.writes();

    f.server.refuse_next(Requests::Update, 1, 500, None);
    let mut update = created.clone();
    update["spec"]["holderIdentity"] = json!("y");
    assert!(f.server.refusing(Requests::Update));
    assert_status(&f.put("w", &update).await, 500, "InternalError");
    assert!(
        !f.server.refusing(Requests::Update),
        "refused more than once"
    );
    assert_eq!(f.server.writes(), writes, "a refused update was written");
    let (code, updated) = f.put("w", &update).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"]["holderIdentity"], "y");

    f.server
        .refuse_next(Requests::Patch, 1, 429, Some(Duration::from_secs(1)));
    let patch = || {
        f.http
            .patch(f.url(Some("w")))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"metadata":{"annotations":{"a":"b"}}}"#)
    };
    let r = patch().send().await.unwrap();
    assert_eq!(r.headers()["retry-after"], "1");
    let answer = (r.status().as_u16(), r.json().await.unwrap());
    assert_status(&answer, 429, "TooManyRequests");
    assert_eq!(answer.1["details"]["retryAfterSeconds"], 1);
    assert_eq!(f.server.writes(), writes + 1, "a refused patch was written");
    let (code, patched) = answer_of(patch()).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["annotations"]["a"], "b");
}

/// A watch hears a change made right after it opened at once, as
/// kube-apiserver's watch cache tells every watcher at once, however
/// recently it started, even where the watch starts from a resourceVersion
/// that etcd's revision has since passed (other objects written), and each
/// open watch is counted under its User-Agent until it closes.
///
/// Two delays the server had: a watch etcd serves from a past revision
/// waits for etcd's catch-up loop, every 100 ms (`watchResyncInterval`,
/// mvcc/watchable_store.go); and an event written just after the watch's
/// headers waited for the client's delayed ACK of them (Nagle's algorithm;
/// Go, and so kube-apiserver, sets TCP_NODELAY). Either put the median
/// of these trials at tens of milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_right_after_a_watch_opened_reaches_it_at_once() {
    const TRIALS: usize = 11;
    let f = fixture().await;
    let (_, mut object) = f.post(&lease("quick", "x", 2, 0)).await;
    let mut took = Vec::with_capacity(TRIALS);
    for trial in 0..TRIALS {
        // Another object's write moves etcd's revision past the Lease's.
        f.post(&lease(&format!("other-{trial}"), "x", 2, 0)).await;
        let url = format!(
            "{}?watch=1&fieldSelector=metadata.name%3Dquick&resourceVersion={}",
            f.url(None),
            rv(&object)
        );
        let agent = format!("watcher-{trial}");
        let response = f
            .http
            .get(url)
            .header("user-agent", &agent)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            f.server.open_watches("default", "quick"),
            [(agent.clone(), 1)],
            "trial {trial}: the open watch, counted under its User-Agent"
        );
        object["spec"]["holderIdentity"] = json!(format!("h{trial}"));
        let written = std::time::Instant::now();
        let (code, updated) = f.put("quick", &object).await;
        assert_eq!(code, 200, "{updated}");
        let mut events = Events::new(response);
        let event = events
            .next(tokio::time::Instant::now() + std::time::Duration::from_secs(5))
            .await;
        took.push(written.elapsed());
        assert_eq!(event["type"], "MODIFIED", "{event}");
        assert_eq!(rv(&event["object"]), rv(&updated));
        object = updated;
        drop(events);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while !f.server.open_watches("default", "quick").is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "trial {trial}: the closed watch still counted after 5 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
    took.sort();
    let median = took[TRIALS / 2];
    println!(
        "write to event: median {median:?}, max {:?}",
        took[TRIALS - 1]
    );
    assert!(
        median <= std::time::Duration::from_millis(20),
        "write to event: median {median:?} of {took:?}"
    );
}

#[tokio::test]
async fn create_sets_creation_timestamp_and_update_keeps_it() {
    let f = fixture().await;
    let mut body = lease("c", "a", 15, 0);
    body["metadata"]["creationTimestamp"] = json!("2001-01-01T00:00:00Z");
    let (code, created) = f.post(&body).await;
    assert_eq!(code, 201, "{created}");
    let created_at = created["metadata"]["creationTimestamp"].clone();
    let text = created_at.as_str().expect("a creationTimestamp");
    assert!(
        text.starts_with("20") && text.ends_with('Z') && text != "2001-01-01T00:00:00Z",
        "{text}"
    );
    let mut changed = created.clone();
    changed["spec"]["holderIdentity"] = json!("b");
    changed["metadata"]["creationTimestamp"] = json!("2001-01-01T00:00:00Z");
    let (code, updated) = f.put("c", &changed).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["metadata"]["creationTimestamp"], created_at);
    let patched = answer_of(
        f.http
            .patch(f.url(Some("c")))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"metadata":{"creationTimestamp":null},"spec":{"holderIdentity":"c"}}"#),
    )
    .await;
    assert_eq!(patched.0, 200, "{}", patched.1);
    assert_eq!(patched.1["metadata"]["creationTimestamp"], created_at);
}
