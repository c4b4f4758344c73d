//! The simulation's own executor: every task of a schedule is polled here,
//! woken tasks in an order the seed gives (each task draws a rank when it
//! is spawned), whatever order they were woken in.
//!
//! tokio's runtime alone is not deterministic, even on one thread with the
//! clock paused: a `watch` receiver waits on one of eight `Notify`s picked
//! by tokio's own generator (seeded at random per runtime unless tokio is
//! built unstable), so the tasks one change wakes are woken, and polled, in
//! an order that differs from run to run. Here a wake-up only marks its
//! task; the executor then polls every marked task by its rank, and the
//! same marks give the same order. Ranks drawn from the seed, rather than
//! the order of spawning, let different seeds try different orders of
//! the tasks one instant wakes (a renewer before or after the `run` whose
//! term it ends, say). tokio still provides the timers and the paused clock
//! (the executor runs as the runtime's `block_on` future).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::gate::{Gate, Task};

/// A task's place in the polling order: its rank, then its number.
type Id = (u64, u64);

struct Marks {
    woken: BTreeSet<Id>,
    /// The runtime's waker for the executor itself.
    executor: Option<Waker>,
}

#[derive(Default)]
struct Shared {
    marks: Mutex<Option<Marks>>,
}

impl Shared {
    fn marks(&self) -> MutexGuard<'_, Option<Marks>> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Marks one task woken.
struct TaskWaker {
    id: Id,
    shared: Arc<Shared>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let executor = {
            let mut marks = self.shared.marks();
            let Some(marks) = marks.as_mut() else {
                return;
            };
            marks.woken.insert(self.id);
            marks.executor.clone()
        };
        if let Some(executor) = executor {
            executor.wake();
        }
    }
}

/// A task to add, and the gate of the member it belongs to, if any.
struct Spawned {
    task: Task,
    gate: Option<Arc<Gate>>,
}

thread_local! {
    static SPAWNED: RefCell<Vec<Spawned>> = const { RefCell::new(Vec::new()) };
    static KILLED: RefCell<Vec<Arc<Gate>>> = const { RefCell::new(Vec::new()) };
}

/// Adds `task` to the running executor (of this thread); it belongs to
/// the member behind `gate`, if any.
pub(crate) fn spawn(task: Task, gate: Option<Arc<Gate>>) {
    SPAWNED.with(|s| s.borrow_mut().push(Spawned { task, gate }));
}

/// Drops every task of the member behind `gate` before anything else runs.
pub(crate) fn kill(gate: Arc<Gate>) {
    KILLED.with(|k| k.borrow_mut().push(gate));
}

struct Entry {
    task: Task,
    gate: Option<Arc<Gate>>,
    waker: Waker,
}

/// Runs `main` and every task spawned meanwhile, until `main` ends; then
/// drops the tasks left. `main` goes first at every instant; the ranks of
/// the others are drawn from `seed`.
pub(crate) async fn run(main: Task, seed: u64) {
    let mut ranks = StdRng::seed_from_u64(seed);
    let shared = Arc::new(Shared::default());
    *shared.marks() = Some(Marks {
        woken: BTreeSet::new(),
        executor: None,
    });
    let mut tasks: BTreeMap<Id, Entry> = BTreeMap::new();
    let mut next = 0u64;
    spawn(main, None);
    std::future::poll_fn(|cx| {
        if let Some(marks) = shared.marks().as_mut() {
            marks.executor = Some(cx.waker().clone());
        }
        loop {
            let spawned = SPAWNED.with(|s| std::mem::take(&mut *s.borrow_mut()));
            for Spawned { task, gate } in spawned {
                let rank = match next {
                    0 => 0,
                    _ => ranks.random_range(1..=u64::MAX),
                };
                let id = (rank, next);
                next += 1;
                let waker = Waker::from(Arc::new(TaskWaker {
                    id,
                    shared: shared.clone(),
                }));
                // tokio's co-operative budget is the executor's as a whole;
                // each task has its turns here instead.
                let task = Box::pin(tokio::task::unconstrained(task));
                tasks.insert(id, Entry { task, gate, waker });
                if let Some(marks) = shared.marks().as_mut() {
                    marks.woken.insert(id);
                }
            }
            let killed = KILLED.with(|k| std::mem::take(&mut *k.borrow_mut()));
            for gate in killed {
                let dead: Vec<Id> = tasks
                    .iter()
                    .filter(|(_, e)| e.gate.as_ref().is_some_and(|g| Arc::ptr_eq(g, &gate)))
                    .map(|(id, _)| *id)
                    .collect();
                for id in dead {
                    drop(tasks.remove(&id));
                }
            }
            let woken = shared.marks().as_mut().and_then(|m| m.woken.pop_first());
            let Some(id) = woken else {
                let pending = SPAWNED.with(|s| !s.borrow().is_empty())
                    || KILLED.with(|k| !k.borrow().is_empty());
                if pending {
                    continue;
                }
                return Poll::Pending;
            };
            let Some(entry) = tasks.get_mut(&id) else {
                continue;
            };
            let waker = entry.waker.clone();
            let polled = entry.task.as_mut().poll(&mut Context::from_waker(&waker));
            if polled.is_ready() {
                tasks.remove(&id);
                if id == (0, 0) {
                    return Poll::Ready(());
                }
            }
        }
    })
    .await;
    // Wake-ups from the tasks' drops go nowhere.
    *shared.marks() = None;
    drop(tasks);
    SPAWNED.with(|s| s.borrow_mut().clear());
    KILLED.with(|k| k.borrow_mut().clear());
}

/// Pins a future as a task.
pub(crate) fn task(future: impl Future<Output = ()> + Send + 'static) -> Task {
    Box::pin(future) as Pin<Box<dyn Future<Output = ()> + Send>>
}
