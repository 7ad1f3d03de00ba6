//! The serverless envoy: started by the first `/start`, reused by every
//! later one, stopped at shutdown.
//!
//! One envoy per host, like the reference (its `serverlessCacheEnvoy`): the
//! engine sends every start of a pool to the same URL, and one envoy can
//! hold many actors. A start for another endpoint, namespace or pool than
//! the cached envoy's is refused (`config.*_mismatch`) instead of opening a
//! second link. An envoy that stopped on its own (the engine evicted it) is
//! replaced by the next start.

use std::future::Future;
use std::sync::Mutex;

use rivet_envoy_client::handle::EnvoyHandle;

use super::start::{endpoints_match, mismatch, StartHeaders};
use crate::error::{catalog, RivetError};

#[derive(Default)]
pub(super) struct EnvoyCache {
    /// Held while an envoy connects, so concurrent starts wait for it
    /// rather than opening their own, and shutdown waits for it too.
    connecting: tokio::sync::Mutex<()>,
    current: Mutex<Option<EnvoyHandle>>,
    closed: Mutex<bool>,
}

impl EnvoyCache {
    /// The envoy for `headers`: the cached one, or a new one from `connect`.
    pub(super) async fn get_or_connect<F, Fut>(&self, headers: &StartHeaders, connect: F) -> anyhow::Result<EnvoyHandle>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = anyhow::Result<EnvoyHandle>>,
    {
        let _connecting = self.connecting.lock().await;
        if *self.closed.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(catalog::registry_shut_down().into_anyhow());
        }
        if let Some(envoy) = self.current() {
            if !envoy.is_stopped() {
                check_same(&envoy, headers)?;
                return Ok(envoy);
            }
            tracing::info!("the serverless envoy stopped; starting a new one");
        }
        let envoy = connect().await?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(envoy.clone());
        tracing::info!(pool = %headers.pool_name, namespace = %headers.namespace, "serverless envoy connected");
        Ok(envoy)
    }

    /// Refuses `headers` at once if a live envoy serves another endpoint,
    /// namespace or pool (checked again under the lock when connecting).
    pub(super) fn check(&self, headers: &StartHeaders) -> Result<(), RivetError> {
        match self.current() {
            Some(envoy) if !envoy.is_stopped() => check_same(&envoy, headers),
            _ => Ok(()),
        }
    }

    /// The cached envoy, if any.
    pub(super) fn current(&self) -> Option<EnvoyHandle> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Refuses every later start and hands out the cached envoy (after any
    /// connect in flight finished), for the shutdown drain.
    pub(super) async fn close(&self) -> Option<EnvoyHandle> {
        let _connecting = self.connecting.lock().await;
        *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.current.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

fn check_same(envoy: &EnvoyHandle, headers: &StartHeaders) -> Result<(), RivetError> {
    if !endpoints_match(envoy.endpoint(), &headers.endpoint) {
        return Err(mismatch("endpoint", envoy.endpoint(), &headers.endpoint));
    }
    if envoy.namespace() != headers.namespace {
        return Err(mismatch("namespace", envoy.namespace(), &headers.namespace));
    }
    if envoy.pool_name() != headers.pool_name {
        return Err(mismatch("pool", envoy.pool_name(), &headers.pool_name));
    }
    Ok(())
}
