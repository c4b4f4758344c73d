//! Mixed elections: tenure candidates and candidates of kube-lease-manager
//! or kube-coordinate on one Lease of the Lease API test server, under the
//! suite's faults (the holder paused past its deadline, the holder
//! partitioned, the holder crashed) and graceful hand-overs, counting
//! whether two candidates ever both believe they lead.
//!
//! Each election has one tenure candidate and one peer candidate, each a
//! process of its own (a pause is SIGSTOP, a crash SIGKILL) reaching the
//! server through a fault proxy of its own (a partition is that proxy
//! dropping everything); every hand-over and failover is therefore between
//! tenure and the peer, in both directions. Two elections per peer run at
//! once, 12 hand-overs and 12 failovers each (two hand-overs, then two
//! failovers, and again: the leadership changes sides every round, so
//! each fault hits each side twice): 24 hand-overs and 24 failovers per
//! peer, of which at least 20 of each must complete.
//!
//! What a candidate believes: tenure's from `elected` until its term
//! ends, but never past its deadline (`valid_until`, which a paused
//! process cannot act past: its next look at the clock says no); a peer's,
//! its own "am I leader" state as the crate reports it (see
//! `src/bin/tenure-e2e-kube-peer.rs`), from when it turns true until it
//! turns false, for these crates give it no deadline; a killed process
//! believes nothing from its kill. Every overlap of two beliefs is found,
//! and blamed from the Lease's own history (watched by the test): the
//! older holder believed past its lease (its last write's renewTime plus
//! leaseDurationSeconds, on the shared clock) — or the Lease was taken from
//! it before that lease ran out. The test fails if tenure is to blame for
//! any (a tenure holder believing past its lease, a tenure candidate
//! taking a lease that had not run out), or if fewer hand-overs or
//! failovers than counted above complete; overlaps that are the peers' own
//! doing are printed, with counts, as evidence for tenure-kube's README.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::Api;
use tenure_conformance::process::clock::now_ns;
use tenure_conformance::process::{CandidateProcess, Command, Message};
use tenure_lease_server::{KubeconfigFile, LeaseServer};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_testkit::proxy::{FaultProxy, Mode};

const TENURE: &str = env!("CARGO_BIN_EXE_tenure-e2e-candidate");
const PEER: &str = env!("CARGO_BIN_EXE_tenure-e2e-kube-peer");

/// The longest a candidate may take to start or answer.
const LIMIT: Duration = Duration::from_secs(20);

/// Hand-overs and failovers per election (see the top of the file): more
/// than the count needs, for a round that fails.
const HAND_OVERS: usize = 12;
const FAILOVERS: usize = 12;
/// Elections per peer, run at once.
const ELECTIONS: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Tenure,
    LeaseManager,
    Coordinate,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tenure => "tenure",
            Kind::LeaseManager => "kube-lease-manager",
            Kind::Coordinate => "kube-coordinate",
        }
    }

    /// The election's TTL with this peer: kube-lease-manager renews a
    /// whole second (its grace) before its lease runs out, so 2 s;
    /// kube-coordinate takes renew_deadline > 1.2 × retry_period ≥ 1.2 s
    /// and api_timeout ≥ 1 s, so the least TTL in its default proportions
    /// is 3 s.
    fn ttl(self) -> Duration {
        match self {
            Kind::Coordinate => Duration::from_secs(3),
            _ => Duration::from_secs(2),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Round {
    HandOver,
    Pause,
    Partition,
    Crash,
}

/// The rounds of one election: hand-overs two by two between failovers
/// two by two, so each happens from either side; the faults in turn, so
/// each hits either side (fault k hits the first leader's side when k is
/// even, as leadership changes sides every round).
fn rounds() -> Vec<Round> {
    const FAULTS: [Round; 3] = [Round::Pause, Round::Partition, Round::Crash];
    const _: () = assert!(HAND_OVERS == FAILOVERS && FAILOVERS.is_multiple_of(6));
    (0..FAILOVERS)
        .step_by(2)
        .flat_map(|k| {
            [
                Round::HandOver,
                Round::HandOver,
                FAULTS[k % 3],
                FAULTS[(k + 1) % 3],
            ]
        })
        .collect()
}

/// One candidate process and its way to the server.
struct Candidate {
    kind: Kind,
    identity: String,
    process: CandidateProcess,
    proxy: FaultProxy,
    _kubeconfig: KubeconfigFile,
    /// When the belief in progress began (shared clock).
    leading_since: Option<u64>,
    /// Its campaign ended (a tenure term lost, a peer resigned): it must be
    /// asked to campaign again.
    idle: bool,
}

/// One stretch of time a candidate believed it led.
#[derive(Clone, Debug)]
struct Belief {
    identity: String,
    kind: Kind,
    from: u64,
    until: u64,
}

/// One write of the Lease, as the test's watch saw it.
#[derive(Clone, Debug)]
struct Write {
    seen: u64,
    holder: String,
    /// renewTime + leaseDurationSeconds on the shared clock, if both are set.
    lease_end: Option<u64>,
}

/// One round, done or not.
#[derive(Clone, Debug)]
struct Done {
    round: Round,
    from: Kind,
    to: Option<Kind>,
    start: u64,
    end: u64,
}

/// The shared clock's reading of a wall-clock time (same machine).
fn wall_to_shared(wall: SystemTime) -> u64 {
    let (now_wall, now) = (SystemTime::now(), now_ns() as i128);
    let delta = match wall.duration_since(now_wall) {
        Ok(ahead) => ahead.as_nanos() as i128,
        Err(behind) => -(behind.duration().as_nanos() as i128),
    };
    (now + delta).max(0) as u64
}

/// Watches Lease `key` from `rv` and keeps its writes.
fn watch_writes(api: Api<Lease>, key: String, mut rv: String) -> Arc<Mutex<Vec<Write>>> {
    let writes = Arc::new(Mutex::new(Vec::new()));
    let kept = writes.clone();
    tokio::spawn(async move {
        loop {
            let params = WatchParams::default().fields(&format!("metadata.name={key}"));
            let Ok(stream) = api.watch(&params, &rv).await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let mut stream = stream.boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                let lease = match event {
                    WatchEvent::Added(l) | WatchEvent::Modified(l) => l,
                    _ => continue,
                };
                let seen = now_ns();
                rv = lease.metadata.resource_version.clone().unwrap_or_default();
                let spec = lease.spec.unwrap_or_default();
                let lease_end =
                    spec.renew_time
                        .zip(spec.lease_duration_seconds)
                        .map(|(renewed, secs)| {
                            let renewed = wall_to_shared(renewed.0.into());
                            renewed + Duration::from_secs(secs.max(0) as u64).as_nanos() as u64
                        });
                kept.lock().unwrap().push(Write {
                    seen,
                    holder: spec.holder_identity.unwrap_or_default(),
                    lease_end,
                });
            }
        }
    });
    writes
}

/// One election between a tenure candidate and a peer's.
struct Election {
    name: String,
    peer: Kind,
    key: String,
    server: SocketAddr,
    candidates: Vec<Candidate>,
    beliefs: Vec<Belief>,
    done: Vec<Done>,
    failed: Vec<String>,
    writes: Arc<Mutex<Vec<Write>>>,
    /// (identity, paused at, resumed at) on the shared clock.
    paused: Vec<(String, u64, u64)>,
    spawned: usize,
}

fn io(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Election {
    async fn start(server: &LeaseServer, api: &Api<Lease>, peer: Kind, n: usize) -> Election {
        let key = format!("mixed-{}-{n}", peer.name());
        let lease = Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(key.clone()),
                ..Default::default()
            },
            spec: Some(Default::default()),
        };
        let created = api
            .create(&PostParams::default(), &lease)
            .await
            .expect("the election's Lease");
        let rv = created.metadata.resource_version.unwrap_or_default();
        let mut election = Election {
            name: format!("tenure + {} #{n}", peer.name()),
            peer,
            writes: watch_writes(api.clone(), key.clone(), rv),
            key,
            server: server.addr(),
            candidates: Vec::new(),
            beliefs: Vec::new(),
            done: Vec::new(),
            failed: Vec::new(),
            paused: Vec::new(),
            spawned: 0,
        };
        for kind in [Kind::Tenure, peer] {
            election.spawn(kind).await.expect("a candidate");
        }
        election
    }

    async fn spawn(&mut self, kind: Kind) -> Result<(), String> {
        let proxy = FaultProxy::start(self.server).await.map_err(io)?;
        let kubeconfig = KubeconfigFile::write(proxy.addr()).map_err(io)?;
        let (program, url) = match kind {
            Kind::Tenure => (TENURE, kubeconfig.url()),
            peer => (PEER, format!("{}+{}", peer.name(), kubeconfig.url())),
        };
        self.spawned += 1;
        let identity = format!("{}-{}", kind.name(), self.spawned);
        let ttl = self.peer.ttl();
        let process = CandidateProcess::spawn(
            std::path::Path::new(program),
            &url,
            &self.key,
            &identity,
            ttl,
            LIMIT,
        )
        .await
        .map_err(io)?;
        self.candidates.push(Candidate {
            kind,
            identity,
            process,
            proxy,
            _kubeconfig: kubeconfig,
            leading_since: None,
            idle: true,
        });
        self.campaign_all().await
    }

    /// Asks every idle candidate to campaign.
    async fn campaign_all(&mut self) -> Result<(), String> {
        for c in self.candidates.iter_mut().filter(|c| c.idle) {
            c.process
                .request(Command::Campaign, LIMIT)
                .await
                .map_err(io)?
                .map_err(|e| format!("{}'s campaign: {e}", c.identity))?;
            c.idle = false;
        }
        Ok(())
    }

    /// Takes in what the candidates said.
    async fn drain(&mut self) {
        for c in &mut self.candidates {
            while let Some((message, _)) = c.process.next_event(Duration::ZERO).await {
                match message {
                    Message::Elected { at_ns, .. } => {
                        c.leading_since.get_or_insert(at_ns);
                    }
                    Message::Lost {
                        at_ns,
                        valid_until_ns,
                        reason,
                    } => {
                        // A tenure candidate's belief ends at its deadline
                        // at the latest; a peer's has none.
                        let until = match c.kind {
                            Kind::Tenure => at_ns.min(valid_until_ns),
                            _ => at_ns,
                        };
                        if let Some(from) = c.leading_since.take() {
                            self.beliefs.push(Belief {
                                identity: c.identity.clone(),
                                kind: c.kind,
                                from,
                                until: until.max(from),
                            });
                        }
                        // A tenure term that ended ends its campaign; a
                        // peer goes on campaigning by itself.
                        if c.kind == Kind::Tenure || reason == "Resigned" {
                            c.idle = true;
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Waits (at most `limit`) until `done` holds of the candidates.
    async fn until(&mut self, limit: Duration, done: impl Fn(&[Candidate]) -> bool) -> bool {
        let give_up = tokio::time::Instant::now() + limit;
        loop {
            self.drain().await;
            if done(&self.candidates) {
                return true;
            }
            if tokio::time::Instant::now() >= give_up {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// How long a standby may take to lead after the holder went: a
    /// kube-coordinate follower waits lease_duration plus up to 1.2 of it
    /// (its jitter), then tries.
    fn failover_limit(&self) -> Duration {
        self.peer.ttl() * 4 + Duration::from_secs(5)
    }

    async fn round(&mut self, round: Round) -> Result<(), String> {
        let one_leads =
            |cs: &[Candidate]| cs.iter().filter(|c| c.leading_since.is_some()).count() == 1;
        if !self.until(self.failover_limit() * 2, one_leads).await {
            return Err("no single leader to start the round with".into());
        }
        // Let the standby settle (watch, read the Lease).
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.drain().await;
        let h = self
            .candidates
            .iter()
            .position(|c| c.leading_since.is_some())
            .ok_or("the leader went before the round")?;
        let from = self.candidates[h].kind;
        let start = now_ns();
        match round {
            Round::HandOver => {
                let c = &mut self.candidates[h];
                c.process
                    .request(Command::Resign, LIMIT)
                    .await
                    .map_err(io)?
                    .map_err(|e| format!("{}'s resign: {e}", c.identity))?;
            }
            Round::Pause => self.candidates[h].process.pause().map_err(io)?,
            Round::Partition => self.candidates[h].proxy.set(Mode::Blackhole),
            Round::Crash => {
                let mut c = self.candidates.remove(h);
                c.process.kill().await.map_err(io)?;
                if let Some(from) = c.leading_since {
                    self.beliefs.push(Belief {
                        identity: c.identity.clone(),
                        kind: c.kind,
                        from,
                        until: now_ns(),
                    });
                }
            }
        }
        let others: Vec<String> = self
            .candidates
            .iter()
            .enumerate()
            .filter(|(i, _)| round == Round::Crash || *i != h)
            .map(|(_, c)| c.identity.clone())
            .collect();
        let led = self
            .until(self.failover_limit(), |cs| {
                cs.iter()
                    .any(|c| c.leading_since.is_some() && others.contains(&c.identity))
            })
            .await;
        let end = now_ns();
        let to = self
            .candidates
            .iter()
            .find(|c| c.leading_since.is_some() && others.contains(&c.identity))
            .map(|c| c.kind);
        // The fault lasts past the holder's deadline at least.
        if matches!(round, Round::Pause | Round::Partition) {
            let past = start + (self.peer.ttl() + Duration::from_millis(500)).as_nanos() as u64;
            let left = past.saturating_sub(now_ns());
            tokio::time::sleep(Duration::from_nanos(left)).await;
        }
        match round {
            Round::Pause => {
                let c = &self.candidates[h];
                c.process.resume().map_err(io)?;
                self.paused.push((c.identity.clone(), start, now_ns()));
            }
            Round::Partition => {
                let proxy = &self.candidates[h].proxy;
                proxy.set(Mode::Pass);
                proxy.reset_connections();
            }
            Round::Crash => self.spawn(from).await?,
            Round::HandOver => {}
        }
        if matches!(round, Round::Pause | Round::Partition) {
            // The old holder notices; a peer that does not is left
            // believing, and its overlap shows.
            let old = self.candidates[h].identity.clone();
            let limit = self.failover_limit();
            self.until(limit, |cs| {
                cs.iter()
                    .any(|c| c.identity == old && c.leading_since.is_none())
            })
            .await;
        }
        self.drain().await;
        self.campaign_all().await?;
        if !led {
            return Err(format!(
                "{round:?} of {}: no other candidate led within {:?}",
                from.name(),
                self.failover_limit()
            ));
        }
        self.done.push(Done {
            round,
            from,
            to,
            start,
            end,
        });
        Ok(())
    }

    async fn run(mut self) -> Election {
        for round in rounds() {
            if let Err(e) = self.round(round).await {
                self.failed.push(e);
            }
        }
        self.drain().await;
        let now = now_ns();
        for c in &mut self.candidates {
            if let Some(from) = c.leading_since.take() {
                self.beliefs.push(Belief {
                    identity: c.identity.clone(),
                    kind: c.kind,
                    from,
                    until: now,
                });
            }
        }
        self.candidates.clear();
        self
    }
}

/// Two beliefs at once, and who is to blame.
#[derive(Debug)]
struct Overlap {
    election: String,
    peer: Kind,
    older: Belief,
    newer: Belief,
    millis: f64,
    /// Of which neither candidate was paused.
    awake_millis: f64,
    /// The round in progress when it began.
    round: Option<Round>,
    /// The candidate that believed it led although the Lease named another
    /// (or nobody) by the overlap's end.
    outsider: Belief,
    /// Why, and whose doing it was.
    blame: Blame,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Blame {
    /// It began to believe after the Lease had been taken from it (or
    /// without ever holding it).
    BelievedWithoutTheLease,
    /// It believed past its own lease (its last write's renewTime plus
    /// leaseDurationSeconds) before the Lease was taken.
    BelievedPastItsLease,
    /// The Lease was taken from it before its lease ran out, by this
    /// holder ("" for a write that emptied the holder).
    TakenEarlyBy(String),
}

impl Overlap {
    /// Whether tenure is to blame.
    fn tenures_doing(&self) -> bool {
        match &self.blame {
            Blame::TakenEarlyBy(taker) => taker.starts_with("tenure-"),
            _ => self.outsider.kind == Kind::Tenure,
        }
    }
}

/// How far a write of the Lease may be seen after a candidate reacted to it.
const SEEN_SLACK: u64 = 50_000_000;

fn overlaps(e: &Election) -> Vec<Overlap> {
    let writes = e.writes.lock().unwrap().clone();
    let mut found = Vec::new();
    for (i, a) in e.beliefs.iter().enumerate() {
        for b in &e.beliefs[i + 1..] {
            let (from, until) = (a.from.max(b.from), a.until.min(b.until));
            if a.identity == b.identity || from >= until {
                continue;
            }
            let (older, newer) = if a.from <= b.from { (a, b) } else { (b, a) };
            let holder = writes
                .iter()
                .rfind(|w| w.seen <= until + SEEN_SLACK)
                .map(|w| w.holder.clone())
                .unwrap_or_default();
            let outsider = if holder == newer.identity {
                older
            } else {
                newer
            };
            let last = writes
                .iter()
                .rposition(|w| w.holder == outsider.identity && w.seen <= until + SEEN_SLACK);
            let taken = last.and_then(|l| {
                let taking = writes[l + 1..]
                    .iter()
                    .find(|w| w.holder != outsider.identity)?;
                Some((writes[l].lease_end, taking))
            });
            let blame = match taken {
                Some((_, taking)) if taking.seen < outsider.from => Blame::BelievedWithoutTheLease,
                Some((Some(end), taking)) if taking.seen < end => {
                    Blame::TakenEarlyBy(taking.holder.clone())
                }
                Some(_) => Blame::BelievedPastItsLease,
                None => Blame::BelievedWithoutTheLease,
            };
            let paused: u64 = e
                .paused
                .iter()
                .filter(|(who, ..)| *who == older.identity || *who == newer.identity)
                .map(|(_, p, r)| r.min(&until).saturating_sub(*p.max(&from)))
                .sum();
            found.push(Overlap {
                election: e.name.clone(),
                peer: e.peer,
                older: older.clone(),
                newer: newer.clone(),
                millis: (until - from) as f64 / 1e6,
                awake_millis: (until - from).saturating_sub(paused) as f64 / 1e6,
                round: e.done.iter().rfind(|d| d.start <= from).map(|d| d.round),
                outsider: outsider.clone(),
                blame,
            });
        }
    }
    found
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn summary(elections: &[Election], found: &[Overlap]) -> String {
    let mut out = String::new();
    let mut counts: BTreeMap<(&str, &str, &str, &str), Vec<f64>> = BTreeMap::new();
    for e in elections {
        for d in &e.done {
            let what = match d.round {
                Round::HandOver => "hand-over",
                Round::Pause => "failover: holder paused",
                Round::Partition => "failover: holder partitioned",
                Round::Crash => "failover: holder killed",
            };
            let to = d.to.unwrap_or(d.from).name();
            let took = (d.end - d.start) as f64 / 1e6;
            counts
                .entry((e.peer.name(), what, d.from.name(), to))
                .or_default()
                .push(took);
        }
    }
    out.push_str("peer | change | from → to | completed | median ms to the new leader\n");
    for ((peer, what, from, to), took) in counts {
        let n = took.len();
        out.push_str(&format!(
            "{peer} | {what} | {from} → {to} | {n} | {:.0}\n",
            median(took)
        ));
    }
    for e in elections {
        for f in &e.failed {
            out.push_str(&format!("{}: round failed: {f}\n", e.name));
        }
    }
    // (peer, round, the outsider's kind, why) → (ms, awake ms) of each.
    type Kinds<'a> = BTreeMap<(&'a str, Option<Round>, &'a str, String), Vec<(f64, f64)>>;
    let mut kinds = Kinds::new();
    for o in found {
        let blame = match &o.blame {
            Blame::TakenEarlyBy(t) if t.is_empty() => "the Lease emptied early".to_owned(),
            Blame::TakenEarlyBy(t) => format!(
                "taken early by {}",
                t.rsplit_once('-').map_or(t.as_str(), |(k, _)| k)
            ),
            Blame::BelievedPastItsLease => "believed past its lease".to_owned(),
            Blame::BelievedWithoutTheLease => "believed without the Lease".to_owned(),
        };
        kinds
            .entry((o.peer.name(), o.round, o.outsider.kind.name(), blame))
            .or_default()
            .push((o.millis, o.awake_millis));
    }
    out.push_str(&format!(
        "overlaps: {} (peer | round | the one that should not have believed | why | count | longest ms | longest awake ms)\n",
        found.len()
    ));
    for ((peer, round, outsider, blame), ms) in kinds {
        let longest = ms.iter().map(|m| m.0).fold(0.0, f64::max);
        let awake = ms.iter().map(|m| m.1).fold(0.0, f64::max);
        out.push_str(&format!(
            "{peer} | {round:?} | {outsider} | {blame} | {} | {longest:.1} | {awake:.1}\n",
            ms.len()
        ));
    }
    for o in found {
        out.push_str(&format!(
            "  {}: {} then {} both led {:.1} ms ({:.1} awake) in {:?}: {} {:?}\n",
            o.election,
            o.older.identity,
            o.newer.identity,
            o.millis,
            o.awake_millis,
            o.round,
            o.outsider.identity,
            o.blame,
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_elections_never_overlap_by_tenures_doing() {
    let cluster = Cluster::start(Topology::Etcd { nodes: 1 })
        .await
        .expect("etcd");
    let server = LeaseServer::start(&cluster.endpoints())
        .await
        .expect("lease server");
    let config = server.kube_config().await.expect("kubeconfig");
    let client = kube::Client::try_from(config).expect("client");
    let api: Api<Lease> = Api::namespaced(client, "default");
    let mut runs = Vec::new();
    for peer in [Kind::LeaseManager, Kind::Coordinate] {
        for n in 0..ELECTIONS {
            runs.push(Election::start(&server, &api, peer, n).await.run());
        }
    }
    let elections = futures::future::join_all(runs).await;
    let found: Vec<Overlap> = elections.iter().flat_map(overlaps).collect();
    let report = summary(&elections, &found);
    println!("{report}");
    for peer in [Kind::LeaseManager, Kind::Coordinate] {
        let done = |what: fn(Round) -> bool| {
            elections
                .iter()
                .filter(|e| e.peer == peer)
                .flat_map(|e| &e.done)
                .filter(|d| what(d.round))
                .count()
        };
        let hand_overs = done(|r| r == Round::HandOver);
        let failovers = done(|r| r != Round::HandOver);
        assert!(
            hand_overs >= 20 && failovers >= 20,
            "with {}: {hand_overs} hand-overs and {failovers} failovers completed\n{report}",
            peer.name()
        );
    }
    let tenures: Vec<&Overlap> = found.iter().filter(|o| o.tenures_doing()).collect();
    assert!(
        tenures.is_empty(),
        "tenure led beside a peer by its own doing: {tenures:#?}\n{report}"
    );
}

/// Issue 44: tenure waiters write labels on the Lease (a waiter naming
/// itself next in line, one leaving the line), and kube-coordinate takes
/// any change of the Lease it holds for a renewal of its own: its
/// `update_state` sets `last_updated` to now for every new version of the
/// object, and it renews `renew_deadline` after that. So label writes that
/// come more often than `renew_deadline` hold its renewals off, while it
/// goes on saying it leads; client-go (and kube-lease-manager) judge
/// expiry by the record, whose renewTime no label write changes, and may
/// take the Lease over once leaseDurationSeconds passed since its last
/// real renewal. Here a kube-coordinate candidate (TTL 3 s: renew_deadline
/// 2 s) holds the Lease; first it renews undisturbed, then a tenure waiter
/// comes and goes every 1.5 s. The evidence for tenure-kube's README: the
/// gap between its renewals, by renewTime, undisturbed and with the waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_waiters_label_writes_hold_off_a_kube_coordinate_holders_renewals() {
    use tenure_core::{AcquireMode, Candidacy, LeaseBackend};
    let cluster = Cluster::start(Topology::Etcd { nodes: 1 })
        .await
        .expect("etcd");
    let server = LeaseServer::start(&cluster.endpoints())
        .await
        .expect("lease server");
    let config = server.kube_config().await.expect("kubeconfig");
    let api: Api<Lease> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let key = "labels-and-kube-coordinate".to_owned();
    let ttl = Kind::Coordinate.ttl();
    let kubeconfig = KubeconfigFile::write(server.addr()).expect("kubeconfig file");
    let mut peer = CandidateProcess::spawn(
        std::path::Path::new(PEER),
        &format!("kube-coordinate+{}", kubeconfig.url()),
        &key,
        "kube-coordinate-1",
        ttl,
        LIMIT,
    )
    .await
    .expect("the kube-coordinate candidate");
    peer.request(Command::Campaign, LIMIT)
        .await
        .expect("campaign")
        .expect("campaign");
    let give_up = tokio::time::Instant::now() + LIMIT;
    loop {
        match peer.next_event(Duration::from_millis(100)).await {
            Some((Message::Elected { .. }, _)) => break,
            _ => assert!(
                tokio::time::Instant::now() < give_up,
                "kube-coordinate never led"
            ),
        }
    }
    // Its renewals, by renewTime, as a watch of the Lease sees them.
    let current = api.get(&key).await.unwrap();
    let renewals = Arc::new(Mutex::new(Vec::<SystemTime>::new()));
    let watching = tokio::spawn({
        let (api, key, renewals) = (api.clone(), key.clone(), renewals.clone());
        let rv = current.metadata.resource_version.unwrap_or_default();
        async move {
            let params = WatchParams::default().fields(&format!("metadata.name={key}"));
            let mut stream = api.watch(&params, &rv).await.unwrap().boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                if let WatchEvent::Modified(lease) = event {
                    let spec = lease.spec.unwrap_or_default();
                    if let Some(at) = spec.renew_time {
                        let at: SystemTime = at.0.into();
                        let mut renewals = renewals.lock().unwrap();
                        if renewals.last() != Some(&at) {
                            renewals.push(at);
                        }
                    }
                }
            }
        }
    });
    let longest_gap = |renewals: &[SystemTime]| {
        renewals
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).unwrap_or_default())
            .max()
            .unwrap_or_default()
    };
    let phase = Duration::from_secs(9);
    tokio::time::sleep(phase).await;
    let undisturbed = renewals.lock().unwrap().clone();

    // Tenure waiters come and go: each names itself (a label write) and
    // withdraws 1.5 s later (another).
    let backend = Arc::new(
        tenure_kube::KubeBackend::from_config(
            server.kube_config().await.unwrap(),
            tenure_kube::KubeOptions::default(),
        )
        .await
        .unwrap(),
    );
    let start = renewals.lock().unwrap().len();
    let until = tokio::time::Instant::now() + phase;
    let mut n = 0;
    while tokio::time::Instant::now() < until {
        n += 1;
        let wants = Candidacy::parse(&key, &format!("w{n}"), ttl).unwrap();
        let backend = backend.clone();
        let waiting = tokio::spawn(async move { backend.acquire(&wants, AcquireMode::Wait).await });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        waiting.abort();
    }
    // The last renewal before the waiters, and those during them.
    let disturbed = renewals.lock().unwrap()[start.saturating_sub(1)..].to_vec();
    let mut last = disturbed.clone();
    last.push(SystemTime::now());
    let (calm, busy) = (longest_gap(&undisturbed), longest_gap(&last));
    let still_leading = peer
        .request(Command::Status, LIMIT)
        .await
        .expect("status")
        .map(|status| status.leader)
        .unwrap_or(false);
    println!(
        "kube-coordinate (lease_duration {ttl:?}, renew_deadline 2 s): longest gap between its \
         renewals {calm:?} undisturbed ({} renewals in {phase:?}), {busy:?} with a tenure waiter \
         coming and going every 1.5 s ({} renewals in {phase:?}); still saying it leads: \
         {still_leading}",
        undisturbed.len(),
        disturbed.len().saturating_sub(1),
    );
    watching.abort();
    let _ = peer.request(Command::Resign, LIMIT).await;
    assert!(
        calm < ttl,
        "kube-coordinate's renewals were {calm:?} apart with nobody else writing"
    );
    assert!(
        busy > ttl && still_leading,
        "tenure's label writes no longer hold off kube-coordinate's renewals past its lease \
         ({busy:?}; leading {still_leading}): update tenure-kube's README"
    );
}
