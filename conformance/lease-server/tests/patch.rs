//! PATCH and server-side apply on Leases, answered as kube-apiserver
//! answers them, over a real etcd.
//!
//! Upstream sources the expectations come from (kubernetes/kubernetes
//! unless named): staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go
//! (patch types, options, create-on-apply), staging/src/k8s.io/apimachinery/
//! pkg/util/managedfields/internal/ (managedFields, conflict messages),
//! kubernetes-sigs/structured-merge-diff merge/update.go (apply and update
//! semantics), and the Kubernetes documentation page "Server-Side Apply".

use std::collections::BTreeSet;

use serde_json::{json, Value};
mod common;

use common::{answer_of, assert_status, fixture, Fixture};

const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

impl Fixture {
    /// A create by `manager`.
    async fn post(&self, body: &Value, manager: &str) -> (u16, Value) {
        let url = format!("{}?fieldManager={manager}", self.url(None));
        answer_of(self.http.post(url).json(body)).await
    }

    /// A PATCH of `name` with `content_type`, `query` after the `?`.
    async fn patch(&self, name: &str, content_type: &str, query: &str, body: &str) -> (u16, Value) {
        let url = format!("{}?{query}", self.url(Some(name)));
        let request = self
            .http
            .patch(url)
            .header("content-type", content_type)
            .body(body.to_owned());
        answer_of(request).await
    }

    /// A server-side apply of `config` by `manager`.
    async fn apply(&self, name: &str, manager: &str, force: bool, config: &Value) -> (u16, Value) {
        let query = format!("fieldManager={manager}&force={force}");
        self.patch(name, APPLY, &query, &config.to_string()).await
    }
}

fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10 },
    })
}

fn rv(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The managedFields entry of `manager` with `operation`.
fn entry<'a>(object: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

/// The (manager, operation) pairs of an object's managedFields.
fn managers(object: &Value) -> BTreeSet<(String, String)> {
    let entries = object["metadata"]["managedFields"].as_array();
    entries
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (text("manager"), text("operation"))
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(m, o)| (m.to_string(), o.to_string()))
        .collect()
}

/// A JSON merge patch (RFC 7386; patch.go's jsonPatcher) changes what it
/// names, removes what it sets to null, stores one write with a new
/// resourceVersion that a watch sees as MODIFIED; the patcher's fields go
/// to its Update entry in managedFields, taken from the creator's
/// (managedfields/internal/managedfieldsupdater.go; SMD merge/update.go
/// `Updater.Update`: an update owns what it changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_patch_changes_the_lease_and_records_the_patcher() {
    let f = fixture().await;
    let mut body = lease("m", "a");
    body["metadata"]["annotations"] = json!({ "keep": "1", "drop": "2" });
    let (code, created) = f.post(&body, "creator").await;
    assert_eq!(code, 201, "{created}");
    let creator = entry(&created, "creator", "Update").expect("the creator's entry");
    assert_eq!(creator["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(creator["fieldsType"], "FieldsV1");
    assert_eq!(
        creator["fieldsV1"],
        json!({
            "f:metadata": { "f:annotations": { ".": {}, "f:drop": {}, "f:keep": {} } },
            "f:spec": { "f:holderIdentity": {}, "f:leaseDurationSeconds": {} },
        })
    );

    let watch = format!(
        "{}?watch=1&fieldSelector=metadata.name%3Dm&resourceVersion={}",
        f.url(None),
        rv(&created)
    );
    let mut events = f.http.get(watch).send().await.unwrap();
    let writes = f.server.writes();
    let patch = r#"{"spec":{"holderIdentity":"b"},"metadata":{"annotations":{"drop":null}}}"#;
    let (code, patched) = f.patch("m", MERGE, "fieldManager=patcher", patch).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(f.server.writes(), writes + 1, "one etcd write");
    assert_eq!(patched["spec"]["holderIdentity"], "b");
    assert_eq!(patched["spec"]["leaseDurationSeconds"], 10);
    assert_eq!(patched["metadata"]["annotations"], json!({ "keep": "1" }));
    assert!(rv(&patched) > rv(&created));
    assert_eq!(patched["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        entry(&patched, "patcher", "Update").unwrap()["fieldsV1"],
        json!({ "f:spec": { "f:holderIdentity": {} } })
    );
    assert_eq!(
        entry(&patched, "creator", "Update").unwrap()["fieldsV1"],
        json!({
            "f:metadata": { "f:annotations": { ".": {}, "f:keep": {} } },
            "f:spec": { "f:leaseDurationSeconds": {} },
        })
    );
    let chunk = tokio::time::timeout(std::time::Duration::from_secs(5), events.chunk())
        .await
        .expect("an event in time")
        .unwrap()
        .unwrap();
    let event: Value =
        serde_json::from_slice(chunk.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(event["type"], "MODIFIED", "{event}");
    assert_eq!(rv(&event["object"]), rv(&patched));
    assert_eq!(f.get("m").await.1, patched);
}

/// A patch whose result carries a resourceVersion other than the stored
/// one is refused 409 Conflict, as the registry's Store.Update refuses a
/// stale one (the patched object's resourceVersion is a precondition);
/// with the current one it applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_carrying_a_stale_resource_version_is_a_conflict() {
    let f = fixture().await;
    let (_, created) = f.post(&lease("p", "a"), "creator").await;
    let stale = rv(&created);
    let (_, current) = f
        .patch("p", MERGE, "", r#"{"spec":{"holderIdentity":"b"}}"#)
        .await;
    let writes = f.server.writes();
    for (content_type, body) in [
        (
            MERGE,
            json!({ "metadata": { "resourceVersion": stale.to_string() }, "spec": { "holderIdentity": "c" } }),
        ),
        (
            STRATEGIC,
            json!({ "metadata": { "resourceVersion": stale.to_string() }, "spec": { "holderIdentity": "c" } }),
        ),
        (
            JSON_PATCH,
            json!([
                { "op": "replace", "path": "/metadata/resourceVersion", "value": stale.to_string() },
                { "op": "replace", "path": "/spec/holderIdentity", "value": "c" },
            ]),
        ),
    ] {
        let answer = f.patch("p", content_type, "", &body.to_string()).await;
        assert_status(&answer, 409, "Conflict");
    }
    assert_eq!(f.server.writes(), writes, "a refused patch reached etcd");
    let fresh = json!({ "metadata": { "resourceVersion": rv(&current).to_string() }, "spec": { "holderIdentity": "c" } });
    let (code, patched) = f.patch("p", MERGE, "", &fresh.to_string()).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"]["holderIdentity"], "c");
}

/// JSON patch (RFC 6902; patch.go's jsonPatcher over evanphx/json-patch):
/// the operations apply in order; one that does not apply (a failed
/// `test`, a missing path) is 422 with kube-apiserver's fixed message and
/// empty details (`errors.NewGenericServerResponse(422, ...)`), and
/// nothing is written; a body that is no patch is 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_applies_operations_and_refuses_one_that_does_not_apply() {
    let f = fixture().await;
    let (_, created) = f.post(&lease("j", "a"), "creator").await;
    let ops = json!([
        { "op": "test", "path": "/spec/holderIdentity", "value": "a" },
        { "op": "replace", "path": "/spec/holderIdentity", "value": "b" },
        { "op": "add", "path": "/metadata/labels", "value": { "x/y": "1" } },
        { "op": "remove", "path": "/spec/leaseDurationSeconds" },
    ]);
    let (code, patched) = f.patch("j", JSON_PATCH, "", &ops.to_string()).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"], json!({ "holderIdentity": "b" }));
    assert_eq!(patched["metadata"]["labels"], json!({ "x/y": "1" }));
    assert!(rv(&patched) > rv(&created));

    let writes = f.server.writes();
    for ops in [
        json!([{ "op": "test", "path": "/spec/holderIdentity", "value": "a" }]),
        json!([{ "op": "replace", "path": "/spec/nothing/here", "value": 1 }]),
        json!([{ "op": "remove", "path": "/metadata/annotations" }]),
    ] {
        let answer = f.patch("j", JSON_PATCH, "", &ops.to_string()).await;
        assert_status(&answer, 422, "Invalid");
        assert_eq!(
            answer.1["message"],
            "the server rejected our request due to an error in our request"
        );
        assert_eq!(answer.1["details"], json!({}));
    }
    assert_status(
        &f.patch("j", JSON_PATCH, "", "{\"op\":1}").await,
        400,
        "BadRequest",
    );
    assert_status(
        &f.patch("j", JSON_PATCH, "", "not json").await,
        400,
        "BadRequest",
    );
    assert_eq!(f.server.writes(), writes, "a refused patch reached etcd");
    assert_eq!(f.get("j").await.1, patched);
}

/// Strategic merge patch on a Lease (apimachinery/pkg/util/strategicpatch):
/// a merge patch for its fields, with `$patch: replace` / `$patch: delete`
/// on objects, and `metadata.finalizers` merged as a set
/// (`patchStrategy:"merge"` in ObjectMeta).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patch_merges_with_its_directives() {
    let f = fixture().await;
    let mut body = lease("s", "a");
    body["metadata"]["labels"] = json!({ "a": "1", "b": "2" });
    body["metadata"]["finalizers"] = json!(["x"]);
    f.post(&body, "creator").await;
    let patch = json!({
        "metadata": { "labels": { "$patch": "replace", "c": "3" }, "finalizers": ["y"] },
        "spec": { "holderIdentity": "b", "leaseDurationSeconds": null },
    });
    let (code, patched) = f
        .patch("s", STRATEGIC, "fieldManager=smp", &patch.to_string())
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["labels"], json!({ "c": "3" }));
    assert_eq!(patched["metadata"]["finalizers"], json!(["x", "y"]));
    assert_eq!(patched["spec"], json!({ "holderIdentity": "b" }));
    let patch = json!({ "metadata": { "labels": { "$patch": "delete" } } });
    let (code, patched) = f.patch("s", STRATEGIC, "", &patch.to_string()).await;
    assert_eq!(code, 200, "{patched}");
    assert!(patched["metadata"].get("labels").is_none(), "{patched}");
}

/// What patch.go refuses before it reads anything, and what a missing Lease
/// is: a Content-Type that is no patch type is 415 UnsupportedMediaType
/// listing the accepted ones (negotiation.NewUnsupportedMediaTypeError);
/// `force` on a patch that is no apply is 422 (ValidatePatchOptions); a
/// patch of a missing Lease is 404 (jsonPatcher.createNewObject); one that
/// renames the Lease is 400 (handlers/rest.go checkName).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_refusals_unknown_type_force_missing_lease_and_renaming() {
    let f = fixture().await;
    f.post(&lease("r", "a"), "creator").await;
    let body = r#"{"spec":{"holderIdentity":"b"}}"#;
    for content_type in ["application/json", "text/plain", "application/yaml"] {
        let answer = f.patch("r", content_type, "", body).await;
        assert_status(&answer, 415, "UnsupportedMediaType");
        assert_eq!(
            answer.1["message"],
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, \
             application/strategic-merge-patch+json, application/apply-patch+yaml"
        );
    }
    let answer = f.patch("r", MERGE, "force=true", body).await;
    assert_status(&answer, 422, "Invalid");
    assert_eq!(
        answer.1["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    for (content_type, patch) in [
        (MERGE, body.to_owned()),
        (STRATEGIC, body.to_owned()),
        (
            JSON_PATCH,
            r#"[{"op":"replace","path":"/spec/holderIdentity","value":"b"}]"#.to_owned(),
        ),
    ] {
        let answer = f.patch("missing", content_type, "", &patch).await;
        assert_status(&answer, 404, "NotFound");
        assert_eq!(
            answer.1["message"],
            "leases.coordination.k8s.io \"missing\" not found"
        );
    }
    let answer = f
        .patch("r", MERGE, "", r#"{"metadata":{"name":"other"}}"#)
        .await;
    assert_status(&answer, 400, "BadRequest");
    assert_eq!(
        answer.1["message"],
        "the name of the object (other) does not match the name on the URL (r)"
    );
    let answer = f
        .patch("r", MERGE, "", r#"{"metadata":{"uid":"other"}}"#)
        .await;
    assert_status(&answer, 422, "Invalid");
    assert_eq!(answer.1["details"]["causes"][0]["field"], "metadata.uid");
    assert_status(&f.patch("r", MERGE, "", "[1]").await, 400, "BadRequest");
    assert_eq!(f.get("r").await.1["spec"]["holderIdentity"], "a");
}

/// With PATCH refused ([`LeaseServer::refuse_patch`]), every PATCH is
/// 415 UnsupportedMediaType, whatever its type, body or options, as
/// patch.go's PatchResource answers a Content-Type outside the resource's
/// patch types (`negotiation.NewUnsupportedMediaTypeError(patchTypes)`,
/// here with none: its message lists none; errUnsupportedMediaType.Status
/// has no details), before it reads the Lease: nothing is written, an apply
/// creates no missing Lease. Served again, a patch applies.
///
/// [`LeaseServer::refuse_patch`]: tenure_lease_server::LeaseServer::refuse_patch
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_patch_is_415_while_patches_are_refused() {
    let f = fixture().await;
    let (_, created) = f.post(&lease("n", "a"), "creator").await;
    f.server.refuse_patch();
    let writes = f.server.writes();
    let merge = r#"{"spec":{"holderIdentity":"b"}}"#;
    let apply = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": "n" },
        "spec": { "holderIdentity": "b" },
    })
    .to_string();
    let json_patch = r#"[{"op":"replace","path":"/spec/holderIdentity","value":"b"}]"#;
    let requests = [
        ("n", MERGE, "fieldManager=m", merge),
        ("n", STRATEGIC, "", merge),
        ("n", JSON_PATCH, "", json_patch),
        (
            "n",
            APPLY,
            "fieldManager=applier&force=true",
            apply.as_str(),
        ),
        ("missing", APPLY, "fieldManager=applier", apply.as_str()),
        ("n", "application/json", "", merge),
        ("n", MERGE, "force=true", "not json"),
    ];
    for (name, content_type, query, body) in requests {
        let answer = f.patch(name, content_type, query, body).await;
        assert_status(&answer, 415, "UnsupportedMediaType");
        assert_eq!(
            answer.1,
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "the body of the request was in an unknown format - accepted media types include: ",
                "reason": "UnsupportedMediaType",
                "code": 415,
            }),
            "{content_type} {query}"
        );
    }
    assert_eq!(f.server.writes(), writes, "a refused patch writes nothing");
    assert_eq!(f.get("n").await.1, created);
    assert_status(&f.get("missing").await, 404, "NotFound");

    f.server.serve_patch();
    let (code, patched) = f.patch("n", MERGE, "fieldManager=m", merge).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"]["holderIdentity"], "b");
}

/// Patches without a resourceVersion racing each other all land: a patch
/// that loses the compare-and-swap is made again on what is stored then,
/// as GuaranteedUpdate retries a conflict when no precondition was given
/// (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_without_a_resource_version_all_apply() {
    let f = fixture().await;
    f.post(&lease("c", "a"), "creator").await;
    let patches = (0..8).map(|i| {
        let body = json!({ "metadata": { "labels": { format!("l{i}"): "1" } } }).to_string();
        let f = &f;
        async move { f.patch("c", MERGE, "", &body).await.0 }
    });
    let codes = futures::future::join_all(patches).await;
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
    let (_, read) = f.get("c").await;
    assert_eq!(
        read["metadata"]["labels"].as_object().unwrap().len(),
        8,
        "{read}"
    );
}

/// An apply without `fieldManager` is 422, worded as kube-apiserver words
/// it (ValidatePatchOptions: "fieldManager: Required value: is required for
/// apply patch", on PatchOptions.meta.k8s.io).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_without_a_field_manager_is_422() {
    let f = fixture().await;
    let answer = f.patch("a", APPLY, "", &lease("a", "x").to_string()).await;
    assert_status(&answer, 422, "Invalid");
    assert_eq!(
        answer.1["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(
        answer.1["details"],
        json!({
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [{
                "reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch",
                "field": "fieldManager",
            }],
        })
    );
    assert_status(&f.get("a").await, 404, "NotFound");
}

/// An apply to a missing Lease creates it, 201 Created (patch.go: apply
/// sets forceAllowCreate), with one Apply entry owning exactly the applied
/// fields (the "Server-Side Apply" docs' managedFields example: leaves,
/// no `.` for maps an applier set, no name or namespace: stripmeta.go); the
/// same apply again changes nothing and writes nothing (etcd3/store.go's
/// GuaranteedUpdate skips an unchanged object), 200; the body may be YAML.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_a_missing_lease_then_is_idempotent() {
    let f = fixture().await;
    let mut config = lease("n", "x");
    config["metadata"]["labels"] = json!({ "app": "tenure" });
    let (code, created) = f.apply("n", "mgr", false, &config).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["holderIdentity"], "x");
    assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
    assert_eq!(managers(&created), pairs(&[("mgr", "Apply")]));
    let applied = entry(&created, "mgr", "Apply").unwrap();
    assert_eq!(applied["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(applied["fieldsType"], "FieldsV1");
    assert!(applied["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        applied["fieldsV1"],
        json!({
            "f:metadata": { "f:labels": { "f:app": {} } },
            "f:spec": { "f:holderIdentity": {}, "f:leaseDurationSeconds": {} },
        })
    );
    let writes = f.server.writes();
    let yaml = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: n\n  labels:\n    app: tenure\nspec:\n  holderIdentity: x\n  leaseDurationSeconds: 10\n";
    let (code, again) = f.patch("n", APPLY, "fieldManager=mgr", yaml).await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(again, created);
    assert_eq!(f.server.writes(), writes, "an unchanged apply was written");
}

/// Two appliers (SMD merge/update.go `Updater.Apply`, and the "Server-Side
/// Apply" docs, "Conflicts"): setting a field another applier owns to
/// another value is 409 Conflict whose causes name the owner and the field
/// (managedfields/internal/conflict.go: reason FieldManagerConflict,
/// message `conflict with "<manager>"`, field `.spec.holderIdentity`);
/// setting it to the same value shares it; `force=true` takes it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_conflicts_share_and_force() {
    let f = fixture().await;
    let (code, _) = f.apply("k", "one", false, &lease("k", "x")).await;
    assert_eq!(code, 201);
    let writes = f.server.writes();
    let answer = f.apply("k", "two", false, &lease("k", "y")).await;
    assert_status(&answer, 409, "Conflict");
    assert_eq!(
        answer.1["message"],
        "Apply failed with 1 conflict: conflict with \"one\": .spec.holderIdentity"
    );
    assert_eq!(
        answer.1["details"],
        json!({ "causes": [{
            "reason": "FieldManagerConflict",
            "message": "conflict with \"one\"",
            "field": ".spec.holderIdentity",
        }] })
    );
    assert_eq!(
        f.server.writes(),
        writes,
        "a conflicting apply reached etcd"
    );

    // The same values: shared, no conflict.
    let (code, shared) = f.apply("k", "two", false, &lease("k", "x")).await;
    assert_eq!(code, 200, "{shared}");
    let both = json!({ "f:spec": { "f:holderIdentity": {}, "f:leaseDurationSeconds": {} } });
    assert_eq!(entry(&shared, "one", "Apply").unwrap()["fieldsV1"], both);
    assert_eq!(entry(&shared, "two", "Apply").unwrap()["fieldsV1"], both);

    // Two fields changed, two causes, one line each (getConflictMessage).
    let mut config = lease("k", "y");
    config["spec"]["leaseDurationSeconds"] = json!(20);
    let answer = f.apply("k", "three", false, &config).await;
    assert_status(&answer, 409, "Conflict");
    assert_eq!(answer.1["details"]["causes"].as_array().unwrap().len(), 4);

    // Forced: "two" takes holderIdentity from "one", who keeps the rest.
    let mut config = lease("k", "y");
    config["spec"]
        .as_object_mut()
        .unwrap()
        .remove("leaseDurationSeconds");
    let (code, forced) = f.apply("k", "two", true, &config).await;
    assert_eq!(code, 200, "{forced}");
    assert_eq!(forced["spec"]["holderIdentity"], "y");
    assert_eq!(
        entry(&forced, "one", "Apply").unwrap()["fieldsV1"],
        json!({ "f:spec": { "f:leaseDurationSeconds": {} } })
    );
    assert_eq!(
        entry(&forced, "two", "Apply").unwrap()["fieldsV1"],
        json!({ "f:spec": { "f:holderIdentity": {} } })
    );
}

/// A field an applier applied before and leaves out now is removed if no
/// other manager owns it, and kept if one does (SMD merge/update.go,
/// `prune`; "Server-Side Apply" docs: "If you remove a field from a
/// manifest and apply that manifest, Server-Side Apply checks if there are
/// any other field managers that also own the field").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_removes_the_fields_it_no_longer_applies_unless_shared() {
    let f = fixture().await;
    let mut config = lease("o", "x");
    config["metadata"]["labels"] = json!({ "a": "1", "b": "2" });
    f.apply("o", "mine", false, &config).await;
    let shared = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": "o", "labels": { "b": "2" } },
    });
    assert_eq!(f.apply("o", "other", false, &shared).await.0, 200);
    let smaller = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": "o" },
        "spec": { "holderIdentity": "x" },
    });
    let (code, pruned) = f.apply("o", "mine", false, &smaller).await;
    assert_eq!(code, 200, "{pruned}");
    assert_eq!(pruned["spec"], json!({ "holderIdentity": "x" }));
    assert_eq!(pruned["metadata"]["labels"], json!({ "b": "2" }));
    assert_eq!(
        entry(&pruned, "mine", "Apply").unwrap()["fieldsV1"],
        json!({ "f:spec": { "f:holderIdentity": {} } })
    );
}

/// An update (PUT, or a patch that is no apply) never conflicts: it takes
/// the fields it changes from their applier ("Server-Side Apply" docs:
/// "this is the only way an update can change a field that is owned by
/// another manager"; SMD `Updater.Update` runs with force), whose next
/// apply of its old value then conflicts with the updater, printed with
/// the version it wrote (conflict.go printManager: `"<manager>" using
/// coordination.k8s.io/v1`). The updater's manager is `?fieldManager=`,
/// or the User-Agent's first word (handlers/rest.go prefixFromUserAgent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_takes_a_field_from_its_applier_without_conflict() {
    let f = fixture().await;
    let (_, applied) = f.apply("u", "applier", false, &lease("u", "x")).await;
    let mut next = applied.clone();
    next["spec"]["holderIdentity"] = json!("y");
    let url = f.url(Some("u"));
    let request = f
        .http
        .put(url)
        .header("user-agent", "updater/1.0 (linux)")
        .json(&next);
    let (code, updated) = answer_of(request).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(
        managers(&updated),
        pairs(&[("applier", "Apply"), ("updater", "Update")])
    );
    assert_eq!(
        entry(&updated, "applier", "Apply").unwrap()["fieldsV1"],
        json!({ "f:spec": { "f:leaseDurationSeconds": {} } })
    );
    assert_eq!(
        entry(&updated, "updater", "Update").unwrap()["fieldsV1"],
        json!({ "f:spec": { "f:holderIdentity": {} } })
    );
    // A merge patch takes a field the same way.
    let patch = r#"{"spec":{"leaseDurationSeconds":30}}"#;
    let (code, patched) = f.patch("u", MERGE, "fieldManager=patcher", patch).await;
    assert_eq!(code, 200, "{patched}");
    assert!(entry(&patched, "applier", "Apply").is_none(), "{patched}");

    let answer = f.apply("u", "applier", false, &lease("u", "x")).await;
    assert_status(&answer, 409, "Conflict");
    let causes = answer.1["details"]["causes"].as_array().unwrap();
    let messages: BTreeSet<&str> = causes
        .iter()
        .map(|c| c["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        BTreeSet::from([
            "conflict with \"patcher\" using coordination.k8s.io/v1",
            "conflict with \"updater\" using coordination.k8s.io/v1",
        ])
    );
    assert!(
        answer.1["message"]
            .as_str()
            .unwrap()
            .starts_with("Apply failed with 2 conflicts: conflicts with \"patcher\" using coordination.k8s.io/v1:\n- .spec.leaseDurationSeconds"),
        "{}",
        answer.1["message"]
    );
}

/// A resourceVersion in an applied configuration is a precondition, as in
/// any update (the registry's Store.Update): 409 if it is not the stored
/// one. A Lease deleted since is created again by it (Store.Update compares
/// resourceVersions only once an object exists), and a uid in it then is
/// a conflict ("uid mismatch", handlers/patch.go patcher.applyPatch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_resource_version_and_uid_preconditions() {
    let f = fixture().await;
    let (_, created) = f.apply("v", "mgr", false, &lease("v", "x")).await;
    let (_, moved) = f.apply("v", "mgr", false, &lease("v", "y")).await;
    let mut config = lease("v", "z");
    config["metadata"]["resourceVersion"] = json!(rv(&created).to_string());
    assert_status(&f.apply("v", "mgr", false, &config).await, 409, "Conflict");
    config["metadata"]["resourceVersion"] = json!(rv(&moved).to_string());
    let (code, applied) = f.apply("v", "mgr", false, &config).await;
    assert_eq!(code, 200, "{applied}");
    assert_eq!(applied["spec"]["holderIdentity"], "z");

    f.http.delete(f.url(Some("v"))).send().await.unwrap();
    let mut with_uid = config.clone();
    with_uid["metadata"]["uid"] = applied["metadata"]["uid"].clone();
    let answer = f.apply("v", "mgr", false, &with_uid).await;
    assert_status(&answer, 409, "Conflict");
    let uid = applied["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        answer.1["message"],
        format!(
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"v\": uid mismatch: \
             the provided object specified uid {uid}, and no existing object was found"
        )
    );
    let (code, recreated) = f.apply("v", "mgr", false, &config).await;
    assert_eq!(code, 201, "{recreated}");
    assert_ne!(recreated["metadata"]["uid"], applied["metadata"]["uid"]);
}

/// kube's own client: `Api::<Lease>::patch` with `Patch::Apply` and
/// `PatchParams::apply("mgr")` (Content-Type application/apply-patch+yaml,
/// `?fieldManager=mgr`), then `Patch::Merge`, as kube-lease-manager and
/// kube-coordinate write Leases; the typed Lease comes back with its
/// managedFields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_client_apply_and_merge_patches_are_understood() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Patch, PatchParams};
    let f = fixture().await;
    let client = kube::Client::try_from(f.server.kube_config().await.unwrap()).unwrap();
    let api: kube::Api<Lease> = kube::Api::default_namespaced(client);
    let applied = api
        .patch(
            "kube",
            &PatchParams::apply("mgr"),
            &Patch::Apply(lease("kube", "x")),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("x")
    );
    let entries = applied.metadata.managed_fields.clone().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("mgr"));
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));

    let merge = Patch::Merge(json!({ "spec": { "holderIdentity": "y" } }));
    let merged = api
        .patch("kube", &PatchParams::default(), &merge)
        .await
        .unwrap();
    assert_eq!(
        merged.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("y")
    );
    let version = |l: &Lease| -> i64 {
        l.metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(version(&merged) > version(&applied));
    let forced = api
        .patch(
            "kube",
            &PatchParams::apply("mgr").force(),
            &Patch::Apply(lease("kube", "z")),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().holder_identity.as_deref(), Some("z"));
    let error = api
        .patch(
            "kube",
            &PatchParams::apply("other"),
            &Patch::Apply(lease("kube", "w")),
        )
        .await
        .unwrap_err();
    match error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => panic!("not a 409: {other}"),
    }
}

/// `?dryRun=All` answers what the patch would store and stores nothing
/// (handlers/patch.go passes it to the registry, whose storage skips the
/// write); any other value is 422 (ValidateDryRun: `Unsupported value`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_answers_without_writing() {
    let f = fixture().await;
    let config = lease("d", "x").to_string();
    let (code, would) = f
        .patch("d", APPLY, "fieldManager=m&dryRun=All", &config)
        .await;
    assert_eq!(code, 201, "{would}");
    assert_eq!(would["spec"]["holderIdentity"], "x");
    assert_status(&f.get("d").await, 404, "NotFound");
    let (_, created) = f.apply("d", "m", false, &lease("d", "x")).await;
    let patch = r#"{"spec":{"holderIdentity":"y"}}"#;
    let (code, would) = f.patch("d", MERGE, "dryRun=All", patch).await;
    assert_eq!(code, 200, "{would}");
    assert_eq!(would["spec"]["holderIdentity"], "y");
    assert_eq!(f.get("d").await.1, created);
    let answer = f.patch("d", MERGE, "dryRun=Some", patch).await;
    assert_status(&answer, 422, "Invalid");
    assert_eq!(answer.1["details"]["causes"][0]["field"], "dryRun");
    assert_eq!(f.server.writes(), 1);
}
