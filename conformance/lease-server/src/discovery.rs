//! API discovery, so that kubectl finds the Lease resource: `/apis` (the
//! one group served, coordination.k8s.io) and
//! `/apis/coordination.k8s.io/v1` (its one resource, leases), in the
//! unaggregated form (metav1.APIGroupList, metav1.APIResourceList) that
//! client-go's discovery falls back to when the answer's Content-Type does
//! not name the aggregated kind.
//!
//! `/api` (the core group) is not served: client-go's discovery takes its
//! 404 as "no core group", as it does from an aggregated API server.
//!
//! `/openapi/v3` and the group's document, with no schemas: only the Lease
//! PATCH operation and its `fieldValidation` parameter, which is what
//! `kubectl apply` (validation on, its default) looks for to leave the
//! validation to the server (cli-runtime's `queryParamVerifierV3`).
//! Without it kubectl falls back to downloading `/openapi/v2` as protobuf
//! to validate on its side, which this server does not serve. The server
//! takes `fieldValidation` and does not act on it: a Lease applied with a
//! field Lease does not have is not refused here (kube-apiserver's Strict
//! would answer 400).

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

const GROUP: &str = "coordination.k8s.io";
const GROUP_VERSION: &str = "coordination.k8s.io/v1";

/// The verbs served on leases: kube-apiserver's list but deletecollection,
/// which this server does not serve.
const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// The discovery routes, to merge into the API's router.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/apis", get(|| async { Json(groups()) }))
        .route(
            &format!("/apis/{GROUP_VERSION}"),
            get(|| async { Json(resources()) }),
        )
        .route("/openapi/v3", get(|| async { Json(openapi_paths()) }))
        .route(
            &format!("/openapi/v3/apis/{GROUP_VERSION}"),
            get(|| async { Json(openapi_document()) }),
        )
}

fn groups() -> Value {
    let version = json!({ "groupVersion": GROUP_VERSION, "version": "v1" });
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{
            "name": GROUP,
            "versions": [version],
            "preferredVersion": version,
        }],
    })
}

/// The one resource of coordination.k8s.io/v1 served.
fn resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [{
            "name": "leases",
            "singularName": "lease",
            "namespaced": true,
            "kind": "Lease",
            "verbs": VERBS,
        }],
    })
}

/// The OpenAPI v3 discovery document: the one group version's document.
fn openapi_paths() -> Value {
    json!({
        "paths": {
            format!("apis/{GROUP_VERSION}"): {
                "serverRelativeURL": format!("/openapi/v3/apis/{GROUP_VERSION}"),
            },
        },
    })
}

/// The group version's OpenAPI v3 document, reduced to the Lease PATCH
/// operation and the query parameters this server reads on it.
fn openapi_document() -> Value {
    let query =
        |name: &str, kind: &str| json!({ "name": name, "in": "query", "schema": { "type": kind } });
    json!({
        "openapi": "3.0.0",
        "info": { "title": "tenure-lease-server", "version": GROUP_VERSION },
        "paths": {
            format!("/apis/{GROUP_VERSION}/namespaces/{{namespace}}/leases/{{name}}"): {
                "patch": {
                    "operationId": "patchCoordinationV1NamespacedLease",
                    "parameters": [
                        query("dryRun", "string"),
                        query("fieldManager", "string"),
                        query("fieldValidation", "string"),
                        query("force", "boolean"),
                    ],
                    "responses": {},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {
                        "group": GROUP,
                        "version": "v1",
                        "kind": "Lease",
                    },
                },
            },
        },
    })
}
