//! client-go's LeaseLock field use: holderIdentity, leaseDurationSeconds,
//! acquireTime, renewTime (MicroTime), leaseTransitions; and what tells one
//! holder's term from another's.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::chrono::{SecondsFormat, SubsecRound, Utc};
use tokio::time::Instant;

/// The election record in a Lease, as client-go reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub holder: String,
    pub duration: Duration,
    pub transitions: i32,
    pub resource_version: String,
}

/// What tells one holder's term of a Lease from another's: who holds it,
/// since when (acquireTime, set on every grant, by tenure and client-go
/// alike) and after how many transitions. Renewals keep it; a take-over,
/// even by the same identity, changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    holder: String,
    acquired: String,
    transitions: i32,
}

impl Term {
    pub fn of(lease: &Lease) -> Term {
        let spec = lease.spec.as_ref();
        Term {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            // As the API carries it: RFC 3339 with microseconds.
            acquired: spec
                .and_then(|s| s.acquire_time.as_ref())
                .map(|t| t.0.to_rfc3339_opts(SecondsFormat::Micros, true))
                .unwrap_or_default(),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
        }
    }

    /// `<leaseTransitions>/<acquireTime>/<holder>`, as the term annotation holds it.
    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.transitions, self.acquired, self.holder)
    }
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

/// Now, to the microsecond the API keeps, so that a term read back equals
/// the term written.
fn now() -> MicroTime {
    MicroTime(Utc::now().trunc_subsecs(6))
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

/// A new Lease held by nobody, as a release leaves one: tenure creates a
/// Lease free and then takes it over with a compare-and-swap, so that even
/// the first grant has a resourceVersion to derive its token from.
pub(crate) fn vacant(name: &str) -> Lease {
    released(&Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            lease_transitions: Some(0),
            ..Default::default()
        }),
    })
}

/// `lease` without `metadata.managedFields`, as tenure keeps and sends a
/// Lease. kube-apiserver keeps the ownership it has when an update carries
/// none (nil or absent, not `[]`, which would reset it:
/// managedfields/internal/fieldmanager.go, decodeLiveOrNew), and records
/// the update as ours; parsing, keeping and sending the entries back on
/// every renewal would cost time and bytes for nothing.
pub(crate) fn trimmed(mut lease: Lease) -> Lease {
    lease.metadata.managed_fields = None;
    lease
}

/// `observed` taken over by `holder`: transitions bumped on every new grant.
pub(crate) fn granted(observed: &Lease, holder: &str, ttl: Duration) -> Lease {
    let mut lease = trimmed(observed.clone());
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(holder.to_owned());
    spec.lease_duration_seconds = Some(seconds(ttl));
    spec.acquire_time = Some(now());
    spec.renew_time = Some(now());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    lease
}

/// `observed` renewed at `renew_time` with `ttl`: renewTime moves, and
/// leaseDurationSeconds is written again, as client-go does with every
/// renewal, so that another writer's duration does not outlive it.
pub(crate) fn renewed(observed: &Lease, renew_time: MicroTime, ttl: Duration) -> Lease {
    let mut lease = trimmed(observed.clone());
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.renew_time = Some(renew_time);
    spec.lease_duration_seconds = Some(seconds(ttl));
    lease
}

/// The instant a deadline of `ttl` counts from for a write sent at `from`
/// that stored `written`: `from`, or earlier by as much as the stored
/// leaseDurationSeconds falls short of `ttl` (a server that stores less
/// than was sent), so the deadline never passes what the stored record
/// grants. `None`: so far back that no deadline is left.
pub(crate) fn counted_from(from: Instant, ttl: Duration, written: &Lease) -> Option<Instant> {
    let stored = Duration::from_secs(Record::of(written).duration.as_secs());
    from.checked_sub(ttl.saturating_sub(stored))
}

/// `observed` released as client-go does it: empty holder and a valid
/// leaseDurationSeconds of 1 (0 is refused with 422, kubernetes#88194).
pub(crate) fn released(observed: &Lease) -> Lease {
    let mut lease = trimmed(observed.clone());
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(now());
    spec.renew_time = Some(now());
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_deadline_counts_no_further_than_the_stored_duration_grants() {
        let (from, ttl) = (Instant::now(), Duration::from_secs(5));
        let mut written = new_lease("a", "x", ttl);
        assert_eq!(counted_from(from, ttl, &written), Some(from));
        written.spec.as_mut().unwrap().lease_duration_seconds = Some(2);
        assert_eq!(
            counted_from(from, ttl, &written),
            Some(from - Duration::from_secs(3))
        );
        let renewed = renewed(&written, now(), ttl);
        assert_eq!(renewed.spec.unwrap().lease_duration_seconds, Some(5));
    }
}
