//! Peers that this bench does not run, each with a row saying why.

use crate::figures::{Figure, Measure};

/// Rows for the peers not measured on `label` (a Kubernetes deployment),
/// for hand-over and failover.
pub fn rows(label: &str) -> Vec<Figure> {
    let mut rows = Vec::new();
    for measure in [Measure::Handover, Measure::Failover] {
        rows.push(Figure::missing(
            measure,
            label,
            "client-go leaderelection (documented defaults)",
            match measure {
                Measure::Handover => "not run (no Go toolchain): with ReleaseOnCancel a standby notices on its next try; client-go tries every RetryPeriod (2 s) stretched by up to JitterFactor 1.2 (wait.JitterUntil), so 2–4.4 s apart: 0–4.4 s",
                _ => "not run (no Go toolchain): LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s: a standby takes over on its first try after the 15 s lease runs out, its tries 2–4.4 s apart (RetryPeriod with JitterFactor 1.2): up to 4.4 s after",
            },
        ));
    }
    rows
}
