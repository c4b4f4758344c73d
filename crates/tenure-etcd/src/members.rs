//! One client per member, for the requests that keep a lease alive.
//!
//! etcd-client's channel balances requests over every endpoint at random
//! (tonic's balancer sees no load), and a frozen member still looks ready:
//! it gets its share of keep-alives and reads, and each waits out its whole
//! bound. A lease's renewal instead goes to one member at a time: the one
//! that answered last, unless it failed lately; a try that fails or times
//! out sets that member aside for [`AVOID_FOR`], and the next try, with the
//! time left, goes to another.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::{map, BACKEND};
use tenure_core::{on_heartbeat_runtime, Error, Result};

/// How long a member that failed a try is passed over while another can
/// be had.
pub(crate) const AVOID_FOR: Duration = Duration::from_secs(10);

/// The members a backend was given, each with a client of its own, made
/// on first use.
pub(crate) struct Members {
    /// One per member: its endpoint (none for a client given by the user)
    /// and its client once connected.
    members: Vec<Member>,
    connect: ConnectOptions,
    /// Until when each member is passed over.
    avoid_until: Mutex<Vec<Option<Instant>>>,
    /// Where a first pick starts: each lease's next member in turn, so that
    /// they do not all start on the first.
    next: AtomicUsize,
}

struct Member {
    endpoint: Option<String>,
    client: OnceCell<Client>,
}

impl Members {
    /// A client for each of `endpoints`, connected with `connect` when
    /// first needed.
    pub(crate) fn new(endpoints: &[String], connect: ConnectOptions) -> Self {
        Members {
            members: endpoints
                .iter()
                .map(|endpoint| Member {
                    endpoint: Some(endpoint.clone()),
                    client: OnceCell::new(),
                })
                .collect(),
            connect,
            avoid_until: Mutex::new(vec![None; endpoints.len()]),
            next: AtomicUsize::new(0),
        }
    }

    /// One member: the client the user built (its own balancing, if any,
    /// stays as it is).
    pub(crate) fn single(client: Client) -> Self {
        Members {
            members: vec![Member {
                endpoint: None,
                client: OnceCell::new_with(Some(client)),
            }],
            connect: ConnectOptions::new(),
            avoid_until: Mutex::new(vec![None]),
            next: AtomicUsize::new(0),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    fn avoided(&self) -> std::sync::MutexGuard<'_, Vec<Option<Instant>>> {
        self.avoid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The member to try next: `last` (the one that answered last), unless
    /// it is set aside; else the next one that is not, in order after it
    /// (with no `last`, from the member after the previous first pick's);
    /// else the one whose time aside ends first.
    pub(crate) fn pick(&self, last: Option<usize>) -> usize {
        let now = Instant::now();
        let avoided = self.avoided();
        let n = avoided.len();
        let free = |i: usize| avoided[i].is_none_or(|until| until <= now);
        let start = last.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed)) % n;
        if last.is_some() && free(start) {
            return start;
        }
        let from = if last.is_some() { start + 1 } else { start };
        (from..from + n)
            .map(|i| i % n)
            .find(|&i| free(i))
            .unwrap_or_else(|| {
                (0..n)
                    .min_by_key(|&i| avoided[i].unwrap_or(now))
                    .unwrap_or(0)
            })
    }

    /// Sets `member` aside after a failed try.
    pub(crate) fn avoid(&self, member: usize) {
        if let Some(slot) = self.avoided().get_mut(member) {
            *slot = Some(Instant::now() + AVOID_FOR);
        }
    }

    /// `member`'s client within `bound` (a frozen member may not even
    /// finish the handshake): a timeout is [`Error::Timeout`].
    pub(crate) async fn client_within(&self, member: usize, bound: Duration) -> Result<Client> {
        tokio::time::timeout(bound, self.client(member))
            .await
            .map_err(|_| Error::Timeout {
                operation: "connect",
                after: bound,
            })?
    }

    /// `member`'s client, connected on tenure's heartbeat runtime the first
    /// time (authenticating, where the options say so).
    pub(crate) async fn client(&self, member: usize) -> Result<Client> {
        let member = &self.members[member];
        let client = member
            .client
            .get_or_try_init(|| async {
                let endpoint = member
                    .endpoint
                    .clone()
                    .expect("a member without an endpoint has its client from the start");
                let connect = self.connect.clone();
                on_heartbeat_runtime(BACKEND, async move {
                    Client::connect([endpoint], Some(connect))
                        .await
                        .map_err(map)
                })
                .await
            })
            .await?;
        Ok(client.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Members {
        let endpoints: Vec<String> = (0..n).map(|i| format!("127.0.0.1:{}", 2379 + i)).collect();
        Members::new(&endpoints, ConnectOptions::new())
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_failed_is_passed_over_until_its_time_aside_ends() {
        let m = members(3);
        assert_eq!(m.pick(None), 0);
        assert_eq!(m.pick(None), 1, "first picks take turns");
        assert_eq!(m.pick(None), 2);
        assert_eq!(m.pick(Some(1)), 1, "the member that answered last stays");
        m.avoid(1);
        assert_eq!(m.pick(Some(1)), 2, "the next one after it");
        tokio::time::advance(Duration::from_millis(1)).await;
        m.avoid(2);
        assert_eq!(m.pick(Some(2)), 0);
        tokio::time::advance(Duration::from_millis(1)).await;
        m.avoid(0);
        // Every member aside: the one whose time aside ends first.
        assert_eq!(m.pick(Some(0)), 1);
        tokio::time::advance(AVOID_FOR).await;
        assert_eq!(m.pick(Some(2)), 2, "back once its time aside is over");
    }

    #[tokio::test(start_paused = true)]
    async fn one_member_is_always_the_pick() {
        let m = members(1);
        m.avoid(0);
        assert_eq!(m.pick(Some(0)), 0);
    }
}
