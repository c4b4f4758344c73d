//! Peers that this bench does not run, each with a row saying why.

use crate::figures::{Figure, Measure};

/// Rows for the peers not measured on `label` (a Kubernetes or ZooKeeper
/// deployment), for hand-over and failover.
pub fn rows(label: &str, kube: bool) -> Vec<Figure> {
    let mut rows = Vec::new();
    for measure in [Measure::Handover, Measure::Failover] {
        if kube {
            rows.push(Figure::missing(
                measure,
                label,
                "kube-lease-manager 0.10",
                "not measured yet: builds against kube 2 / k8s-openapi 0.26 (0.10.0; later releases need kube 5), the adapter was not written in this session",
            ));
            rows.push(Figure::missing(
                measure,
                label,
                "kube-coordinate 2.0.0-rc.0",
                "not measured yet: builds against kube 2, the adapter was not written in this session",
            ));
            rows.push(Figure::missing(
                measure,
                label,
                "client-go leaderelection (documented defaults)",
                match measure {
                    Measure::Handover => "not run (no Go toolchain): with ReleaseOnCancel a standby polls every RetryPeriod 2 s, so 0–2 s",
                    _ => "not run (no Go toolchain): LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s: failover − TTL up to 2 s (one RetryPeriod) at TTL 15 s",
                },
            ));
        } else {
            rows.push(Figure::missing(
                measure,
                label,
                "Curator LeaderLatch 5.4",
                "not measured yet: JDK and libcurator-recipes-java are installed, the Java adapter was not written in this session",
            ));
        }
    }
    rows
}
