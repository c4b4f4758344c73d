//! Between the messages and the JSON the server keeps: what each field's Go
//! type does on either side (a metav1.Time keeps whole seconds, a
//! MicroTime microseconds; a zero time is sent as an empty message;
//! `omitempty` strings are left out of the JSON when empty, the LeaseSpec's
//! pointer fields only when unset).

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use super::messages::*;
use super::LEASE_API_VERSION;

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

pub(super) fn lease_from_json(object: &Value) -> Lease {
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

pub(super) fn list_meta_from_json(meta: &Value) -> ListMeta {
    ListMeta {
        self_link: nonempty(&meta["selfLink"]),
        resource_version: nonempty(&meta["resourceVersion"]),
        continue_: nonempty(&meta["continue"]),
        remaining_item_count: meta["remainingItemCount"].as_i64(),
    }
}

pub(super) fn status_from_json(object: &Value) -> Status {
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
pub(super) fn lease_to_json(lease: Lease, with_type: bool) -> Value {
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

pub(super) fn delete_options_to_json(options: DeleteOptions) -> Value {
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
