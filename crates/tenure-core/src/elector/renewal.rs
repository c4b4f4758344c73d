//! The renewer: keeps one lease alive, and gives it up at its deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::{sleep_until, timeout, Instant};

use super::health::Reporter;
use super::planted::ElectorBug;
use super::term::{StepDown, TermShared};
use super::Settings;
use crate::backoff::{jittered, Backoff};
use crate::{Error, Lease, LeaseBackend, LossReason, Result};

/// Renews `lease` every `renew_interval` (jittered) counted from the send time
/// of the last successful renewal, retries failures with back-off, and ends
/// the term exactly at `valid_until` if no renewal succeeded by then.
pub(crate) async fn renew_until_lost(
    backend: Arc<dyn LeaseBackend>,
    mut lease: Lease,
    settings: Arc<Settings>,
    term: Arc<TermShared>,
    mut step_down: oneshot::Receiver<StepDown>,
    mut shutdown: watch::Receiver<bool>,
    reporter: Arc<Reporter>,
) {
    let key = lease.key().as_str().to_owned();
    let identity = lease.holder().as_str().to_owned();
    let token = lease.token().map(|t| t.get());
    let mut retry = Backoff::new(Duration::from_millis(10), interval(&lease, &settings) / 4);
    if settings.planted.is(ElectorBug::BackoffWithoutJitter) {
        retry = retry.without_jitter();
    }
    let mut next = next_renewal(&lease, &settings);
    loop {
        let deadline = settings.planted.deadline(lease.valid_until());
        let attempt = async {
            sleep_until(next).await;
            let started = Instant::now();
            let renewed = backend.renew(&lease).await;
            (renewed, started.elapsed())
        };
        tokio::select! {
            biased;
            request = &mut step_down => {
                // Any renewal in flight is cancelled here; the backend's release
                // copes with that (contract, point 8).
                let reply = request.ok().map(|r| r.reply);
                let planted = settings.planted.is(ElectorBug::ReleaseBeforeEnd);
                if !planted {
                    term.end(LossReason::Resigned);
                }
                let result = release(&*backend, &lease, &settings).await;
                term.end(LossReason::Resigned);
                match &result {
                    Ok(()) => tracing::info!(key, identity, token, "resigned"),
                    Err(error) => {
                        reporter.error("release", Arc::new(error.duplicate()));
                        tracing::warn!(key, identity, token, %error, "resigned; release failed, the lease will expire");
                    }
                }
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
                return;
            }
            _ = super::shut_down(&mut shutdown) => {
                if !settings.planted.is(ElectorBug::ReleaseBeforeEnd) {
                    term.end(LossReason::Shutdown);
                }
                // A term `run` leads: its work is cancelled before the
                // release lets anyone else lead.
                term.work_dropped(deadline).await;
                match release(&*backend, &lease, &settings).await {
                    Ok(()) => tracing::info!(key, identity, token, "resigned at shutdown"),
                    Err(error) => {
                        let error = Arc::new(error);
                        reporter.error("release", error.clone());
                        tracing::warn!(key, identity, token, %error, "resigned at shutdown; release failed, the lease will expire");
                    }
                }
                term.end(LossReason::Shutdown);
                return;
            }
            reason = lease.loss_signalled() => {
                // The backend saw our record deleted or taken (it watches
                // it): the term ends now, not at the next renewal.
                if term.end(reason) {
                    reporter.error("watch", Arc::new(Error::lease_lost(&key, reason)));
                    tracing::info!(key, identity, token, reason = reason.as_str(), "leadership lost: the backend saw our record go");
                }
                // Free whatever is still ours (an etcd lease outlives its key).
                let _ = release(&*backend, &lease, &settings).await;
                return;
            }
            _ = sleep_until(deadline + settings.planted.renewal_accepted_late()) => {
                if term.end(LossReason::Expired) {
                    // A renewal still in flight, never answered, counts too.
                    reporter.error("renew", Arc::new(Error::Timeout {
                        operation: "renew",
                        after: deadline.saturating_duration_since(lease.sent_at()),
                    }));
                    tracing::info!(key, identity, token, "leadership lost: no renewal succeeded before the local deadline");
                }
                // A term `run` leads: its work is dropped before the release
                // lets anyone else lead (`run`'s task sees the loss in its
                // own time; this one may be polled first). Waiting at most a
                // TTL: by then the servers have let the key go by themselves
                // unless a late renewal reached them, and the work is one
                // that does not yield.
                term.work_dropped(Instant::now() + lease.ttl()).await;
                // Free the key in case a late renewal did reach the backend.
                let _ = release(&*backend, &lease, &settings).await;
                return;
            }
            (renewed, took) = attempt => match renewed {
                Ok(renewed) => {
                    let renewed = match settings.planted.is(ElectorBug::RenewFromAnswer) {
                        // The planted bug: the deadline counts from the answer.
                        true => renewed.renewed(Instant::now(), renewed.handle().clone()),
                        false => renewed,
                    };
                    reporter.renewal(took, Ok(renewed.sent_at()));
                    lease = renewed;
                    retry.reset();
                    let valid_until = settings.planted.deadline(lease.valid_until());
                    term.status.send_modify(|s| s.valid_until = s.valid_until.max(valid_until));
                    tracing::debug!(key, identity, token, "renewed");
                    next = next_renewal(&lease, &settings);
                }
                Err(error @ Error::LeaseLost { reason, .. }) => {
                    let error = Arc::new(error);
                    reporter.renewal(took, Err(error.clone()));
                    if term.end(reason) {
                        tracing::info!(key, identity, token, reason = reason.as_str(), %error, "leadership lost");
                    }
                    return;
                }
                Err(error) => {
                    let error = Arc::new(error);
                    reporter.renewal(took, Err(error.clone()));
                    let delay = retry.next_delay();
                    tracing::warn!(key, identity, token, %error, retry_in = ?delay, "renewal failed");
                    next = Instant::now() + delay;
                }
            }
        }
    }
}

/// The renewal interval: the user's, or a third of what the backend lets a
/// lease live, TTL/3 less a third of the backend's expiry lead. A server
/// that stops answering just before a renewal then leaves about two thirds
/// of the lease's life for the client to notice and renew through another
/// (ZooKeeper, whose lead is about 0.37 TTL, needs that: tenure-zookeeper's
/// connection timeout is sized for it).
fn interval(lease: &Lease, settings: &Settings) -> Duration {
    settings
        .renew_interval
        .unwrap_or_else(|| settings.ttl.saturating_sub(lease.expiry_lead()) / 3)
        .max(Duration::from_millis(1))
}

fn next_renewal(lease: &Lease, settings: &Settings) -> Instant {
    // Jitter never pushes a renewal past halfway between the interval and the
    // deadline; and where a backend's expiry lead leaves a lease valid for no
    // longer than the interval, the renewal goes out halfway to the deadline.
    let interval = interval(lease, settings);
    let window = lease.valid_until() - lease.sent_at();
    let latest = match window.checked_sub(interval) {
        Some(spare) if !spare.is_zero() => interval + spare / 2,
        _ => window / 2,
    };
    if settings.align_renewals {
        return on_grid(lease.sent_at() + interval.min(latest), interval);
    }
    lease.sent_at() + jittered(interval, settings.renew_jitter).min(latest)
}

/// The last point at or before `due` of a grid `period` (the renewal
/// interval) apart, shared by every elector of the process (it starts when
/// the first one asks): terms whose renewals fall due within one interval
/// of each other renew at the same instant, and a backend that batches
/// renewals sends them as one request. A term's first renewal comes up to
/// an interval early (never before its grant's send); from then on, a
/// renewal sent a moment after a grid point falls due a moment after the
/// next, and renews on it: once an interval, together.
fn on_grid(due: Instant, period: Duration) -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    if period < Duration::from_millis(1) {
        return due;
    }
    // A simulation gives each of its worlds a grid of its own.
    let epoch = crate::simulation::grid_epoch().unwrap_or_else(|| *EPOCH.get_or_init(Instant::now));
    let since = due.saturating_duration_since(epoch).as_nanos();
    let on_grid = since - since % period.as_nanos();
    epoch + Duration::from_nanos(u64::try_from(on_grid).unwrap_or(u64::MAX))
}

/// Releases, retrying transient failures for at most one TTL: by then the
/// backend has expired the lease by itself, and the standby leads anyway.
pub(crate) async fn release(
    backend: &dyn LeaseBackend,
    lease: &Lease,
    settings: &Settings,
) -> Result<()> {
    let give_up = Instant::now() + settings.ttl;
    let mut backoff = Backoff::new(Duration::from_millis(10), settings.ttl / 4);
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        match timeout(left, backend.release(lease)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) if error.is_retryable() => {
                let delay = backoff.next_delay();
                if Instant::now() + delay >= give_up {
                    return Err(error);
                }
                tracing::debug!(key = %lease.key(), %error, retry_in = ?delay, "release failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Ok(Err(error)) => return Err(error),
            Err(_) => {
                return Err(crate::Error::Timeout {
                    operation: "release",
                    after: settings.ttl,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Candidacy, CandidateId, ElectionKey, LeaseHandle, RenewOn};

    fn settings(interval_ms: u64) -> Settings {
        Settings {
            ttl: Duration::from_secs(3),
            renew_interval: Some(Duration::from_millis(interval_ms)),
            renew_jitter: 0.1,
            align_renewals: false,
            retry_min: Duration::from_millis(10),
            retry_max: Duration::from_millis(100),
            renew_on: RenewOn::CurrentRuntime,
            planted: Default::default(),
        }
    }

    fn lease(lead_ms: u64) -> Lease {
        lease_sent(Instant::now()).with_expiry_lead(Duration::from_millis(lead_ms))
    }

    fn lease_sent(at: Instant) -> Lease {
        let candidacy = Candidacy::with_drift_margin(
            ElectionKey::new("k").unwrap(),
            CandidateId::new("a").unwrap(),
            Duration::from_secs(3),
            Duration::ZERO,
        )
        .unwrap();
        Lease::new(candidacy, None, at, LeaseHandle::new(()))
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_come_before_the_deadline_whatever_the_expiry_lead() {
        // Valid 3 s, 2 s, 1 s, 0.6 s after the send; interval 1 s, jitter 10 %.
        for (lead, earliest, latest) in [
            (0, 900, 1100),
            (1000, 900, 1100),
            (2000, 500, 500),
            (2400, 300, 300),
        ] {
            let lease = lease(lead);
            for _ in 0..50 {
                let at = next_renewal(&lease, &settings(1000)) - lease.sent_at();
                assert!(
                    at >= Duration::from_millis(earliest) && at <= Duration::from_millis(latest),
                    "lead {lead} ms: renewal {at:?} after the send"
                );
                assert!(lease.sent_at() + at < lease.valid_until());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn by_default_three_renewals_fit_in_what_the_backend_allows() {
        // TTL 3 s: the backend's expiry lead 0, 1.2 s, 2.4 s; jitter 10 %.
        let default = || Settings {
            renew_interval: None,
            ..settings(1)
        };
        for (lead, expected) in [(0, 1000), (1200, 600), (2400, 200)] {
            let lease = lease(lead);
            assert_eq!(
                interval(&lease, &default()),
                Duration::from_millis(expected)
            );
            for _ in 0..50 {
                let at = next_renewal(&lease, &default()) - lease.sent_at();
                let (lo, hi) = (expected * 9 / 10, expected * 11 / 10);
                assert!(
                    at >= Duration::from_millis(lo) && at <= Duration::from_millis(hi),
                    "lead {lead} ms: renewal {at:?} after the send"
                );
            }
        }
        // An interval the user set is kept, whatever the lead.
        assert_eq!(
            interval(&lease(2000), &settings(700)),
            Duration::from_millis(700)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_batching_backend_terms_of_one_ttl_renew_together() {
        let aligned = || Settings {
            align_renewals: true,
            ..settings(1000)
        };
        // Leases granted at scattered instants: each renews at most an
        // interval early, never before its send, at an instant of the
        // shared grid.
        let mut firsts = Vec::new();
        for offset in [0, 130, 480, 499, 777] {
            tokio::time::advance(Duration::from_millis(offset)).await;
            let lease = lease(0);
            let at = next_renewal(&lease, &aligned());
            let early = lease.sent_at() + Duration::from_secs(1) - at;
            assert!(
                early < Duration::from_secs(1) && at >= lease.sent_at(),
                "renewal {early:?} early"
            );
            firsts.push(at);
        }
        // Renewed on the grid (each sent a moment after its grid instant),
        // each falls due again one interval on.
        let next: Vec<Instant> = firsts
            .iter()
            .map(|at| next_renewal(&lease_sent(*at + Duration::from_millis(2)), &aligned()))
            .collect();
        for (first, then) in firsts.iter().zip(&next) {
            assert_eq!(*then - *first, Duration::from_secs(1));
        }
        // All on one grid of an interval: at each of its instants, every
        // term renews at once.
        for then in &next {
            let apart = then.duration_since(next[0]).as_millis();
            assert_eq!(apart % 1000, 0, "{apart} ms from the first is off the grid");
        }
    }
}
