//! One actor generation: its context, the hooks it calls into, the task
//! that drives it from start to stop, and the raw WebSockets it is given.
//!
//! The core decides *when* things happen (order, timeouts, admission, grace
//! periods); the host runtime behind [`ActorHooks`] decides *what* each hook
//! does. The JavaScript surface is one such runtime; tests use doubles.

pub mod activity;
pub mod clients;
pub mod clock;
pub mod commands;
pub mod config;
pub mod conn;
pub mod conn_store;
pub mod context;
pub mod cron;
pub mod database;
pub mod factory;
pub mod hooks;
pub mod http_body;
pub mod inspector;
pub mod key;
pub mod key_owner;
pub mod keys;
pub mod kv;
pub mod kv_limits;
pub mod lifecycle;
pub mod link;
pub mod outbox;
pub mod output_gate;
pub mod persisted;
pub mod queue;
pub mod request;
pub mod run_handler;
pub mod runtime_socket;
pub mod save;
pub mod schedule;
pub mod scheduled_fire;
pub mod signals;
pub mod state_transaction;
pub mod storage;
pub mod task;
pub mod websocket;
pub mod workflow;

pub use clients::Inbox;
pub use commands::ShutdownKind;
pub use config::{ActorConfig, InspectorTab, OutputGate};
pub use conn::{Conn, ConnRecord, ConnTransport, Connections, Hibernation};
pub use context::{ActorContext, DynHooks, GenerationHold};
pub use factory::ActorFactory;
pub use hooks::{ActorHooks, LifecycleHook, SerializeReason, StateDelta};
pub use key::ActorKey;
pub use link::EngineLink;
pub use request::{HttpRequest, HttpResponse, QueueSendRequest};
pub use schedule::ScheduledEvent;
pub use scheduled_fire::ScheduledFire;
pub use task::ActorTaskHandle;
pub use websocket::RawWebSocket;
