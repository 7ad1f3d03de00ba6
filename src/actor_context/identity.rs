//! Who the actor is: `actorId`, `name`, `key`, `region`, `generation` and
//! `sameActorInstance`.

use napi_derive::napi;

use super::handle::ActorContext;
use crate::bridge::types::JsActorKeySegment;

#[napi]
impl ActorContext {
    #[napi]
    pub fn actor_id(&self) -> String {
        self.inner.actor_id().to_string()
    }

    #[napi]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// The key's segments. Every segment is a string on the wire.
    #[napi]
    pub fn key(&self) -> Vec<JsActorKeySegment> {
        self.inner
            .key()
            .segments()
            .iter()
            .map(|s| JsActorKeySegment { kind: "string".into(), string_value: Some(s.clone()), number_value: None })
            .collect()
    }

    #[napi]
    pub fn region(&self) -> String {
        self.inner.region().to_string()
    }

    /// The generation number (1 for the first start; higher on every wake).
    #[napi]
    pub fn generation(&self) -> u32 {
        self.inner.generation()
    }

    /// True when both handles refer to the same generation.
    #[napi]
    pub fn same_actor_instance(&self, other: &ActorContext) -> bool {
        self.inner.same_instance(&other.inner)
    }
}
