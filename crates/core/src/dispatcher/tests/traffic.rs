//! Client traffic and its callers: `onDisconnect` is never lost to a full
//! queue, work whose caller left before it started never runs, the JS
//! cancel token fires as soon as a caller leaves running work, and work
//! whose caller left still ends its transient connection.

use std::time::Duration;

use tokio::sync::oneshot;

use super::doubles::*;
use crate::actor::task::DispatchCommand;
use crate::actor::{ActorConfig, Conn};

fn has(h: &Harness, call: &str) -> bool {
    h.hooks.calls().iter().any(|c| c == call)
}

async fn until(h: &Harness, call: &str) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !has(h, call) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never saw {call}: {:?}", h.hooks.calls()));
}

#[tokio::test(start_paused = true)]
async fn on_disconnect_survives_a_full_traffic_queue() {
    let h = Harness::with_config(ActorConfig { dispatch_queue_capacity: 1, ..ActorConfig::default() });
    let wake = Gate::new();
    *h.hooks.wake_gate.lock().unwrap() = Some(wake.clone());
    let ctx = h.ctx(1);
    let start = h.spawn_start(ctx.clone());
    wake.entered().await;

    // The task is busy starting: its one-slot traffic queue fills up.
    let conn = Conn::new("gone".into(), vec![], None, None);
    ctx.conns().insert(conn.clone());
    let (reply, _answer) = oneshot::channel();
    assert!(ctx.dispatch_for_test(DispatchCommand::Action {
        conn: None,
        message_index: None,
        name: "queued".into(),
        args: vec![],
        reply
    }));
    let (reply, _refused) = oneshot::channel();
    assert!(
        !ctx.dispatch_for_test(DispatchCommand::Action {
            conn: None,
            message_index: None,
            name: "overflow".into(),
            args: vec![],
            reply
        }),
        "the queue is full"
    );

    ctx.disconnect(&conn);
    wake.release();
    start.await.unwrap().unwrap();
    until(&h, "onDisconnect:gone").await;
}

#[tokio::test(start_paused = true)]
async fn an_action_whose_caller_left_before_it_started_does_not_run() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    let (reply, answer) = oneshot::channel();
    drop(answer);
    assert!(ctx.dispatch_for_test(DispatchCommand::Action {
        conn: None,
        message_index: None,
        name: "abandoned".into(),
        args: vec![],
        reply
    }));
    // Traffic is taken in order: once a later action answered, the first was handled.
    let handle = h.dispatcher.active_actor("actor").unwrap();
    handle.action("later".into(), vec![]).await.unwrap();
    assert!(has(&h, "action later:1"));
    assert!(!has(&h, "action abandoned:1"), "{:?}", h.hooks.calls());
}

#[tokio::test(start_paused = true)]
async fn the_cancel_token_fires_while_a_hung_action_runs_when_its_caller_leaves() {
    let h = Harness::new();
    h.start(1).await;
    let gate = Gate::new();
    *h.hooks.action_gate.lock().unwrap() = Some(gate.clone());
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let caller = tokio::spawn(async move { handle.action("hang".into(), vec![]).await });
    gate.entered().await;
    assert!(!has(&h, "cancelled hang"));

    caller.abort();
    until(&h, "cancelled hang").await;
    assert!(!has(&h, "finished hang"), "cancelled while the action still runs");
    gate.release();
    until(&h, "finished hang").await;
}

#[tokio::test(start_paused = true)]
async fn an_http_action_is_one_trip_with_its_connection_hooks() {
    let h = Harness::new();
    h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let output = handle.http_action(vec![], Default::default(), "ping".into(), vec![]).await.unwrap();
    assert_eq!(output, vec![0xf6]);
    let calls = h.hooks.calls();
    let action = calls.iter().position(|c| c == "action ping:1").expect("the action ran");
    let disconnect = calls.iter().position(|c| c.starts_with("onDisconnect:")).expect("onDisconnect ran");
    assert!(action < disconnect, "{calls:?}");
}

/// Reference 2.3.28: a connection created for an HTTP action whose caller
/// went away was left registered and kept the actor awake forever. Here the
/// work runs to its end (bounded by its timeouts) and ends its transient
/// connection, `onDisconnect` included, whoever still waits.
#[tokio::test(start_paused = true)]
async fn an_http_action_whose_caller_left_leaves_no_connection_behind() {
    let h = Harness::new();
    h.start(1).await;
    let gate = Gate::new();
    *h.hooks.action_gate.lock().unwrap() = Some(gate.clone());
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let caller = tokio::spawn({
        let handle = handle.clone();
        async move { handle.http_action(vec![], Default::default(), "hang".into(), vec![]).await }
    });
    gate.entered().await;
    assert_eq!(handle.context().conns().len(), 1, "the action runs on its own connection");

    caller.abort();
    until(&h, "cancelled hang").await;
    gate.release();
    until(&h, "finished hang").await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while !handle.context().conns().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the transient connection stayed registered");
    assert!(h.hooks.calls().iter().any(|c| c.starts_with("onDisconnect:")), "{:?}", h.hooks.calls());
}
