//! PATCH on a Lease: JSON merge, JSON, strategic merge patch, and
//! server-side apply, as kube-apiserver's patch handler runs them
//! (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go) over
//! `GuaranteedUpdate`: read the Lease, patch it, write it with a
//! compare-and-swap on its resourceVersion, and on a concurrent write do it
//! all again on what is stored then.

// Handlers return a finished Response either way; boxing it buys nothing.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::api::{fill_system_fields, keep_system_fields, meta_str, validate, write_failure};
use super::faults::Requests;
use super::managed::{self, API_VERSION};
use super::patches;
use super::status::{self, FieldError, OptionError};
use super::store::{Store, WriteError};

/// The patch types a built-in resource takes, in the order kube-apiserver
/// lists them (apiserver/pkg/endpoints/installer.go).
const ACCEPTED: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// How often a patch without a resourceVersion is tried again on a
/// concurrent write before the client is told 409 (GuaranteedUpdate tries
/// until it wins; a bound keeps a bug from spinning here).
const TRIES: usize = 16;

/// A parsed patch body.
enum Patch {
    Merge(Value),
    Json(Vec<Value>),
    Strategic(Value),
    Apply(Value),
}

/// The body of a PATCH, by its Content-Type (parameters such as
/// `; charset=utf-8` ignored, as patch.go does).
fn parse(headers: &HeaderMap, body: &Bytes) -> Result<Patch, Response> {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let content_type = content_type.split(';').next().unwrap_or_default().trim();
    let object = || match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(status::bad_request("the patch is not a JSON object".into())),
        Err(e) => Err(status::bad_request(format!(
            "the patch is not valid JSON: {e}"
        ))),
    };
    match content_type {
        "application/merge-patch+json" => object().map(Patch::Merge),
        "application/strategic-merge-patch+json" => object().map(Patch::Strategic),
        "application/json-patch+json" => match serde_json::from_slice::<Value>(body) {
            Ok(Value::Array(ops)) => Ok(Patch::Json(ops)),
            Ok(_) => Err(status::bad_request(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into(),
            )),
            Err(e) => Err(status::bad_request(format!(
                "the patch is not valid JSON: {e}"
            ))),
        },
        "application/apply-patch+yaml" => match serde_yaml::from_slice::<Value>(body) {
            Ok(v) if v.is_object() => Ok(Patch::Apply(v)),
            Ok(_) => Err(status::bad_request(
                "error decoding YAML: the applied configuration is not an object".into(),
            )),
            Err(e) => Err(status::bad_request(format!("error decoding YAML: {e}"))),
        },
        _ => Err(status::unsupported_media_type(&ACCEPTED)),
    }
}

/// What the query asks for, once PatchOptions validated.
struct Options {
    manager: String,
    force: bool,
    dry_run: bool,
}

/// PatchOptions as `ValidatePatchOptions` checks them: `force` only on an
/// apply, `fieldManager` required on one, `dryRun` only `All`.
fn options(
    params: &HashMap<String, String>,
    apply: bool,
    user_agent: &str,
) -> Result<Options, Response> {
    let mut errors: Vec<OptionError> = Vec::new();
    let force = params.get("force");
    if !apply && force.is_some() {
        let message = "Forbidden: may not be specified for non-apply patch".to_owned();
        errors.push(("force", "FieldValueForbidden", message));
    }
    let manager = params.get("fieldManager").cloned().unwrap_or_default();
    if apply && manager.is_empty() {
        let message = "Required value: is required for apply patch".to_owned();
        errors.push(("fieldManager", "FieldValueRequired", message));
    }
    let dry_run = params.get("dryRun").filter(|d| !d.is_empty());
    if let Some(d) = dry_run.filter(|d| *d != "All") {
        let message = format!("Unsupported value: {d:?}: supported values: \"All\"");
        errors.push(("dryRun", "FieldValueNotSupported", message));
    }
    if !errors.is_empty() {
        return Err(status::invalid_patch_options(&errors));
    }
    let force = match force.map(String::as_str) {
        None | Some("false" | "0" | "f" | "F" | "FALSE" | "False") => false,
        Some("true" | "1" | "t" | "T" | "TRUE" | "True") => true,
        Some(other) => return Err(status::bad_request(format!("invalid force {other:?}"))),
    };
    Ok(Options {
        manager: managed::manager_of(params, user_agent),
        force,
        dry_run: dry_run.is_some(),
    })
}

/// `PATCH .../leases/{name}`.
pub(crate) async fn patch(
    State(store): State<Store>,
    Path((ns, name)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = store.faults().refusal(Requests::Patch, &ns, Some(&name)) {
        return refused;
    }
    if let Some(refused) = store.faults().patch_refusal() {
        return refused;
    }
    let patch = match parse(&headers, &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let user_agent = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let options = match options(&params, matches!(patch, Patch::Apply(_)), user_agent) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if let Patch::Apply(config) = &patch {
        if let Err(r) = check_config(config) {
            return r;
        }
    }
    for _ in 0..TRIES {
        let current = match store.get(&ns, &name).await {
            Ok(current) => current,
            Err(e) => return status::etcd_failure(e),
        };
        let outcome = match (&patch, current) {
            (Patch::Apply(config), None) => {
                create_by_apply(&store, &ns, &name, config, &options).await
            }
            (_, None) => return status::not_found(&name),
            (patch, Some(current)) => {
                patch_existing(&store, &ns, &name, patch, current, &options).await
            }
        };
        match outcome {
            Outcome::Done(response) => return response,
            Outcome::Raced => continue,
        }
    }
    status::conflict(&name)
}

/// How one try ended: answered, or lost to a concurrent write (tried again).
enum Outcome {
    Done(Response),
    Raced,
}

/// What an applied configuration must be (managedfields/internal/
/// structuredmerge.go, Apply): of this server's version, without
/// managedFields (both worded as there). A kind other than Lease is refused
/// too, in this server's own words (kube-apiserver fails such a
/// configuration later, converting it to the Lease's type).
fn check_config(config: &Value) -> Result<(), Response> {
    let version = config["apiVersion"].as_str().unwrap_or_default();
    if version != API_VERSION {
        return Err(status::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: {API_VERSION}"
        )));
    }
    let kind = config["kind"].as_str().unwrap_or("Lease");
    if kind != "Lease" {
        return Err(status::bad_request(format!(
            "the kind of the applied object ({kind}) is not Lease"
        )));
    }
    if !config["metadata"]["managedFields"].is_null() {
        return Err(status::bad_request(
            "metadata.managedFields must be nil".into(),
        ));
    }
    Ok(())
}

/// The checks on a patched object before it is written: its name and
/// namespace are the URL's (handlers/rest.go, checkName: 400), its uid is
/// the stored one (ValidateObjectMetaUpdate: 422, immutable), and the
/// Lease is valid (422).
fn check_patched(object: &Value, ns: &str, name: &str, uid: &str) -> Result<(), Response> {
    let object_name = object["metadata"]["name"].as_str().unwrap_or_default();
    if object_name != name {
        return Err(status::bad_request(format!(
            "the name of the object ({object_name}) does not match the name on the URL ({name})"
        )));
    }
    let object_ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
    if !object_ns.is_empty() && object_ns != ns {
        return Err(status::bad_request(format!(
            "the namespace of the object ({object_ns}) does not match the namespace on the request ({ns})"
        )));
    }
    let mut errors: Vec<FieldError> = Vec::new();
    if let Some(new_uid) = meta_str(object, "uid").filter(|u| *u != uid) {
        errors.push(FieldError::invalid(
            "metadata.uid",
            format!("{new_uid:?}"),
            "field is immutable",
        ));
    }
    errors.extend(validate(object, name));
    if !errors.is_empty() {
        return Err(status::invalid(name, &errors));
    }
    Ok(())
}

/// The server's own fields on a patched object: kind, apiVersion,
/// namespace.
fn normalise(object: &mut Value, ns: &str) {
    object["kind"] = json!("Lease");
    object["apiVersion"] = json!(API_VERSION);
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    object["metadata"]["namespace"] = json!(ns);
}

async fn patch_existing(
    store: &Store,
    ns: &str,
    name: &str,
    patch: &Patch,
    current: Value,
    options: &Options,
) -> Outcome {
    use Outcome::Done;
    let stored_rv = meta_str(&current, "resourceVersion")
        .unwrap_or_default()
        .to_owned();
    let uid = meta_str(&current, "uid").unwrap_or_default().to_owned();
    let mut object = current.clone();
    let applied = match patch {
        Patch::Merge(p) => {
            patches::merge_patch(&mut object, p);
            Ok(())
        }
        Patch::Strategic(p) => {
            patches::strategic_merge_patch(&mut object, p).map_err(status::bad_request)
        }
        Patch::Json(ops) => {
            patches::json_patch(&mut object, ops).map_err(|_| status::json_patch_rejected())
        }
        Patch::Apply(config) => {
            // The applied object's resourceVersion is a precondition.
            match meta_str(config, "resourceVersion") {
                Some(rv) if rv != stored_rv => return Done(status::conflict(name)),
                _ => {}
            }
            let entries = managed::decode(&current);
            match managed::apply(&current, config, entries, &options.manager, options.force) {
                Ok((merged, entries)) => {
                    object = merged;
                    managed::encode(&mut object, entries);
                    Ok(())
                }
                Err(conflicts) => return Done(conflicted(conflicts)),
            }
        }
    };
    if let Err(r) = applied {
        return Done(r);
    }
    // A resourceVersion the patch leaves in the object is a precondition
    // (the registry's Store.Update compares it with the stored one); one
    // the patch did not touch is the stored one, so a write racing this
    // one fails the compare-and-swap below and the patch is made again.
    match meta_str(&object, "resourceVersion") {
        Some(rv) if rv != stored_rv => return Done(status::conflict(name)),
        _ => {}
    }
    if let Err(r) = check_patched(&object, ns, name, &uid) {
        return Done(r);
    }
    normalise(&mut object, ns);
    keep_system_fields(&mut object, &current);
    if !matches!(patch, Patch::Apply(_)) {
        let entries = managed::of_write(Some(&current), &object);
        let entries = managed::update(&current, &object, entries, &options.manager);
        managed::encode(&mut object, entries);
    }
    // GuaranteedUpdate writes nothing when the object would not change
    // (etcd3/store.go: the new data equal to the stored data).
    let unversioned = |o: &Value| {
        let mut o = o.clone();
        if let Some(meta) = o["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        o
    };
    if unversioned(&object) == unversioned(&current) {
        return Done(Json(current).into_response());
    }
    if options.dry_run {
        object["metadata"]["resourceVersion"] = json!(stored_rv);
        return Done(Json(object).into_response());
    }
    let Ok(at) = stored_rv.parse::<i64>() else {
        return Done(status::internal(format!(
            "stored resourceVersion {stored_rv:?}"
        )));
    };
    match store.update(ns, name, at, &object).await {
        Ok(updated) => Done(
            store
                .faults()
                .after_commit()
                .unwrap_or_else(|| Json(updated).into_response()),
        ),
        Err(WriteError::Conflict) => Outcome::Raced,
        // Deleted since the read: an apply creates it, a patch is 404.
        Err(WriteError::NotFound) if matches!(patch, Patch::Apply(_)) => Outcome::Raced,
        Err(e) => Done(write_failure(e, name)),
    }
}

/// An apply to a Lease that does not exist creates it (patch.go: apply
/// sets forceAllowCreate), 201 Created; a uid in the configuration then is
/// a conflict ("uid mismatch", patcher.applyPatch). A resourceVersion in it
/// does not stop the create: the registry's Store.Update compares
/// resourceVersions only once an object exists (its create-on-update
/// branch comes first), and storage drops the one given.
async fn create_by_apply(
    store: &Store,
    ns: &str,
    name: &str,
    config: &Value,
    options: &Options,
) -> Outcome {
    use Outcome::Done;
    if let Some(uid) = meta_str(config, "uid") {
        let why = format!("uid mismatch: the provided object specified uid {uid}, and no existing object was found");
        return Done(status::cannot_fulfil(name, &why));
    }
    let empty = json!({ "metadata": {}, "spec": {} });
    let (mut object, entries) =
        match managed::apply(&empty, config, Vec::new(), &options.manager, options.force) {
            Ok(applied) => applied,
            Err(conflicts) => return Done(conflicted(conflicts)),
        };
    managed::encode(&mut object, entries);
    if let Err(r) = check_patched(&object, ns, name, "") {
        return Done(r);
    }
    normalise(&mut object, ns);
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    fill_system_fields(&mut object);
    if options.dry_run {
        return Done((StatusCode::CREATED, Json(object)).into_response());
    }
    match store.create(ns, name, &object).await {
        Ok(created) => Done(
            store
                .faults()
                .after_commit()
                .unwrap_or_else(|| (StatusCode::CREATED, Json(created)).into_response()),
        ),
        // Created by another request since the read: apply to it.
        Err(WriteError::AlreadyExists) => Outcome::Raced,
        Err(e) => Done(write_failure(e, name)),
    }
}

/// The 409 of an apply that conflicts with other managers' fields.
fn conflicted(conflicts: Vec<managed::Conflict>) -> Response {
    let conflicts: Vec<(String, String)> = conflicts
        .into_iter()
        .map(|c| (c.manager, c.field))
        .collect();
    status::apply_conflict(&conflicts)
}
