//! `EnvoyCallbacks` for the registry: turns envoy events into dispatcher
//! operations and gateway traffic into routed requests.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::FutureExt;
use rivet_envoy_client::config::ActorStopHandle;
use rivet_envoy_client::config::{
    BoxFuture, EnvoyCallbacks, HttpRequest, HttpResponse, WebSocketHandler, WebSocketSender,
};
use rivet_envoy_client::handle::EnvoyHandle;
use rivet_envoy_client::protocol;
use tokio_util::sync::CancellationToken;

use super::{EnvoyLink, KeyIndex};
use crate::actor::context::ActorIdentity;
use crate::actor::{ActorContext, ActorKey};
use crate::dispatcher::{Dispatcher, StopHandle, StopReason};
use crate::routing;

pub struct RegistryCallbacks {
    dispatcher: Arc<Dispatcher>,
    region: String,
    key_index: Option<Arc<KeyIndex>>,
}

impl RegistryCallbacks {
    pub fn new(dispatcher: Arc<Dispatcher>, key_index: Option<KeyIndex>) -> Self {
        Self {
            dispatcher,
            region: crate::env::get(crate::env::RIVET_REGION).unwrap_or_default(),
            key_index: key_index.map(Arc::new),
        }
    }
}

/// A socket handler that closes the socket as soon as it is open.
fn close_on_open(code: u16, reason: String) -> WebSocketHandler {
    WebSocketHandler {
        on_message: Box::new(|_| async {}.boxed()),
        on_close: Box::new(|_, _| async {}.boxed()),
        on_open: Some(Box::new(move |sender| async move { sender.close(Some(code), Some(reason)) }.boxed())),
    }
}

fn stop_reason(reason: protocol::StopActorReason) -> StopReason {
    match reason {
        protocol::StopActorReason::SleepIntent => StopReason::SleepIntent,
        protocol::StopActorReason::StopIntent => StopReason::StopIntent,
        protocol::StopActorReason::Destroy => StopReason::Destroy,
        protocol::StopActorReason::GoingAway => StopReason::GoingAway,
        protocol::StopActorReason::Lost => StopReason::Lost,
    }
}

impl EnvoyCallbacks for RegistryCallbacks {
    // Socket options (TCP_NODELAY, quick ACKs) are set by the envoy client
    // itself on its own socket: see the patch in vendor/rivet-envoy-client.
    fn on_connect(&self, _handle: EnvoyHandle) {}

    fn on_actor_start(
        &self,
        handle: EnvoyHandle,
        actor_id: String,
        generation: u32,
        config: protocol::ActorConfig,
        preloaded_kv: Option<protocol::PreloadedKv>,
    ) -> BoxFuture<anyhow::Result<()>> {
        self.on_actor_start_with_lost_signal(
            handle,
            actor_id,
            generation,
            config,
            preloaded_kv,
            CancellationToken::new(),
        )
    }

    fn on_actor_start_with_lost_signal(
        &self,
        handle: EnvoyHandle,
        actor_id: String,
        generation: u32,
        config: protocol::ActorConfig,
        _preloaded_kv: Option<protocol::PreloadedKv>,
        lost: CancellationToken,
    ) -> BoxFuture<anyhow::Result<()>> {
        let dispatcher = self.dispatcher.clone();
        let identity = ActorIdentity {
            actor_id,
            generation,
            name: config.name.clone(),
            key: ActorKey::parse(config.key.as_deref().unwrap_or("")),
            region: self.region.clone(),
            input: config.input,
        };
        // Built once its type is known: its limits, intervals and hooks come with it.
        let factory = dispatcher.factory(&config.name);
        let actor_config = factory.as_ref().map(|f| f.config.clone()).unwrap_or_default();
        let hooks = factory.map(|f| f.hooks.clone());
        let link = Arc::new(EnvoyLink(handle, self.key_index.clone()));
        let (ctx, inbox) = ActorContext::new(identity, lost, link, &actor_config, hooks);
        async move {
            tracing::debug!(actor_id = %ctx.actor_id(), generation = ctx.generation(), name = %config.name, "actor start");
            let result = dispatcher.start_actor(&config.name, ctx.clone(), inbox).await;
            if let Err(err) = &result {
                tracing::warn!(actor_id = %ctx.actor_id(), generation = ctx.generation(), error = %format!("{err:#}"), "actor start failed");
            }
            result
        }
        .boxed()
    }

    fn on_actor_stop_with_completion(
        &self,
        _handle: EnvoyHandle,
        actor_id: String,
        generation: u32,
        reason: protocol::StopActorReason,
        stop_handle: ActorStopHandle,
    ) -> BoxFuture<anyhow::Result<()>> {
        // The outcome travels only through the stop handle; the callback
        // itself returns at once so the envoy loop is never blocked.
        let dispatcher = self.dispatcher.clone();
        let reason = stop_reason(reason);
        let stop = StopHandle::new(move |result| {
            stop_handle.finish(result);
        });
        self.dispatcher.tracker().spawn(async move {
            tracing::debug!(%actor_id, generation, ?reason, "actor stop");
            if let Err(err) = dispatcher.stop_actor(&actor_id, generation, reason, stop).await {
                tracing::warn!(%actor_id, generation, error = %format!("{err:#}"), "actor stop failed");
            }
        });
        async { Ok(()) }.boxed()
    }

    fn on_shutdown(&self) {
        tracing::debug!("envoy shut down");
    }

    fn fetch(
        &self,
        _handle: EnvoyHandle,
        actor_id: String,
        _gateway_id: protocol::GatewayId,
        _request_id: protocol::RequestId,
        request: HttpRequest,
    ) -> BoxFuture<anyhow::Result<HttpResponse>> {
        let dispatcher = self.dispatcher.clone();
        async move { routing::http::handle_fetch(&dispatcher, &actor_id, request).await }.boxed()
    }

    fn websocket(
        &self,
        _handle: EnvoyHandle,
        actor_id: String,
        gateway_id: protocol::GatewayId,
        request_id: protocol::RequestId,
        request: HttpRequest,
        path: String,
        headers: HashMap<String, String>,
        is_hibernatable: bool,
        is_restoring_hibernatable: bool,
        sender: WebSocketSender,
    ) -> BoxFuture<anyhow::Result<WebSocketHandler>> {
        let dispatcher = self.dispatcher.clone();
        async move {
            // A generation whose start failed: open and close at once with
            // the start error, so the client learns why (failing the
            // callback makes the gateway retry the open for ~20 s, waking
            // the actor again each time, then close with
            // `guard.websocket_closed_before_open`).
            if let Some(error) = dispatcher.failed_start_error(&actor_id) {
                tracing::debug!(%actor_id, error = %error, "websocket to a failed start closed with its error");
                return Ok(close_on_open(1011, error.qualified_code()));
            }
            let result = routing::websocket::handle_websocket(
                &dispatcher,
                &actor_id,
                gateway_id,
                request_id,
                request,
                path,
                headers,
                is_hibernatable,
                is_restoring_hibernatable,
                sender,
            )
            .await;
            if let Err(err) = &result {
                tracing::debug!(%actor_id, error = %format!("{err:#}"), "websocket refused");
            }
            result
        }
        .boxed()
    }

    fn can_hibernate(
        &self,
        actor_id: &str,
        _gateway_id: &protocol::GatewayId,
        _request_id: &protocol::RequestId,
        request: &HttpRequest,
    ) -> BoxFuture<anyhow::Result<bool>> {
        let hibernate = routing::websocket::can_hibernate(&self.dispatcher, actor_id, &request.path);
        async move { Ok(hibernate) }.boxed()
    }
}
