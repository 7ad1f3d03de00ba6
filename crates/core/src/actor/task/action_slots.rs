//! The cap on client action handlers running at once in one generation
//! (`maxActions`, default 128; docs/admission.md, "Check 3").
//!
//! An action past the cap waits for a slot before its handler is called;
//! the wait counts toward its action timeout, as the client's own timer
//! does. At most as many wait as the traffic queue holds
//! (`dispatch_queue_capacity`); past that the action is answered
//! `actor.overloaded` at once, so waiting work stays bounded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::catalog;

/// Default of `maxActions`.
pub const DEFAULT_MAX_ACTIONS: usize = 128;

pub(super) struct ActionSlots {
    slots: Arc<Semaphore>,
    max: usize,
    waiting: Arc<AtomicUsize>,
    max_waiting: usize,
}

/// What [`ActionSlots::reserve`] got.
pub(super) enum Reserved {
    Now(ActionSlot),
    Later(BoxFuture<'static, ActionSlot>),
}

impl Reserved {
    pub(super) async fn wait(self) -> ActionSlot {
        match self {
            Reserved::Now(slot) => slot,
            Reserved::Later(slot) => slot.await,
        }
    }
}

/// A running action's slot; given back when dropped.
pub(super) struct ActionSlot(#[allow(dead_code)] OwnedSemaphorePermit);

impl ActionSlots {
    pub(super) fn new(max: usize, max_waiting: usize) -> Self {
        let max = max.max(1);
        Self { slots: Arc::new(Semaphore::new(max)), max, waiting: Arc::default(), max_waiting: max_waiting.max(1) }
    }

    /// A slot now, or a place in line for one; `actor.overloaded` when the
    /// line is full. A slot taken now lets the caller call the handler at
    /// once, in the order the traffic arrived; the line is first come,
    /// first served (a free slot goes to the line before a newcomer).
    pub(super) fn reserve(&self) -> anyhow::Result<Reserved> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(Reserved::Now(ActionSlot(permit)));
        }
        let max_waiting = self.max_waiting;
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max_waiting).then_some(n + 1))
            .map_err(|_| {
                catalog::actor_overloaded("actions", &format!("run an action ({} run at once)", self.max), max_waiting)
                    .into_anyhow()
            })?;
        let waiter = Waiting(Arc::clone(&self.waiting));
        let slots = Arc::clone(&self.slots);
        Ok(Reserved::Later(Box::pin(async move {
            let permit = slots.acquire_owned().await.expect("the action semaphore is never closed");
            drop(waiter);
            ActionSlot(permit)
        })))
    }

    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

/// A place in line; left when the wait ends or is abandoned.
struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_then_a_bounded_line() {
        let slots = ActionSlots::new(1, 1);
        let first = slots.reserve().unwrap().wait().await;
        let second = slots.reserve().unwrap();
        assert!(matches!(second, Reserved::Later(_)));
        assert_eq!(slots.waiting(), 1);
        let err = slots.reserve().err().expect("a second waiter past the line's bound");
        assert!(format!("{err:#}").contains("overloaded"), "{err:#}");
        drop(first);
        let _second = second.wait().await;
        assert_eq!(slots.waiting(), 0);
    }

    #[tokio::test]
    async fn an_abandoned_wait_leaves_the_line() {
        let slots = ActionSlots::new(1, 1);
        let _first = slots.reserve().unwrap().wait().await;
        drop(slots.reserve().unwrap());
        assert_eq!(slots.waiting(), 0);
    }
}
