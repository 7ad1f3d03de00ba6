//! `handle_fetch` against a real dispatcher and actor task with in-memory
//! hooks: the action route in each encoding and each of its failure paths.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::handle_fetch;
use crate::actor::context::ActorIdentity;
use crate::actor::link::MemoryLink;
use crate::actor::queue::{self, QueueSendResult, QueueSendStatus};
use crate::actor::{ActorConfig, ActorContext, ActorFactory, ActorHooks, ActorKey};
use crate::dispatcher::Dispatcher;
use crate::error::RivetError;
use crate::protocol::bare::tests::framed;
use crate::protocol::cbor_json::{cbor_to_json, from_cbor, to_cbor};

const ACTOR: &str = "actor-1";

/// `echo` returns its args, `big` 200 bytes, `hang` never settles, `fail`
/// a public user error, `crash` an internal error, `bytes` a CBOR byte string.
struct Actions;

impl ActorHooks for Actions {
    type Ctx = ActorContext;

    fn action(
        &self,
        _ctx: &ActorContext,
        _conn: Option<&crate::actor::Conn>,
        name: &str,
        args: Vec<u8>,
        _cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        let fut = match name {
            "echo" => async move { Ok(args) }.boxed(),
            "big" => async { to_cbor(&"x".repeat(200)) }.boxed(),
            "hang" => futures::future::pending().boxed(),
            "fail" => async { Err(RivetError::foreign("user", "nope", "Not allowed").into_anyhow()) }.boxed(),
            "crash" => async { Err(anyhow::anyhow!("secret detail")) }.boxed(),
            "bytes" => async { Ok(vec![0x42, 0x01, 0x02]) }.boxed(),
            _ => return None,
        };
        Some(fut)
    }

    /// `jobs` queues (or enqueues and waits, answering `timedOut` at the
    /// timeout); `private` refuses with `auth.forbidden`.
    fn on_queue_send(
        &self,
        ctx: &ActorContext,
        _conn: &crate::actor::Conn,
        _request: crate::actor::HttpRequest,
        send: crate::actor::QueueSendRequest,
        _cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<QueueSendResult>>> {
        let ctx = ctx.clone();
        Some(
            async move {
                if send.name == "private" {
                    return Err(RivetError::foreign("auth", "forbidden", "Forbidden").into_anyhow());
                }
                if !send.wait {
                    queue::send(&ctx, &send.name, send.body).await?;
                    return Ok(QueueSendResult { status: QueueSendStatus::Completed, response: None });
                }
                let timeout = send.timeout_ms.map(Duration::from_millis);
                match queue::enqueue_and_wait(&ctx, &send.name, send.body, timeout, None).await {
                    Ok(response) => Ok(QueueSendResult { status: QueueSendStatus::Completed, response }),
                    Err(err) if RivetError::extract(&err).code == "timed_out" => {
                        Ok(QueueSendResult { status: QueueSendStatus::TimedOut, response: None })
                    }
                    Err(err) => Err(err),
                }
            }
            .boxed(),
        )
    }
}

async fn started_dispatcher() -> Arc<Dispatcher> {
    let config = ActorConfig {
        action_timeout: Duration::from_millis(100),
        max_incoming_message_size: 64,
        max_outgoing_message_size: 128,
        ..ActorConfig::default()
    };
    let factory = ActorFactory::new(config.clone(), Arc::new(Actions));
    let dispatcher = Dispatcher::new(HashMap::from([("counter".to_string(), factory)]));
    let (ctx, inbox) = ActorContext::new(
        ActorIdentity {
            actor_id: ACTOR.into(),
            generation: 3,
            name: "counter".into(),
            key: ActorKey(vec!["k".into()]),
            region: String::new(),
            input: None,
        },
        CancellationToken::new(),
        Arc::new(MemoryLink::default()),
        &config,
        dispatcher.factory("counter").map(|f| f.hooks.clone()),
    );
    dispatcher.start_actor("counter", ctx, inbox).await.expect("start");
    dispatcher
}

fn request(method: &str, path: &str, encoding: Option<&str>, body: Vec<u8>) -> EnvoyRequest {
    let mut headers = HashMap::new();
    if let Some(encoding) = encoding {
        headers.insert("x-rivet-encoding".to_string(), encoding.to_string());
    }
    EnvoyRequest { method: method.into(), path: path.into(), headers, body: Some(body), body_stream: None }
}

async fn fetch(dispatcher: &Dispatcher, req: EnvoyRequest) -> EnvoyResponse {
    handle_fetch(dispatcher, ACTOR, req).await.expect("response")
}

fn json_body(response: &EnvoyResponse) -> Value {
    serde_json::from_slice(response.body.as_ref().unwrap()).unwrap()
}

fn post_json(path: &str, body: Value) -> EnvoyRequest {
    request("POST", path, None, serde_json::to_vec(&body).unwrap())
}

#[tokio::test]
async fn action_in_each_encoding() {
    let d = started_dispatcher().await;

    let r = fetch(&d, post_json("/action/echo", json!({"args": [1, "a"]}))).await;
    assert_eq!((r.status, r.headers["content-type"].as_str()), (200, "application/json"));
    assert_eq!(json_body(&r), json!({"output": [1, "a"]}));
    assert_eq!(r.headers["x-rivet-actor"], ACTOR);
    assert_eq!(r.headers["x-rivet-actor-generation"], "3");
    assert_eq!(r.headers["x-rivet-actor-key"], "k");

    let body = to_cbor(&json!({"args": 7})).unwrap();
    let r = fetch(&d, request("POST", "/action/echo", Some("cbor"), body)).await;
    assert_eq!((r.status, r.headers["content-type"].as_str()), (200, "application/octet-stream"));
    assert_eq!(from_cbor::<Value>(r.body.as_ref().unwrap()).unwrap(), json!({"output": [7]}));

    // BARE, v1 framing of a request; the answer is v4 with the raw CBOR.
    let args = to_cbor(&json!([3])).unwrap();
    let mut bare_body = vec![args.len() as u8];
    bare_body.extend_from_slice(&args);
    let r = fetch(&d, request("POST", "/action/echo", Some("bare"), framed(1, &bare_body))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.as_ref().unwrap(), &framed(4, &bare_body));

    // Output that JSON cannot carry is null there, bytes in BARE.
    let r = fetch(&d, post_json("/action/bytes", json!({}))).await;
    assert_eq!(json_body(&r), json!({"output": null}));
    let r = fetch(&d, request("POST", "/action/bytes", Some("bare"), framed(4, &[1, 0x80]))).await;
    assert_eq!(r.body.as_ref().unwrap(), &framed(4, &[3, 0x42, 0x01, 0x02]));
}

#[tokio::test]
async fn action_failures_have_status_and_code() {
    let d = started_dispatcher().await;
    let check = |r: &EnvoyResponse, status: u16, code: &str| {
        assert_eq!(r.status, status, "{:?}", r.body.as_ref().map(|b| String::from_utf8_lossy(b).to_string()));
        let body = json_body(r);
        assert_eq!(format!("{}.{}", body["group"].as_str().unwrap(), body["code"].as_str().unwrap()), code);
        assert_eq!(body["actor"]["actorId"], ACTOR);
        assert_eq!(r.headers["x-rivet-actor"], ACTOR);
        body
    };

    let r = fetch(&d, request("GET", "/action/echo?x=1", None, vec![])).await;
    let body = check(&r, 405, "actor.method_not_allowed");
    assert_eq!(body["metadata"], json!({"method": "GET", "path": "/action/echo"}));

    let r = fetch(&d, post_json("/action/echo", json!({"args": ["x".repeat(100)]}))).await;
    check(&r, 400, "message.incoming_too_long");

    // Too long AND malformed: the size is checked first.
    let r = fetch(&d, request("POST", "/action/echo", None, vec![b'{'; 65])).await;
    check(&r, 400, "message.incoming_too_long");

    let r = fetch(&d, request("POST", "/action/echo", None, b"{nope".to_vec())).await;
    let body = check(&r, 400, "core.internal_error");
    assert_eq!(body["message"], "An internal error occurred");
    assert!(body.get("metadata").is_none());

    let r = fetch(&d, request("POST", "/action/echo", Some("cbor"), vec![0xff])).await;
    assert_eq!(r.status, 400);
    let body: Value = from_cbor(r.body.as_ref().unwrap()).unwrap();
    assert_eq!(body["code"], "internal_error");

    let r = fetch(&d, request("POST", "/action/echo", Some("bare"), vec![9, 0, 0])).await;
    assert_eq!(r.status, 400);

    let mut req = post_json("/action/echo", json!({"args": []}));
    req.headers.insert("x-rivet-conn-params".into(), "{bad".into());
    check(&fetch(&d, req).await, 400, "core.internal_error");
    let mut req = post_json("/action/echo", json!({"args": []}));
    req.headers.insert("x-rivet-conn-params".into(), r#"{"token":"t"}"#.into());
    assert_eq!(fetch(&d, req).await.status, 200);

    let r = fetch(&d, post_json("/action/missing", json!({}))).await;
    let body = check(&r, 404, "actor.action_not_found");
    assert_eq!(body["metadata"], json!({"name": "missing"}));

    let r = fetch(&d, post_json("/action/fail", json!({}))).await;
    let body = check(&r, 500, "user.nope");
    assert_eq!(body["message"], "Not allowed");

    let r = fetch(&d, post_json("/action/crash", json!({}))).await;
    let body = check(&r, 500, "core.internal_error");
    assert_eq!(body["message"], "An internal error occurred");

    let r = fetch(&d, post_json("/action/hang", json!({}))).await;
    let body = check(&r, 408, "actor.action_timed_out");
    assert_eq!(body["message"], "Action timed out");

    let r = fetch(&d, post_json("/action/big", json!({}))).await;
    check(&r, 400, "message.outgoing_too_long");

    // And the actor still answers.
    let r = fetch(&d, post_json("/action/echo", json!({"args": [1]}))).await;
    assert_eq!(json_body(&r), json!({"output": [1]}));
}

#[tokio::test]
async fn errors_follow_the_request_encoding() {
    let d = started_dispatcher().await;
    let r = fetch(&d, request("POST", "/action/missing", Some("bare"), framed(4, &[1, 0x80]))).await;
    assert_eq!((r.status, r.headers["content-type"].as_str()), (404, "application/octet-stream"));
    use rivetkit_client_protocol::versioned::HttpResponseError;
    use vbare::OwnedVersionedData;
    let e = HttpResponseError::deserialize_with_embedded_version(r.body.as_ref().unwrap()).unwrap();
    assert_eq!((e.group.as_str(), e.code.as_str()), ("actor", "action_not_found"));
    assert_eq!(cbor_to_json(&e.metadata.unwrap()).unwrap(), json!({"name": "missing"}));
    assert_eq!(e.actor.unwrap().generation.0, 3);

    let r = fetch(&d, request("GET", "/nowhere", Some("cbor"), vec![])).await;
    assert_eq!(r.status, 404);
    let body: Value = from_cbor(r.body.as_ref().unwrap()).unwrap();
    assert_eq!(body["metadata"], json!({"resource": "route", "id": "/nowhere"}));

    let r = fetch(&d, request("POST", "/health", Some("cbor"), vec![])).await;
    assert_eq!(r.status, 405);
    let body: Value = from_cbor(r.body.as_ref().unwrap()).unwrap();
    assert_eq!(body["code"], "method_not_allowed");
}

#[tokio::test]
async fn queue_sends_in_each_encoding_and_their_failures() {
    let d = started_dispatcher().await;
    let ctx = d.active_actor(ACTOR).unwrap().context().clone();

    let r = fetch(&d, post_json("/queue/jobs", json!({"body": {"n": 1}}))).await;
    assert_eq!((r.status, json_body(&r)), (200, json!({"status": "completed"})));
    assert_eq!(r.headers["x-rivet-actor"], ACTOR);
    let body = to_cbor(&json!({"body": [2]})).unwrap();
    let r = fetch(&d, request("POST", "/queue/jobs", Some("cbor"), body)).await;
    assert_eq!(from_cbor::<Value>(r.body.as_ref().unwrap()).unwrap(), json!({"status": "completed"}));
    let received = queue::next_batch(&ctx, queue::Receive { count: 5, ..Default::default() }).await.unwrap();
    let bodies: Vec<Value> = received.iter().map(|m| cbor_to_json(&m.body).unwrap()).collect();
    assert_eq!(bodies, [json!({"n": 1}), json!([2])]);

    // Waiting: the consumer's answer, or `timedOut`.
    let consumer = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let receive = queue::Receive { count: 1, completable: true, ..Default::default() };
            let message = queue::next_batch(&ctx, receive).await.unwrap().pop().unwrap();
            message.complete(Some(to_cbor(&json!("done")).unwrap())).unwrap();
        })
    };
    let r = fetch(&d, post_json("/queue/jobs", json!({"body": 3, "wait": true}))).await;
    assert_eq!(json_body(&r), json!({"status": "completed", "response": "done"}));
    consumer.await.unwrap();
    let r = fetch(&d, post_json("/queue/jobs", json!({"body": 4, "wait": true, "timeout": 10}))).await;
    assert_eq!(json_body(&r), json!({"status": "timedOut"}));

    // Failures: in the request's encoding, with the actor's headers.
    let r = fetch(&d, request("GET", "/queue/jobs", Some("cbor"), vec![])).await;
    assert_eq!(r.status, 405);
    let r = fetch(&d, request("POST", "/queue/jobs", Some("cbor"), vec![0xff])).await;
    assert_eq!(r.status, 400);
    let r = fetch(&d, post_json("/queue/jobs", json!({"body": "x".repeat(100)}))).await;
    assert_eq!((r.status, json_body(&r)["code"].as_str()), (400, Some("incoming_too_long")));
    let r = fetch(&d, post_json("/queue/private", json!({"body": 1}))).await;
    assert_eq!((r.status, json_body(&r)["code"].as_str()), (403, Some("forbidden")));
    assert_eq!(r.headers["x-rivet-actor"], ACTOR);
}

#[tokio::test]
async fn unknown_actor_and_bad_names() {
    let d = started_dispatcher().await;
    let r = handle_fetch(&d, "other", request("POST", "/action/echo", Some("cbor"), vec![])).await.unwrap();
    assert_eq!(r.status, 404);
    let body: Value = from_cbor(r.body.as_ref().unwrap()).unwrap();
    assert_eq!(body["metadata"], json!({"resource": "instance", "id": "other"}));
    assert!(!r.headers.contains_key("x-rivet-actor"));

    // Undecodable names are the envoy's 500.
    assert!(handle_fetch(&d, ACTOR, request("POST", "/action/%zz", None, vec![])).await.is_err());
    assert!(handle_fetch(&d, ACTOR, request("POST", "/queue/%C3", None, vec![])).await.is_err());
    // A `+` is literal.
    let r = fetch(&d, post_json("/action/a+b", json!({}))).await;
    assert_eq!(json_body(&r)["metadata"], json!({"name": "a+b"}));
}

#[tokio::test]
async fn framework_routes() {
    let d = started_dispatcher().await;
    let r = fetch(&d, request("GET", "/metadata", None, vec![])).await;
    let body = json_body(&r);
    assert_eq!((body["runtime"].as_str(), body["version"].as_str()), (Some("rivetkit"), Some("2.3.24-rc.1")));
    let r = fetch(&d, request("GET", "/health", None, vec![])).await;
    assert_eq!((r.status, r.body.as_deref()), (200, Some(&b"ok"[..])));
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
    let r = fetch(&d, request("GET", "/", None, vec![])).await;
    assert!(String::from_utf8_lossy(r.body.as_ref().unwrap()).starts_with("This is an RivetKit actor."));
    let r = fetch(&d, request("HEAD", "/health", None, vec![])).await;
    assert_eq!(r.status, 405);
    assert_eq!(json_body(&r)["metadata"], json!({"method": "HEAD", "path": "/health"}));
    assert_eq!(r.headers["x-rivet-actor"], ACTOR);
}
