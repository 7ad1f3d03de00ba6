//! Framework routes (docs/wire-formats.md): admission, then
//! the action, queue, root, health, metadata and not-found handlers. Every
//! error is a structured body in the request's encoding.

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};

use super::action::{self, method_not_allowed};
use super::queue;
use super::response;
use super::route::Route;
use crate::actor::ActorTaskHandle;
use crate::error::{catalog, RivetError};
use crate::protocol::Encoding;

const ROOT_TEXT: &str = "This is an RivetKit actor.\n\nLearn more at https://rivetkit.org";

/// `/metadata` reports the version of the reference core whose behaviour
/// this crate implements (docs/wire-formats.md), as the reference reports
/// its own crate version.
const REFERENCE_CORE_VERSION: &str = "2.3.24-rc.1";

pub(super) async fn handle(
    handle: &ActorTaskHandle,
    request: EnvoyRequest,
    route: Route,
    body: Vec<u8>,
) -> anyhow::Result<EnvoyResponse> {
    let encoding = Encoding::from_headers(&request.headers);
    let actor = handle.context().specifier();
    let error = |err: RivetError| response::framework_error(encoding, &err.into_anyhow(), None, Some(&actor));
    let get = request.method == "GET";
    let mut response = match route {
        Route::Action(name) => action::handle(handle, request, name, body, encoding, &actor).await?,
        Route::Queue(name) => queue::handle(handle, &request, name, body, encoding).await?,
        Route::Root if get => response::text(200, ROOT_TEXT),
        Route::Health if get => response::text(200, "ok"),
        Route::Metadata if get => response::json(200, &metadata_body()),
        Route::Root | Route::Health | Route::Metadata => error(method_not_allowed(&request.method, &request.path))?,
        Route::NotFound(path) => error(
            RivetError::new(crate::error_codes::ACTOR_NOT_FOUND, format!("Actor route '{path}' was not found."))
                .with_metadata(serde_json::json!({ "resource": "route", "id": path })),
        )?,
        Route::Raw(_) => error(catalog::invalid_state("raw route sent to the framework handler"))?,
    };
    response::attach_actor_headers(&mut response, &actor);
    Ok(response)
}

fn metadata_body() -> serde_json::Value {
    let kind =
        if crate::env::get(crate::env::NODE_ENV).as_deref() == Some("production") { "deployed" } else { "local" };
    serde_json::json!({ "runtime": "rivetkit", "version": REFERENCE_CORE_VERSION, "type": kind })
}
