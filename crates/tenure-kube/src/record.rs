//! client-go's LeaseLock field use: holderIdentity, leaseDurationSeconds,
//! acquireTime, renewTime (MicroTime), leaseTransitions.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::chrono::Utc;

/// The election record in a Lease, as client-go reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub holder: String,
    pub duration: Duration,
    pub transitions: i32,
    pub resource_version: String,
}

impl Record {
    pub fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            transitions: spec.lease_transitions.unwrap_or(0),
            resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

fn now() -> MicroTime {
    MicroTime(Utc::now())
}

/// Whole seconds of a TTL (the backend allows only whole seconds).
pub(crate) fn seconds(ttl: Duration) -> i32 {
    ttl.as_secs().min(i32::MAX as u64) as i32
}

/// A new Lease held by `holder`, as client-go creates one.
pub(crate) fn new_lease(name: &str, holder: &str, ttl: Duration) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(seconds(ttl)),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

/// `observed` taken over by `holder`: transitions bumped on every new grant.
pub(crate) fn granted(observed: &Lease, holder: &str, ttl: Duration) -> Lease {
    let mut lease = observed.clone();
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(holder.to_owned());
    spec.lease_duration_seconds = Some(seconds(ttl));
    spec.acquire_time = Some(now());
    spec.renew_time = Some(now());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    lease
}

/// `observed` renewed: only renewTime moves.
pub(crate) fn renewed(observed: &Lease) -> Lease {
    let mut lease = observed.clone();
    lease.spec.get_or_insert_with(Default::default).renew_time = Some(now());
    lease
}

/// `observed` released as client-go does it: empty holder and a valid
/// leaseDurationSeconds of 1 (0 is refused with 422, kubernetes#88194).
pub(crate) fn released(observed: &Lease) -> Lease {
    let mut lease = observed.clone();
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(now());
    spec.renew_time = Some(now());
    lease
}
