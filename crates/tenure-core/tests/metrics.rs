//! Health and metrics: what an elector reports, through the `metrics`
//! facade (a recorder installed for this test binary alone) and `health()`.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::elector;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use tenure_core::{Error, LossReason, MemoryBackend};

const TTL: Duration = Duration::from_secs(2);

/// A recorder that keeps every metric as it stands (counters add up,
/// gauges keep their last value, histograms every sample).
#[derive(Clone)]
struct Seen(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for Seen {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

fn matches(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
    key.name() == name
        && labels
            .iter()
            .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
}

impl Seen {
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0
            .get_gauge_handles()
            .into_iter()
            .find(|(key, _)| matches(key, name, labels))
            .map(|(_, g)| f64::from_bits(g.load(Ordering::SeqCst)))
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.0
            .get_counter_handles()
            .into_iter()
            .filter(|(key, _)| matches(key, name, labels))
            .map(|(_, c)| c.load(Ordering::SeqCst))
            .sum()
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.0
            .get_histogram_handles()
            .into_iter()
            .filter(|(key, _)| matches(key, name, labels))
            .map(|(_, h)| h.data().len())
            .sum()
    }
}

#[tokio::test(start_paused = true)]
async fn an_elector_reports_terms_renewals_errors_and_losses() {
    let seen = Seen(Arc::new(Registry::atomic()));
    metrics::set_global_recorder(seen.clone()).expect("the only recorder of this binary");

    let server = MemoryBackend::new();
    let client = server.client();
    let a = elector(&client, "a", TTL);
    let me = [("key", "billing"), ("identity", "a")];
    assert!(a.health().last_error.is_none());

    let leadership = a.campaign().await.unwrap();
    assert_eq!(seen.gauge("tenure_is_leader", &me), Some(1.0));
    assert_eq!(seen.counter("tenure_terms_total", &me), 1);
    assert!(
        seen.gauge("tenure_last_renewal_timestamp_seconds", &me)
            .unwrap()
            > 1.6e9
    );

    // Two renewals' worth of time: the histogram has their round trips.
    tokio::time::sleep(TTL).await;
    let ok = [me[0], me[1], ("outcome", "ok")];
    assert!(seen.samples("tenure_renew_duration_seconds", &ok) >= 2);
    assert!(a.health().since_last_renewal.unwrap() < TTL);

    // Calls fail: renewals fail until the deadline, and the term expires.
    client.faults().fail_calls(true);
    leadership.lost().await;
    tokio::task::yield_now().await;
    assert_eq!(seen.gauge("tenure_is_leader", &me), Some(0.0));
    let expired = [me[0], me[1], ("reason", "expired")];
    assert_eq!(seen.counter("tenure_terms_ended_total", &expired), 1);
    let failed = [me[0], me[1], ("outcome", "error")];
    assert!(seen.samples("tenure_renew_duration_seconds", &failed) >= 1);
    let renew_errors = [me[0], me[1], ("operation", "renew")];
    assert!(seen.counter("tenure_backend_errors_total", &renew_errors) >= 1);
    let health = a.health();
    // The last error is the error itself: the renewals' retries ran out at
    // the deadline.
    let (error, _) = health.last_error.expect("the failed renewals");
    assert!(
        matches!(
            *error,
            Error::Timeout {
                operation: "renew",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        health.last_loss.map(|(reason, _)| reason),
        Some(LossReason::Expired)
    );
    drop(leadership);

    // Cut off (calls hang): the renewal in flight at the deadline counts as
    // an error too.
    client.faults().fail_calls(false);
    let leadership = a.campaign().await.unwrap();
    client.faults().cut_off();
    leadership.lost().await;
    tokio::task::yield_now().await;
    let (error, _) = a.health().last_error.expect("the unanswered renewal");
    assert!(
        matches!(
            *error,
            Error::Timeout {
                operation: "renew",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(seen.counter("tenure_terms_ended_total", &expired), 2);
    drop(leadership);
    client.faults().heal();

    // Healed: a new term, then a resignation.
    let leadership = a.campaign().await.unwrap();
    assert_eq!(seen.gauge("tenure_is_leader", &me), Some(1.0));
    assert_eq!(seen.counter("tenure_terms_total", &me), 3);
    leadership.resign().await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(seen.gauge("tenure_is_leader", &me), Some(0.0));
    let resigned = [me[0], me[1], ("reason", "resigned")];
    assert_eq!(seen.counter("tenure_terms_ended_total", &resigned), 1);
    assert_eq!(
        a.health().last_loss.map(|(reason, _)| reason),
        Some(LossReason::Resigned)
    );

    // A backend's warnings (told through the candidacy it was handed, as
    // a Redis renewal that took back a master does) are counted.
    assert_eq!(a.health().warnings, 0);
    a.candidacy().warning("renew", "master 0 had lost the key");
    a.candidacy()
        .clone()
        .warning("watch", "the server refused the watch");
    let health = a.health();
    assert_eq!(health.warnings, 2);
    let (last, _) = health.last_warning.expect("the last warning");
    assert_eq!(
        (last.operation, last.message.as_str()),
        ("watch", "the server refused the watch")
    );
    let renew = [me[0], me[1], ("operation", "renew")];
    assert_eq!(seen.counter("tenure_backend_warnings_total", &renew), 1);
    // A candidacy of its own (no elector) tells nobody, and is equal to
    // the elector's.
    let bare = tenure_core::Candidacy::with_drift_margin(
        a.candidacy().key().clone(),
        a.candidacy().identity().clone(),
        a.candidacy().ttl(),
        a.candidacy().drift_margin(),
    )
    .unwrap();
    bare.warning("renew", "nobody hears this");
    assert_eq!(&bare, a.candidacy());
    assert_eq!(a.health().warnings, 2);
}
