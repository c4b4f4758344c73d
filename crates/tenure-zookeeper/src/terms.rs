//! The session timeout a session's servers grant it, and the leases that
//! count on it.
//!
//! Every lease counts its `valid_until` from the session timeout tenure
//! asked for. That holds only while no server gives the session less: a
//! server whose `maxSessionTimeout` is lower (servers with different
//! `tickTime`s, or a rolling config change) gives a session that reconnects
//! to it its own maximum, and expires it that much sooner. The
//! [relay](crate::relay) reports what every server grants at every
//! (re)connect ([`Terms::granted`]); the first grant below the timeout asked
//! for fires the loss signal of every lease that counts on the session, and
//! of any granted later, and the session closes itself (see
//! [`Session`](crate::session::Session)).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_core::{LossReason, LossSignal};
use tokio::sync::watch;

/// A server gave the session less than asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shrink {
    /// The server, as the connect string names it.
    pub server: Arc<str>,
    /// What it gave.
    pub negotiated: Duration,
}

/// What the servers granted one session, and who counts on it.
#[derive(Debug)]
pub(crate) struct Terms {
    requested: Duration,
    state: Mutex<State>,
    shrunk: watch::Sender<Option<Shrink>>,
}

#[derive(Debug, Default)]
struct State {
    /// The server that answered the session's last connect, and what it gave.
    last: Option<(Arc<str>, Duration)>,
    /// The loss signals of the leases counting on the session.
    leases: HashMap<u64, LossSignal>,
    next: u64,
}

impl Terms {
    /// The terms of a session that asks for `requested`.
    pub(crate) fn new(requested: Duration) -> Arc<Terms> {
        Arc::new(Terms {
            requested,
            state: Mutex::default(),
            shrunk: watch::Sender::new(None),
        })
    }

    /// `server` answered a connect of the session with `negotiated`. Below
    /// the timeout asked for, every lease counting on the session ends here
    /// (before the answer goes on to the client), with
    /// [`LossReason::Revoked`]: the servers no longer keep the session for
    /// as long as the leases count.
    pub(crate) fn granted(&self, server: &Arc<str>, negotiated: Duration) {
        let mut state = self.state.lock().unwrap();
        state.last = Some((server.clone(), negotiated));
        if negotiated >= self.requested || self.shrunk.borrow().is_some() {
            return;
        }
        for signal in state.leases.values() {
            signal.fire(LossReason::Revoked);
        }
        let leases = state.leases.len();
        drop(state);
        tracing::warn!(
            backend = crate::error::BACKEND,
            server = &**server,
            negotiated = ?negotiated,
            requested = ?self.requested,
            leases,
            "a ZooKeeper server gave the session a shorter timeout than asked for (its \
             maxSessionTimeout is lower): the leases counting on it end now, and the session \
             closes"
        );
        self.shrunk.send_replace(Some(Shrink {
            server: server.clone(),
            negotiated,
        }));
    }

    /// The server that answered the session's last connect, and what it gave.
    pub(crate) fn last_granted(&self) -> Option<(Arc<str>, Duration)> {
        self.state.lock().unwrap().last.clone()
    }

    /// The first grant below the timeout asked for, if there was one.
    pub(crate) fn shrink(&self) -> Option<Shrink> {
        self.shrunk.borrow().clone()
    }

    /// Resolves at the first grant below the timeout asked for.
    pub(crate) async fn shrunk(&self) -> Shrink {
        let mut shrunk = self.shrunk.subscribe();
        let seen = shrunk.wait_for(Option::is_some).await;
        // `self` keeps the sender alive: the wait cannot fail.
        seen.ok()
            .and_then(|s| s.clone())
            .expect("a shrink was seen")
    }

    /// Counts a lease on the session until the returned guard is dropped:
    /// a shrink fires `signal` (at once, if the session shrank already).
    /// How many leases of this client live now.
    pub(crate) fn live(&self) -> usize {
        self.state.lock().unwrap().leases.len()
    }

    pub(crate) fn count_on(self: &Arc<Self>, signal: LossSignal) -> Counting {
        let mut state = self.state.lock().unwrap();
        if self.shrunk.borrow().is_some() {
            signal.fire(LossReason::Revoked);
        }
        let id = state.next;
        state.next += 1;
        state.leases.insert(id, signal);
        Counting {
            terms: self.clone(),
            id,
        }
    }
}

/// A lease counting on its session's terms (see [`Terms::count_on`]).
#[derive(Debug)]
pub(crate) struct Counting {
    terms: Arc<Terms>,
    id: u64,
}

impl Drop for Counting {
    fn drop(&mut self) {
        self.terms.state.lock().unwrap().leases.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASKED: Duration = Duration::from_secs(2);

    #[test]
    fn a_grant_below_the_request_ends_every_lease_counting_on_the_session() {
        let terms = Terms::new(ASKED);
        let (one, two, gone) = (LossSignal::new(), LossSignal::new(), LossSignal::new());
        let _one = terms.count_on(one.clone());
        let _two = terms.count_on(two.clone());
        drop(terms.count_on(gone.clone()));
        let server: Arc<str> = "zk1:2181".into();
        terms.granted(&server, ASKED);
        terms.granted(&server, ASKED * 2);
        assert_eq!(one.fired(), None);
        assert_eq!(terms.shrink(), None);
        let low: Arc<str> = "zk2:2181".into();
        terms.granted(&low, Duration::from_millis(600));
        assert_eq!(one.fired(), Some(LossReason::Revoked));
        assert_eq!(two.fired(), Some(LossReason::Revoked));
        assert_eq!(gone.fired(), None, "a lease that ended counts no more");
        let shrink = terms.shrink().expect("shrunk");
        assert_eq!(&*shrink.server, "zk2:2181");
        assert_eq!(shrink.negotiated, Duration::from_millis(600));
        // A later grant of the full timeout does not undo it.
        terms.granted(&server, ASKED);
        assert_eq!(terms.shrink(), Some(shrink));
        assert_eq!(terms.last_granted(), Some((server, ASKED)));
    }

    #[test]
    fn a_lease_granted_after_a_shrink_ends_at_once() {
        let terms = Terms::new(ASKED);
        terms.granted(&"zk2:2181".into(), Duration::from_millis(600));
        let late = LossSignal::new();
        let _late = terms.count_on(late.clone());
        assert_eq!(late.fired(), Some(LossReason::Revoked));
    }
}
