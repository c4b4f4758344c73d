//! renewTime as a client-go peer sees it: to the second.
//!
//! client-go's `tryAcquireOrRenew` decides whether a Lease changed by
//! comparing its `LeaderElectionRecord` marshalled to JSON with the one it
//! observed last, and that record's `renewTime` is a `metav1.Time`, which
//! marshals to whole seconds. A renewal whose renewTime falls in the same
//! second as an earlier write of the term is therefore no change to a
//! client-go candidate that saw that earlier write: its expiry still
//! counts from when it saw it, which can be as early as the send of the
//! first write of the term carrying that second. So a renewal's deadline
//! counts from that send, not from its own ([`NewestSecond::sent`]).
//!
//! A renewal in the same second as an answered one would then extend
//! nothing, and the Elector, which schedules the next renewal from the
//! last one's send, would renew again at once, over and over until the
//! second turns. So a renewal waits for the wall clock to leave the second
//! of the newest renewTime it wrote ([`NewestSecond::wait`]) once a write
//! in that second was answered: every renewal lands in a second of its own
//! and counts from its own send. After a write that failed (no answer, a
//! 500) a retry in the same second need not wait: it counts from the
//! failed write's send, the first of that second, which is later than the
//! last answered write's, and whichever of the two landed, a client-go
//! peer sees a change (the failed one's second is not the stored one's,
//! or it landed and the retry counts from it). At the 2 s minimum TTL,
//! where renewals settle just after the turn of each second, waiting for
//! the next second after a failed renewal ran past the lease's end: one
//! failure ended the term. Written renewTimes never
//! go backwards, even when the wall clock does (a record repeated after
//! another would be no change to a peer that missed the one between); a
//! clock stepped back further than the lease's deadline allows waiting for
//! ends the term instead.
//!
//! The cost: a lease must outlive one whole second plus a renewal's round
//! trip, so the backend's minimum TTL is 2 s. At 1 s, no holder could keep
//! a lease that client-go peers respect: each second's first write would
//! have to come earlier in its second than the one before.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::chrono::{DateTime, SubsecRound, Utc};
use tokio::time::Instant;

/// The newest renewTime a term has sent (answered or not), and when the
/// first write carrying its second was sent.
#[derive(Debug)]
pub(crate) struct NewestSecond {
    at: DateTime<Utc>,
    first_sent: Instant,
    /// Whether a write carrying `at`'s second was answered (written).
    answered: bool,
}

impl NewestSecond {
    /// The term begun by `written`, whose granting write was sent at `sent_at`.
    pub fn granted(written: &Lease, sent_at: Instant) -> NewestSecond {
        let at = written
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map_or_else(Utc::now, |t| t.0);
        NewestSecond {
            at,
            first_sent: sent_at,
            answered: true,
        }
    }

    /// How long until the wall clock has left the second of the newest
    /// renewTime (zero if it has, or if no write in that second was
    /// answered: a retry counts from the first of them all the same).
    pub fn wait(&self) -> Duration {
        if !self.answered {
            return Duration::ZERO;
        }
        let next_second = self.at.trunc_subsecs(0) + k8s_openapi::chrono::TimeDelta::seconds(1);
        (next_second - Utc::now()).to_std().unwrap_or_default()
    }

    /// The renewTime of a write about to be sent: now, to the microsecond
    /// the API keeps, but never before the newest one.
    pub fn next(&self) -> MicroTime {
        MicroTime(Utc::now().trunc_subsecs(6).max(self.at))
    }

    /// A write carrying `renew_time` ([`next`](Self::next)) is sent at
    /// `sent_at`: returns the instant its deadline counts from, the send
    /// of the first write of the term in the same second.
    pub fn sent(&mut self, renew_time: &MicroTime, sent_at: Instant) -> Instant {
        if renew_time.0.timestamp() != self.at.timestamp() {
            self.first_sent = sent_at;
            self.answered = false;
        }
        self.at = self.at.max(renew_time.0);
        self.first_sent
    }

    /// The write [`sent`](Self::sent) last was answered: written.
    pub fn answered(&mut self) {
        self.answered = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::chrono::TimeDelta;

    fn granted_at(at: DateTime<Utc>, sent_at: Instant) -> NewestSecond {
        let lease = Lease {
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(at)),
                ..Default::default()
            }),
            ..Default::default()
        };
        NewestSecond::granted(&lease, sent_at)
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_in_the_same_second_counts_from_the_first_write_of_that_second() {
        let second: DateTime<Utc> = "2030-01-01T00:00:00Z".parse().unwrap();
        let t0 = Instant::now();
        let mut newest = granted_at(second + TimeDelta::milliseconds(50), t0);
        let later = t0 + Duration::from_millis(650);
        let same = MicroTime(second + TimeDelta::milliseconds(700));
        assert_eq!(newest.sent(&same, later), t0);
        let next = MicroTime(second + TimeDelta::milliseconds(1_010));
        let then = t0 + Duration::from_millis(960);
        assert_eq!(newest.sent(&next, then), then);
        let again = MicroTime(second + TimeDelta::milliseconds(1_500));
        assert_eq!(newest.sent(&again, then + Duration::from_millis(490)), then);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_a_failed_write_goes_at_once_and_counts_from_the_failed_send() {
        let t0 = Instant::now();
        let mut newest = granted_at(Utc::now() - TimeDelta::seconds(1), t0);
        assert_eq!(newest.wait(), Duration::ZERO);
        // A write in a second of its own (ahead, so that the wall clock
        // cannot leave it during the test) fails.
        let failed = MicroTime(Utc::now() + TimeDelta::seconds(30));
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(newest.sent(&failed, t1), t1);
        // Not answered: the retry need not wait, and counts from the failed send.
        assert_eq!(newest.wait(), Duration::ZERO);
        let retry = newest.next();
        assert_eq!(retry.0.timestamp(), failed.0.timestamp());
        assert_eq!(newest.sent(&retry, t1 + Duration::from_millis(5)), t1);
        newest.answered();
        assert!(
            newest.wait() > Duration::from_secs(29),
            "renewed twice in a second once answered"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renew_time_never_goes_back_and_a_later_one_waits_for_the_next_second() {
        let ahead = Utc::now() + TimeDelta::seconds(30);
        let newest = granted_at(ahead, Instant::now());
        assert_eq!(
            newest.next().0,
            ahead,
            "wrote a renewTime before the newest"
        );
        assert!(newest.wait() > Duration::from_secs(29));
        let behind = granted_at(Utc::now() - TimeDelta::seconds(2), Instant::now());
        assert_eq!(behind.wait(), Duration::ZERO);
        assert!(behind.next().0 > behind.at);
    }
}
