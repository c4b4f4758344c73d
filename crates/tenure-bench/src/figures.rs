//! What the bench measured: one [`Figure`] per measure, server and system.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The measures, in the order BENCHMARKS.md shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Uncontended acquire, one attempt on a free key.
    Acquire,
    /// One renewal of a held lease.
    Renew,
    /// The leader resigns → the waiting standby's campaign returns.
    Handover,
    /// The leader's process is SIGKILLed → a standby leads; less the TTL.
    Failover,
    /// Server writes and requests per leadership change, with waiters.
    Herd,
    /// Many keys led by one process over one connection.
    Scale,
}

/// The system name of a server's floor row: the minimal sequence of
/// requests the protocol needs for a graceful hand-over, timed with raw
/// clients (see `floor.rs`).
pub const FLOOR: &str = "floor";

/// One row of one table.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Figure {
    /// Which table.
    pub measure: Option<Measure>,
    /// The deployment: `etcd 1-node`, `memory`, ...
    pub server: String,
    /// `tenure` or the peer's name.
    pub system: String,
    /// Latency percentiles, in milliseconds.
    pub p50_ms: Option<f64>,
    /// The 99th percentile, in milliseconds.
    pub p99_ms: Option<f64>,
    /// How many samples or trials the percentiles are over.
    pub samples: usize,
    /// Herd: waiting candidates.
    pub waiters: Option<usize>,
    /// Herd: server writes per leadership change.
    pub writes_per_change: Option<f64>,
    /// Herd: server requests (and notifications, where counted) per change.
    pub requests_per_change: Option<f64>,
    /// Scale: keys led.
    pub keys: Option<usize>,
    /// Scale: CPU time over wall time, percent of one core.
    pub cpu_percent: Option<f64>,
    /// Scale: peak resident set (VmHWM), MiB.
    pub rss_mib: Option<f64>,
    /// Failover: the TTL subtracted, in milliseconds.
    pub ttl_ms: Option<f64>,
    /// Why a figure is missing, or what to know about it.
    pub note: String,
}

impl Figure {
    /// An empty row for `measure` on `server` by `system`.
    pub fn new(measure: Measure, server: &str, system: &str) -> Figure {
        Figure {
            measure: Some(measure),
            server: server.to_owned(),
            system: system.to_owned(),
            ..Figure::default()
        }
    }

    /// A row that says why there is no figure.
    pub fn missing(measure: Measure, server: &str, system: &str, why: impl Into<String>) -> Figure {
        Figure {
            note: why.into(),
            ..Figure::new(measure, server, system)
        }
    }

    /// A latency row from samples.
    pub fn latency(measure: Measure, server: &str, system: &str, samples: &[Duration]) -> Figure {
        let mut f = Figure::new(measure, server, system);
        f.set_latency(samples);
        f
    }

    /// A crash-failover row from stop-to-lead times: each less the `ttl`
    /// the standby had to wait out, which the row records.
    pub fn failover(server: &str, system: &str, samples: &[Duration], ttl: Duration) -> Figure {
        let mut f = Figure::new(Measure::Failover, server, system);
        let less_ttl: Vec<f64> = samples
            .iter()
            .map(|d| (d.as_secs_f64() - ttl.as_secs_f64()) * 1000.0)
            .collect();
        f.set_ms(&less_ttl);
        f.ttl_ms = Some(ttl.as_secs_f64() * 1000.0);
        f
    }

    /// Fills in p50 and p99 from `samples` (nearest rank).
    pub fn set_latency(&mut self, samples: &[Duration]) {
        let ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        self.set_ms(&ms);
    }

    /// Fills in p50 and p99 from values in milliseconds, which may be
    /// negative (failover − TTL).
    pub fn set_ms(&mut self, values: &[f64]) {
        self.samples = values.len();
        self.p50_ms = percentile_ms(values, 50.0);
        self.p99_ms = percentile_ms(values, 99.0);
    }

    /// Adds a note (`; `-separated).
    pub fn with_note(mut self, note: impl AsRef<str>) -> Figure {
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(note.as_ref());
        self
    }
}

/// The `p`th percentile of `samples` in milliseconds (nearest rank), `None` if empty.
#[cfg(test)]
pub fn percentile(samples: &[Duration], p: f64) -> Option<f64> {
    let ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    percentile_ms(&ms, p)
}

/// The `p`th percentile of `values` (nearest rank), `None` if empty.
pub fn percentile_ms(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Some(50.0));
        assert_eq!(percentile(&samples, 99.0), Some(99.0));
        assert_eq!(percentile(&samples[..1], 99.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
