//! `NapiActorFactory(callbacks, config)`: one actor type, as JavaScript
//! registers it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{Object, Unknown};
use napi_derive::napi;
use rivetkit_native_core::actor::{ActorConfig, ActorFactory, InspectorTab, OutputGate};
use rivetkit_native_core::env;
use rivetkit_native_core::sqlite::SqliteProfiling;
use rivetkit_native_core::telemetry::ActorTracing;

use crate::bridge::error::{throw, to_js_error};
use crate::bridge::types::args;
use crate::hooks::table::JsHooks;
use napi::Env;
use rivetkit_native_core::error::catalog;
use rivetkit_native_core::RivetError;

/// Per-actor configuration. Every field is optional; omitted timeouts take
/// the reference defaults. Fields rivetkit-native does not use yet are
/// accepted and ignored so that RivetKit's own config passes through.
/// Every `...Ms` field is a duration (a finite number, not negative, at
/// most 8.64e15) and every size or count a whole number in `0..=2^53-1`;
/// the constructor throws `napi.invalid_argument` naming the field
/// otherwise.
#[napi(object)]
#[derive(Default)]
pub struct JsActorConfig {
    pub name: Option<String>,
    pub icon: Option<String>,
    pub has_database: Option<bool>,
    pub remote_sqlite: Option<bool>,
    pub enable_actor_runtime_socket: Option<bool>,
    /// Answers wait for the engine to confirm the save of what they
    /// changed (docs/durability.md). Default: on, unless the environment
    /// sets `RIVETKIT_OUTPUT_GATE=0`.
    pub output_gate: Option<bool>,
    pub has_state: Option<bool>,
    pub can_hibernate_websocket: Option<bool>,
    /// Whether actor-connect (`/connect`) sockets may stay open while the
    /// actor sleeps (not in RivetKit's actor options, which never set it).
    /// Default by RivetKit version (docs/versions.md): true under 2.3,
    /// `canHibernateWebsocket` under 3.0 and for direct use.
    pub can_hibernate_connect: Option<bool>,
    pub state_save_interval_ms: Option<f64>,
    pub create_state_timeout_ms: Option<f64>,
    pub on_create_timeout_ms: Option<f64>,
    pub create_vars_timeout_ms: Option<f64>,
    pub create_conn_state_timeout_ms: Option<f64>,
    pub on_before_connect_timeout_ms: Option<f64>,
    pub on_connect_timeout_ms: Option<f64>,
    pub on_migrate_timeout_ms: Option<f64>,
    pub on_wake_timeout_ms: Option<f64>,
    pub on_before_actor_start_timeout_ms: Option<f64>,
    pub action_timeout_ms: Option<f64>,
    pub on_request_timeout_ms: Option<f64>,
    pub sleep_timeout_ms: Option<f64>,
    pub no_sleep: Option<bool>,
    pub sleep_grace_period_ms: Option<f64>,
    pub connection_liveness_timeout_ms: Option<f64>,
    pub connection_liveness_interval_ms: Option<f64>,
    pub max_queue_size: Option<f64>,
    pub max_schedules: Option<f64>,
    /// Client action handlers running at once; more wait for a slot
    /// (default 128; not in RivetKit 2.3.19's actor options).
    pub max_actions: Option<f64>,
    pub max_queue_message_size: Option<f64>,
    /// Generations that may end while holding a queue message before it
    /// becomes a dead letter (default 5, or `RIVETKIT_QUEUE_MAX_DELIVERIES`;
    /// not in RivetKit's actor options).
    pub max_queue_deliveries: Option<f64>,
    pub max_incoming_message_size: Option<f64>,
    pub max_outgoing_message_size: Option<f64>,
    pub actions: Option<Vec<JsActionDefinition>>,
    /// SQLite profiling, in RivetKit 2.3's shape (`enabled`) or 3.0's
    /// (`queries`, `fingerprints`); `RIVETKIT_SQLITE_PROFILING` replaces
    /// the selection (docs/versions.md).
    pub sqlite_profiling: Option<JsSqliteProfilingConfig>,
    /// Listed in the inspector's `Init` (the tabs' assets are served by
    /// RivetKit's runtime, not here).
    pub inspector_tabs: Option<Vec<JsInspectorTabEntry>>,
    /// Trace sample rates of this actor's invocations when spans are
    /// exported (docs/telemetry.md; not in RivetKit 2.3.19's actor
    /// options).
    pub tracing: Option<JsActorTracingConfig>,
}

/// An actor's trace sample rates, each from 0 to 1. A rate lowers what
/// is recorded and never raises it.
#[napi(object)]
#[derive(Default)]
pub struct JsActorTracingConfig {
    /// The rate of every invocation of the actor; without it, the process
    /// rule (`OTEL_TRACES_SAMPLER`) decides.
    pub sampler: Option<f64>,
    /// Rates of the actions named, over `sampler`. Each name must be one
    /// of `actions` when the config lists them.
    pub actions: Option<HashMap<String, f64>>,
}

/// An inspector tab: a custom one, or a built-in one hidden.
#[napi(object)]
#[derive(Default)]
pub struct JsInspectorTabEntry {
    pub id: String,
    pub label: Option<String>,
    pub source: Option<String>,
    pub icon: Option<String>,
    pub hidden: Option<bool>,
}

/// SQLite profiling (experimental, as in RivetKit). Every statement counts
/// toward its actor's aggregate; those selected get a label of their own.
/// The `max...` bounds other than `maxTrackedStatementFingerprints` and
/// `slowOperationThresholdMs` are accepted and not used.
#[napi(object)]
#[derive(Default)]
pub struct JsSqliteProfilingConfig {
    /// RivetKit 2.3: `false` turns the labels and the slow-statement log off.
    pub enabled: Option<bool>,
    /// RivetKit 3.0: exact SQL texts that get a label of their own.
    pub queries: Option<Vec<String>>,
    /// RivetKit 3.0: statement fingerprints (as the profile log prints
    /// them) that get a label of their own.
    pub fingerprints: Option<Vec<String>>,
    pub max_tracked_statement_fingerprints: Option<u32>,
    pub max_tracked_transaction_fingerprints: Option<u32>,
    pub max_prometheus_series: Option<u32>,
    pub max_statements_per_transaction_trace: Option<u32>,
    pub max_get_pages_requests_per_trace: Option<u32>,
    pub max_transaction_name_bytes: Option<u32>,
    pub slow_operation_threshold_ms: Option<u32>,
    pub baseline_sample_rate: Option<f64>,
    pub max_diagnostic_events_per_minute: Option<u32>,
    pub diagnostic_event_queue_capacity: Option<u32>,
}

/// Either RivetKit version's `sqliteProfiling`, with the process's
/// `RIVETKIT_SQLITE_PROFILING` applied over it.
fn sqlite_profiling(config: Option<JsSqliteProfilingConfig>) -> Result<SqliteProfiling, RivetError> {
    let d = SqliteProfiling::default();
    let config = config.unwrap_or_default();
    let settings = SqliteProfiling {
        enabled: config.enabled.unwrap_or(d.enabled),
        queries: config.queries.unwrap_or_default().into_iter().collect(),
        fingerprints: config.fingerprints.unwrap_or_default().into_iter().collect(),
        max_tracked: config.max_tracked_statement_fingerprints.map_or(d.max_tracked, |n| n as usize),
        slow_threshold: config.slow_operation_threshold_ms.map(|ms| Duration::from_millis(u64::from(ms))),
    };
    settings.with_override(env::get(env::RIVETKIT_SQLITE_PROFILING).as_deref())
}

#[napi(object)]
pub struct JsActionDefinition {
    pub name: String,
}

/// A duration field, or `default` when omitted.
fn ms(field: &str, value: Option<f64>, default: Duration) -> Result<Duration, RivetError> {
    Ok(args::field_duration_ms(&format!("config.{field}"), value)?.map_or(default, Duration::from_millis))
}

/// A size or count field, or `default` when omitted.
fn size(field: &str, value: Option<f64>, default: usize) -> Result<usize, RivetError> {
    let max = usize::MAX as u64;
    // Bounded by usize::MAX above.
    Ok(args::field_size(&format!("config.{field}"), value, max)?.map_or(default, |v| v as usize))
}

impl JsActorConfig {
    /// Checks every number (also of the fields not used yet, so a typo'd
    /// `NaN` never passes silently) and builds the core config.
    fn into_core(self) -> Result<ActorConfig, RivetError> {
        let d = ActorConfig::default();
        for (field, value) in [
            ("connectionLivenessTimeoutMs", self.connection_liveness_timeout_ms),
            ("connectionLivenessIntervalMs", self.connection_liveness_interval_ms),
        ] {
            ms(field, value, Duration::ZERO)?;
        }
        let action_timeout = ms("actionTimeoutMs", self.action_timeout_ms, d.action_timeout)?;
        let actions: Vec<String> = self.actions.unwrap_or_default().into_iter().map(|a| a.name).collect();
        let tracing = self.tracing.unwrap_or_default();
        let tracing = ActorTracing { sampler: tracing.sampler, actions: tracing.actions.unwrap_or_default() };
        tracing.validate(&actions).map_err(|(field, reason)| {
            rivetkit_native_core::error::validate::invalid(&format!("config.{field}"), reason)
        })?;
        Ok(ActorConfig {
            name: self.name,
            icon: self.icon,
            can_hibernate_websocket: self.can_hibernate_websocket.unwrap_or(d.can_hibernate_websocket),
            can_hibernate_connect: self.can_hibernate_connect,
            // Set by the serve run (`CoreRegistry::set_contract`).
            contract: d.contract,
            state_save_interval: ms("stateSaveIntervalMs", self.state_save_interval_ms, d.state_save_interval)?,
            create_state_timeout: ms("createStateTimeoutMs", self.create_state_timeout_ms, d.create_state_timeout)?,
            on_create_timeout: ms("onCreateTimeoutMs", self.on_create_timeout_ms, d.on_create_timeout)?,
            create_vars_timeout: ms("createVarsTimeoutMs", self.create_vars_timeout_ms, d.create_vars_timeout)?,
            on_migrate_timeout: ms("onMigrateTimeoutMs", self.on_migrate_timeout_ms, d.on_migrate_timeout)?,
            on_wake_timeout: ms("onWakeTimeoutMs", self.on_wake_timeout_ms, d.on_wake_timeout)?,
            on_before_actor_start_timeout: ms(
                "onBeforeActorStartTimeoutMs",
                self.on_before_actor_start_timeout_ms,
                d.on_before_actor_start_timeout,
            )?,
            action_timeout,
            on_before_connect_timeout: ms(
                "onBeforeConnectTimeoutMs",
                self.on_before_connect_timeout_ms,
                d.on_before_connect_timeout,
            )?,
            create_conn_state_timeout: ms(
                "createConnStateTimeoutMs",
                self.create_conn_state_timeout_ms,
                d.create_conn_state_timeout,
            )?,
            on_connect_timeout: ms("onConnectTimeoutMs", self.on_connect_timeout_ms, d.on_connect_timeout)?,
            // The reference: onRequestTimeoutMs, else actionTimeoutMs, else 60 s.
            on_request_timeout: ms("onRequestTimeoutMs", self.on_request_timeout_ms, action_timeout)?,
            sleep_timeout: ms("sleepTimeoutMs", self.sleep_timeout_ms, d.sleep_timeout)?,
            no_sleep: self.no_sleep.unwrap_or(d.no_sleep),
            sleep_grace_period: ms("sleepGracePeriodMs", self.sleep_grace_period_ms, d.sleep_grace_period)?,
            max_incoming_message_size: size(
                "maxIncomingMessageSize",
                self.max_incoming_message_size,
                d.max_incoming_message_size,
            )?,
            max_outgoing_message_size: size(
                "maxOutgoingMessageSize",
                self.max_outgoing_message_size,
                d.max_outgoing_message_size,
            )?,
            dispatch_queue_capacity: d.dispatch_queue_capacity,
            max_actions: match size("maxActions", self.max_actions, d.max_actions)? {
                0 => {
                    return Err(rivetkit_native_core::error::validate::invalid(
                        "config.maxActions",
                        "must be at least 1",
                    ))
                }
                n => n,
            },
            max_schedules: size("maxSchedules", self.max_schedules, d.max_schedules)?,
            max_queue_size: size("maxQueueSize", self.max_queue_size, d.max_queue_size)?,
            max_queue_message_size: size("maxQueueMessageSize", self.max_queue_message_size, d.max_queue_message_size)?,
            max_queue_deliveries: match size(
                "maxQueueDeliveries",
                self.max_queue_deliveries,
                d.max_queue_deliveries as usize,
            )? {
                0 => {
                    return Err(rivetkit_native_core::error::validate::invalid(
                        "config.maxQueueDeliveries",
                        "must be at least 1",
                    ))
                }
                n => u32::try_from(n).unwrap_or(u32::MAX),
            },
            has_state: self.has_state.unwrap_or(d.has_state),
            has_database: self.has_database.unwrap_or(d.has_database),
            actions,
            tracing: Arc::new(tracing),
            inspector_tabs: self
                .inspector_tabs
                .unwrap_or_default()
                .into_iter()
                .map(|tab| InspectorTab {
                    id: tab.id,
                    label: tab.label,
                    icon: tab.icon,
                    hidden: tab.hidden.unwrap_or(false),
                })
                .collect(),
            enable_actor_runtime_socket: self.enable_actor_runtime_socket.unwrap_or(d.enable_actor_runtime_socket),
            output_gate: match self.output_gate {
                Some(true) => OutputGate::On,
                Some(false) => OutputGate::Off,
                None => OutputGate::from_env(),
            },
            sqlite_profiling: Arc::new(sqlite_profiling(self.sqlite_profiling)?),
        })
    }
}

/// The callbacks object: every member is optional. Hooks are called as
/// `hook(null, payload)` and must return (a promise of) their result.
const CALLBACKS_TS_TYPE: &str = "ActorCallbacks";

#[napi]
pub struct NapiActorFactory {
    pub(crate) inner: ActorFactory,
}

#[napi]
impl NapiActorFactory {
    #[napi(constructor, ts_args_type = "callbacks: ActorCallbacks, config?: JsActorConfig | undefined | null")]
    pub fn new(env: &Env, callbacks: Unknown<'_>, config: Option<Unknown<'_>>) -> napi::Result<Self> {
        let _ = CALLBACKS_TS_TYPE;
        let callbacks: Object<'_> = args::object("callbacks", callbacks).map_err(|e| throw(env, e))?;
        let hooks = JsHooks::from_object(&callbacks)
            .map_err(|err| to_js_error(env, catalog::invalid_argument(err.reason.clone()).into_anyhow()))?;
        let config: Option<JsActorConfig> = args::opt_object("config", config).map_err(|e| throw(env, e))?;
        let config = config.unwrap_or_default().into_core().map_err(|e| throw(env, e))?;
        Ok(Self { inner: ActorFactory::new(config, Arc::new(hooks)) })
    }
}
