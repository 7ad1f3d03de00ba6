//! Workflows: `ctx.saveStateAndWorkflowBatch` (docs/workflows.md) and the
//! tracing side, `WorkflowSpan` / `WorkflowStepSpan`: `tracing` spans like
//! the call spans of `crate::classes::telemetry` (a run under the handle's
//! application span, each step attempt under its run), whose handles act
//! under them so that calls out nest below.

use napi::bindgen_prelude::{PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::ActorContext as CoreContext;

use super::handle::ActorContext;
use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::types::args;
use rivetkit_native_core::telemetry::{open, Kind};

use crate::classes::telemetry::TracedSpan;
use rivetkit_native_core::actor::workflow;

#[napi(object)]
pub struct WorkflowKvWritePayload {
    pub key: napi::bindgen_prelude::Buffer,
    pub value: napi::bindgen_prelude::Buffer,
}

/// One run of a workflow function (`ctx.startWorkflowSpan`): an
/// `actor.workflow` span until `finish`.
#[napi]
pub struct WorkflowSpan {
    pub(crate) ctx: CoreContext,
    span: TracedSpan,
}

#[napi]
impl WorkflowSpan {
    /// The handle workflow code runs under: the same generation, acting
    /// under this span (calls out and steps are its children).
    #[napi]
    pub fn ctx(&self) -> ActorContext {
        ActorContext::under_workflow_span(&self.ctx, &self.span.context)
    }

    /// Records the outcome (`completed`, `sleeping`, `failed`, ...) and
    /// closes the span; later calls do nothing.
    #[napi(ts_args_type = "outcome: string", ts_return_type = "Promise<void>")]
    pub fn finish<'env>(&self, env: &'env Env, outcome: String) -> napi::Result<PromiseRaw<'env, ()>> {
        self.span.finish(&outcome, None, "workflow run finished");
        spawn_promise(env, async { Ok(()) })
    }
}

/// One attempt at one workflow step (`startWorkflowStepSpan` on a
/// workflow run's handle): an `actor.workflow.step` span until `finish`.
#[napi]
pub struct WorkflowStepSpan {
    pub(crate) ctx: CoreContext,
    span: TracedSpan,
}

#[napi]
impl WorkflowStepSpan {
    /// The handle the step's code runs under, acting under this span.
    #[napi]
    pub fn ctx(&self) -> ActorContext {
        ActorContext::under_workflow_span(&self.ctx, &self.span.context)
    }

    /// Records the outcome (`ok`, `retry`, `failed`) and the error the
    /// step threw, and closes the span; later calls do nothing.
    #[napi(ts_args_type = "outcome: string, error?: string | undefined | null")]
    pub fn finish(&self, outcome: String, error: Option<String>) {
        self.span.finish(&outcome, error.as_deref(), "workflow step finished");
    }
}

/// `ActorContext`'s workflow calls.
#[napi]
impl ActorContext {
    /// Opens the `actor.workflow` span of one run of the workflow function,
    /// under this handle's application span (a new trace without one).
    #[napi(ts_return_type = "Promise<WorkflowSpan>")]
    pub fn start_workflow_span<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, WorkflowSpan>> {
        let context = open(self.app_span.as_ref());
        let span = tracing::info_span!(
            "actor.workflow",
            actor_id = %self.inner.actor_id(),
            trace_id = %context.trace_id,
            span_id = %context.span_id,
            parent_span_id = self.app_span.as_ref().map(|p| p.span_id.as_str()),
        );
        let name = format!("{}/workflow", self.inner.name());
        let span = TracedSpan::new(context, self.app_span.as_ref(), name, Kind::Internal, span);
        let workflow = WorkflowSpan { ctx: self.inner.clone(), span };
        spawn_promise(env, async move { Ok(workflow) })
    }

    /// Opens the `actor.workflow.step` span of one attempt at `stepName`;
    /// `null` on a handle that is not a workflow run's (outside a run).
    #[napi(ts_args_type = "stepName: string, attempt: number", ts_return_type = "WorkflowStepSpan | null")]
    pub fn start_workflow_step_span(&self, step_name: String, attempt: u32) -> Option<WorkflowStepSpan> {
        if !self.in_workflow {
            return None;
        }
        let context = open(self.app_span.as_ref());
        let span = tracing::info_span!(
            "actor.workflow.step",
            actor_id = %self.inner.actor_id(),
            step = %step_name,
            attempt,
            trace_id = %context.trace_id,
            span_id = %context.span_id,
            parent_span_id = self.app_span.as_ref().map(|p| p.span_id.as_str()),
        );
        let name = format!("{}/{step_name}", self.inner.name());
        let mut step = TracedSpan::new(context, self.app_span.as_ref(), name, Kind::Internal, span);
        step.set("rivet.workflow.step.name", step_name);
        Some(WorkflowStepSpan { ctx: self.inner.clone(), span: step })
    }

    /// Commits the workflow engine's rows and the actor state together
    /// (SQLite is the commit point; see docs/workflows.md).
    #[napi(ts_args_type = "writes: Array<WorkflowKvWritePayload>", ts_return_type = "Promise<void>")]
    pub fn save_state_and_workflow_batch<'env>(
        &self,
        env: &'env Env,
        writes: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        // Malformed writes reject with napi.invalid_argument, naming the
        // element (napi-rs's own conversion would throw a bare InvalidArg).
        let writes = args::list("writes", writes, |name, item| {
            let write: WorkflowKvWritePayload = args::object(name, item)?;
            Ok(workflow::WorkflowKvWrite { key: write.key.to_vec(), value: write.value.to_vec() })
        });
        let writes = match writes {
            Ok(writes) => writes,
            Err(err) => return reject(env, err),
        };
        // The messages its steps took are in these rows: handled now, on
        // the JavaScript thread (docs/queues-cron.md).
        rivetkit_native_core::actor::queue::mark_handled(&self.inner);
        let ctx = self.inner.clone();
        spawn_promise(env, async move {
            let hooks = ctx.hooks();
            workflow::save_state_and_batch(&ctx, hooks.as_deref(), writes).await
        })
    }
}
