use std::{collections::HashMap, sync::Arc};

// Retain the established `config::*` API while keeping implementations in their domain modules.
pub use crate::{
	callbacks::{ActorStopHandle, BoxFuture, EnvoyCallbacks},
	http::{
		HTTP_BODY_MAX_CHUNK_SIZE, HTTP_BODY_STREAM_CHANNEL_CAPACITY, HttpRequest,
		HttpRequestBodyError, HttpRequestBodyStream, HttpResponse, HttpResponseBodyStream,
		ResponseChunk,
	},
	websocket::{WebSocketHandler, WebSocketMessage, WebSocketSender},
};

pub struct EnvoyConfig {
	pub version: u32,
	pub endpoint: String,
	/// rivetkit-native patch: more engine nodes to connect to, in turn,
	/// when the connection to the current one ends or cannot be made
	/// (`crate::connection`'s reconnect loop). Empty: `endpoint` only.
	pub fallback_endpoints: Vec<String>,
	pub token: Option<String>,
	pub namespace: String,
	pub pool_name: String,
	pub prepopulate_actor_names: HashMap<String, ActorName>,
	pub metadata: Option<serde_json::Value>,
	/// When `start_envoy` is called, create a new envoy every time instead of using a single global envoy
	/// instance for the entire runtime.
	pub not_global: bool,

	/// Debug option to inject artificial latency (in ms) into WebSocket communication.
	pub debug_latency_ms: Option<u64>,

	/// rivetkit-native patch: HTTP requests admitted to one actor that its
	/// task has not taken yet (they wait while it starts); past this a
	/// request is answered `envoy.actor_overloaded` (`crate::queued_requests`).
	pub max_queued_requests_per_actor: usize,

	/// rivetkit-native patch: the actor id the lease's probes name
	/// (`crate::lease`): one the engine answers with an error at once. It
	/// depends on the engine: [`crate::lease::NO_ACTOR`] for 2.3,
	/// [`crate::lease::NIL_ACTOR`] for 3.0, which drops the connection on an
	/// id that does not parse.
	pub lease_probe_actor_id: String,

	pub callbacks: Arc<dyn EnvoyCallbacks>,
}

pub struct ActorName {
	pub metadata: serde_json::Value,
}
