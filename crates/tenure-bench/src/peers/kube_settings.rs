//! How the bench sets up the Kubernetes peers, the same in its in-process
//! measures and in `tenure-bench-candidate` (which includes this file by
//! path): the Lease in namespace `default`, a lease of the bench's TTL.

use std::time::Duration;

use kube_lease_manager::LeaseManagerBuilder;
use tenure::kube::kube::Client;

/// The namespace of the Leases (the test server's kubeconfig's).
pub const NAMESPACE: &str = "default";

/// kube-lease-manager's grace: a holder renews this long before its lease
/// runs out (whole seconds, less than the duration).
pub const GRACE_SECS: u64 = 1;

/// A kube-lease-manager `LeaseManager` for Lease `key`: duration `ttl` in
/// whole seconds (at least the grace and one), grace [`GRACE_SECS`].
pub fn lease_manager(
    client: &Client,
    key: &str,
    identity: &str,
    ttl: Duration,
) -> LeaseManagerBuilder {
    LeaseManagerBuilder::new(client.clone(), key)
        .with_namespace(NAMESPACE)
        .with_identity(identity)
        .with_duration(ttl.as_secs().max(GRACE_SECS + 1))
        .with_grace(GRACE_SECS)
}

/// kube-coordinate's configuration for Lease `key`: lease_duration `ttl`,
/// renew_deadline 2/3 of it, retry_period 1 s and api_timeout 1 s (the
/// least its validation takes), in the proportions of its defaults (15 s,
/// 10 s, 2 s, 5 s). The SSA manager is shared by the group, as its docs ask.
pub fn coordinate(key: &str, identity: &str, ttl: Duration) -> kube_coordinate::Config {
    kube_coordinate::Config::default()
        .name(key)
        .namespace(NAMESPACE)
        .identity(identity)
        .manager("tenure-bench")
        .lease_duration(ttl)
        .renew_deadline(ttl * 2 / 3)
        .retry_period(Duration::from_secs(1))
        .api_timeout(Duration::from_secs(1))
}
