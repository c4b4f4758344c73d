//! A stand-in for client-go's `LeaderElector` over a `LeaseLock`
//! (k8s.io/client-go/tools/leaderelection), exactly as strict as client-go:
//! it decides whether the Lease changed by comparing its
//! `LeaderElectionRecord` marshalled to JSON, whose `acquireTime` and
//! `renewTime` are `metav1.Time` and marshal to whole seconds; it judges
//! expiry by its own clock from when it last saw that JSON change (or wrote
//! the Lease itself), with the observed record's leaseDurationSeconds.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::chrono::{DateTime, Utc};
use k8s_openapi::serde_json;
use kube::api::PostParams;
use kube::Api;
use tokio::time::Instant;

/// client-go's `LeaderElectionRecord` (resourcelock/interface.go), the
/// fields in its order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoRecord {
    pub holder_identity: String,
    pub lease_duration_seconds: i32,
    pub acquire_time: Option<DateTime<Utc>>,
    pub renew_time: Option<DateTime<Utc>>,
    pub leader_transitions: i32,
    pub strategy: String,
    pub preferred_holder: String,
}

impl GoRecord {
    /// `LeaseSpecToLeaderElectionRecord` (resourcelock/leaselock.go).
    pub fn of(spec: &LeaseSpec) -> GoRecord {
        GoRecord {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            leader_transitions: spec.lease_transitions.unwrap_or(0),
            strategy: spec.strategy.clone().unwrap_or_default(),
            preferred_holder: spec.preferred_holder.clone().unwrap_or_default(),
        }
    }

    /// `LeaderElectionRecordToLeaseSpec`: the whole spec, as `Update` writes it.
    pub fn to_spec(&self) -> LeaseSpec {
        let nonempty = |s: &String| (!s.is_empty()).then(|| s.clone());
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: Some(MicroTime(self.acquire_time.unwrap_or_default())),
            renew_time: Some(MicroTime(self.renew_time.unwrap_or_default())),
            lease_transitions: Some(self.leader_transitions),
            preferred_holder: nonempty(&self.preferred_holder),
            strategy: nonempty(&self.strategy),
        }
    }

    /// `json.Marshal(record)`, as `LeaseLock.Get` returns it beside the
    /// record: `metav1.Time.MarshalJSON` writes `t.UTC()` in Go's
    /// `time.RFC3339` layout, whole seconds (the fraction is dropped, not
    /// rounded), or `null` for the zero time.
    pub fn raw(&self) -> Vec<u8> {
        let time = |t: &Option<DateTime<Utc>>| match t {
            Some(t) => format!("\"{}\"", t.format("%Y-%m-%dT%H:%M:%SZ")),
            None => "null".to_owned(),
        };
        let text = |s: &str| serde_json::to_string(s).expect("JSON string");
        format!(
            "{{\"holderIdentity\":{},\"leaseDurationSeconds\":{},\"acquireTime\":{},\"renewTime\":{},\"leaderTransitions\":{},\"strategy\":{},\"preferredHolder\":{}}}",
            text(&self.holder_identity),
            self.lease_duration_seconds,
            time(&self.acquire_time),
            time(&self.renew_time),
            self.leader_transitions,
            text(&self.strategy),
            text(&self.preferred_holder),
        )
        .into_bytes()
    }
}

/// A Lease as client-go's LeaseLock writes it: every field of the record set.
pub fn go_lease(name: &str, holder: &str, duration_secs: i32, transitions: i32) -> Lease {
    let now = Utc::now();
    let record = GoRecord {
        holder_identity: holder.to_owned(),
        lease_duration_seconds: duration_secs,
        acquire_time: Some(now),
        renew_time: Some(now),
        leader_transitions: transitions,
        ..Default::default()
    };
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(record.to_spec()),
    }
}

/// What client-go's `LeaderElector` does with a `LeaseLock`, step by step,
/// as leaderelection.go has it: `tryAcquireOrRenew` (the leader's fast
/// path, an optimistic update of the Lease it last read or wrote; else GET,
/// compare the record's JSON with the one it last observed, judge the
/// holder by its own clock, then create or update) and `tryRelease`.
pub struct GoCandidate {
    api: Api<Lease>,
    name: String,
    identity: String,
    /// `LeaseDuration` of its config, in seconds.
    duration_secs: i32,
    /// `LeaseLock.lease`: the Lease as last read or written (its
    /// resourceVersion is the compare-and-swap of the next update).
    lease: Option<Lease>,
    /// `observedRecord`, `observedTime`, `observedRawRecord`.
    observed: GoRecord,
    observed_time: Instant,
    observed_raw: Vec<u8>,
}

impl GoCandidate {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration_secs: i32) -> GoCandidate {
        GoCandidate {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration_secs,
            lease: None,
            observed: GoRecord::default(),
            observed_time: Instant::now(),
            observed_raw: Vec::new(),
        }
    }

    /// Creates the Lease held by this candidate with `transitions`, as a
    /// client-go replica that has led this election before would have left
    /// it (`Lock.Create`, then `setObservedRecord`).
    pub async fn create_held(&mut self, transitions: i32) {
        let lease = go_lease(&self.name, &self.identity, self.duration_secs, transitions);
        let written = self
            .api
            .create(&PostParams::default(), &lease)
            .await
            .expect("create the Lease");
        self.set_observed(GoRecord::of(written.spec.as_ref().expect("a spec")));
        self.lease = Some(written);
    }

    /// The Lease as this candidate last read or wrote it.
    pub fn last(&self) -> &Lease {
        self.lease.as_ref().expect("a Lease read or written")
    }

    /// When it last saw the record change, or wrote it (`observedTime`).
    pub fn observed_time(&self) -> Instant {
        self.observed_time
    }

    /// What `LeaseLock.Get` returns: the record, its JSON, and the Lease
    /// kept for the next update.
    pub async fn get(&mut self) -> kube::Result<Option<(GoRecord, Vec<u8>)>> {
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            return Ok(None);
        };
        let record = GoRecord::of(&lease.spec.clone().unwrap_or_default());
        let raw = record.raw();
        self.lease = Some(lease);
        Ok(Some((record, raw)))
    }

    /// `setObservedRecord`: the record, and now as when it was seen.
    fn set_observed(&mut self, record: GoRecord) {
        self.observed = record;
        self.observed_time = Instant::now();
    }

    /// client-go's `IsLeader`: the observed record names this candidate.
    pub fn is_leader(&self) -> bool {
        self.observed.holder_identity == self.identity
    }

    /// client-go's `isLeaseValid`: observed time + the observed record's
    /// leaseDurationSeconds is still ahead of `now`.
    fn is_lease_valid(&self, now: Instant) -> bool {
        let secs = self.observed.lease_duration_seconds.max(0) as u64;
        self.observed_time + Duration::from_secs(secs) > now
    }

    /// `LeaseLock.Update`: the whole spec from `record`, against the
    /// resourceVersion of the Lease last read or written.
    async fn update(&mut self, record: &GoRecord) -> kube::Result<()> {
        let mut next = self.lease.clone().expect("lease not initialized");
        next.spec = Some(record.to_spec());
        let written = self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await?;
        self.lease = Some(written);
        Ok(())
    }

    /// client-go's `tryAcquireOrRenew`: whether this candidate leads after it.
    pub async fn try_acquire_or_renew(&mut self) -> bool {
        let (now, now_time) = (Utc::now(), Instant::now());
        let mut record = GoRecord {
            holder_identity: self.identity.clone(),
            lease_duration_seconds: self.duration_secs,
            renew_time: Some(now),
            acquire_time: Some(now),
            ..Default::default()
        };

        // 1. The leader's fast path: update what it last observed.
        if self.is_leader() && self.is_lease_valid(now_time) && self.lease.is_some() {
            record.acquire_time = self.observed.acquire_time;
            record.leader_transitions = self.observed.leader_transitions;
            if self.update(&record).await.is_ok() {
                self.set_observed(record);
                return true;
            }
        }

        // 2. Obtain or create the record.
        let (old, old_raw) = match self.get().await {
            Ok(Some(got)) => got,
            Ok(None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(record.to_spec()),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(written) => {
                        self.lease = Some(written);
                        self.set_observed(record);
                        true
                    }
                    Err(_) => false,
                };
            }
            Err(_) => return false,
        };

        // 3. The record changed only if its JSON did.
        if self.observed_raw != old_raw {
            self.set_observed(old.clone());
            self.observed_raw = old_raw;
        }
        if !old.holder_identity.is_empty() && self.is_lease_valid(now_time) && !self.is_leader() {
            return false;
        }

        // 4. Update: a leader keeps its term, anyone else starts one.
        if self.is_leader() {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            record.leader_transitions = old.leader_transitions + 1;
        }
        if self.update(&record).await.is_err() {
            return false;
        }
        self.set_observed(record);
        true
    }

    /// A leader's renewal: `tryAcquireOrRenew` again; whether it still leads.
    pub async fn renew(&mut self) -> bool {
        assert!(self.is_leader(), "only a leader renews");
        self.try_acquire_or_renew().await
    }

    /// client-go's `tryRelease`: if it leads, an empty holder,
    /// leaseDurationSeconds 1, acquire and renew time now, transitions as
    /// read; again on a conflict.
    pub async fn release(&mut self) {
        assert!(self.is_leader(), "client-go releases only while it leads");
        loop {
            let (old, _) = self
                .get()
                .await
                .expect("GET the Lease")
                .expect("the Lease exists");
            let now = Utc::now();
            let record = GoRecord {
                leader_transitions: old.leader_transitions,
                lease_duration_seconds: 1,
                renew_time: Some(now),
                acquire_time: Some(now),
                ..Default::default()
            };
            match self.update(&record).await {
                Ok(()) => {
                    self.set_observed(record);
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => panic!("PUT the released Lease: {e}"),
            }
        }
    }
}
