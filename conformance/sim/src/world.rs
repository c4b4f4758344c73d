//! One schedule, run: the server, the members and their electors, the
//! application's tasks, and the driver that applies the plan in time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure_core::{
    ElectionKey, Elector, ElectorBug, Fence, LeaderEvent, LeaseBackend, MemoryBackend, RenewOn,
    Term,
};
use tokio::sync::mpsc;
use tokio::time::{sleep, sleep_until, Instant};

use crate::gate::{Gate, Gated};
use crate::judge::{member_of, Judge};
use crate::link::Link;
use crate::plan::{Action, Happening, LinkState, Plan};
use crate::trace::Event;

/// Plants a bug in every elector: given the TTL and drift margin, the bug.
pub type Planting = fn(Duration, Duration) -> ElectorBug;

/// What a holder of a campaign is told.
enum Command {
    Resign,
    Drop,
}

/// One elector of a member, for one key.
struct Slot {
    key: usize,
    elector: Elector,
    /// The elector's number (each elector of the schedule has its own; a
    /// shutdown or a restart brings a new one).
    generation: u64,
    /// `shutdown()` was called: the next action builds a new elector.
    stopped: bool,
    /// A campaign or `run` task of this elector is under way.
    busy: Arc<AtomicBool>,
    /// Whether that task is a `run` (it campaigns again by itself).
    running: Arc<AtomicBool>,
    /// Tells the holder of a campaign to resign or drop its leadership.
    holder: Option<mpsc::UnboundedSender<Command>>,
}

struct Member {
    index: usize,
    link: Arc<Link>,
    gate: Arc<Gate>,
    slots: Vec<Slot>,
    paused: bool,
    down: bool,
    /// The link's state is `LinkState::Clean`.
    link_clean: bool,
    /// How many times its link's state was set.
    link_changes: u64,
}

/// Clears a flag when dropped.
struct Flag(Arc<AtomicBool>);

impl Flag {
    fn raise(flag: &Arc<AtomicBool>) -> Flag {
        flag.store(true, Ordering::SeqCst);
        Flag(flag.clone())
    }
}

impl Drop for Flag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Everything a member's tasks share.
#[derive(Clone)]
struct Shared {
    judge: Arc<Judge>,
    fences: Arc<Vec<Fence>>,
    keys: Arc<Vec<String>>,
    ttl: Duration,
}

impl Shared {
    /// One step of a leader's work: check `is_valid()`, then write through
    /// the key's fence with the term's token. False if the term is over.
    fn work_step(&self, member: usize, key: usize, term: &Term) -> bool {
        if !term.is_valid() {
            return false;
        }
        let token = term.token().expect("the memory backend fences");
        let accepted = self.fences[key].check(&self.keys[key], token).is_ok();
        self.judge.wrote(member, key, token.get(), accepted);
        true
    }

    /// How long a leader waits between steps.
    fn step(&self, rng: &mut StdRng) -> Duration {
        let ttl = self.ttl.as_millis() as u64;
        Duration::from_millis(rng.random_range(ttl / 20..=ttl / 3))
    }
}

/// The world while a schedule runs.
pub(crate) struct World {
    plan: Plan,
    plant: Option<Planting>,
    server: MemoryBackend,
    members: Vec<Member>,
    shared: Shared,
    /// Numbers every elector built.
    electors: u64,
    /// Links to heal later, as the last happening asked.
    heals: Vec<(Duration, Due)>,
}

/// The driver's own happenings, beside the plan's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Plan(usize),
    Resume(usize),
    /// A cut link heals (unless its state changed since: the number of
    /// its state changes then).
    HealLink(usize, u64),
    Restart(usize),
    Heal,
    Liveness,
    End,
}

impl World {
    pub(crate) fn new(plan: &Plan, plant: Option<Planting>, judge: Arc<Judge>) -> World {
        let mut capabilities = MemoryBackend::default_capabilities();
        capabilities.renewals_batched = plan.batched;
        let server = MemoryBackend::with_capabilities(capabilities);
        let hook = judge.clone();
        server.on_grant(move |key, identity, token| hook.granted(key, identity, token));
        let shared = Shared {
            judge,
            fences: Arc::new(plan.keys.iter().map(|_| Fence::new()).collect()),
            keys: Arc::new(plan.keys.clone()),
            ttl: plan.ttl,
        };
        let mut world = World {
            plan: plan.clone(),
            plant,
            server,
            members: Vec::new(),
            shared,
            electors: 0,
            heals: Vec::new(),
        };
        for index in 0..plan.joins.len() {
            let member = world.member(index);
            world.members.push(member);
        }
        world
    }

    /// A member as it starts: a new client, a new gate, an elector per key.
    fn member(&mut self, index: usize) -> Member {
        let client = self.server.client();
        client.set_client_clock_rate(self.plan.clock_rates[index]);
        let link = Arc::new(Link {
            member: index,
            client,
            judge: self.shared.judge.clone(),
        });
        let slots = self.plan.joins[index]
            .clone()
            .into_iter()
            .map(|key| {
                let (elector, generation) = self.elector(&link, index, key);
                Slot {
                    key,
                    elector,
                    generation,
                    stopped: false,
                    busy: Arc::default(),
                    running: Arc::default(),
                    holder: None,
                }
            })
            .collect();
        Member {
            index,
            link,
            gate: Arc::default(),
            slots,
            paused: false,
            down: false,
            link_clean: true,
            link_changes: 0,
        }
    }

    /// A new elector of `member` for `key`, and its number.
    fn elector(&mut self, link: &Arc<Link>, member: usize, key: usize) -> (Elector, u64) {
        self.electors += 1;
        let ttl = self.plan.ttl;
        let mut builder = Elector::builder(link.clone() as Arc<dyn LeaseBackend>)
            .key(self.plan.keys[key].clone())
            .identity(format!("m{member}"))
            .ttl(ttl)
            .drift_margin(self.plan.margin)
            .retry_backoff(ttl / 20, ttl / 4)
            .renew_on(RenewOn::CurrentRuntime);
        if let Some(plant) = self.plant {
            builder = builder.plant(plant(ttl, self.plan.margin));
        }
        let elector = builder
            .build()
            .expect("the simulation's settings are valid");
        (elector, self.electors)
    }

    /// Runs the plan to its end, or to the first violation.
    pub(crate) async fn drive(mut self) {
        let start = Instant::now();
        let mut due: BinaryHeap<Reverse<(Duration, Due)>> = BinaryHeap::new();
        for (i, e) in self.plan.events.iter().enumerate() {
            due.push(Reverse((e.at, Due::Plan(i))));
        }
        let bound = self.plan.ttl + Duration::from_millis(2);
        due.push(Reverse((self.plan.heal_at, Due::Heal)));
        due.push(Reverse((self.plan.heal_at + bound, Due::Liveness)));
        due.push(Reverse((self.plan.end_at, Due::End)));
        while let Some(Reverse((at, what))) = due.pop() {
            sleep_until(start + at).await;
            if self.shared.judge.violation().is_some() {
                return;
            }
            match what {
                Due::Plan(i) => {
                    let happening = self.plan.events[i].what.clone();
                    if let Some((later, what)) = self.apply(&happening) {
                        due.push(Reverse((at + later, what)));
                    }
                    for (later, what) in self.heals.drain(..) {
                        due.push(Reverse((at + later, what)));
                    }
                }
                Due::Resume(m) => self.resume(m),
                Due::HealLink(m, changes) => {
                    let member = &self.members[m];
                    if !member.down && member.link_changes == changes {
                        self.shared.judge.push(Event::Link(m, LinkState::Clean));
                        self.set_link(m, LinkState::Clean);
                    }
                }
                Due::Restart(m) => self.restart(m),
                Due::Heal => self.heal(),
                Due::Liveness => {
                    let holders: Vec<_> = self
                        .plan
                        .keys
                        .iter()
                        .map(|k| {
                            self.server
                                .holder(&ElectionKey::new(k.clone()).expect("valid"))
                        })
                        .collect();
                    self.shared.judge.leaders(&holders, bound);
                }
                Due::End => {
                    // What the teardown does (dropping every task) is not judged.
                    self.shared.judge.close();
                    return;
                }
            }
            if self.shared.judge.violation().is_some() {
                return;
            }
        }
    }

    /// Applies one happening of the plan; what it brings about later.
    fn apply(&mut self, happening: &Happening) -> Option<(Duration, Due)> {
        let judge = self.shared.judge.clone();
        match *happening {
            Happening::Link { member, state } => {
                if !self.members[member].down {
                    judge.push(Event::Link(member, state));
                    self.set_link(member, state);
                }
            }
            Happening::CutUntilDeadline { member, offset_ms } => {
                if !self.members[member].down {
                    judge.push(Event::Link(member, LinkState::CutOff));
                    self.set_link(member, LinkState::CutOff);
                    let now = Instant::now();
                    let quarter = self.plan.ttl / 4;
                    let heal = match judge.first_deadline(member) {
                        Some(deadline) => {
                            let offset = Duration::from_millis(offset_ms.unsigned_abs());
                            match offset_ms < 0 {
                                true => deadline.checked_sub(offset).unwrap_or(deadline),
                                false => deadline + offset,
                            }
                        }
                        None => now + quarter,
                    };
                    let changes = self.members[member].link_changes;
                    return Some((
                        heal.saturating_duration_since(now),
                        Due::HealLink(member, changes),
                    ));
                }
            }
            Happening::ResetLink { member } => {
                if !self.members[member].down {
                    judge.push(Event::ResetLink(member));
                    self.members[member]
                        .link
                        .client
                        .faults()
                        .reset_connections();
                    judge.jolted(member);
                }
            }
            Happening::ServerRestart => {
                judge.server_restarted();
                for m in self.members.iter().filter(|m| !m.down) {
                    m.link.client.faults().reset_connections();
                }
            }
            Happening::SlowServer { delay, for_ } => {
                judge.push(Event::SlowServer(delay));
                let slow = LinkState::Delayed {
                    request: delay,
                    response: delay,
                };
                for member in 0..self.members.len() {
                    if !self.members[member].down {
                        self.set_link(member, slow);
                        let changes = self.members[member].link_changes;
                        self.heals.push((for_, Due::HealLink(member, changes)));
                    }
                }
            }
            Happening::Wipe { key } => {
                judge.wiping(key);
                let key = ElectionKey::new(self.plan.keys[key].clone()).expect("valid");
                self.server.wipe(&key);
            }
            Happening::Pause { member, for_ } => {
                let m = &mut self.members[member];
                if !m.down && !m.paused {
                    judge.push(Event::Paused(member));
                    m.paused = true;
                    m.gate.pause();
                    judge.member_state(member, true, false);
                    return Some((for_, Due::Resume(member)));
                }
            }
            Happening::Suspend { member, for_ } => {
                let m = &mut self.members[member];
                if !m.down && !m.paused {
                    judge.push(Event::Suspended(member));
                    m.paused = true;
                    m.gate.pause();
                    judge.member_state(member, true, false);
                    // Its clock will have lost `for_` when it wakes: in its
                    // time, the server's expiries come that much sooner.
                    m.link.client.client_clock_lost(for_);
                    return Some((for_, Due::Resume(member)));
                }
            }
            Happening::Crash { member, down_for } => {
                let m = &mut self.members[member];
                if !m.down {
                    judge.push(Event::Crashed(member));
                    m.down = true;
                    m.gate.kill();
                    crate::executor::kill(m.gate.clone());
                    m.link.client.faults().cut_off();
                    judge.member_state(member, false, false);
                    return Some((down_for, Due::Restart(member)));
                }
            }
            Happening::App {
                member,
                key,
                action,
            } => {
                let m = &self.members[member];
                if !m.down && !m.paused {
                    judge.push(Event::App(member, self.plan.keys[key].clone(), action));
                    self.act(member, key, action);
                }
            }
        }
        None
    }

    fn set_link(&mut self, member: usize, state: LinkState) {
        self.members[member].link_changes += 1;
        let faults = self.members[member].link.client.faults();
        faults.reset();
        match state {
            LinkState::Clean => {}
            LinkState::Delayed { request, response } => {
                faults.delay_requests(request);
                faults.delay_responses(response);
            }
            LinkState::CutOff => faults.cut_off(),
            LinkState::AnswersDropped => faults.drop_answers(true),
            LinkState::Refused => faults.fail_calls(true),
        }
        self.members[member].link_clean = state == LinkState::Clean;
        self.report(member);
    }

    /// Tells the judge whether the member is paused, and calm.
    fn report(&self, member: usize) {
        let m = &self.members[member];
        let calm = m.link_clean && !m.paused && !m.down;
        self.shared.judge.member_state(member, m.paused, calm);
    }

    fn resume(&mut self, member: usize) {
        let m = &mut self.members[member];
        if m.paused && !m.down {
            m.paused = false;
            m.gate.resume();
            self.shared.judge.push(Event::Resumed(member));
            self.report(member);
        }
    }

    fn restart(&mut self, member: usize) {
        if !self.members[member].down {
            return;
        }
        self.members[member] = self.member(member);
        self.shared.judge.push(Event::Restarted(member));
        self.report(member);
        // A restarted service runs its leader loop again.
        let keys: Vec<usize> = self.members[member].slots.iter().map(|s| s.key).collect();
        for key in keys {
            let seed = self.plan.seed ^ (member as u64) << 8 ^ key as u64;
            self.act(member, key, Action::Run { steps: None, seed });
        }
    }

    /// Every fault heals: links clean, paused members resume, crashed ones
    /// start again; every key gets a candidate that campaigns for good.
    fn heal(&mut self) {
        self.shared.judge.push(Event::Healed);
        for member in 0..self.members.len() {
            self.restart(member);
            self.resume(member);
            self.set_link(member, LinkState::Clean);
        }
        for key in 0..self.plan.keys.len() {
            let running = self.members.iter().any(|m| {
                m.slots
                    .iter()
                    .any(|s| s.key == key && !s.stopped && s.running.load(Ordering::SeqCst))
            });
            if running {
                continue;
            }
            let free = self.members.iter().find_map(|m| {
                m.slots
                    .iter()
                    .find(|s| s.key == key && (s.stopped || !s.busy.load(Ordering::SeqCst)))
                    .map(|_| m.index)
            });
            let run = Action::Run {
                steps: None,
                seed: self.plan.seed ^ 0x5eed ^ key as u64,
            };
            match free {
                Some(member) => self.act(member, key, run),
                None => {
                    // Every elector of the key holds a campaign: one more
                    // elector of the first candidate runs beside them.
                    let member = (0..self.members.len())
                        .find(|&m| self.plan.joins[m].contains(&key))
                        .expect("every key has candidates");
                    let link = self.members[member].link.clone();
                    let (elector, generation) = self.elector(&link, member, key);
                    let slot = Slot {
                        key,
                        elector,
                        generation,
                        stopped: false,
                        busy: Arc::default(),
                        running: Arc::default(),
                        holder: None,
                    };
                    self.members[member].slots.push(slot);
                    let index = self.members[member].slots.len() - 1;
                    self.start(member, index, run);
                }
            }
        }
    }

    /// The application's action on a member's elector for `key`.
    fn act(&mut self, member: usize, key: usize, action: Action) {
        let Some(index) = self.members[member].slots.iter().position(|s| s.key == key) else {
            return;
        };
        match action {
            Action::Campaign { .. } | Action::Run { .. } => {
                let slot = &self.members[member].slots[index];
                if slot.stopped {
                    let link = self.members[member].link.clone();
                    let (elector, generation) = self.elector(&link, member, key);
                    let slot = &mut self.members[member].slots[index];
                    slot.elector = elector;
                    slot.generation = generation;
                    slot.stopped = false;
                    slot.busy = Arc::default();
                    slot.running = Arc::default();
                    slot.holder = None;
                } else if slot.busy.load(Ordering::SeqCst) {
                    return;
                }
                self.start(member, index, action);
            }
            Action::Resign | Action::DropLeadership => {
                let slot = &self.members[member].slots[index];
                if let Some(holder) = &slot.holder {
                    let command = match action {
                        Action::Resign => Command::Resign,
                        _ => Command::Drop,
                    };
                    let _ = holder.send(command);
                }
            }
            Action::Shutdown => {
                let slot = &mut self.members[member].slots[index];
                if slot.stopped {
                    return;
                }
                slot.stopped = true;
                slot.holder = None;
                let (elector, generation) = (slot.elector.clone(), slot.generation);
                let judge = self.shared.judge.clone();
                self.spawn(member, async move {
                    elector.shutdown().await;
                    judge.shut_down(member, key, generation);
                });
            }
            Action::Observe { for_ } => {
                let elector = self.members[member].slots[index].elector.clone();
                let judge = self.shared.judge.clone();
                self.spawn(member, async move {
                    let mut events = elector.observe();
                    let end = sleep(for_);
                    tokio::pin!(end);
                    loop {
                        tokio::select! {
                            biased;
                            _ = &mut end => return,
                            event = events.next() => match event {
                                Some(event) => {
                                    let leader = match event {
                                        LeaderEvent::Elected(info) => Some((
                                            member_of(&info.identity),
                                            info.token.map_or(0, |t| t.get()),
                                        )),
                                        LeaderEvent::Vacant => None,
                                    };
                                    judge.observed(member, key, leader);
                                }
                                None => return,
                            },
                        }
                    }
                });
            }
        }
    }

    /// Starts a campaign's holder or a `run` on a slot.
    fn start(&mut self, member: usize, index: usize, action: Action) {
        let shared = self.shared.clone();
        let client = self.members[member].link.client.clone();
        let slot = &mut self.members[member].slots[index];
        let (elector, key, generation) = (slot.elector.clone(), slot.key, slot.generation);
        let busy = Flag::raise(&slot.busy);
        match action {
            Action::Campaign { attentive, seed } => {
                let (tx, mut commands) = mpsc::unbounded_channel();
                slot.holder = Some(tx);
                self.spawn(member, async move {
                    let _busy = busy;
                    let Ok(leadership) = elector.campaign().await else {
                        return;
                    };
                    let judge = shared.judge.clone();
                    judge.register(member, generation, leadership.term(), None);
                    let mut rng = StdRng::seed_from_u64(seed);
                    loop {
                        let step = sleep(shared.step(&mut rng));
                        tokio::select! {
                            biased;
                            command = commands.recv() => {
                                if let Some(Command::Resign) = command {
                                    let token = leadership.token().map_or(0, |t| t.get());
                                    // Only a term still leading hands over.
                                    let waiting = leadership.is_valid()
                                        && client.queue_len(leadership.key()) > 0;
                                    let started = Instant::now();
                                    let ok = leadership.resign().await.is_ok();
                                    judge.resigned(member, key, token, (ok, waiting, started));
                                }
                                return;
                            }
                            _ = leadership.lost(), if attentive => return,
                            _ = step => {
                                if !shared.work_step(member, key, &leadership) {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
            Action::Run { steps, seed } => {
                let running = Flag::raise(&slot.running);
                self.spawn(member, async move {
                    let (_busy, _running) = (busy, running);
                    let mut terms = 0u64;
                    let _ = elector
                        .run(move |leadership| {
                            terms += 1;
                            let shared = shared.clone();
                            let mut rng = StdRng::seed_from_u64(seed ^ terms);
                            async move {
                                let alive = Arc::new(AtomicBool::new(false));
                                let _alive = Flag::raise(&alive);
                                let term = leadership.term();
                                shared.judge.register(
                                    member,
                                    generation,
                                    term.clone(),
                                    Some(alive),
                                );
                                let mut done = 0;
                                loop {
                                    sleep(shared.step(&mut rng)).await;
                                    if !shared.work_step(member, key, &term) {
                                        // Over: `run` cancels the work.
                                        std::future::pending::<()>().await;
                                    }
                                    done += 1;
                                    if Some(done) == steps {
                                        return;
                                    }
                                }
                            }
                        })
                        .await;
                });
            }
            _ => unreachable!("only campaigns and runs start"),
        }
    }

    /// Spawns a task of `member`, behind its gate.
    fn spawn(
        &mut self,
        member: usize,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let gate = self.members[member].gate.clone();
        let gated = Gated::new(
            gate.clone(),
            member,
            self.shared.judge.clone(),
            Box::pin(task),
        );
        crate::executor::spawn(Box::pin(gated), Some(gate));
    }
}
