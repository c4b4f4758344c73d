//! One monotonic clock across processes: `CLOCK_MONOTONIC` in nanoseconds,
//! the clock `std::time::Instant` (and so tokio's) reads on Linux.

use tokio::time::Instant;

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `at` on the shared clock.
pub fn to_ns(at: Instant) -> u64 {
    let (now, ns) = (Instant::now(), now_ns());
    if at >= now {
        ns + (at - now).as_nanos() as u64
    } else {
        ns.saturating_sub((now - at).as_nanos() as u64)
    }
}

/// A reading of the shared clock as a local instant.
pub fn from_ns(ns: u64) -> Instant {
    let (now, here) = (Instant::now(), now_ns());
    if ns >= here {
        now + std::time::Duration::from_nanos(ns - here)
    } else {
        now - std::time::Duration::from_nanos(here - ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_survive_the_round_trip_through_nanoseconds() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let at = Instant::now() + std::time::Duration::from_millis(250);
            let back = from_ns(to_ns(at));
            let err = if back > at { back - at } else { at - back };
            assert!(err < std::time::Duration::from_millis(1), "{err:?}");
        });
    }
}
