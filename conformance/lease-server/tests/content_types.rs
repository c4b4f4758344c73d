//! Bodies and answers in the media types kube-apiserver negotiates: JSON,
//! YAML and Kubernetes' protobuf (`application/vnd.kubernetes.protobuf`),
//! 415 for a body in any other, 406 for an Accept of none. The protobuf
//! bodies here are built byte by byte from the .proto files' field numbers.

mod common;

use common::{answer_of, assert_status, fixture};
use serde_json::{json, Value};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A length-delimited field (string, bytes, message).
fn bytes_field(tag: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(tag << 3 | 2, &mut out);
    varint(value.len() as u64, &mut out);
    out.extend_from_slice(value);
    out
}

fn varint_field(tag: u64, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(tag << 3, &mut out);
    varint(value, &mut out);
    out
}

/// `k8s\0` + runtime.Unknown{typeMeta, raw} of a Lease `name` held by
/// `holder` for 15 s.
fn protobuf_lease(name: &str, holder: &str) -> Vec<u8> {
    let meta = [bytes_field(1, name.as_bytes()), bytes_field(3, b"default")].concat();
    let spec = [bytes_field(1, holder.as_bytes()), varint_field(2, 15)].concat();
    let lease = [bytes_field(1, &meta), bytes_field(2, &spec)].concat();
    let type_meta = [
        bytes_field(1, b"coordination.k8s.io/v1"),
        bytes_field(2, b"Lease"),
    ]
    .concat();
    let mut body = b"k8s\0".to_vec();
    body.extend([bytes_field(1, &type_meta), bytes_field(2, &lease)].concat());
    body
}

/// Whether `haystack` holds `needle` (a protobuf answer's strings are in
/// it as they are).
fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_protobuf_create_is_stored_and_answered_in_protobuf() {
    let f = fixture().await;
    let answer = f
        .http
        .post(f.url(None))
        .header("content-type", PROTOBUF)
        .header("accept", format!("{PROTOBUF},application/json"))
        .body(protobuf_lease("p", "a"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    assert_eq!(answer.headers()["content-type"], PROTOBUF);
    let body = answer.bytes().await.unwrap();
    assert!(body.starts_with(b"k8s\0"), "{body:?}");
    assert!(contains(&body, "Lease") && contains(&body, "coordination.k8s.io/v1"));
    // The server's own fields are in the answer: the uid it made.
    let (code, stored) = f.get("p").await;
    assert_eq!(code, 200, "{stored}");
    assert_eq!(stored["spec"]["holderIdentity"], "a");
    assert_eq!(stored["spec"]["leaseDurationSeconds"], 15);
    assert!(contains(&body, stored["metadata"]["uid"].as_str().unwrap()));
}

#[tokio::test]
async fn a_failure_asked_in_protobuf_is_a_protobuf_status() {
    let f = fixture().await;
    let answer = f
        .http
        .get(f.url(Some("missing")))
        .header("accept", PROTOBUF)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    assert_eq!(answer.headers()["content-type"], PROTOBUF);
    let body = answer.bytes().await.unwrap();
    assert!(body.starts_with(b"k8s\0"), "{body:?}");
    assert!(contains(&body, "Status") && contains(&body, "NotFound"));
}

#[tokio::test]
async fn a_body_in_another_type_is_415_and_a_malformed_one_400() {
    let f = fixture().await;
    let lease = json!({ "metadata": { "name": "t" }, "spec": {} });
    let answer = answer_of(
        f.http
            .post(f.url(None))
            .header("content-type", "text/plain")
            .body(lease.to_string()),
    )
    .await;
    assert_status(&answer, 415, "UnsupportedMediaType");
    assert_eq!(
        answer.1["message"],
        "the body of the request was in an unknown format - accepted media types include: \
         application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
    let answer = answer_of(
        f.http
            .post(f.url(None))
            .header("content-type", PROTOBUF)
            .body(lease.to_string()),
    )
    .await;
    assert_status(&answer, 400, "BadRequest");
    assert_eq!(f.get("t").await.0, 404);
}

#[tokio::test]
async fn an_accept_of_no_served_type_is_406() {
    let f = fixture().await;
    let answer = answer_of(f.http.get(f.url(None)).header("accept", "text/html")).await;
    assert_status(&answer, 406, "NotAcceptable");
}

#[tokio::test]
async fn yaml_bodies_and_answers() {
    let f = fixture().await;
    let answer = f
        .http
        .post(f.url(None))
        .header("content-type", "application/yaml")
        .header("accept", "application/yaml")
        .body("metadata:\n  name: y\nspec:\n  holderIdentity: a\n")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    assert_eq!(answer.headers()["content-type"], "application/yaml");
    let created: Value = serde_yaml::from_slice(&answer.bytes().await.unwrap()).unwrap();
    assert_eq!(created["spec"]["holderIdentity"], "a");
    assert_eq!(created["metadata"]["name"], "y");
}

#[tokio::test]
async fn a_watch_asked_in_protobuf_streams_length_delimited_watch_events() {
    let f = fixture().await;
    let created = answer_of(f.http.post(f.url(None)).json(&json!({
        "metadata": { "name": "w" }, "spec": { "holderIdentity": "a" },
    })))
    .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let mut answer = f
        .http
        .get(format!("{}?watch=1&resourceVersion=0", f.url(None)))
        .header("accept", format!("{PROTOBUF},application/json"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let mut stream = Vec::new();
    let frame = loop {
        if stream.len() >= 4 {
            let len = u32::from_be_bytes(stream[..4].try_into().unwrap()) as usize;
            if stream.len() >= 4 + len {
                break stream[4..4 + len].to_vec();
            }
        }
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), answer.chunk())
            .await
            .expect("a frame within 10 s")
            .unwrap()
            .expect("the stream goes on");
        stream.extend_from_slice(&chunk);
    };
    // WatchEvent{type: "ADDED", object: RawExtension{raw: k8s\0 + Unknown}}.
    assert!(frame.starts_with(&bytes_field(1, b"ADDED")), "{frame:?}");
    let object = &frame[bytes_field(1, b"ADDED").len()..];
    assert_eq!(object[0], 2 << 3 | 2, "{frame:?}");
    assert!(contains(object, "k8s\0") && contains(object, "Lease"));
    assert!(contains(
        object,
        created.1["metadata"]["uid"].as_str().unwrap()
    ));
}
