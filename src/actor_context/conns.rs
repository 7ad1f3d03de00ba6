//! The actor's connections: `conns`, `broadcast`, `connectConn`,
//! `disconnectConn` and `disconnectConns` (the `ConnHandle` class is in
//! `crate::classes::conn`).

use napi::bindgen_prelude::{Function, PromiseRaw, Unknown};
use napi::{Env, JsValue};
use napi_derive::napi;

use super::handle::ActorContext;
use crate::bridge::error::{reject, spawn_promise, throw};
use crate::bridge::types::args::{self, ArgResult};
use crate::classes::conn::ConnHandle;

#[napi]
impl ActorContext {
    /// The live connections.
    #[napi]
    pub fn conns(&self) -> Vec<ConnHandle> {
        self.inner.conns().list().iter().map(|c| ConnHandle::new(&self.inner, c)).collect()
    }

    /// Sends an event to every connection subscribed to `name`.
    #[napi(ts_args_type = "name: string, args: Buffer")]
    pub fn broadcast(&self, env: &Env, name: Unknown<'_>, args: Unknown<'_>) -> napi::Result<()> {
        let read = || -> ArgResult<(String, Vec<u8>)> { Ok((args::string("name", name)?, args::bytes("args", args)?)) };
        let (name, args) = read().map_err(|e| throw(env, e))?;
        self.inner.broadcast(&name, &args);
        Ok(())
    }

    /// A connection without a socket (RivetKit uses one per raw HTTP
    /// request): the connect hooks run and it is registered until
    /// `conn.disconnect()`.
    #[napi(
        ts_args_type = "params: Buffer, request?: JsHttpRequest | undefined | null",
        ts_return_type = "Promise<ConnHandle>"
    )]
    pub fn connect_conn<'env>(
        &self,
        env: &'env Env,
        params: Unknown<'env>,
        request: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ConnHandle>> {
        let ctx = self.inner.clone();
        let read = || -> ArgResult<(Vec<u8>, Option<crate::bridge::types::JsHttpRequest>)> {
            Ok((args::bytes("params", params)?, args::opt_object("request", request)?))
        };
        let (params, request) = match read() {
            Ok(read) => read,
            Err(err) => return reject(env, err),
        };
        let request = request.map(|r| rivetkit_native_core::actor::HttpRequest {
            method: r.method,
            uri: r.uri,
            headers: r.headers.unwrap_or_default(),
            body: r.body.map(|b| b.to_vec()).unwrap_or_default(),
            ..Default::default()
        });
        spawn_promise(env, async move {
            let conn = ctx.connect_conn(params, request).await?;
            Ok(ConnHandle::new(&ctx, &conn))
        })
    }

    /// Disconnects the connection `id` (no-op if it is gone).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn disconnect_conn<'env>(&self, env: &'env Env, id: String) -> napi::Result<PromiseRaw<'env, ()>> {
        if let Some(conn) = self.inner.conns().get(&id) {
            crate::classes::conn::disconnect(&self.inner, &conn, None);
        }
        spawn_promise(env, async { Ok(()) })
    }

    /// Calls `predicate(conn)` for every live connection (synchronously,
    /// now) and disconnects those for which it returns a truthy value. A
    /// throw from the predicate is thrown from this call.
    #[napi(ts_args_type = "predicate: (conn: ConnHandle) => unknown", ts_return_type = "Promise<void>")]
    pub fn disconnect_conns<'env>(
        &self,
        env: &'env Env,
        predicate: Function<'env, ConnHandle, Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        for conn in self.inner.conns().list() {
            if predicate.call(ConnHandle::new(&self.inner, &conn))?.coerce_to_bool()? {
                crate::classes::conn::disconnect(&self.inner, &conn, None);
            }
        }
        spawn_promise(env, async { Ok(()) })
    }
}
