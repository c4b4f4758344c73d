//! An update (PUT) that carries no managedFields keeps the ownership the
//! Lease has and records the update as its manager's; `[]` resets it. As
//! kube-apiserver's field manager does (kubernetes/kubernetes,
//! staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/
//! fieldmanager.go, `decodeLiveOrNew` and `isResetManagedFields`: "If the
//! managed field is empty or we failed to decode it, let's try the live
//! object. This is to prevent clients who don't understand managedFields
//! from deleting it accidentally"; only a non-nil empty list, or one empty
//! entry, resets them). tenure-kube relies on it: it sends none.

use serde_json::{json, Value};
mod common;

use common::{answer_of, fixture, Fixture};

const APPLY: &str = "application/apply-patch+yaml";

impl Fixture {
    /// A server-side apply of `config` by `manager`.
    async fn apply_as(&self, name: &str, manager: &str, config: &Value) -> (u16, Value) {
        let url = format!("{}?fieldManager={manager}", self.url(Some(name)));
        let request = self
            .http
            .patch(url)
            .header("content-type", APPLY)
            .body(config.to_string());
        answer_of(request).await
    }

    /// A PUT of `object` by `manager`.
    async fn put_as(&self, name: &str, manager: &str, object: &Value) -> (u16, Value) {
        let url = format!("{}?fieldManager={manager}", self.url(Some(name)));
        answer_of(self.http.put(url).json(object)).await
    }
}

/// The (manager, operation, fieldsV1) of each managedFields entry.
fn owners(object: &Value) -> Vec<(String, String, Value)> {
    let entries = object["metadata"]["managedFields"].as_array();
    let mut owners: Vec<_> = entries
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (text("manager"), text("operation"), e["fieldsV1"].clone())
        })
        .collect();
    owners.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    owners
}

/// `object` with a new renewTime, and its managedFields as `managed`
/// (`None`: the field left out).
fn renewed(object: &Value, managed: Option<Value>) -> Value {
    let mut next = object.clone();
    next["spec"]["renewTime"] = json!("2030-01-01T00:00:00.000000Z");
    let meta = next["metadata"].as_object_mut().unwrap();
    match managed {
        Some(managed) => meta.insert("managedFields".into(), managed),
        None => meta.remove("managedFields"),
    };
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_without_managed_fields_keeps_ownership_and_records_the_update() {
    let f = fixture().await;
    let config = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": "k", "labels": { "team": "a" } },
        "spec": { "holderIdentity": "h", "leaseDurationSeconds": 10 },
    });
    let (code, applied) = f.apply_as("k", "ops", &config).await;
    assert_eq!(code, 201, "{applied}");
    let applier = (
        "ops".to_owned(),
        "Apply".to_owned(),
        json!({
            "f:metadata": { "f:labels": { "f:team": {} } },
            "f:spec": { "f:holderIdentity": {}, "f:leaseDurationSeconds": {} },
        }),
    );
    assert_eq!(owners(&applied), std::slice::from_ref(&applier));
    let updater = (
        "tenure".to_owned(),
        "Update".to_owned(),
        json!({ "f:spec": { "f:renewTime": {} } }),
    );

    // Left out, and null (Go's nil slice): the stored entries are kept,
    // the update is recorded as tenure's.
    for managed in [None, Some(Value::Null)] {
        let (_, current) = f.get("k").await;
        let mut body = renewed(&current, managed.clone());
        // A new renewTime each time, so that the update changes something.
        if managed.is_some() {
            body["spec"]["renewTime"] = json!("2031-01-01T00:00:00.000000Z");
        }
        let (code, updated) = f.put_as("k", "tenure", &body).await;
        assert_eq!(code, 200, "{managed:?}: {updated}");
        assert_eq!(
            owners(&updated),
            [applier.clone(), updater.clone()],
            "{managed:?}"
        );
        assert_eq!(owners(&f.get("k").await.1), owners(&updated));
    }

    // `[]` resets them: only this update's own fields are recorded.
    let (_, current) = f.get("k").await;
    let mut body = renewed(&current, Some(json!([])));
    body["spec"]["renewTime"] = json!("2032-01-01T00:00:00.000000Z");
    let (code, reset) = f.put_as("k", "tenure", &body).await;
    assert_eq!(code, 200, "{reset}");
    assert_eq!(owners(&reset), [updater]);
}
