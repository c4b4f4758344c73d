//! The HTTP routes: GET / POST / PUT / DELETE on Leases, list and watch
//! (PATCH in patch.rs).

// Handlers return a finished Response either way; boxing it buys nothing.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::faults::Requests;
use super::managed;
use super::selector::Selector;
use super::status::{self, FieldError};
use super::store::{Store, WriteError};
use super::watch;

const BASE: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";

pub(crate) fn router(store: Store) -> Router {
    Router::new()
        .route(BASE, get(list_or_watch).post(create))
        .route(
            &format!("{BASE}/{{name}}"),
            get(read)
                .put(update)
                .delete(remove)
                .patch(super::patch::patch),
        )
        .merge(super::discovery::router())
        .layer(axum::middleware::from_fn(super::media::negotiate))
        .layer(axum::middleware::from_fn_with_state(store.clone(), count))
        .with_state(store)
}

/// Counts every request, whatever its route or answer.
async fn count(
    State(store): State<Store>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    store.count_served();
    next.run(request).await
}

type Params = Query<HashMap<String, String>>;

pub(crate) fn write_failure(e: WriteError, name: &str) -> Response {
    match e {
        WriteError::AlreadyExists => status::already_exists(name),
        WriteError::NotFound => status::not_found(name),
        WriteError::Conflict => status::conflict(name),
        WriteError::Etcd(e) => status::etcd_failure(e),
    }
}

/// Whether `name` is a DNS-1123 subdomain.
pub(crate) fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && dns1123_subdomain_shape(name)
}

/// Whether `name` has the shape of a DNS-1123 subdomain, whatever its length.
fn dns1123_subdomain_shape(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| alnum(c) || c == '-')
                && label.starts_with(alnum)
                && label.ends_with(alnum)
        })
}

const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FORMAT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const LABEL_KEY_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_FORMAT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FORMAT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
/// The longest name part of a label key, and the longest label value.
const LABEL_MAX: usize = 63;
/// kube-apiserver's limit on the sum of the lengths of an object's
/// annotations' keys and values (`TotalAnnotationSizeLimitB`).
pub(crate) const ANNOTATIONS_MAX: usize = 256 * 1024;

/// apimachinery's `RegexError`: `message`, the examples and the regex, worded
/// (and spaced) as there.
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{format}')",
        examples.join(" or ")
    )
}

/// Whether `value` is empty or, with `-`, `_` and `.` inside, alphanumeric
/// at both ends.
fn label_shape(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    value.is_empty()
        || (value
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
            && value.starts_with(alnum)
            && value.ends_with(alnum))
}

/// What is wrong with a label key or an annotation key, as apimachinery's
/// `IsQualifiedName` (`content.IsLabelKey`) says it: an optional DNS-1123
/// subdomain prefix and `/`, and a name part of at most 63 characters.
fn qualified_name_errors(key: &str) -> Vec<String> {
    let example = ["MyName", "my.name", "123-abc"];
    let parts: Vec<&str> = key.split('/').collect();
    let mut errors = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > 253 {
                    errors.push("prefix part must be no more than 253 bytes".to_owned());
                }
                if !dns1123_subdomain_shape(prefix) {
                    let why = regex_error(
                        DNS1123_SUBDOMAIN_MESSAGE,
                        DNS1123_SUBDOMAIN_FORMAT,
                        &["example.com"],
                    );
                    errors.push(format!("prefix part {why}"));
                }
            }
            *name
        }
        _ => {
            let why = regex_error(LABEL_KEY_MESSAGE, LABEL_KEY_FORMAT, &example);
            return vec![format!(
                "a valid label key {why} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > LABEL_MAX {
        errors.push(format!("name part must be no more than {LABEL_MAX} bytes"));
    }
    if name.is_empty() || !label_shape(name) {
        let why = regex_error(LABEL_KEY_MESSAGE, LABEL_KEY_FORMAT, &example);
        errors.push(format!("name part {why}"));
    }
    errors
}

/// A Go string as `%q` shows it (for the ASCII a key or value here has).
fn quoted(value: &str) -> String {
    format!("{value:?}")
}

/// The string map at `metadata.<field>`: `Err` with the field's error if
/// it is not a map of strings.
fn string_map(object: &Value, field: &'static str) -> Result<Vec<(String, String)>, FieldError> {
    match &object["metadata"][field] {
        Value::Null => Ok(Vec::new()),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(v) => Ok((k.clone(), v.clone())),
                other => Err(FieldError::invalid(
                    format!("metadata.{field}"),
                    other.to_string(),
                    "must be a string",
                )),
            })
            .collect(),
        other => Err(FieldError::invalid(
            format!("metadata.{field}"),
            other.to_string(),
            "must be a map of strings",
        )),
    }
}

/// `ValidateObjectMeta`'s checks of labels (`v1validation.ValidateLabels`:
/// each key a qualified name, each value a label value) and annotations
/// (`ValidateAnnotations`: each key a qualified name, case aside, and all
/// keys and values together at most 256 KiB).
fn validate_labels_and_annotations(object: &Value, errors: &mut Vec<FieldError>) {
    match string_map(object, "labels") {
        Ok(labels) => {
            for (key, value) in labels {
                for why in qualified_name_errors(&key) {
                    errors.push(FieldError::invalid("metadata.labels", quoted(&key), why));
                }
                if value.len() > LABEL_MAX {
                    let why = format!("must be no more than {LABEL_MAX} bytes");
                    errors.push(FieldError::invalid("metadata.labels", quoted(&value), why));
                }
                if !label_shape(&value) {
                    let why = regex_error(
                        LABEL_VALUE_MESSAGE,
                        LABEL_VALUE_FORMAT,
                        &["MyValue", "my_value", "12345"],
                    );
                    errors.push(FieldError::invalid("metadata.labels", quoted(&value), why));
                }
            }
        }
        Err(e) => errors.push(e),
    }
    match string_map(object, "annotations") {
        Ok(annotations) => {
            for (key, _) in &annotations {
                for why in qualified_name_errors(&key.to_lowercase()) {
                    errors.push(FieldError::invalid(
                        "metadata.annotations",
                        quoted(key),
                        why,
                    ));
                }
            }
            let size: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
            if size > ANNOTATIONS_MAX {
                errors.push(FieldError::too_long(
                    "metadata.annotations",
                    ANNOTATIONS_MAX,
                ));
            }
        }
        Err(e) => errors.push(e),
    }
}

/// kube-apiserver's validation of a Lease, for the fields it checks: the
/// name, labels and annotations (`ValidateObjectMeta`), then the spec.
pub(crate) fn validate(object: &Value, name: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if !is_dns1123_subdomain(name) {
        errors.push(FieldError::invalid(
            "metadata.name",
            format!("{name:?}"),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ));
    }
    validate_labels_and_annotations(object, &mut errors);
    let spec = &object["spec"];
    if let Some(d) = spec.get("leaseDurationSeconds").filter(|v| !v.is_null()) {
        if d.as_i64().is_none_or(|d| d <= 0) {
            errors.push(FieldError::invalid(
                "spec.leaseDurationSeconds",
                d.to_string(),
                "must be greater than 0",
            ));
        }
    }
    if let Some(t) = spec.get("leaseTransitions").filter(|v| !v.is_null()) {
        if t.as_i64().is_none_or(|t| t < 0) {
            errors.push(FieldError::invalid(
                "spec.leaseTransitions",
                t.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    errors
}

fn parse(body: &Bytes) -> Result<Value, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(status::bad_request("the body is not a JSON object".into())),
        Err(e) => Err(status::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

/// Fills in what the server owns: kind, apiVersion, namespace.
fn normalise(object: &mut Value, ns: &str) -> Result<(), Response> {
    object["kind"] = json!("Lease");
    object["apiVersion"] = json!("coordination.k8s.io/v1");
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    match object["metadata"]["namespace"].as_str() {
        Some(n) if !n.is_empty() && n != ns => {
            return Err(status::bad_request(format!(
                "the namespace of the provided object ({n}) does not match the namespace sent on the request ({ns})"
            )))
        }
        _ => object["metadata"]["namespace"] = json!(ns),
    }
    Ok(())
}

async fn read(State(store): State<Store>, Path((ns, name)): Path<(String, String)>) -> Response {
    if let Some(refused) = store.faults().refusal(Requests::Get, &ns, Some(&name)) {
        return refused;
    }
    match store.get(&ns, &name).await {
        Ok(Some(object)) => Json(object).into_response(),
        Ok(None) => status::not_found(&name),
        Err(e) => status::etcd_failure(e),
    }
}

/// The manager of a create or an update: `?fieldManager=`, or the
/// User-Agent's first word.
fn manager(params: &HashMap<String, String>, headers: &axum::http::HeaderMap) -> String {
    let user_agent = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    managed::manager_of(params, user_agent)
}

/// The managedFields of a create or an update by `manager`, from `live`
/// (none for a create) to `object` (an Update operation).
fn record_update(live: Option<&Value>, object: &mut Value, manager: &str) {
    let empty = json!({ "metadata": {}, "spec": {} });
    let entries = managed::of_write(live, object);
    let entries = managed::update(live.unwrap_or(&empty), object, entries, manager);
    managed::encode(object, entries);
}

async fn create(
    State(store): State<Store>,
    Path(ns): Path<String>,
    Query(params): Params,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let mut object = match parse(&body) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if let Err(r) = normalise(&mut object, &ns) {
        return r;
    }
    let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let errors = validate(&object, &name);
    if !errors.is_empty() {
        return status::invalid(&name, &errors);
    }
    fill_system_fields(&mut object);
    record_update(None, &mut object, &manager(&params, &headers));
    match store.create(&ns, &name, &object).await {
        Ok(created) => store
            .faults()
            .after_commit()
            .unwrap_or_else(|| (StatusCode::CREATED, Json(created)).into_response()),
        Err(e) => write_failure(e, &name),
    }
}

/// What kube-apiserver fills in on a create, whatever the body said
/// (`rest.FillObjectMetaSystemFields`): a new uid and the creation time.
pub(crate) fn fill_system_fields(object: &mut Value) {
    object["metadata"]["uid"] = json!(format!("{:032x}", rand::random::<u128>()));
    object["metadata"]["creationTimestamp"] = json!(managed::now());
}

/// What an update keeps of the stored object whatever the new one says
/// (`rest.BeforeUpdate`): its uid and its creation time (none for a Lease
/// stored before this server set one).
pub(crate) fn keep_system_fields(object: &mut Value, current: &Value) {
    for field in ["uid", "creationTimestamp"] {
        match current["metadata"].get(field) {
            Some(value) => object["metadata"][field] = value.clone(),
            None => {
                if let Some(meta) = object["metadata"].as_object_mut() {
                    meta.remove(field);
                }
            }
        }
    }
}

/// A string field of `metadata`, if set and not empty.
pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object["metadata"][field].as_str().filter(|s| !s.is_empty())
}

/// PUT, as kube-apiserver's registry `Store.Update` runs it over
/// `GuaranteedUpdate` with current state: the body's uid is a precondition
/// (`rest.DefaultUpdatedObjectInfo.Preconditions`), checked before anything
/// else; a missing Lease is created (the Lease strategy's
/// `AllowCreateOnUpdate` is true: pkg/registry/coordination/lease/strategy.go);
/// an existing one needs the body's resourceVersion (422 without, 409 if
/// stale), and a stale one is refused before any etcd write. Only a write
/// that may commit reaches etcd, as a transaction on the mod revision (a
/// write racing it between the read and the transaction is a 409 too).
async fn update(
    State(store): State<Store>,
    Path((ns, name)): Path<(String, String)>,
    Query(params): Params,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = store.faults().refusal(Requests::Update, &ns, Some(&name)) {
        return refused;
    }
    let mut object = match parse(&body) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if let Err(r) = normalise(&mut object, &ns) {
        return r;
    }
    match object["metadata"]["name"].as_str() {
        Some(n) if n == name => {}
        other => {
            return status::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                other.unwrap_or("")
            ))
        }
    }
    let rv = match meta_str(&object, "resourceVersion").map(str::parse::<i64>) {
        None => None,
        Some(Ok(rv)) => Some(rv),
        Some(Err(_)) => {
            let rv = meta_str(&object, "resourceVersion").unwrap_or_default();
            return status::bad_request(format!("invalid resourceVersion {rv:?}"));
        }
    };
    let uid = meta_str(&object, "uid").map(str::to_owned);
    // The first guess of the current state is a local read, as
    // kube-apiserver's is its watch cache; only if the write would be
    // refused on it is the state read again with a quorum (GuaranteedUpdate
    // re-reads etcd when its cached state fails the update), so a write
    // that goes ahead costs no quorum round more than the transaction.
    let meets = |current: &Option<Value>| {
        current.as_ref().is_some_and(|current| {
            uid.as_deref()
                .is_none_or(|uid| meta_str(current, "uid") == Some(uid))
                && rv.is_some_and(|rv| {
                    meta_str(current, "resourceVersion") == Some(rv.to_string().as_str())
                })
        })
    };
    let current = match store.get_local(&ns, &name).await {
        Ok(guess) if meets(&guess) => guess,
        Ok(_) => match store.get(&ns, &name).await {
            Ok(current) => current,
            Err(e) => return status::etcd_failure(e),
        },
        Err(e) => return status::etcd_failure(e),
    };
    let Some(current) = current else {
        if let Some(uid) = uid {
            return status::precondition_failed(
                &name,
                format!("UID in precondition: {uid}, UID in object meta: "),
            );
        }
        let errors = validate(&object, &name);
        if !errors.is_empty() {
            return status::invalid(&name, &errors);
        }
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        fill_system_fields(&mut object);
        record_update(None, &mut object, &manager(&params, &headers));
        return match store.create(&ns, &name, &object).await {
            Ok(created) => store
                .faults()
                .after_commit()
                .unwrap_or_else(|| (StatusCode::CREATED, Json(created)).into_response()),
            // Created by another request since our read.
            Err(WriteError::AlreadyExists) => status::conflict(&name),
            Err(e) => write_failure(e, &name),
        };
    };
    let stored_uid = meta_str(&current, "uid").unwrap_or_default().to_owned();
    if let Some(uid) = uid.filter(|uid| *uid != stored_uid) {
        return status::precondition_failed(
            &name,
            format!("UID in precondition: {uid}, UID in object meta: {stored_uid}"),
        );
    }
    let Some(rv) = rv else {
        let errors = [FieldError::invalid(
            "metadata.resourceVersion",
            "\"\"".into(),
            "must be specified for an update",
        )];
        return status::invalid(&name, &errors);
    };
    if meta_str(&current, "resourceVersion") != Some(rv.to_string().as_str()) {
        return status::conflict(&name);
    }
    let errors = validate(&object, &name);
    if !errors.is_empty() {
        return status::invalid(&name, &errors);
    }
    keep_system_fields(&mut object, &current);
    record_update(Some(&current), &mut object, &manager(&params, &headers));
    match store.update(&ns, &name, rv, &object).await {
        Ok(updated) => store
            .faults()
            .after_commit()
            .unwrap_or_else(|| Json(updated).into_response()),
        Err(e) => write_failure(e, &name),
    }
}

/// DELETE, with the preconditions of the body's DeleteOptions (uid,
/// resourceVersion) checked against the stored Lease, as kube-apiserver's
/// storage does (`storage.Preconditions.Check` in etcd3's
/// `conditionalDelete`): 409 if one fails.
async fn remove(
    State(store): State<Store>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let options = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match parse(&body) {
            Ok(o) => o,
            Err(r) => return r,
        }
    };
    let wanted = |field: &str| {
        options["preconditions"][field]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let current = match store.get(&ns, &name).await {
        Ok(Some(current)) => current,
        Ok(None) => return status::not_found(&name),
        Err(e) => return status::etcd_failure(e),
    };
    let stored = |field: &str| meta_str(&current, field).unwrap_or_default().to_owned();
    if let Some(uid) = wanted("uid").filter(|uid| *uid != stored("uid")) {
        let detail = format!(
            "UID in precondition: {uid}, UID in object meta: {}",
            stored("uid")
        );
        return status::precondition_failed(&name, detail);
    }
    let stored_rv = stored("resourceVersion");
    if let Some(rv) = wanted("resourceVersion").filter(|rv| *rv != stored_rv) {
        let detail = format!(
            "ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {stored_rv}"
        );
        return status::precondition_failed(&name, detail);
    }
    let Ok(at) = stored_rv.parse::<i64>() else {
        return status::internal(format!("stored resourceVersion {stored_rv:?}"));
    };
    match store.delete(&ns, &name, at).await {
        Ok(object) => store
            .faults()
            .after_commit()
            .unwrap_or_else(|| Json(object).into_response()),
        Err(e) => write_failure(e, &name),
    }
}

/// `metadata.name=<name>` from a fieldSelector (the only field selector served).
fn name_selector(params: &HashMap<String, String>) -> Result<Option<String>, Response> {
    let Some(selector) = params.get("fieldSelector").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    match selector
        .strip_prefix("metadata.name=")
        .or_else(|| selector.strip_prefix("metadata.name=="))
    {
        Some(name) if !name.contains(',') => Ok(Some(name.to_owned())),
        _ => Err(status::bad_request(format!(
            "field selector {selector:?} is not supported (only metadata.name=<name>)"
        ))),
    }
}

async fn list_or_watch(
    State(store): State<Store>,
    Path(ns): Path<String>,
    Query(params): Params,
    headers: axum::http::HeaderMap,
) -> Response {
    let name = match name_selector(&params) {
        Ok(name) => name,
        Err(r) => return r,
    };
    // An unparsable labelSelector is a 400 BadRequest, as kube-apiserver
    // answers when decoding the list options fails (labels.Parse).
    let labels = match Selector::parse(params.get("labelSelector").map_or("", String::as_str)) {
        Ok(labels) => labels,
        Err(e) => return status::bad_request(e),
    };
    let flag = |k: &str| params.get(k).is_some_and(|v| v == "1" || v == "true");
    let requests = if flag("watch") {
        Requests::Watch
    } else {
        Requests::List
    };
    if let Some(refused) = store.faults().refusal(requests, &ns, name.as_deref()) {
        return refused;
    }
    if flag("watch") {
        let rv = params
            .get("resourceVersion")
            .filter(|v| !v.is_empty() && *v != "0")
            .map(|v| v.parse::<i64>());
        let rv = match rv.transpose() {
            Ok(rv) => rv,
            Err(_) => return status::bad_request("invalid resourceVersion".into()),
        };
        let timeout = params
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs);
        let user_agent = headers
            .get(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bookmarks = flag("allowWatchBookmarks");
        let target = watch::Target { ns, name, labels };
        return watch::watch(store, target, rv, bookmarks, timeout, user_agent).await;
    }
    match store.list(&ns, name.as_deref()).await {
        Ok((mut items, revision)) => {
            items.retain(|item| labels.matches(item));
            Json(json!({
                "kind": "LeaseList",
                "apiVersion": "coordination.k8s.io/v1",
                "metadata": { "resourceVersion": revision.to_string() },
                "items": items,
            }))
            .into_response()
        }
        Err(e) => status::etcd_failure(e),
    }
}
