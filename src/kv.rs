//! `Kv`: the actor's own key-value store (`ActorContext.kv()`).

use napi_derive::napi;
use rivetkit_native_core::actor::ActorContext as CoreContext;

#[napi]
pub struct Kv {
    pub(crate) ctx: CoreContext,
}
