//! Content negotiation, as kube-apiserver's `negotiation` package does it:
//! a create, update or delete body in JSON, YAML or protobuf by its
//! Content-Type (415 for any other), and every answer in the first type of
//! the request's Accept that the server writes (406 if none is).
//!
//! The handlers read and write JSON only: this layer turns a YAML or
//! protobuf body into JSON before them, and their JSON answer into YAML or
//! protobuf after them. A watch's stream of JSON lines becomes a stream of
//! protobuf frames when protobuf is asked for (client-go's typed watches
//! ask for it; its leader election does not watch), and stays JSON when
//! YAML is (kube-apiserver streams no YAML either); a PATCH's body is the
//! patch handler's to read (patch.rs), its answer negotiated here.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::protobuf::{self, MEDIA_TYPE as PROTOBUF};
use super::status;

const JSON: &str = "application/json";
const YAML: &str = "application/yaml";

/// The media types a body may be sent in and an answer asked for, in the
/// order kube-apiserver lists them.
const SERVED: [&str; 3] = [JSON, YAML, PROTOBUF];

/// The largest body read; kube-apiserver's limit on a request body
/// (`MaxRequestBodyBytes`) is 3 MiB.
const BODY_LIMIT: usize = 3 * 1024 * 1024;

/// A media type the server reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Media {
    Json,
    Yaml,
    Protobuf,
}

impl Media {
    fn of(media_type: &str) -> Option<Media> {
        match media_type {
            JSON => Some(Media::Json),
            YAML => Some(Media::Yaml),
            PROTOBUF => Some(Media::Protobuf),
            _ => None,
        }
    }
}

/// The media type of a header value, parameters (`; charset=utf-8`) left
/// out, lowercased.
fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// What an answer is written in for `accept`: the first of its types the
/// server writes once sorted as goautoneg sorts them (by `q`, then exact
/// types before `type/*` before `*/*`, else in the order sent), `*/*` and
/// `application/*` meaning JSON; JSON without an Accept; `None` if the
/// server writes none of them (406).
pub(crate) fn answer_type(accept: Option<&str>) -> Option<Media> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Media::Json);
    };
    let mut clauses: Vec<(f32, u8, String)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let media = parts.next()?.trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q=").map(str::to_owned))
                .next()
                .map_or(Some(1.0), |q| q.trim().parse::<f32>().ok())?;
            let specificity = match media.as_str() {
                "*/*" => 0,
                m if m.ends_with("/*") => 1,
                _ => 2,
            };
            (q > 0.0).then_some((q, specificity, media))
        })
        .collect();
    // A stable sort keeps the order sent among equals.
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    clauses
        .iter()
        .find_map(|(_, _, media)| match media.as_str() {
            "*/*" | "application/*" => Some(Media::Json),
            other => Media::of(other),
        })
}

/// 406 NotAcceptable, as kube-apiserver words it
/// (negotiation.NewNotAcceptableError).
fn not_acceptable() -> Response {
    let code = StatusCode::NOT_ACCEPTABLE;
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("only the following media types are accepted: {}", SERVED.join(", ")),
        "reason": "NotAcceptable",
        "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

/// Whether the request is a watch (`?watch=true` or `?watch=1`).
fn is_watch(request: &Request) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

/// The middleware: the body read by its Content-Type, the answer written
/// in what Accept asks for.
pub(crate) async fn negotiate(request: Request, next: Next) -> Response {
    let accept = request
        .headers()
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(answer) = answer_type(accept.as_deref()) else {
        return not_acceptable();
    };
    let watch = is_watch(&request);
    tracing::debug!(
        method = %request.method(),
        uri = %request.uri(),
        content_type = ?request.headers().get(CONTENT_TYPE),
        accept = ?accept,
        answer = ?answer,
        "negotiated"
    );
    let request = match read_body(request).await {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    let response = next.run(request).await;
    if watch && response.status() == StatusCode::OK {
        return match answer {
            Media::Protobuf => protobuf_watch(response),
            Media::Json | Media::Yaml => response,
        };
    }
    write_answer(response, answer).await
}

/// The request with a create's, update's or delete's body turned into JSON,
/// or the answer refusing it: 415 for a Content-Type no decoder takes, 400
/// for a body that is not what its Content-Type says.
async fn read_body(request: Request) -> Result<Request, Response> {
    let expected = match *request.method() {
        Method::POST | Method::PUT => protobuf::Body::Lease,
        Method::DELETE => protobuf::Body::DeleteOptions,
        _ => return Ok(request),
    };
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(media_type)
        .unwrap_or_default();
    let (mut parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .map_err(|e| status::bad_request(format!("reading the body: {e}")))?;
    // A delete needs no body, and one without is not negotiated.
    if expected == protobuf::Body::DeleteOptions && body.is_empty() {
        return Ok(Request::from_parts(parts, Body::from(body)));
    }
    // No Content-Type is JSON (NegotiateInputSerializerForMediaType).
    let media = if content_type.is_empty() {
        Media::Json
    } else {
        Media::of(&content_type).ok_or_else(|| status::unsupported_media_type(&SERVED))?
    };
    let json: Bytes = match media {
        Media::Json => body,
        Media::Yaml => {
            let value: Value = serde_yaml::from_slice(&body)
                .map_err(|e| status::bad_request(format!("error decoding YAML: {e}")))?;
            serde_json::to_vec(&value)
                .expect("a JSON value serializes")
                .into()
        }
        Media::Protobuf => {
            let value = protobuf::decode(&body, expected).map_err(status::bad_request)?;
            serde_json::to_vec(&value)
                .expect("a JSON value serializes")
                .into()
        }
    };
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    parts.headers.remove(CONTENT_LENGTH);
    Ok(Request::from_parts(parts, Body::from(json)))
}

/// A handler's JSON answer in `media`: a Lease, LeaseList or Status in
/// protobuf, any JSON in YAML; an answer that is not JSON goes as it is.
async fn write_answer(response: Response, media: Media) -> Response {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| media_type(v) == JSON);
    if media == Media::Json || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return status::internal("the answer could not be read".into());
    };
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return Response::from_parts(parts, Body::from(body));
    };
    let (content_type, encoded) = match media {
        Media::Protobuf => match protobuf::encode(&value) {
            Some(encoded) => (PROTOBUF, encoded),
            None => return Response::from_parts(parts, Body::from(body)),
        },
        Media::Yaml => (
            YAML,
            serde_yaml::to_string(&value)
                .expect("a JSON value serializes as YAML")
                .into_bytes(),
        ),
        Media::Json => unreachable!("answered above"),
    };
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(encoded))
}

/// A watch's answer of JSON lines as protobuf frames, each sent as its
/// line arrives.
fn protobuf_watch(response: Response) -> Response {
    use futures::StreamExt;

    let (mut parts, body) = response.into_parts();
    let lines = body.into_data_stream();
    // The JSON not yet ended by a newline, and frames made but not sent.
    let state = (
        lines,
        Vec::<u8>::new(),
        std::collections::VecDeque::<Bytes>::new(),
    );
    let frames = futures::stream::unfold(state, |(mut lines, mut pending, mut ready)| async move {
        loop {
            if let Some(frame) = ready.pop_front() {
                return Some((Ok::<_, axum::Error>(frame), (lines, pending, ready)));
            }
            match lines.next().await {
                Some(Ok(chunk)) => {
                    pending.extend_from_slice(&chunk);
                    while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        let frame = serde_json::from_slice::<Value>(&line)
                            .ok()
                            .and_then(|event| protobuf::watch_frame(&event));
                        match frame {
                            Some(frame) => ready.push_back(frame.into()),
                            None => tracing::warn!(
                                line = %String::from_utf8_lossy(&line),
                                "a watch event with no protobuf form; not sent"
                            ),
                        }
                    }
                }
                Some(Err(e)) => return Some((Err(e), (lines, pending, ready))),
                None => return None,
            }
        }
    });
    parts.headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(protobuf::WATCH_MEDIA_TYPE),
    );
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from_stream(frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_go_accept_picks_protobuf() {
        assert_eq!(
            answer_type(Some("application/vnd.kubernetes.protobuf,application/json")),
            Some(Media::Protobuf)
        );
        assert_eq!(
            answer_type(Some("application/vnd.kubernetes.protobuf, */*")),
            Some(Media::Protobuf)
        );
    }

    #[test]
    fn accept_order_q_and_wildcards_decide_the_type() {
        assert_eq!(answer_type(None), Some(Media::Json));
        assert_eq!(answer_type(Some("*/*")), Some(Media::Json));
        assert_eq!(
            answer_type(Some(
                "application/json, application/vnd.kubernetes.protobuf"
            )),
            Some(Media::Json)
        );
        assert_eq!(
            answer_type(Some("application/json;q=0.5, application/yaml")),
            Some(Media::Yaml)
        );
        assert_eq!(
            answer_type(Some("*/*, application/vnd.kubernetes.protobuf")),
            Some(Media::Protobuf)
        );
        assert_eq!(answer_type(Some("text/html, application/json;q=0")), None);
        // kubectl's Table request: parameters do not change the type.
        assert_eq!(
            answer_type(Some(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
            )),
            Some(Media::Json)
        );
    }
}
