//! Per-actor configuration with the reference defaults (docs/generations.md).

use std::time::Duration;

/// Timeouts and limits of one actor type. Every field has the reference's
/// default; the JS surface overrides them from `JsActorConfig`.
#[derive(Debug, Clone)]
pub struct ActorConfig {
    pub name: Option<String>,
    pub icon: Option<String>,
    /// Whether raw (`onWebSocket`) sockets may stay open while the actor
    /// sleeps (`canHibernateWebsocket`; RivetKit 2.3.19 passes false
    /// unless the app sets it).
    pub can_hibernate_websocket: bool,
    /// Whether actor-connect (`/connect`) sockets may stay open while the
    /// actor sleeps (`canHibernateConnect`, our own option; RivetKit never
    /// sets it). Without it the contract profile decides
    /// ([`crate::contract::RivetkitVersion::connect_hibernates`]).
    pub can_hibernate_connect: Option<bool>,
    /// The contract profile of the serve run this actor type is served by
    /// (docs/versions.md): set from `serverlessPackageVersion` when the
    /// run starts, the newest for direct use.
    pub contract: crate::contract::RivetkitVersion,
    pub state_save_interval: Duration,
    pub create_state_timeout: Duration,
    pub on_create_timeout: Duration,
    pub create_vars_timeout: Duration,
    pub on_migrate_timeout: Duration,
    pub on_wake_timeout: Duration,
    pub on_before_actor_start_timeout: Duration,
    pub action_timeout: Duration,
    pub on_before_connect_timeout: Duration,
    pub create_conn_state_timeout: Duration,
    /// Bounds `onConnect` and, for the actor-connect socket, its whole setup.
    pub on_connect_timeout: Duration,
    pub on_request_timeout: Duration,
    pub sleep_timeout: Duration,
    pub no_sleep: bool,
    pub sleep_grace_period: Duration,
    pub max_incoming_message_size: usize,
    pub max_outgoing_message_size: usize,
    /// Capacity of the task's client-traffic queue; a full queue answers
    /// `actor.overloaded` instead of growing without bound.
    pub dispatch_queue_capacity: usize,
    /// Client action handlers running at once (`maxActions`); more wait
    /// for a slot (crates/core/src/actor/task/action_slots.rs).
    pub max_actions: usize,
    /// Pending scheduled actions and cron jobs an actor may hold (`maxSchedules`).
    pub max_schedules: usize,
    /// Messages the queue holds at most (`maxQueueSize`).
    pub max_queue_size: usize,
    /// Bytes of one queue message at most (`maxQueueMessageSize`).
    pub max_queue_message_size: usize,
    /// Generations that may end while holding a queue message before it
    /// becomes a dead letter (`maxQueueDeliveries`, else
    /// `RIVETKIT_QUEUE_MAX_DELIVERIES`, else 5; docs/queues-cron.md).
    pub max_queue_deliveries: u32,
    /// The actor keeps a state (the inspector's `isStateEnabled`).
    pub has_state: bool,
    /// The actor may use its SQLite database (the inspector's
    /// `isDatabaseEnabled`; RivetKit always sets it).
    pub has_database: bool,
    /// The action names, in the order the host gave them (the inspector's
    /// RPC list).
    pub actions: Vec<String>,
    /// The inspector's tab descriptors (`inspectorTabs`).
    pub inspector_tabs: Vec<InspectorTab>,
    /// Whether a generation may provision its runtime socket
    /// (`enableActorRuntimeSocket`, experimental; docs/runtime-socket.md).
    pub enable_actor_runtime_socket: bool,
    /// Whether answers wait for the save of what they changed
    /// (docs/durability.md); on by default.
    pub output_gate: OutputGate,
    /// Trace sample rates (the `tracing` block; docs/telemetry.md).
    pub tracing: std::sync::Arc<crate::telemetry::ActorTracing>,
    /// SQLite profiling (`sqliteProfiling`, with the process's
    /// `RIVETKIT_SQLITE_PROFILING` applied; docs/versions.md).
    pub sqlite_profiling: std::sync::Arc<crate::sqlite::SqliteProfiling>,
}

/// One entry of the inspector's tab list: a custom tab (`label` set), or a
/// built-in tab hidden (`hidden`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectorTab {
    pub id: String,
    pub label: Option<String>,
    pub icon: Option<String>,
    pub hidden: bool,
}

impl Default for ActorConfig {
    fn default() -> Self {
        Self {
            name: None,
            icon: None,
            can_hibernate_websocket: false,
            can_hibernate_connect: None,
            contract: crate::contract::RivetkitVersion::default(),
            state_save_interval: Duration::from_secs(1),
            create_state_timeout: Duration::from_secs(5),
            on_create_timeout: Duration::from_secs(5),
            create_vars_timeout: Duration::from_secs(5),
            on_migrate_timeout: Duration::from_secs(30),
            on_wake_timeout: Duration::from_secs(30),
            on_before_actor_start_timeout: Duration::from_secs(5),
            action_timeout: Duration::from_secs(60),
            on_before_connect_timeout: Duration::from_secs(5),
            create_conn_state_timeout: Duration::from_secs(5),
            on_connect_timeout: Duration::from_secs(5),
            on_request_timeout: Duration::from_secs(60),
            sleep_timeout: Duration::from_secs(30),
            no_sleep: false,
            sleep_grace_period: Duration::from_secs(15),
            max_incoming_message_size: 65_536,
            max_outgoing_message_size: 1_048_576,
            dispatch_queue_capacity: 1024,
            max_actions: super::task::DEFAULT_MAX_ACTIONS,
            max_schedules: super::schedule::limits::DEFAULT_MAX_SCHEDULES,
            max_queue_size: super::queue::limits::DEFAULT_MAX_QUEUE_SIZE,
            max_queue_message_size: super::queue::limits::DEFAULT_MAX_MESSAGE_SIZE,
            max_queue_deliveries: max_deliveries_from_env(),
            has_state: false,
            has_database: false,
            actions: Vec::new(),
            inspector_tabs: Vec::new(),
            enable_actor_runtime_socket: false,
            output_gate: OutputGate::On,
            tracing: std::sync::Arc::default(),
            sqlite_profiling: std::sync::Arc::default(),
        }
    }
}

/// Which answers wait for the engine's acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputGate {
    /// Every action response (HTTP and WebSocket) and raw `onRequest`
    /// response of an actor with state.
    On,
    /// Answers leave as soon as they are ready; state is saved on the
    /// throttle (`stateSaveInterval`), as in the reference.
    Off,
}

/// `RIVETKIT_QUEUE_MAX_DELIVERIES`: a whole number, at least 1; anything
/// else is the default.
fn max_deliveries_from_env() -> u32 {
    crate::env::get(crate::env::RIVETKIT_QUEUE_MAX_DELIVERIES)
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(super::queue::limits::DEFAULT_MAX_DELIVERIES)
}

impl OutputGate {
    /// `RIVETKIT_OUTPUT_GATE`: `0`, `false` or `off` turn it off.
    pub fn from_env() -> Self {
        match crate::env::get(crate::env::RIVETKIT_OUTPUT_GATE).map(|v| v.to_ascii_lowercase()) {
            Some(v) if matches!(v.as_str(), "0" | "false" | "off") => Self::Off,
            _ => Self::On,
        }
    }
}
