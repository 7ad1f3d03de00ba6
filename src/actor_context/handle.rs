//! The `ActorContext` struct: JavaScript's handle on one actor generation.
//!
//! Each hook call hands JavaScript a fresh wrapper around the same core
//! context (an `Arc`), so every method reads live state. The methods are
//! `impl ActorContext` blocks in the other files of this folder (see
//! `mod.rs`); napi-rs merges them into the one `ActorContext` class.

use napi::bindgen_prelude::Promise;
use napi_derive::napi;
use rivetkit_native_core::actor::ActorContext as CoreContext;

use crate::bridge::js_callback::Ignored;
use crate::classes::telemetry::{InvocationRay, SpanContext};

#[napi]
pub struct ActorContext {
    pub(crate) inner: CoreContext,
    /// The JavaScript application span this handle acts under
    /// (`withApplicationSpan`), parent of the spans it opens.
    pub(crate) app_span: Option<SpanContext>,
    /// True for the handle of a workflow run or step (`WorkflowSpan.ctx`):
    /// only those open step spans.
    pub(crate) in_workflow: bool,
    /// The ray ID of the invocation this handle was given to (the caller's
    /// `x-rivet-ray-id`), or of the last queue message it received,
    /// reported by `invocationTraceContext`.
    pub(crate) ray: InvocationRay,
}

impl From<CoreContext> for ActorContext {
    fn from(inner: CoreContext) -> Self {
        Self { inner, app_span: None, in_workflow: false, ray: Default::default() }
    }
}

impl ActorContext {
    /// A handle on `ctx`'s generation acting under the span `context`,
    /// inside a workflow run (`WorkflowSpan.ctx`, `WorkflowStepSpan.ctx`).
    pub(crate) fn under_workflow_span(ctx: &CoreContext, context: &SpanContext) -> Self {
        let mut handle = Self::from(ctx.clone());
        handle.app_span = Some(context.clone());
        handle.in_workflow = true;
        handle
    }

    /// Holds a keep-awake region until `promise` settles (either way).
    pub(super) fn track(&self, promise: Promise<Ignored>) {
        let ctx = self.inner.clone();
        let region = ctx.activity().begin();
        crate::bridge::runtime::spawn(async move {
            let _ = promise.await;
            ctx.activity().end(region);
        });
    }
}
