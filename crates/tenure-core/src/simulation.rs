//! What a deterministic simulation of the Elector needs from core (cargo
//! feature `__simulation`: test-only, not part of the API).
//!
//! Core has four sources of behaviour that differ from run to run on one
//! machine; a simulation on tokio's paused clock must fix each of them for
//! the same seed to give the same trace:
//!
//! - randomness: renewal jitter and retry back-off (`backoff.rs`) draw from
//!   [`random`], which is `rand::rng()` unless a simulation seeded this thread;
//! - the renewal grid of a batching backend starts at the first instant
//!   any elector of the process asks for it, a `static`: a simulation gives
//!   each world its own start;
//! - `tokio::select!` polls its branches in an order drawn from tokio's own
//!   per-runtime generator, which only an unstable tokio build can seed:
//!   core's selects go through [`select`], which polls them in the written
//!   order while a simulation runs on this thread;
//! - renewers are spawned on the caller's runtime (`RenewOn::CurrentRuntime`):
//!   a simulation takes the spawn, to freeze a paused member's renewers with
//!   the rest of it.
//!
//! (Identities are not random: an elector without one uses `POD_NAME` or the
//! host name and pid, and a simulation names every candidate. The
//! `SystemTime` in health reports is reported, never acted on.)
//!
//! Nothing changes unless [`install`] was called on the thread.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;

use rand::rngs::StdRng;
use rand::RngCore;
use tokio::time::Instant;

/// A task core would spawn on the current runtime.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Takes the tasks core spawns on the current runtime.
pub(crate) type Spawner = Box<dyn Fn(Task)>;

thread_local! {
    static RNG: RefCell<Option<StdRng>> = const { RefCell::new(None) };
    static ORDERED: Cell<bool> = const { Cell::new(false) };
    static GRID_EPOCH: Cell<Option<Instant>> = const { Cell::new(None) };
    static SPAWNER: RefCell<Option<std::rc::Rc<Spawner>>> = const { RefCell::new(None) };
}

/// Calls `f` with this thread's random source: the simulation's seeded
/// generator while one is installed, else `rand::rng()`.
pub(crate) fn random<T>(f: impl FnOnce(&mut dyn RngCore) -> T) -> T {
    let mut f = Some(f);
    let seeded = RNG.with(|rng| {
        rng.borrow_mut()
            .as_mut()
            .map(|rng| (f.take().expect("called once"))(rng))
    });
    match seeded {
        Some(out) => out,
        None => (f.take().expect("called once"))(&mut rand::rng()),
    }
}

/// Whether `select!` polls its branches in the written order (a
/// simulation runs on this thread) rather than tokio's random order.
pub(crate) fn ordered() -> bool {
    ORDERED.with(Cell::get)
}

/// The start of the renewal grid a simulation gave this thread, if any.
pub(crate) fn grid_epoch() -> Option<Instant> {
    GRID_EPOCH.with(Cell::get)
}

/// Hands `task` to the simulation's spawner, or gives it back if none is
/// installed on this thread.
pub(crate) fn spawn(task: Task) -> Option<Task> {
    let spawner = SPAWNER.with(|s| s.borrow().clone());
    match spawner {
        Some(spawner) => {
            spawner(task);
            None
        }
        None => Some(task),
    }
}

/// `tokio::select!`, polling the branches in the written order while a
/// simulation runs on this thread (see the module's doc).
macro_rules! select {
    ($($arms:tt)*) => {
        if $crate::simulation::ordered() {
            ::tokio::select! { biased; $($arms)* }
        } else {
            ::tokio::select! { $($arms)* }
        }
    };
}
pub(crate) use select;

/// The world a simulation gives this thread (test-only, not part of the API).
#[cfg(feature = "__simulation")]
pub struct World {
    /// Seeds every random draw of core on this thread.
    pub seed: u64,
    /// Where the renewal grid of batching backends starts.
    pub grid_epoch: Instant,
    /// Takes every task core spawns on the current runtime (renewers):
    /// the simulation spawns it, wrapped as it likes.
    pub spawner: Box<dyn Fn(Task)>,
}

/// Installs `world` on this thread until the guard is dropped (test-only,
/// not part of the API).
#[cfg(feature = "__simulation")]
pub fn install(world: World) -> Installed {
    RNG.with(|rng| {
        *rng.borrow_mut() = Some(<StdRng as rand::SeedableRng>::seed_from_u64(world.seed))
    });
    ORDERED.with(|o| o.set(true));
    GRID_EPOCH.with(|e| e.set(Some(world.grid_epoch)));
    SPAWNER.with(|s| *s.borrow_mut() = Some(std::rc::Rc::new(world.spawner)));
    Installed(std::marker::PhantomData)
}

/// Keeps a simulated world installed on this thread; dropping it restores
/// core's ordinary behaviour (test-only, not part of the API).
#[cfg(feature = "__simulation")]
#[must_use = "the world is uninstalled when this is dropped"]
pub struct Installed(std::marker::PhantomData<*const ()>);

#[cfg(feature = "__simulation")]
impl Drop for Installed {
    fn drop(&mut self) {
        RNG.with(|rng| *rng.borrow_mut() = None);
        ORDERED.with(|o| o.set(false));
        GRID_EPOCH.with(|e| e.set(None));
        SPAWNER.with(|s| *s.borrow_mut() = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn without_a_world_draws_differ_and_nothing_is_taken() {
        let draws: std::collections::BTreeSet<u64> =
            (0..20).map(|_| random(|r| r.random::<u64>())).collect();
        assert!(draws.len() > 1);
        assert!(!ordered());
        assert!(grid_epoch().is_none());
        assert!(spawn(Box::pin(async {})).is_some());
    }

    #[cfg(feature = "__simulation")]
    #[test]
    fn a_world_fixes_the_draws_until_it_is_uninstalled() {
        let world = |seed| World {
            seed,
            grid_epoch: Instant::now(),
            spawner: Box::new(drop),
        };
        let draws = |seed| {
            let _world = install(world(seed));
            assert!(ordered() && grid_epoch().is_some());
            assert!(spawn(Box::pin(async {})).is_none());
            (0..8)
                .map(|_| random(|r| r.random::<u64>()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        assert!(!ordered() && spawn(Box::pin(async {})).is_some());
    }
}
