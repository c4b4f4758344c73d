//! The messages of Kubernetes' protobuf encoding that the Lease API
//! needs, written from k8s.io/apimachinery/pkg/runtime/generated.proto,
//! k8s.io/api/coordination/v1/generated.proto and
//! k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto (proto2: every
//! scalar is `optional`, so an `Option` keeps whether it was sent).

use std::collections::BTreeMap;

use prost::Message;

// --- runtime/generated.proto ---

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub(crate) type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub(crate) raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    pub(crate) content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(crate) content_type: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub(crate) api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(crate) kind: Option<String>,
}

// --- coordination/v1/generated.proto ---

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Lease {
    #[prost(message, optional, tag = "1")]
    pub(crate) metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub(crate) spec: Option<LeaseSpec>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct LeaseList {
    #[prost(message, optional, tag = "1")]
    pub(crate) metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) items: Vec<Lease>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct LeaseSpec {
    #[prost(string, optional, tag = "1")]
    pub(crate) holder_identity: Option<String>,
    #[prost(int32, optional, tag = "2")]
    pub(crate) lease_duration_seconds: Option<i32>,
    #[prost(message, optional, tag = "3")]
    pub(crate) acquire_time: Option<Timestamp>,
    #[prost(message, optional, tag = "4")]
    pub(crate) renew_time: Option<Timestamp>,
    #[prost(int32, optional, tag = "5")]
    pub(crate) lease_transitions: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub(crate) strategy: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub(crate) preferred_holder: Option<String>,
}

// --- meta/v1/generated.proto ---

/// `Time` and `MicroTime` alike: seconds and nanoseconds since the epoch.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Timestamp {
    #[prost(int64, optional, tag = "1")]
    pub(crate) seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub(crate) nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub(crate) name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(crate) generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(crate) namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(crate) self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub(crate) uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub(crate) resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub(crate) generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    pub(crate) creation_timestamp: Option<Timestamp>,
    #[prost(message, optional, tag = "9")]
    pub(crate) deletion_timestamp: Option<Timestamp>,
    #[prost(int64, optional, tag = "10")]
    pub(crate) deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub(crate) labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub(crate) annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    pub(crate) owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    pub(crate) finalizers: Vec<String>,
    #[prost(message, repeated, tag = "17")]
    pub(crate) managed_fields: Vec<ManagedFieldsEntry>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct ListMeta {
    #[prost(string, optional, tag = "1")]
    pub(crate) self_link: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(crate) resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(crate) continue_: Option<String>,
    #[prost(int64, optional, tag = "4")]
    pub(crate) remaining_item_count: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct ManagedFieldsEntry {
    #[prost(string, optional, tag = "1")]
    pub(crate) manager: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(crate) operation: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(crate) api_version: Option<String>,
    #[prost(message, optional, tag = "4")]
    pub(crate) time: Option<Timestamp>,
    #[prost(string, optional, tag = "6")]
    pub(crate) fields_type: Option<String>,
    #[prost(message, optional, tag = "7")]
    pub(crate) fields_v1: Option<FieldsV1>,
    #[prost(string, optional, tag = "8")]
    pub(crate) subresource: Option<String>,
}

/// A field set, as the JSON object FieldsV1 is in JSON.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct FieldsV1 {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub(crate) raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    pub(crate) kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(crate) name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(crate) uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub(crate) api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    pub(crate) controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    pub(crate) block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Status {
    #[prost(message, optional, tag = "1")]
    pub(crate) metadata: Option<ListMeta>,
    #[prost(string, optional, tag = "2")]
    pub(crate) status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(crate) message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(crate) reason: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub(crate) details: Option<StatusDetails>,
    #[prost(int32, optional, tag = "6")]
    pub(crate) code: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct StatusDetails {
    #[prost(string, optional, tag = "1")]
    pub(crate) name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(crate) group: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(crate) kind: Option<String>,
    #[prost(message, repeated, tag = "4")]
    pub(crate) causes: Vec<StatusCause>,
    #[prost(int32, optional, tag = "5")]
    pub(crate) retry_after_seconds: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub(crate) uid: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct StatusCause {
    #[prost(string, optional, tag = "1")]
    pub(crate) reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(crate) message: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(crate) field: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct DeleteOptions {
    #[prost(int64, optional, tag = "1")]
    pub(crate) grace_period_seconds: Option<i64>,
    #[prost(message, optional, tag = "2")]
    pub(crate) preconditions: Option<Preconditions>,
    #[prost(bool, optional, tag = "3")]
    pub(crate) orphan_dependents: Option<bool>,
    #[prost(string, optional, tag = "4")]
    pub(crate) propagation_policy: Option<String>,
    #[prost(string, repeated, tag = "5")]
    pub(crate) dry_run: Vec<String>,
    #[prost(bool, optional, tag = "6")]
    pub(crate) ignore_store_read_error_with_cluster_breaking_potential: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Preconditions {
    #[prost(string, optional, tag = "1")]
    pub(crate) uid: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(crate) resource_version: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    pub(crate) r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub(crate) object: Option<RawExtension>,
}

// runtime/generated.proto
#[derive(Clone, PartialEq, Message)]
pub(crate) struct RawExtension {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub(crate) raw: Option<Vec<u8>>,
}
