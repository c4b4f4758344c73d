//! Kubernetes' protobuf encoding of the objects this server reads and
//! writes: a Lease, a LeaseList, a Status, DeleteOptions.
//!
//! client-go's typed clients send built-in types such as Lease as
//! `application/vnd.kubernetes.protobuf` and ask for it back
//! (`gentype.PrefersProtobuf`, `rest.Request.UseProtobufAsDefault`), so a
//! stock client-go program speaks nothing else to this server. The wire
//! form (apimachinery's `runtime/serializer/protobuf`): the four bytes
//! `k8s\0`, then a `runtime.Unknown` message whose `typeMeta` names the
//! kind and whose `raw` is the object, encoded as
//! k8s.io/api/coordination/v1/generated.proto and
//! k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto define it; the
//! messages are written by hand from those .proto files (messages.rs).
//!
//! The server keeps and handles Leases as JSON; these functions turn the
//! protobuf form into the JSON kube-apiserver's decoder would make of it,
//! and back, field by field (json.rs).

mod json;
mod messages;

use prost::Message;
use serde_json::Value;

use json::{
    delete_options_to_json, lease_from_json, lease_to_json, list_meta_from_json, status_from_json,
};
use messages::{DeleteOptions, Lease, LeaseList, RawExtension, TypeMeta, Unknown, WatchEvent};

/// The media type of Kubernetes' protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with (`protobuf.protoEncodingPrefix`).
const MAGIC: &[u8; 4] = b"k8s\0";

/// The Lease's API group and version, as its `apiVersion`.
const LEASE_API_VERSION: &str = "coordination.k8s.io/v1";

// --- the envelope ---

/// The kinds of body this server reads as protobuf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// A Lease (create, update).
    Lease,
    /// DeleteOptions (delete).
    DeleteOptions,
}

/// The JSON object a protobuf request body holds, read as `expected`:
/// `Err` with the message of kube-apiserver's 400 if it is not one.
pub(crate) fn decode(body: &[u8], expected: Body) -> Result<Value, String> {
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        return Err(format!(
            "provided data does not appear to be a protobuf message, expected prefix {:?}",
            MAGIC
        ));
    };
    let unknown = Unknown::decode(envelope).map_err(|e| format!("runtime.Unknown: {e}"))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(format!("content encoding {encoding:?} is not supported"));
    }
    let raw = unknown.raw.unwrap_or_default();
    match expected {
        Body::Lease => {
            // kube-apiserver decodes into the kind the endpoint serves; the
            // data must say that kind (or nothing, which defaults to it).
            if !(kind.is_empty() || kind == "Lease")
                || !(api_version.is_empty() || api_version == LEASE_API_VERSION)
            {
                return Err(format!(
                    "the body is a {api_version} {kind}, not a {LEASE_API_VERSION} Lease"
                ));
            }
            let lease = Lease::decode(raw.as_slice()).map_err(|e| format!("Lease: {e}"))?;
            Ok(lease_to_json(lease, true))
        }
        Body::DeleteOptions => {
            if !(kind.is_empty() || kind == "DeleteOptions") {
                return Err(format!(
                    "the body is a {api_version} {kind}, not DeleteOptions"
                ));
            }
            let options =
                DeleteOptions::decode(raw.as_slice()).map_err(|e| format!("DeleteOptions: {e}"))?;
            Ok(delete_options_to_json(options))
        }
    }
}

/// `object` (a Lease, LeaseList or Status, by its `kind`) in protobuf, in
/// its envelope; `None` for any other JSON, which stays JSON.
pub(crate) fn encode(object: &Value) -> Option<Vec<u8>> {
    let (api_version, kind, raw) = match object["kind"].as_str()? {
        "Lease" => (
            LEASE_API_VERSION,
            "Lease",
            lease_from_json(object).encode_to_vec(),
        ),
        "LeaseList" => {
            let list = LeaseList {
                metadata: Some(list_meta_from_json(&object["metadata"])),
                items: object["items"]
                    .as_array()
                    .map(|items| items.iter().map(lease_from_json).collect())
                    .unwrap_or_default(),
            };
            (LEASE_API_VERSION, "LeaseList", list.encode_to_vec())
        }
        "Status" => ("v1", "Status", status_from_json(object).encode_to_vec()),
        _ => return None,
    };
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = MAGIC.to_vec();
    unknown.encode(&mut body).expect("a Vec grows as needed");
    Some(body)
}

/// The media type of a watch's stream of protobuf frames.
pub(crate) const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// One watch event (`{"type": .., "object": ..}`, as JSON) as a frame of a
/// protobuf watch stream: its length in four bytes, big-endian
/// (`protobuf.LengthDelimitedFramer`), then a metav1.WatchEvent with no
/// envelope (the stream's serializer is apimachinery's `RawSerializer`)
/// whose object is the Lease or Status in its envelope, as
/// [`encode`] writes it. `None` for an event whose object is neither.
pub(crate) fn watch_frame(event: &Value) -> Option<Vec<u8>> {
    let watch_event = WatchEvent {
        r#type: Some(event["type"].as_str()?.to_owned()),
        object: Some(RawExtension {
            raw: Some(encode(&event["object"])?),
        }),
    };
    let message = watch_event.encode_to_vec();
    let mut frame = u32::try_from(message.len()).ok()?.to_be_bytes().to_vec();
    frame.extend(message);
    Some(frame)
}

#[cfg(test)]
mod tests {
    //! Bodies built byte by byte from the .proto files' field numbers, not
    //! with the messages above, so a wrong tag or wire type there fails.

    use super::*;
    use serde_json::json;

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

    /// A varint field (int32, int64, bool).
    fn varint_field(tag: u64, value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(tag << 3, &mut out);
        varint(value, &mut out);
        out
    }

    fn message(fields: &[Vec<u8>]) -> Vec<u8> {
        fields.concat()
    }

    /// `k8s\0` + runtime.Unknown{typeMeta{apiVersion, kind}, raw, "", ""}.
    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = message(&[
            bytes_field(1, api_version.as_bytes()),
            bytes_field(2, kind.as_bytes()),
        ]);
        let mut body = b"k8s\0".to_vec();
        body.extend(message(&[
            bytes_field(1, &type_meta),
            bytes_field(2, raw),
            bytes_field(3, b""),
            bytes_field(4, b""),
        ]));
        body
    }

    // 2026-12-07T17:31:04Z
    const SECONDS: u64 = 1_796_664_664;

    /// The Lease client-go's LeaseLock creates: ObjectMeta as gogo writes a
    /// Go struct (every non-pointer string, even empty; the zero
    /// creationTimestamp as an empty message), then the spec's pointers.
    fn client_go_lease(holder: &str) -> Vec<u8> {
        let meta = message(&[
            bytes_field(1, b"leader"),
            bytes_field(2, b""),
            bytes_field(3, b"default"),
            bytes_field(4, b""),
            bytes_field(5, b""),
            bytes_field(6, b""),
            varint_field(7, 0),
            bytes_field(8, b""),
            bytes_field(
                11,
                &message(&[bytes_field(1, b"app"), bytes_field(2, b"x")]),
            ),
        ]);
        let micro = |nanos: u64| message(&[varint_field(1, SECONDS), varint_field(2, nanos)]);
        let spec = message(&[
            bytes_field(1, holder.as_bytes()),
            varint_field(2, 15),
            bytes_field(3, &micro(123_456_789)),
            bytes_field(4, &micro(5_000)),
            varint_field(5, 2),
        ]);
        message(&[bytes_field(1, &meta), bytes_field(2, &spec)])
    }

    #[test]
    fn decode_reads_a_lease_as_client_go_writes_it() {
        let body = envelope("coordination.k8s.io/v1", "Lease", &client_go_lease("a"));
        let lease = decode(&body, Body::Lease).unwrap();
        assert_eq!(
            lease,
            json!({
                "kind": "Lease",
                "apiVersion": "coordination.k8s.io/v1",
                "metadata": { "name": "leader", "namespace": "default", "labels": { "app": "x" } },
                "spec": {
                    "holderIdentity": "a",
                    "leaseDurationSeconds": 15,
                    "acquireTime": "2026-12-07T17:31:04.123456Z",
                    "renewTime": "2026-12-07T17:31:04.000005Z",
                    "leaseTransitions": 2,
                },
            })
        );
    }

    #[test]
    fn decode_keeps_a_released_leases_empty_holder() {
        let body = envelope("coordination.k8s.io/v1", "Lease", &client_go_lease(""));
        let lease = decode(&body, Body::Lease).unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], json!(""));
    }

    #[test]
    fn decode_refuses_a_body_without_the_magic_or_of_another_kind() {
        let lease = client_go_lease("a");
        let without_magic = envelope("coordination.k8s.io/v1", "Lease", &lease)[4..].to_vec();
        let err = decode(&without_magic, Body::Lease).unwrap_err();
        assert!(
            err.contains("does not appear to be a protobuf message"),
            "{err}"
        );
        let pod = envelope("v1", "Pod", &lease);
        let err = decode(&pod, Body::Lease).unwrap_err();
        assert!(err.contains("v1 Pod"), "{err}");
        let err = decode(b"k8s\0\x0a\xff", Body::Lease).unwrap_err();
        assert!(err.contains("runtime.Unknown"), "{err}");
    }

    #[test]
    fn decode_reads_delete_options_preconditions() {
        let preconditions = message(&[bytes_field(1, b"u-1"), bytes_field(2, b"42")]);
        let options = message(&[
            varint_field(1, 0),
            bytes_field(2, &preconditions),
            bytes_field(4, b"Background"),
            bytes_field(5, b"All"),
        ]);
        let body = envelope("meta.k8s.io/v1", "DeleteOptions", &options);
        assert_eq!(
            decode(&body, Body::DeleteOptions).unwrap(),
            json!({
                "gracePeriodSeconds": 0,
                "preconditions": { "uid": "u-1", "resourceVersion": "42" },
                "propagationPolicy": "Background",
                "dryRun": ["All"],
            })
        );
    }

    #[test]
    fn encode_writes_a_lease_as_the_proto_defines_it() {
        let lease = json!({
            "kind": "Lease",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": {
                "name": "leader",
                "namespace": "default",
                "uid": "u",
                "resourceVersion": "9",
                "creationTimestamp": "2026-12-07T17:31:04Z",
                "managedFields": [{
                    "manager": "m",
                    "operation": "Update",
                    "apiVersion": "coordination.k8s.io/v1",
                    "time": "2026-12-07T17:31:04Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": { "f:spec": {} },
                }],
            },
            "spec": {
                "holderIdentity": "a",
                "leaseDurationSeconds": 15,
                "renewTime": "2026-12-07T17:31:04.000005Z",
            },
        });
        let seconds = message(&[varint_field(1, SECONDS)]);
        let entry = message(&[
            bytes_field(1, b"m"),
            bytes_field(2, b"Update"),
            bytes_field(3, b"coordination.k8s.io/v1"),
            bytes_field(4, &seconds),
            bytes_field(6, b"FieldsV1"),
            bytes_field(7, &bytes_field(1, br#"{"f:spec":{}}"#)),
        ]);
        let meta = message(&[
            bytes_field(1, b"leader"),
            bytes_field(3, b"default"),
            bytes_field(5, b"u"),
            bytes_field(6, b"9"),
            bytes_field(8, &seconds),
            bytes_field(17, &entry),
        ]);
        let spec = message(&[
            bytes_field(1, b"a"),
            varint_field(2, 15),
            bytes_field(
                4,
                &message(&[varint_field(1, SECONDS), varint_field(2, 5_000)]),
            ),
        ]);
        let raw = message(&[bytes_field(1, &meta), bytes_field(2, &spec)]);
        assert_eq!(
            encode(&lease).unwrap(),
            envelope("coordination.k8s.io/v1", "Lease", &raw)
        );
    }

    #[test]
    fn encode_writes_a_status_as_v1_status() {
        let status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "m",
            "reason": "Conflict",
            "details": { "name": "leader", "group": "coordination.k8s.io", "kind": "leases",
                         "causes": [{ "reason": "FieldValueInvalid", "field": "spec" }],
                         "retryAfterSeconds": 1 },
            "code": 409,
        });
        let cause = message(&[
            bytes_field(1, b"FieldValueInvalid"),
            bytes_field(3, b"spec"),
        ]);
        let details = message(&[
            bytes_field(1, b"leader"),
            bytes_field(2, b"coordination.k8s.io"),
            bytes_field(3, b"leases"),
            bytes_field(4, &cause),
            varint_field(5, 1),
        ]);
        let raw = message(&[
            bytes_field(1, b""),
            bytes_field(2, b"Failure"),
            bytes_field(3, b"m"),
            bytes_field(4, b"Conflict"),
            bytes_field(5, &details),
            varint_field(6, 409),
        ]);
        assert_eq!(encode(&status).unwrap(), envelope("v1", "Status", &raw));
    }

    #[test]
    fn a_watch_frame_is_a_length_then_a_bare_watch_event_around_the_envelope() {
        let status = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Failure", "reason": "Expired", "code": 410 });
        let frame = watch_frame(&json!({ "type": "ERROR", "object": status })).unwrap();
        let object = encode(&status).unwrap();
        let event = message(&[
            bytes_field(1, b"ERROR"),
            bytes_field(2, &bytes_field(1, &object)),
        ]);
        let mut expected = (event.len() as u32).to_be_bytes().to_vec();
        expected.extend(event);
        assert_eq!(frame, expected);
    }

    #[test]
    fn encode_leaves_other_json_alone() {
        assert_eq!(encode(&json!({ "kind": "APIResourceList" })), None);
        assert_eq!(encode(&json!({ "items": [] })), None);
    }

    #[test]
    fn a_lease_list_round_trips_through_protobuf() {
        let list = json!({
            "kind": "LeaseList",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": { "resourceVersion": "12" },
            "items": [
                { "metadata": { "name": "a", "namespace": "default" },
                  "spec": { "holderIdentity": "x", "leaseTransitions": 0 } },
            ],
        });
        let body = encode(&list).unwrap();
        let unknown = Unknown::decode(&body[4..]).unwrap();
        let decoded = LeaseList::decode(unknown.raw.unwrap().as_slice()).unwrap();
        assert_eq!(
            decoded.metadata.unwrap().resource_version.as_deref(),
            Some("12")
        );
        let items: Vec<Value> = decoded
            .items
            .into_iter()
            .map(|l| lease_to_json(l, false))
            .collect();
        assert_eq!(json!(items), list["items"]);
    }
}
