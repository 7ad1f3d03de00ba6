//! One log line per failed call of an actor's code by a client, the same on
//! every transport (HTTP action, WebSocket action, HTTP queue send): the
//! actor, the call, the code and the real message, at `warn` for an
//! internal error (clients see it masked) and at `debug` for a public one
//! (the client got it whole, so it is the client's to act on). The
//! JavaScript stack of the error, when there is one, follows at `debug`.
//! docs/errors.md, "What the server log says".

use crate::actor::ActorContext;
use crate::error::{JsOrigin, RivetError};

/// Which transport a call came over (the log's `transport` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    WebSocket,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::WebSocket => "websocket",
        }
    }
}

/// What was called: an action or a queue send, by name.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    Action(&'a str),
    QueueSend(&'a str),
}

impl Call<'_> {
    fn describe(&self) -> String {
        match self {
            Call::Action(name) => format!("action `{name}`"),
            Call::QueueSend(name) => format!("queue send to `{name}`"),
        }
    }
}

/// Logs `err`, the failure of `call` on the actor of `ctx`.
pub fn log_failed_call(ctx: &ActorContext, transport: Transport, call: Call<'_>, err: &anyhow::Error) {
    let e = RivetError::extract(err);
    let what = call.describe();
    let key = ctx.key().format();
    let (actor, actor_id, generation) = (ctx.name(), ctx.actor_id(), ctx.generation());
    let transport = transport.as_str();
    let code = e.qualified_code();
    if e.is_public() {
        tracing::debug!(actor, actor_id, key, generation, transport, code, "{what} failed: {}", e.message);
    } else {
        // Unmasked here: the message the client did not see. An internal
        // error carries the real text in `metadata.error` (docs/errors.md).
        let message = match e.metadata.as_ref().and_then(|m| m.get("error")).and_then(|v| v.as_str()) {
            Some(text) if e.group == "core" && e.code == "internal_error" => text.to_owned(),
            _ if e.group == "core" && e.code == "internal_error" => format!("{err:#}"),
            _ => e.message,
        };
        tracing::warn!(actor, actor_id, key, generation, transport, code, "{what} failed: {message}");
    }
    if let Some(stack) = JsOrigin::stack_of(err) {
        tracing::debug!(actor, actor_id, transport, "JavaScript stack of the {what} failure:\n{stack}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_named_for_the_log() {
        assert_eq!(Call::Action("boom").describe(), "action `boom`");
        assert_eq!(Call::QueueSend("jobs").describe(), "queue send to `jobs`");
    }

    #[test]
    fn the_stack_is_found_anywhere_in_the_chain() {
        let origin = JsOrigin { public: false, status_code: 500, stack: Some("Error: boom\n    at x".into()) };
        let err = RivetError::foreign("rivetkit", "internal_error", "boom").into_anyhow().context(origin);
        let err = err.context("outer");
        assert_eq!(JsOrigin::stack_of(&err), Some("Error: boom\n    at x"));
        // The stack is not part of the chain's text.
        assert!(!format!("{err:#}").contains("at x"), "{err:#}");
    }
}
