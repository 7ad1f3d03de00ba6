//! The start sequence of one generation (docs/generations.md).

use super::{with_timeout, ActorTask};
use crate::actor::lifecycle::Phase;
use crate::actor::{schedule, storage, ActorContext, ActorFactory, LifecycleHook};
use crate::error::catalog;

impl ActorTask {
    /// Loads the actor record and runs the start hooks. Fails with
    /// `actor.stopping` if the generation is declared lost meanwhile.
    pub(super) async fn start(&mut self) -> anyhow::Result<()> {
        let lost = self.ctx.lost_token().clone();
        if lost.is_cancelled() {
            return Err(catalog::actor_stopping(Some("declared lost before it started")).into_anyhow());
        }
        // Started before the hooks run, like the reference: `ctx.sleep()`
        // from inside `onWake` is allowed.
        self.ctx.signals().enter(Phase::Starting);
        let result = tokio::select! {
            biased;
            _ = lost.cancelled() => Err(catalog::actor_stopping(Some("declared lost before it started")).into_anyhow()),
            result = run_start_hooks(self.ctx.clone(), self.factory.clone()) => result,
        };
        if result.is_err() {
            self.ctx.signals().enter(Phase::Stopped);
        }
        result.map_err(|err| err.context(self.ctx.specifier()))
    }
}

/// onMigrate → (new: createState, onCreate, persist) | (wake: restore state)
/// → createVars → onWake → onBeforeActorStart, each bounded by its timeout.
async fn run_start_hooks(ctx: ActorContext, factory: ActorFactory) -> anyhow::Result<()> {
    let hooks = &factory.hooks;
    let config = &factory.config;
    let record = storage::load_record(&ctx).await?;
    let is_new = !record.as_ref().is_some_and(|r| r.initialized);
    // I13: a new keyed actor serves only as the key's owner.
    if is_new {
        crate::actor::key_owner::confirm(&ctx).await?;
    }
    // The alarm and scheduled events: due ones fire once the actor has
    // started; the next wake-up is pushed to the engine again in case this
    // start was not its wake.
    ctx.restore_alarm(record.as_ref().and_then(|r| r.alarm));
    // A workflow flush that reached SQLite but not KV: its state copy wins.
    let record = crate::actor::workflow::reconcile(&ctx, record).await?;
    schedule::load(&ctx).await?;
    crate::actor::cron::load(&ctx).await?;
    ctx.sync_engine_alarm();
    // Queued messages (their headers) for the consumers this start runs.
    crate::actor::queue::load(&ctx).await?;
    // The inspector token: created on the first start, loaded on the others.
    crate::actor::inspector::ensure_token(&ctx).await?;

    // Hibernatable connections of the previous generation: registered
    // (without hooks) and handed to the envoy, which reopens the sockets
    // that are still live once this start succeeds.
    if !is_new {
        let records = crate::actor::conn_store::load(&ctx).await?;
        if !records.is_empty() {
            let sockets = records.iter().map(|r| r.hibernation.clone()).collect();
            for record in records {
                ctx.conns().insert(crate::actor::Conn::restore(record));
            }
            ctx.link().restore_hibernating_sockets(ctx.actor_id(), sockets);
        }
    }

    if let Some(fut) = hooks.on_migrate(&ctx, is_new) {
        with_timeout("onMigrate", config.on_migrate_timeout, fut).await?;
    }

    let input = ctx.input().map(<[u8]>::to_vec);
    match record.filter(|r| r.initialized && !r.state.is_empty()) {
        Some(record) if !is_new => ctx.set_state(record.state),
        _ => {
            // A new actor, or one whose snapshot is empty: build its state.
            if let Some(fut) = hooks.create_state(&ctx, input.clone()) {
                let state = with_timeout("createState", config.create_state_timeout, fut).await?;
                ctx.set_state(state);
            }
            if is_new {
                if let Some(fut) = hooks.on_create(&ctx, input) {
                    with_timeout("onCreate", config.on_create_timeout, fut).await?;
                }
            }
            storage::save_record(&ctx).await?;
        }
    }

    for (hook, timeout) in [
        (LifecycleHook::CreateVars, config.create_vars_timeout),
        (LifecycleHook::OnWake, config.on_wake_timeout),
        (LifecycleHook::OnBeforeActorStart, config.on_before_actor_start_timeout),
    ] {
        if let Some(fut) = hooks.lifecycle(hook, &ctx) {
            with_timeout(hook.name(), timeout, fut).await?;
        }
    }
    Ok(())
}
