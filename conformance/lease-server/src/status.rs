//! kube-style `Status` bodies for failures.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The group-qualified resource, as kube-apiserver names it in messages.
pub(crate) const RESOURCE: &str = "leases.coordination.k8s.io";

/// The `details` of a `Status` about Lease `name` (or about none).
fn details(name: Option<&str>) -> Value {
    let mut details = json!({ "group": "coordination.k8s.io", "kind": "leases" });
    if let Some(name) = name {
        details["name"] = json!(name);
    }
    details
}

/// A `Status` failure with `code`, `reason`, `message` and `details`.
pub(crate) fn status(code: StatusCode, reason: &str, message: String, details: Value) -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code.as_u16(),
    });
    (code, Json(body)).into_response()
}

/// A `Status` failure with `code`, `reason`, `message` and details.
pub(crate) fn failure(
    code: StatusCode,
    reason: &str,
    message: String,
    name: Option<&str>,
    causes: Vec<Value>,
) -> Response {
    let mut details = details(name);
    if !causes.is_empty() {
        details["causes"] = json!(causes);
    }
    status(code, reason, message, details)
}

/// The `reason` kube-apiserver gives a failure with `code`
/// (apimachinery's `StatusReason`s).
pub(crate) fn reason_for(code: StatusCode) -> &'static str {
    match code.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// A refusal with `code` (`reason` as apimachinery names it); with
/// `retry_after`, `details.retryAfterSeconds` and the `Retry-After` header,
/// as kube-apiserver's `responsewriters.ErrorNegotiated` writes both for a
/// Status that carries a retry delay (`errors.NewTooManyRequests`, and API
/// Priority and Fairness's 429s, which send the header).
pub(crate) fn refused(
    code: StatusCode,
    message: String,
    name: Option<&str>,
    retry_after: Option<std::time::Duration>,
) -> Response {
    let mut details = details(name);
    let seconds = retry_after.map(|d| d.as_secs().max(1));
    if let Some(seconds) = seconds {
        details["retryAfterSeconds"] = json!(seconds);
    }
    let mut response = status(code, reason_for(code), message, details);
    if let Some(seconds) = seconds {
        response.headers_mut().insert(
            "retry-after",
            seconds.to_string().parse().expect("a header value"),
        );
    }
    response
}

/// 404 NotFound.
pub(crate) fn not_found(name: &str) -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{RESOURCE} {name:?} not found"),
        Some(name),
        vec![],
    )
}

/// 409 Conflict: a stale resourceVersion.
pub(crate) fn conflict(name: &str) -> Response {
    failure(
        StatusCode::CONFLICT,
        "Conflict",
        format!("Operation cannot be fulfilled on {RESOURCE} {name:?}: the object has been modified; please apply your changes to the latest version and try again"),
        Some(name),
        vec![],
    )
}

/// 409 Conflict: a precondition (uid, resourceVersion) that the stored
/// object does not meet. kube-apiserver's storage fails it as an invalid
/// object (`storage.Preconditions.Check`: "Precondition failed: UID in
/// precondition: ..., UID in object meta: ..."), which the registry turns
/// into a Conflict (`storeerr.InterpretUpdateError`/`InterpretDeleteError`).
pub(crate) fn precondition_failed(name: &str, detail: String) -> Response {
    failure(
        StatusCode::CONFLICT,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {RESOURCE} {name:?}: Precondition failed: {detail}"
        ),
        Some(name),
        vec![],
    )
}

/// 409 AlreadyExists: a create of an existing name.
pub(crate) fn already_exists(name: &str) -> Response {
    failure(
        StatusCode::CONFLICT,
        "AlreadyExists",
        format!("{RESOURCE} {name:?} already exists"),
        Some(name),
        vec![],
    )
}

/// 400 BadRequest.
pub(crate) fn bad_request(message: String) -> Response {
    failure(StatusCode::BAD_REQUEST, "BadRequest", message, None, vec![])
}

/// 500 InternalError: etcd failed `e`.
pub(crate) fn etcd_failure(e: etcd_client::Error) -> Response {
    internal(format!("etcd: {e}"))
}

/// 500 InternalError (etcd unreachable and the like).
pub(crate) fn internal(message: String) -> Response {
    failure(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        message,
        None,
        vec![],
    )
}

/// One invalid field, as apimachinery's `field.Error` words it.
pub(crate) struct FieldError {
    /// Its path (`metadata.labels`).
    field: String,
    /// What is wrong, without the path: `Invalid value: <value>: <detail>`,
    /// or `Too long: <detail>` (a too-long value is not shown).
    body: String,
    /// The cause's reason (`FieldValueInvalid`, `FieldValueTooLong`).
    reason: &'static str,
}

impl FieldError {
    /// `field.Invalid`: `value` as shown (a Go string quoted, a number bare).
    pub(crate) fn invalid(
        field: impl Into<String>,
        value: String,
        detail: impl AsRef<str>,
    ) -> Self {
        FieldError {
            field: field.into(),
            body: format!("Invalid value: {value}: {}", detail.as_ref()),
            reason: "FieldValueInvalid",
        }
    }

    /// `field.TooLong` with `max` bytes.
    pub(crate) fn too_long(field: impl Into<String>, max: usize) -> Self {
        FieldError {
            field: field.into(),
            body: format!("Too long: must have at most {max} bytes"),
            reason: "FieldValueTooLong",
        }
    }
}

/// 422 Invalid, one cause per bad field.
pub(crate) fn invalid(name: &str, errors: &[FieldError]) -> Response {
    let text: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body))
        .collect();
    let causes = errors
        .iter()
        .zip(&text)
        .map(|(e, message)| json!({ "reason": e.reason, "message": message, "field": e.field }))
        .collect();
    let message = if text.len() == 1 {
        text[0].clone()
    } else {
        format!("[{}]", text.join(", "))
    };
    failure(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("Lease.coordination.k8s.io {name:?} is invalid: {message}"),
        Some(name),
        causes,
    )
}

/// 409 Conflict: an update that cannot be made, for `why`
/// (apimachinery's `errors.NewConflict`).
pub(crate) fn cannot_fulfil(name: &str, why: &str) -> Response {
    failure(
        StatusCode::CONFLICT,
        "Conflict",
        format!("Operation cannot be fulfilled on {RESOURCE} {name:?}: {why}"),
        Some(name),
        vec![],
    )
}

/// 415 UnsupportedMediaType: a PATCH whose Content-Type is none of
/// `accepted` (apiserver/pkg/endpoints/handlers/negotiation/errors.go,
/// errUnsupportedMediaType: no details).
pub(crate) fn unsupported_media_type(accepted: &[&str]) -> Response {
    let code = StatusCode::UNSUPPORTED_MEDIA_TYPE;
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
        "reason": "UnsupportedMediaType",
        "code": code.as_u16(),
    });
    (code, Json(body)).into_response()
}

/// One invalid option of a PATCH: (field, cause reason, message).
pub(crate) type OptionError = (&'static str, &'static str, String);

/// 422 Invalid: PatchOptions that fail validation
/// (apimachinery/pkg/apis/meta/v1/validation/validation.go,
/// ValidatePatchOptions, answered by handlers/patch.go as
/// `errors.NewInvalid(PatchOptions.meta.k8s.io, "", errs)`).
pub(crate) fn invalid_patch_options(errors: &[OptionError]) -> Response {
    let causes: Vec<Value> = errors
        .iter()
        .map(|(field, reason, message)| json!({ "reason": reason, "message": message, "field": field }))
        .collect();
    let text: Vec<String> = errors
        .iter()
        .map(|(field, _, message)| format!("{field}: {message}"))
        .collect();
    let message = if text.len() == 1 {
        text[0].clone()
    } else {
        format!("[{}]", text.join(", "))
    };
    let details = json!({ "group": "meta.k8s.io", "kind": "PatchOptions", "causes": causes });
    status(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("PatchOptions.meta.k8s.io \"\" is invalid: {message}"),
        details,
    )
}

/// 422 Invalid: a JSON patch that does not apply to the object (a failed
/// `test`, a path that is not there): handlers/patch.go answers it with
/// `errors.NewGenericServerResponse(422, ...)`, whose message is fixed and
/// whose details are empty.
pub(crate) fn json_patch_rejected() -> Response {
    status(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        "the server rejected our request due to an error in our request".into(),
        json!({}),
    )
}

/// 409 Conflict: an apply that would change fields other managers own
/// (apimachinery/pkg/util/managedfields/internal/conflict.go,
/// NewConflictError and getConflictMessage; `errors.NewApplyConflict`:
/// details carry only the causes). `conflicts` are (owner as printed,
/// field), sorted by owner.
pub(crate) fn apply_conflict(conflicts: &[(String, String)]) -> Response {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(manager, field)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {manager}"),
                "field": field,
            })
        })
        .collect();
    let message = match conflicts {
        [(manager, field)] => {
            format!("Apply failed with 1 conflict: conflict with {manager}: {field}")
        }
        _ => {
            let mut lines = Vec::new();
            let mut last: Option<&String> = None;
            for (manager, field) in conflicts {
                if last != Some(manager) {
                    lines.push(format!("conflicts with {manager}:"));
                    last = Some(manager);
                }
                lines.push(format!("- {field}"));
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        }
    };
    status(
        StatusCode::CONFLICT,
        "Conflict",
        message,
        json!({ "causes": causes }),
    )
}
