//! A member's tasks, frozen while it is paused and dropped when it dies.
//!
//! Every task of a member (the application's, and the renewers core spawns
//! while one of them runs) is polled through its member's [`Gate`]: while
//! the member is paused a wake-up is parked instead of polled, so its
//! timers fire into nothing and it catches up when it resumes, as a
//! stopped process does; once it is dead the task is dropped unpolled
//! (nothing is released: a crash says no goodbye).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::judge::Judge;

/// A task of a member.
pub(crate) type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

#[derive(Default)]
struct GateState {
    paused: bool,
    dead: bool,
    parked: Vec<Waker>,
}

/// Whether a member's tasks may run.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
}

impl Gate {
    fn state(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pause(&self) {
        self.state().paused = true;
    }

    pub fn resume(&self) {
        let parked = {
            let mut s = self.state();
            s.paused = false;
            std::mem::take(&mut s.parked)
        };
        parked.into_iter().for_each(Waker::wake);
    }

    pub fn kill(&self) {
        let parked = {
            let mut s = self.state();
            s.dead = true;
            std::mem::take(&mut s.parked)
        };
        parked.into_iter().for_each(Waker::wake);
    }
}

thread_local! {
    /// The member whose task is being polled, and its gate.
    static CURRENT: RefCell<Option<(Arc<Gate>, usize)>> = const { RefCell::new(None) };
}

/// A member's task behind its gate; after each poll the judge checks the
/// member's terms.
pub(crate) struct Gated {
    gate: Arc<Gate>,
    member: usize,
    judge: Arc<Judge>,
    inner: Option<Task>,
}

impl Gated {
    pub fn new(gate: Arc<Gate>, member: usize, judge: Arc<Judge>, task: Task) -> Self {
        Gated {
            gate,
            member,
            judge,
            inner: Some(task),
        }
    }
}

impl Future for Gated {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        {
            let mut s = this.gate.state();
            if s.dead {
                this.inner = None;
                return Poll::Ready(());
            }
            if s.paused {
                s.parked.push(cx.waker().clone());
                return Poll::Pending;
            }
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(());
        };
        let outer = CURRENT.with(|c| c.replace(Some((this.gate.clone(), this.member))));
        let polled = inner.as_mut().poll(cx);
        CURRENT.with(|c| *c.borrow_mut() = outer);
        if polled.is_ready() {
            this.inner = None;
        }
        this.judge.after_poll(this.member);
        polled
    }
}

/// Spawns a task core hands over (a renewer) behind the gate of the member
/// whose task is being polled.
pub(crate) fn spawn_for_current(judge: &Arc<Judge>, task: Task) {
    match CURRENT.with(|c| c.borrow().clone()) {
        Some((gate, member)) => {
            let gated = Gated::new(gate.clone(), member, judge.clone(), task);
            crate::executor::spawn(Box::pin(gated), Some(gate));
        }
        None => crate::executor::spawn(task, None),
    }
}
