//! Workflows: `ctx.saveStateAndWorkflowBatch` (built, docs/workflows.md)
//! and the tracing side, `WorkflowSpan` / `WorkflowStepSpan`.
//!
//! Spans are not exported yet, so they are harmless no-ops: a
//! `WorkflowSpan` runs its code under the same context and `finish`
//! resolves; `ctx.startWorkflowStepSpan` returns `null`, so a
//! `WorkflowStepSpan` is never handed out.

use napi::bindgen_prelude::{Null, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::ActorContext as CoreContext;

use crate::actor_context::ActorContext;
use crate::error::spawn_promise;
use rivetkit_native_core::actor::workflow;

#[napi(object)]
pub struct WorkflowKvWritePayload {
    pub key: napi::bindgen_prelude::Buffer,
    pub value: napi::bindgen_prelude::Buffer,
}

/// One open workflow run (no span recorded).
#[napi]
pub struct WorkflowSpan {
    pub(crate) ctx: CoreContext,
}

#[napi]
impl WorkflowSpan {
    /// The context workflow code runs under: the same generation.
    #[napi]
    pub fn ctx(&self) -> ActorContext {
        ActorContext::from(self.ctx.clone())
    }

    #[napi(ts_args_type = "outcome: string", ts_return_type = "Promise<void>")]
    pub fn finish<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        spawn_promise(env, async { Ok(()) })
    }
}

/// One open attempt at one workflow step (never handed out yet).
#[napi]
pub struct WorkflowStepSpan {
    pub(crate) ctx: CoreContext,
}

#[napi]
impl WorkflowStepSpan {
    #[napi]
    pub fn ctx(&self) -> ActorContext {
        ActorContext::from(self.ctx.clone())
    }

    #[napi(ts_args_type = "outcome: string, error?: string | undefined | null")]
    pub fn finish(&self) {}
}

/// `ActorContext`'s workflow calls.
#[napi]
impl ActorContext {
    /// A workflow span that records nothing; its `ctx()` is this generation.
    #[napi(ts_return_type = "Promise<WorkflowSpan>")]
    pub fn start_workflow_span<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, WorkflowSpan>> {
        let ctx = self.inner.clone();
        spawn_promise(env, async move { Ok(WorkflowSpan { ctx }) })
    }

    /// Always `null` (tracing disabled).
    #[napi(ts_args_type = "stepName: string, attempt: number", ts_return_type = "WorkflowStepSpan | null")]
    pub fn start_workflow_step_span(&self) -> Null {
        Null
    }

    /// Commits the workflow engine's rows and the actor state together
    /// (SQLite is the commit point; see docs/workflows.md).
    #[napi(ts_args_type = "writes: Array<WorkflowKvWritePayload>", ts_return_type = "Promise<void>")]
    pub fn save_state_and_workflow_batch<'env>(
        &self,
        env: &'env Env,
        writes: Vec<WorkflowKvWritePayload>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let ctx = self.inner.clone();
        let writes = writes
            .into_iter()
            .map(|w| workflow::WorkflowKvWrite { key: w.key.to_vec(), value: w.value.to_vec() })
            .collect();
        spawn_promise(env, async move {
            let hooks = ctx.hooks();
            workflow::save_state_and_batch(&ctx, hooks.as_deref(), writes).await
        })
    }
}
