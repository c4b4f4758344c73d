//! The schedule a seed stands for: the world (members, keys, TTL, server
//! clock) and everything that happens in it, drawn before the run starts.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How fast the server's clock runs against each member's in a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerClock {
    /// Drawn from the seed for each member, always within the drift margin:
    /// the member's rate, a rate anywhere inside the margin, or at its edge
    /// (the server expires the member's lease one millisecond after its
    /// deadline).
    WithinMargin,
    /// Against one member, drawn from the seed, so fast that the server
    /// expires its lease one millisecond *before* its deadline: beyond the
    /// margin, where the promise is not made and the simulation must
    /// report an overlap (it shows that the margin is what keeps the
    /// promise). The others' as in `WithinMargin`.
    BeyondMargin,
}

/// A drawn world and its schedule.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The election keys.
    pub keys: Vec<String>,
    /// For each member, the keys (indices into `keys`) it has an elector on.
    pub joins: Vec<Vec<usize>>,
    /// Every elector's TTL.
    pub ttl: Duration,
    /// Every elector's drift margin (the default, TTL/50).
    pub margin: Duration,
    /// The server declares batched renewals: electors renew on the shared grid.
    pub batched: bool,
    /// For each member, the server's clock rate against the member's (1.0
    /// or faster: a fast server ends leases early in the member's time).
    pub clock_rates: Vec<f64>,
    /// When every fault has healed: links clean, members resumed and restarted.
    pub heal_at: Duration,
    /// When the schedule ends.
    pub end_at: Duration,
    /// What happens, in time order.
    pub events: Vec<Scheduled>,
}

/// One happening at its instant (from the start of the schedule).
#[derive(Clone, Debug, PartialEq)]
pub struct Scheduled {
    /// When.
    pub at: Duration,
    /// What.
    pub what: Happening,
}

/// Something that happens to the world.
#[derive(Clone, Debug, PartialEq)]
pub enum Happening {
    /// A member's link to the server turns to `state` (until its next state,
    /// or the heal).
    Link {
        /// The member.
        member: usize,
        /// The link's new state.
        state: LinkState,
    },
    /// A member's link is cut both ways, and heals `offset_ms` after the
    /// deadline of the member's term that ends first (a quarter TTL later
    /// if it leads nothing): a renewal held by the cut is answered just
    /// before, at, or just after the deadline, where the renewer's
    /// arithmetic must be exact.
    CutUntilDeadline {
        /// The member.
        member: usize,
        /// From the deadline to the heal, in milliseconds (-2 to 2).
        offset_ms: i64,
    },
    /// A member's connections are reset: every call in flight on its link
    /// fails, as after a TCP reset.
    ResetLink {
        /// The member.
        member: usize,
    },
    /// Every link's connections are reset at once, as when the server
    /// restarts: candidates that fail together must not retry together.
    ServerRestart,
    /// The server answers slowly: every link is delayed by `delay` each way
    /// for `for_`.
    SlowServer {
        /// Each way.
        delay: Duration,
        /// How long.
        for_: Duration,
    },
    /// An operator deletes the key's record on the server: its holder is
    /// told at once (its loss signal fires), the next waiter is granted,
    /// tokens go on increasing. Safety cannot hold across it (the holder
    /// learns of it after the grant), so the terms it ends are not judged
    /// at that grant; tokens, the fence and liveness are.
    Wipe {
        /// The key.
        key: usize,
    },
    /// A member's tasks freeze (SIGSTOP, a long GC pause) while its
    /// monotonic clock runs on; they resume `for_` later (or at the heal).
    Pause {
        /// The member.
        member: usize,
        /// How long.
        for_: Duration,
    },
    /// A member's host is suspended for `for_`: its tasks freeze and its
    /// monotonic clock stops, while the server's runs on. Not a promise
    /// tenure makes (the README says so): drawn only when asked for, and
    /// counted apart.
    Suspend {
        /// The member.
        member: usize,
        /// How long.
        for_: Duration,
    },
    /// A member's process dies without a word (nothing is released) and
    /// starts again `down_for` later (or at the heal) with the same identity.
    Crash {
        /// The member.
        member: usize,
        /// How long it stays down.
        down_for: Duration,
    },
    /// The application does something with one of a member's electors.
    App {
        /// The member.
        member: usize,
        /// The key (index into `Plan::keys`).
        key: usize,
        /// What.
        action: Action,
    },
}

impl Happening {
    /// The kind of fault this is, if it is one (a link turning clean, and
    /// the application's own actions, are not).
    pub fn fault(&self) -> Option<FaultKind> {
        Some(match self {
            Happening::Link { state, .. } => match state {
                LinkState::Clean => return None,
                LinkState::Delayed { .. } => FaultKind::Delay,
                LinkState::CutOff => FaultKind::Partition,
                LinkState::AnswersDropped => FaultKind::AnswersDropped,
                LinkState::Refused => FaultKind::Refused,
            },
            Happening::CutUntilDeadline { .. } => FaultKind::Partition,
            Happening::ResetLink { .. } => FaultKind::Reset,
            Happening::ServerRestart => FaultKind::ServerRestart,
            Happening::SlowServer { .. } => FaultKind::SlowServer,
            Happening::Wipe { .. } => FaultKind::Wipe,
            Happening::Pause { .. } => FaultKind::Pause,
            Happening::Suspend { .. } => FaultKind::Suspend,
            Happening::Crash { .. } => FaultKind::Crash,
            Happening::App { .. } => return None,
        })
    }
}

/// The state of one member's link, set through the memory backend's
/// [`Faults`](tenure_core::memory::Faults).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkState {
    /// Requests and answers go through at once.
    Clean,
    /// Each request takes `request` to reach the server, each answer `response` back.
    Delayed {
        /// Client to server.
        request: Duration,
        /// Server to client.
        response: Duration,
    },
    /// A partition both ways: calls hang until the link heals.
    CutOff,
    /// A partition one way, server to client: requests reach the server and
    /// are applied, their answers are lost (an acquire, renewal or release
    /// that took, though the client cannot tell); the calls fail once the
    /// answers flow again.
    AnswersDropped,
    /// Every call fails at once (connection refused).
    Refused,
}

/// What the application does with an elector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// `campaign()`, then hold the leadership doing work that checks
    /// `is_valid()` and writes to the key's `Fence` with its token. An
    /// attentive holder also awaits `lost()`; the other notices the loss
    /// at its next `is_valid()`.
    Campaign {
        /// Awaits `lost()` beside its work.
        attentive: bool,
        /// Seeds the holder's step durations.
        seed: u64,
    },
    /// `run(work)`: work that checks `is_valid()` before each step and writes
    /// to the `Fence`; it returns after `steps` steps (`None`: never).
    Run {
        /// How many steps each term's work takes.
        steps: Option<u32>,
        /// Seeds the work's step durations.
        seed: u64,
    },
    /// `resign()` the leadership a `Campaign` holds.
    Resign,
    /// Drop the leadership a `Campaign` holds.
    DropLeadership,
    /// `shutdown()`; a later action builds a new elector, same identity.
    Shutdown,
    /// Follow `observe()` for `for_`.
    Observe {
        /// How long.
        for_: Duration,
    },
}

/// The kinds of fault, as the final line counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// A link with delayed requests and answers.
    Delay,
    /// A link cut both ways.
    Partition,
    /// A link losing answers after the server applied the request.
    AnswersDropped,
    /// A link refusing calls.
    Refused,
    /// A link's connections reset.
    Reset,
    /// Every link reset at once.
    ServerRestart,
    /// Every link delayed at once.
    SlowServer,
    /// A key's record deleted on the server.
    Wipe,
    /// A member paused.
    Pause,
    /// A member's host suspended (its clock stopped too).
    Suspend,
    /// A member crashed and restarted.
    Crash,
}

impl FaultKind {
    /// Every kind, in the order the final line prints them.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Delay,
        FaultKind::Partition,
        FaultKind::AnswersDropped,
        FaultKind::Refused,
        FaultKind::Reset,
        FaultKind::ServerRestart,
        FaultKind::SlowServer,
        FaultKind::Wipe,
        FaultKind::Pause,
        FaultKind::Suspend,
        FaultKind::Crash,
    ];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Delay => "delay",
            FaultKind::Partition => "partition",
            FaultKind::AnswersDropped => "answers-dropped",
            FaultKind::Refused => "refused",
            FaultKind::Reset => "reset",
            FaultKind::ServerRestart => "server-restart",
            FaultKind::SlowServer => "slow-server",
            FaultKind::Wipe => "wipe",
            FaultKind::Pause => "pause",
            FaultKind::Suspend => "suspend",
            FaultKind::Crash => "crash",
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Plan {
    /// Draws the world and schedule of `seed`; with `suspends`, each member
    /// may also be suspended once (drawn apart: the rest of the schedule is
    /// the seed's without them).
    pub fn draw(seed: u64, clock: ServerClock, suspends: bool) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let members = rng.random_range(2..=9usize);
        let key_count = rng.random_range(1..=3usize);
        let keys: Vec<String> = (0..key_count).map(|k| format!("k{k}")).collect();
        let mut joins: Vec<Vec<usize>> = (0..members)
            .map(|_| (0..key_count).filter(|_| rng.random_bool(0.7)).collect())
            .collect();
        // Every key has at least two candidates, every member a key.
        for key in 0..key_count {
            while joins.iter().filter(|j| j.contains(&key)).count() < 2 {
                let m = rng.random_range(0..members);
                if !joins[m].contains(&key) {
                    joins[m].push(key);
                    joins[m].sort_unstable();
                }
            }
        }
        for joined in &mut joins {
            if joined.is_empty() {
                joined.push(rng.random_range(0..key_count));
            }
        }
        // TTLs divisible by 50 ms: the default margin (TTL/50) and every
        // deadline fall on whole milliseconds, tokio's timer resolution.
        let ttl_ms = [500u64, 1000, 2000, 3000][rng.random_range(0..4)];
        let (ttl, margin) = (ms(ttl_ms), ms(ttl_ms / 50));
        let batched = rng.random_bool(0.3);
        // The server keeps a member's lease `kept` of its time for a TTL.
        let kept = |rng: &mut StdRng| match rng.random_range(0..10) {
            0..=3 => ttl_ms,
            4..=6 => ttl_ms - rng.random_range(0..(ttl_ms / 50)),
            // The edge: one millisecond past the holder's deadline.
            _ => ttl_ms - ttl_ms / 50 + 1,
        };
        let mut kept_ms: Vec<u64> = (0..members).map(|_| kept(&mut rng)).collect();
        // Drawn either way: a seed's world is the same in both but for
        // this member's clock.
        let beyond = rng.random_range(0..members);
        if clock == ServerClock::BeyondMargin {
            kept_ms[beyond] = ttl_ms - ttl_ms / 50 - 1;
        }
        let clock_rates = kept_ms
            .iter()
            .map(|&kept| ttl_ms as f64 / kept as f64)
            .collect();
        let heal_ms = ttl_ms * rng.random_range(4..=10);
        let end_ms = heal_ms + 3 * ttl_ms;
        let mut events = Vec::new();
        let at = |rng: &mut StdRng| ms(rng.random_range(0..heal_ms));
        let span = |rng: &mut StdRng| ms(rng.random_range(1..=ttl_ms * 3 / 2));
        // Each link: a few states, each until the next.
        for member in 0..members {
            for _ in 0..rng.random_range(0..=4) {
                let state = match rng.random_range(0..10) {
                    0..=2 => LinkState::Delayed {
                        request: delay(&mut rng, ttl_ms),
                        response: delay(&mut rng, ttl_ms),
                    },
                    3..=4 => LinkState::CutOff,
                    5..=6 => LinkState::AnswersDropped,
                    7 => LinkState::Refused,
                    _ => LinkState::Clean,
                };
                let start = at(&mut rng);
                events.push(Scheduled {
                    at: start,
                    what: Happening::Link { member, state },
                });
                if rng.random_bool(0.6) {
                    events.push(Scheduled {
                        at: start + span(&mut rng),
                        what: Happening::Link {
                            member,
                            state: LinkState::Clean,
                        },
                    });
                }
            }
            if rng.random_bool(0.3) {
                events.push(Scheduled {
                    at: at(&mut rng),
                    what: Happening::CutUntilDeadline {
                        member,
                        offset_ms: rng.random_range(-2..=2),
                    },
                });
            }
            if rng.random_bool(0.2) {
                events.push(Scheduled {
                    at: at(&mut rng),
                    what: Happening::ResetLink { member },
                });
            }
            if rng.random_bool(0.25) {
                events.push(Scheduled {
                    at: at(&mut rng),
                    what: Happening::Pause {
                        member,
                        for_: span(&mut rng),
                    },
                });
            }
            if rng.random_bool(0.15) {
                events.push(Scheduled {
                    at: at(&mut rng),
                    what: Happening::Crash {
                        member,
                        down_for: span(&mut rng),
                    },
                });
            }
        }
        if rng.random_bool(0.3) {
            events.push(Scheduled {
                at: at(&mut rng),
                what: Happening::ServerRestart,
            });
        }
        if rng.random_bool(0.2) {
            events.push(Scheduled {
                at: at(&mut rng),
                what: Happening::SlowServer {
                    delay: delay(&mut rng, ttl_ms),
                    for_: span(&mut rng),
                },
            });
        }
        if rng.random_bool(0.2) {
            events.push(Scheduled {
                at: at(&mut rng),
                what: Happening::Wipe {
                    key: rng.random_range(0..key_count),
                },
            });
        }
        // The application: every elector starts at once, then acts at random.
        for (member, joined) in joins.iter().enumerate() {
            for &key in joined {
                let first = match rng.random_range(0..10) {
                    0..=4 => Some(campaign(&mut rng)),
                    5..=8 => Some(run(&mut rng)),
                    _ => None,
                };
                if let Some(action) = first {
                    events.push(Scheduled {
                        at: ms(rng.random_range(0..=ttl_ms / 10)),
                        what: Happening::App {
                            member,
                            key,
                            action,
                        },
                    });
                }
                for _ in 0..rng.random_range(0..=6) {
                    let action = match rng.random_range(0..12) {
                        0..=2 => campaign(&mut rng),
                        3..=4 => run(&mut rng),
                        5..=6 => Action::Resign,
                        7 => Action::DropLeadership,
                        8..=9 => Action::Shutdown,
                        _ => Action::Observe {
                            for_: span(&mut rng),
                        },
                    };
                    events.push(Scheduled {
                        at: at(&mut rng),
                        what: Happening::App {
                            member,
                            key,
                            action,
                        },
                    });
                }
            }
        }
        if suspends {
            let mut apart = StdRng::seed_from_u64(seed ^ 0x5005_9e4d);
            for member in 0..members {
                if apart.random_bool(0.5) {
                    events.push(Scheduled {
                        at: ms(apart.random_range(0..heal_ms)),
                        what: Happening::Suspend {
                            member,
                            for_: ms(apart.random_range(1..=ttl_ms * 3 / 2)),
                        },
                    });
                }
            }
        }
        events.retain(|e| e.at < ms(heal_ms));
        // Stable: events drawn for one instant keep their drawing order.
        events.sort_by_key(|e| e.at);
        Plan {
            seed,
            keys,
            joins,
            ttl,
            margin,
            batched,
            clock_rates,
            heal_at: ms(heal_ms),
            end_at: ms(end_ms),
            events,
        }
    }

    /// How many faults the schedule holds.
    pub fn faults(&self) -> usize {
        self.events
            .iter()
            .filter(|e| e.what.fault().is_some())
            .count()
    }
}

/// A link delay: mostly short, sometimes a good part of the TTL.
fn delay(rng: &mut StdRng, ttl_ms: u64) -> Duration {
    match rng.random_range(0..10) {
        0..=5 => ms(rng.random_range(0..=ttl_ms / 20)),
        6..=8 => ms(rng.random_range(0..=ttl_ms / 4)),
        _ => ms(rng.random_range(0..=ttl_ms)),
    }
}

fn campaign(rng: &mut StdRng) -> Action {
    Action::Campaign {
        attentive: rng.random_bool(0.5),
        seed: rng.random(),
    }
}

fn run(rng: &mut StdRng) -> Action {
    Action::Run {
        steps: rng.random_bool(0.5).then(|| rng.random_range(1..=8)),
        seed: rng.random(),
    }
}
