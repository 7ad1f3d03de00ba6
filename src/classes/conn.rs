//! `ConnHandle`: JavaScript's handle on one connection.

use napi::bindgen_prelude::{Buffer, PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::{ActorContext as CoreContext, Conn};

use crate::bridge::error::{spawn_promise, throw, to_js_error};
use crate::bridge::types::args::{self, ArgResult};

#[napi]
pub struct ConnHandle {
    pub(crate) conn: Conn,
    pub(crate) ctx: CoreContext,
}

impl ConnHandle {
    pub(crate) fn new(ctx: &CoreContext, conn: &Conn) -> Self {
        Self { conn: conn.clone(), ctx: ctx.clone() }
    }
}

#[napi]
impl ConnHandle {
    #[napi]
    pub fn id(&self) -> String {
        self.conn.id().to_string()
    }

    /// The connection params the client sent (CBOR).
    #[napi]
    pub fn params(&self) -> Buffer {
        Buffer::from(self.conn.params().to_vec())
    }

    /// The connection's state (CBOR for the TypeScript runtime).
    #[napi]
    pub fn state(&self) -> Buffer {
        Buffer::from(self.conn.state())
    }

    /// Replaces the connection's state; `state` must be a `Buffer`.
    #[napi(ts_args_type = "state: Buffer")]
    pub fn set_state(&self, env: &Env, state: Unknown<'_>) -> napi::Result<()> {
        let state = args::bytes("state", state).map_err(|e| throw(env, e))?;
        self.conn.set_state(state);
        Ok(())
    }

    /// Whether the connection survives the actor's sleep.
    #[napi]
    pub fn is_hibernatable(&self) -> bool {
        self.conn.is_hibernatable()
    }

    /// Sends an event to this connection (whatever it subscribed to).
    #[napi(ts_args_type = "name: string, args: Buffer")]
    pub fn send(&self, env: &Env, name: Unknown<'_>, args: Unknown<'_>) -> napi::Result<()> {
        let read = || -> ArgResult<(String, Vec<u8>)> { Ok((args::string("name", name)?, args::bytes("args", args)?)) };
        let (name, args) = read().map_err(|e| throw(env, e))?;
        self.ctx.send_event(&self.conn, &name, &args).map_err(|e| to_js_error(env, e))
    }

    /// Closes the connection (code 1000 with `reason`); `onDisconnect` runs.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn disconnect<'env>(&self, env: &'env Env, reason: Option<String>) -> napi::Result<PromiseRaw<'env, ()>> {
        disconnect(&self.ctx, &self.conn, reason.as_deref());
        spawn_promise(env, async { Ok(()) })
    }
}

/// Removes the connection from its actor, closes its socket and queues
/// `onDisconnect` (through the actor's dispatcher entry point).
pub(crate) fn disconnect(ctx: &CoreContext, conn: &Conn, reason: Option<&str>) {
    ctx.close_conn_transport(conn, 1000, reason.unwrap_or("disconnected"));
    ctx.disconnect(conn);
}
