//! `runtimeState()` and `clearRuntimeState()`: a plain JavaScript object
//! per generation, kept on the JS thread.
//!
//! The rules (docs/versions.md), the same for RivetKit 2.3 and 3.0: one bag
//! per generation, the same object on every call and every handle; after
//! `clearRuntimeState()` the next call hands out a fresh bag (RivetKit 3.0
//! reads it at once and marks it `cleared`, so that later reads of that
//! generation fail with `actor.stopping`); a stopped generation's bag stays
//! readable through its context. A bag is therefore kept for as long as
//! any handle on its generation's context lives, and released (on the JS
//! thread, by a later call) once none does: nobody can ask for it then.

use napi::bindgen_prelude::{Object, ObjectRef};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::context::WeakContext;

use super::handle::ActorContext;

#[napi]
impl ActorContext {
    /// A plain object private to this generation: the same object on every
    /// call (and every handle) until `clearRuntimeState()`, then a fresh one.
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn runtime_state<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        RUNTIME_STATE.with(|bags| {
            let mut bags = bags.borrow_mut();
            // Looked up by `&str`: RivetKit calls this about ten times per
            // action, and a lookup should not allocate.
            if let Some(existing) = bags.get(self.inner.actor_id(), |owner| owner.refers_to(&self.inner)) {
                return existing.get_value(env);
            }
            let object = Object::new(env)?;
            let reference = object.create_ref::<false>()?;
            let released = bags.insert(self.inner.actor_id(), self.inner.downgrade(), reference);
            for reference in released {
                reference.unref(env)?;
            }
            Ok(object)
        })
    }

    /// Forgets this generation's `runtimeState()` object: the next call
    /// hands out a fresh one.
    #[napi]
    pub fn clear_runtime_state(&self, env: &Env) -> napi::Result<()> {
        let removed =
            RUNTIME_STATE.with(|bags| bags.borrow_mut().remove(self.inner.actor_id(), |o| o.refers_to(&self.inner)));
        match removed {
            Some(reference) => reference.unref(env),
            None => Ok(()),
        }
    }
}

/// What a bag is kept for: its generation, held weakly.
pub(crate) trait Owner {
    /// Whether a handle on the generation still lives.
    fn is_alive(&self) -> bool;
}

impl Owner for WeakContext {
    fn is_alive(&self) -> bool {
        WeakContext::is_alive(self)
    }
}

/// Below this many bags no sweep runs.
const MIN_SWEEP: usize = 64;

/// The bags by actor id, then by generation (its owner). A sweep drops the
/// bags whose generation nobody holds any more; it runs when the table has
/// doubled since the last one, so its cost is spread over the inserts.
pub(crate) struct Bags<W, R> {
    by_actor: std::collections::HashMap<String, Vec<(W, R)>>,
    len: usize,
    next_sweep: usize,
}

impl<W: Owner, R> Bags<W, R> {
    pub(crate) fn new() -> Self {
        Self { by_actor: std::collections::HashMap::new(), len: 0, next_sweep: MIN_SWEEP }
    }

    pub(crate) fn get(&self, actor_id: &str, mine: impl Fn(&W) -> bool) -> Option<&R> {
        self.by_actor.get(actor_id)?.iter().find(|(owner, _)| mine(owner)).map(|(_, bag)| bag)
    }

    /// Adds a bag; returns the bags a sweep dropped, for the caller to
    /// release.
    pub(crate) fn insert(&mut self, actor_id: &str, owner: W, bag: R) -> Vec<R> {
        let mut released = Vec::new();
        if self.len >= self.next_sweep {
            for bags in self.by_actor.values_mut() {
                let (live, dead): (Vec<_>, Vec<_>) = std::mem::take(bags).into_iter().partition(|(o, _)| o.is_alive());
                *bags = live;
                released.extend(dead.into_iter().map(|(_, bag)| bag));
            }
            self.by_actor.retain(|_, bags| !bags.is_empty());
            self.len -= released.len();
            self.next_sweep = (self.len * 2).max(MIN_SWEEP);
        }
        self.by_actor.entry(actor_id.to_owned()).or_default().push((owner, bag));
        self.len += 1;
        released
    }

    pub(crate) fn remove(&mut self, actor_id: &str, mine: impl Fn(&W) -> bool) -> Option<R> {
        let bags = self.by_actor.get_mut(actor_id)?;
        let at = bags.iter().position(|(owner, _)| mine(owner))?;
        let (_, bag) = bags.swap_remove(at);
        if bags.is_empty() {
            self.by_actor.remove(actor_id);
        }
        self.len -= 1;
        Some(bag)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }
}

thread_local! {
    /// `runtimeState()` objects by actor id, then generation. JS thread
    /// only: references must be created and released there.
    static RUNTIME_STATE: std::cell::RefCell<Bags<WeakContext, ObjectRef<false>>> =
        std::cell::RefCell::new(Bags::new());
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Weak};

    use super::*;

    impl Owner for Weak<()> {
        fn is_alive(&self) -> bool {
            self.strong_count() > 0
        }
    }

    fn mine(ctx: &Arc<()>) -> impl Fn(&Weak<()>) -> bool + '_ {
        move |owner| std::ptr::eq(owner.as_ptr(), Arc::as_ptr(ctx))
    }

    #[test]
    fn one_bag_per_generation_and_a_fresh_one_after_a_clear() {
        let mut bags = Bags::new();
        let (one, two) = (Arc::new(()), Arc::new(()));
        assert!(bags.insert("a", Arc::downgrade(&one), "bag 1").is_empty());
        assert!(bags.insert("a", Arc::downgrade(&two), "bag 2").is_empty());
        assert_eq!(bags.get("a", mine(&one)), Some(&"bag 1"));
        assert_eq!(bags.get("a", mine(&two)), Some(&"bag 2"));
        assert_eq!(bags.remove("a", mine(&one)), Some("bag 1"));
        assert_eq!(bags.get("a", mine(&one)), None, "the next read makes a fresh bag");
        assert_eq!(bags.get("a", mine(&two)), Some(&"bag 2"), "another generation's bag is untouched");
    }

    /// RivetKit 3.0 reads a fresh bag after every clear (to mark it
    /// `cleared`) and never clears it: without a sweep, every generation
    /// would leave one bag behind for the life of the process.
    #[test]
    fn bags_of_generations_nobody_holds_are_released() {
        let mut bags = Bags::new();
        let kept = Arc::new(());
        bags.insert("kept", Arc::downgrade(&kept), 0);
        let mut released = Vec::new();
        for generation in 1..=1000 {
            let ctx = Arc::new(());
            released.extend(bags.insert("a", Arc::downgrade(&ctx), generation));
            // The generation stops and its last handle goes.
        }
        assert!(bags.len() <= 2 * MIN_SWEEP, "{} bags kept", bags.len());
        assert_eq!(released.len() + bags.len(), 1001, "each bag is kept or handed back to be released");
        assert!(!released.contains(&0), "a held generation keeps its bag");
        assert_eq!(bags.get("kept", mine(&kept)), Some(&0));
    }
}
