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
//! k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto define it. The
//! messages below are written from those .proto files (proto2: every
//! scalar is `optional`, so an `Option` keeps whether it was sent).
//!
//! The server keeps and handles Leases as JSON; these functions turn the
//! protobuf form into the JSON kube-apiserver's decoder would make of it,
//! and back, field by field: what a field's Go type does on either side
//! (a metav1.Time keeps whole seconds, a MicroTime microseconds; a zero
//! time is sent as an empty message; `omitempty` strings are left out of
//! the JSON when empty, the LeaseSpec's pointer fields only when unset).

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use prost::Message;
use serde_json::{json, Map, Value};

/// The media type of Kubernetes' protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with (`protobuf.protoEncodingPrefix`).
const MAGIC: &[u8; 4] = b"k8s\0";

/// The Lease's API group and version, as its `apiVersion`.
const LEASE_API_VERSION: &str = "coordination.k8s.io/v1";

// --- runtime/generated.proto ---

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    content_type: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

// --- coordination/v1/generated.proto ---

#[derive(Clone, PartialEq, Message)]
struct Lease {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<LeaseSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    items: Vec<Lease>,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseSpec {
    #[prost(string, optional, tag = "1")]
    holder_identity: Option<String>,
    #[prost(int32, optional, tag = "2")]
    lease_duration_seconds: Option<i32>,
    #[prost(message, optional, tag = "3")]
    acquire_time: Option<Timestamp>,
    #[prost(message, optional, tag = "4")]
    renew_time: Option<Timestamp>,
    #[prost(int32, optional, tag = "5")]
    lease_transitions: Option<i32>,
    #[prost(string, optional, tag = "6")]
    strategy: Option<String>,
    #[prost(string, optional, tag = "7")]
    preferred_holder: Option<String>,
}

// --- meta/v1/generated.proto ---

/// `Time` and `MicroTime` alike: seconds and nanoseconds since the epoch.
#[derive(Clone, PartialEq, Message)]
struct Timestamp {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    creation_timestamp: Option<Timestamp>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<Timestamp>,
    #[prost(int64, optional, tag = "10")]
    deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
    #[prost(message, repeated, tag = "17")]
    managed_fields: Vec<ManagedFieldsEntry>,
}

#[derive(Clone, PartialEq, Message)]
struct ListMeta {
    #[prost(string, optional, tag = "1")]
    self_link: Option<String>,
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    continue_: Option<String>,
    #[prost(int64, optional, tag = "4")]
    remaining_item_count: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct ManagedFieldsEntry {
    #[prost(string, optional, tag = "1")]
    manager: Option<String>,
    #[prost(string, optional, tag = "2")]
    operation: Option<String>,
    #[prost(string, optional, tag = "3")]
    api_version: Option<String>,
    #[prost(message, optional, tag = "4")]
    time: Option<Timestamp>,
    #[prost(string, optional, tag = "6")]
    fields_type: Option<String>,
    #[prost(message, optional, tag = "7")]
    fields_v1: Option<FieldsV1>,
    #[prost(string, optional, tag = "8")]
    subresource: Option<String>,
}

/// A field set, as the JSON object FieldsV1 is in JSON.
#[derive(Clone, PartialEq, Message)]
struct FieldsV1 {
    #[prost(bytes = "vec", optional, tag = "1")]
    raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMeta>,
    #[prost(string, optional, tag = "2")]
    status: Option<String>,
    #[prost(string, optional, tag = "3")]
    message: Option<String>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(message, optional, tag = "5")]
    details: Option<StatusDetails>,
    #[prost(int32, optional, tag = "6")]
    code: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct StatusDetails {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    group: Option<String>,
    #[prost(string, optional, tag = "3")]
    kind: Option<String>,
    #[prost(message, repeated, tag = "4")]
    causes: Vec<StatusCause>,
    #[prost(int32, optional, tag = "5")]
    retry_after_seconds: Option<i32>,
    #[prost(string, optional, tag = "6")]
    uid: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct StatusCause {
    #[prost(string, optional, tag = "1")]
    reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    message: Option<String>,
    #[prost(string, optional, tag = "3")]
    field: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct DeleteOptions {
    #[prost(int64, optional, tag = "1")]
    grace_period_seconds: Option<i64>,
    #[prost(message, optional, tag = "2")]
    preconditions: Option<Preconditions>,
    #[prost(bool, optional, tag = "3")]
    orphan_dependents: Option<bool>,
    #[prost(string, optional, tag = "4")]
    propagation_policy: Option<String>,
    #[prost(string, repeated, tag = "5")]
    dry_run: Vec<String>,
    #[prost(bool, optional, tag = "6")]
    ignore_store_read_error_with_cluster_breaking_potential: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Preconditions {
    #[prost(string, optional, tag = "1")]
    uid: Option<String>,
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

// runtime/generated.proto
#[derive(Clone, PartialEq, Message)]
struct RawExtension {
    #[prost(bytes = "vec", optional, tag = "1")]
    raw: Option<Vec<u8>>,
}

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

// --- JSON to protobuf ---

fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

/// An `omitempty` string: sent only when set and not empty.
fn nonempty(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(text).collect())
        .unwrap_or_default()
}

/// An RFC 3339 time as a Timestamp, `whole_seconds` for a metav1.Time
/// (whose protobuf form drops the fraction), microseconds for a MicroTime.
fn timestamp_from_json(value: &Value, whole_seconds: bool) -> Option<Timestamp> {
    let time = DateTime::parse_from_rfc3339(value.as_str()?).ok()?;
    let nanos = if whole_seconds {
        0
    } else {
        time.timestamp_subsec_micros() * 1000
    };
    Some(Timestamp {
        seconds: Some(time.timestamp()),
        nanos: (nanos != 0).then_some(nanos as i32),
    })
}

fn object_meta_from_json(meta: &Value) -> ObjectMeta {
    ObjectMeta {
        name: nonempty(&meta["name"]),
        generate_name: nonempty(&meta["generateName"]),
        namespace: nonempty(&meta["namespace"]),
        self_link: nonempty(&meta["selfLink"]),
        uid: nonempty(&meta["uid"]),
        resource_version: nonempty(&meta["resourceVersion"]),
        generation: meta["generation"].as_i64(),
        creation_timestamp: timestamp_from_json(&meta["creationTimestamp"], true),
        deletion_timestamp: timestamp_from_json(&meta["deletionTimestamp"], true),
        deletion_grace_period_seconds: meta["deletionGracePeriodSeconds"].as_i64(),
        labels: string_map(&meta["labels"]),
        annotations: string_map(&meta["annotations"]),
        owner_references: meta["ownerReferences"]
            .as_array()
            .map(|refs| {
                refs.iter()
                    .map(|r| OwnerReference {
                        kind: text(&r["kind"]),
                        name: text(&r["name"]),
                        uid: text(&r["uid"]),
                        api_version: text(&r["apiVersion"]),
                        controller: r["controller"].as_bool(),
                        block_owner_deletion: r["blockOwnerDeletion"].as_bool(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        finalizers: strings(&meta["finalizers"]),
        managed_fields: meta["managedFields"]
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| ManagedFieldsEntry {
                        manager: nonempty(&e["manager"]),
                        operation: nonempty(&e["operation"]),
                        api_version: nonempty(&e["apiVersion"]),
                        time: timestamp_from_json(&e["time"], true),
                        fields_type: nonempty(&e["fieldsType"]),
                        fields_v1: e
                            .get("fieldsV1")
                            .filter(|f| !f.is_null())
                            .map(|f| FieldsV1 {
                                raw: Some(f.to_string().into_bytes()),
                            }),
                        subresource: nonempty(&e["subresource"]),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn lease_from_json(object: &Value) -> Lease {
    let spec = &object["spec"];
    let int32 = |v: &Value| v.as_i64().and_then(|n| i32::try_from(n).ok());
    Lease {
        metadata: Some(object_meta_from_json(&object["metadata"])),
        spec: Some(LeaseSpec {
            holder_identity: text(&spec["holderIdentity"]),
            lease_duration_seconds: int32(&spec["leaseDurationSeconds"]),
            acquire_time: timestamp_from_json(&spec["acquireTime"], false),
            renew_time: timestamp_from_json(&spec["renewTime"], false),
            lease_transitions: int32(&spec["leaseTransitions"]),
            strategy: text(&spec["strategy"]),
            preferred_holder: text(&spec["preferredHolder"]),
        }),
    }
}

fn list_meta_from_json(meta: &Value) -> ListMeta {
    ListMeta {
        self_link: nonempty(&meta["selfLink"]),
        resource_version: nonempty(&meta["resourceVersion"]),
        continue_: nonempty(&meta["continue"]),
        remaining_item_count: meta["remainingItemCount"].as_i64(),
    }
}

fn status_from_json(object: &Value) -> Status {
    let details = &object["details"];
    Status {
        metadata: Some(list_meta_from_json(&object["metadata"])),
        status: nonempty(&object["status"]),
        message: nonempty(&object["message"]),
        reason: nonempty(&object["reason"]),
        details: details.is_object().then(|| StatusDetails {
            name: nonempty(&details["name"]),
            group: nonempty(&details["group"]),
            kind: nonempty(&details["kind"]),
            causes: details["causes"]
                .as_array()
                .map(|causes| {
                    causes
                        .iter()
                        .map(|c| StatusCause {
                            reason: nonempty(&c["reason"]),
                            message: nonempty(&c["message"]),
                            field: nonempty(&c["field"]),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            retry_after_seconds: details["retryAfterSeconds"]
                .as_i64()
                .and_then(|n| i32::try_from(n).ok()),
            uid: nonempty(&details["uid"]),
        }),
        code: object["code"].as_i64().and_then(|n| i32::try_from(n).ok()),
    }
}

// --- protobuf to JSON ---

/// Sets `field` to `value` if there is one.
fn put(map: &mut Map<String, Value>, field: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(field.to_owned(), value);
    }
}

/// An `omitempty` string field: left out when empty.
fn put_nonempty(map: &mut Map<String, Value>, field: &str, value: Option<String>) {
    put(map, field, value.filter(|s| !s.is_empty()).map(Value::from));
}

/// A Timestamp as RFC 3339 in UTC, `None` for the zero time (an empty
/// message, as Go marshals a zero Time): whole seconds for a metav1.Time,
/// six fractional digits for a MicroTime, as their JSON forms are.
fn timestamp_to_json(time: Option<Timestamp>, whole_seconds: bool) -> Option<Value> {
    let time = time?;
    let seconds = time.seconds?;
    let nanos = if whole_seconds {
        0
    } else {
        // MicroTime truncates to microseconds on both sides.
        u32::try_from(time.nanos.unwrap_or(0)).ok()? / 1000 * 1000
    };
    let time = DateTime::<Utc>::from_timestamp(seconds, nanos)?;
    let format = if whole_seconds {
        SecondsFormat::Secs
    } else {
        SecondsFormat::Micros
    };
    Some(Value::from(time.to_rfc3339_opts(format, true)))
}

fn object_meta_to_json(meta: ObjectMeta) -> Value {
    let mut map = Map::new();
    put_nonempty(&mut map, "name", meta.name);
    put_nonempty(&mut map, "generateName", meta.generate_name);
    put_nonempty(&mut map, "namespace", meta.namespace);
    put_nonempty(&mut map, "selfLink", meta.self_link);
    put_nonempty(&mut map, "uid", meta.uid);
    put_nonempty(&mut map, "resourceVersion", meta.resource_version);
    put(
        &mut map,
        "generation",
        meta.generation.filter(|g| *g != 0).map(Value::from),
    );
    put(
        &mut map,
        "creationTimestamp",
        timestamp_to_json(meta.creation_timestamp, true),
    );
    put(
        &mut map,
        "deletionTimestamp",
        timestamp_to_json(meta.deletion_timestamp, true),
    );
    put(
        &mut map,
        "deletionGracePeriodSeconds",
        meta.deletion_grace_period_seconds.map(Value::from),
    );
    if !meta.labels.is_empty() {
        map.insert("labels".into(), json!(meta.labels));
    }
    if !meta.annotations.is_empty() {
        map.insert("annotations".into(), json!(meta.annotations));
    }
    if !meta.owner_references.is_empty() {
        let refs: Vec<Value> = meta
            .owner_references
            .into_iter()
            .map(|r| {
                let mut owner = Map::new();
                owner.insert(
                    "apiVersion".into(),
                    json!(r.api_version.unwrap_or_default()),
                );
                owner.insert("kind".into(), json!(r.kind.unwrap_or_default()));
                owner.insert("name".into(), json!(r.name.unwrap_or_default()));
                owner.insert("uid".into(), json!(r.uid.unwrap_or_default()));
                put(&mut owner, "controller", r.controller.map(Value::from));
                put(
                    &mut owner,
                    "blockOwnerDeletion",
                    r.block_owner_deletion.map(Value::from),
                );
                Value::Object(owner)
            })
            .collect();
        map.insert("ownerReferences".into(), Value::Array(refs));
    }
    if !meta.finalizers.is_empty() {
        map.insert("finalizers".into(), json!(meta.finalizers));
    }
    if !meta.managed_fields.is_empty() {
        let entries: Vec<Value> = meta
            .managed_fields
            .into_iter()
            .map(|e| {
                let mut entry = Map::new();
                put_nonempty(&mut entry, "manager", e.manager);
                put_nonempty(&mut entry, "operation", e.operation);
                put_nonempty(&mut entry, "apiVersion", e.api_version);
                put(&mut entry, "time", timestamp_to_json(e.time, true));
                put_nonempty(&mut entry, "fieldsType", e.fields_type);
                put(
                    &mut entry,
                    "fieldsV1",
                    e.fields_v1
                        .and_then(|f| f.raw)
                        .and_then(|raw| serde_json::from_slice(&raw).ok()),
                );
                put_nonempty(&mut entry, "subresource", e.subresource);
                Value::Object(entry)
            })
            .collect();
        map.insert("managedFields".into(), Value::Array(entries));
    }
    Value::Object(map)
}

/// A Lease as JSON; `with_type` adds its kind and apiVersion (a top-level
/// object has them, a list's items need not).
fn lease_to_json(lease: Lease, with_type: bool) -> Value {
    let mut object = Map::new();
    if with_type {
        object.insert("kind".into(), json!("Lease"));
        object.insert("apiVersion".into(), json!(LEASE_API_VERSION));
    }
    object.insert(
        "metadata".into(),
        object_meta_to_json(lease.metadata.unwrap_or_default()),
    );
    let spec = lease.spec.unwrap_or_default();
    let mut json_spec = Map::new();
    // LeaseSpec's fields are pointers in Go: present when set, even if empty
    // (a released Lease's holderIdentity is "").
    put(
        &mut json_spec,
        "holderIdentity",
        spec.holder_identity.map(Value::from),
    );
    put(
        &mut json_spec,
        "leaseDurationSeconds",
        spec.lease_duration_seconds.map(Value::from),
    );
    put(
        &mut json_spec,
        "acquireTime",
        timestamp_to_json(spec.acquire_time, false),
    );
    put(
        &mut json_spec,
        "renewTime",
        timestamp_to_json(spec.renew_time, false),
    );
    put(
        &mut json_spec,
        "leaseTransitions",
        spec.lease_transitions.map(Value::from),
    );
    put(&mut json_spec, "strategy", spec.strategy.map(Value::from));
    put(
        &mut json_spec,
        "preferredHolder",
        spec.preferred_holder.map(Value::from),
    );
    object.insert("spec".into(), Value::Object(json_spec));
    Value::Object(object)
}

fn delete_options_to_json(options: DeleteOptions) -> Value {
    let mut map = Map::new();
    put(
        &mut map,
        "gracePeriodSeconds",
        options.grace_period_seconds.map(Value::from),
    );
    if let Some(p) = options.preconditions {
        let mut preconditions = Map::new();
        put(&mut preconditions, "uid", p.uid.map(Value::from));
        put(
            &mut preconditions,
            "resourceVersion",
            p.resource_version.map(Value::from),
        );
        map.insert("preconditions".into(), Value::Object(preconditions));
    }
    put(
        &mut map,
        "orphanDependents",
        options.orphan_dependents.map(Value::from),
    );
    put_nonempty(&mut map, "propagationPolicy", options.propagation_policy);
    if !options.dry_run.is_empty() {
        map.insert("dryRun".into(), json!(options.dry_run));
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    //! Bodies built byte by byte from the .proto files' field numbers, not
    //! with the messages above, so a wrong tag or wire type there fails.

    use super::*;

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
