//! `runtimeState()` and `clearRuntimeState()`: a plain JavaScript object
//! per generation, kept on the JS thread.

use napi::bindgen_prelude::{Object, ObjectRef};
use napi::Env;
use napi_derive::napi;

use super::handle::ActorContext;

#[napi]
impl ActorContext {
    /// A plain object private to this generation: the same object on every
    /// call (and every handle) until `clearRuntimeState()`.
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn runtime_state<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let generation = self.inner.generation();
        RUNTIME_STATE.with(|map| {
            let mut map = map.borrow_mut();
            // Looked up by `&str`: RivetKit calls this about ten times per
            // action, and a lookup should not allocate.
            if let Some((_, existing)) =
                map.get(self.inner.actor_id()).and_then(|gens| gens.iter().find(|(g, _)| *g == generation))
            {
                return existing.get_value(env);
            }
            let object = Object::new(env)?;
            let reference = object.create_ref::<false>()?;
            map.entry(self.inner.actor_id().to_string()).or_default().push((generation, reference));
            Ok(object)
        })
    }

    /// Forgets this generation's `runtimeState()` object.
    #[napi]
    pub fn clear_runtime_state(&self, env: &Env) -> napi::Result<()> {
        let generation = self.inner.generation();
        let removed = RUNTIME_STATE.with(|map| {
            let mut map = map.borrow_mut();
            let gens = map.get_mut(self.inner.actor_id())?;
            let at = gens.iter().position(|(g, _)| *g == generation)?;
            let (_, reference) = gens.swap_remove(at);
            if gens.is_empty() {
                map.remove(self.inner.actor_id());
            }
            Some(reference)
        });
        match removed {
            Some(reference) => reference.unref(env),
            None => Ok(()),
        }
    }
}

type RuntimeStates = std::collections::HashMap<String, Vec<(u32, ObjectRef<false>)>>;

thread_local! {
    /// `runtimeState()` objects by actor id, then generation. JS thread
    /// only: references must be created and released there.
    static RUNTIME_STATE: std::cell::RefCell<RuntimeStates> = std::cell::RefCell::new(RuntimeStates::new());
}
