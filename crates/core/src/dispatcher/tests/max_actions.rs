//! `maxActions`: at most that many client action handlers run at once in a
//! generation; more wait their turn in order, one whose caller leaves while
//! it waits never starts, and past the traffic queue's size the line
//! answers `actor.overloaded`.

use std::time::Duration;

use super::doubles::*;
use crate::actor::{ActorConfig, ActorTaskHandle};

fn started(h: &Harness) -> usize {
    h.hooks.calls().iter().filter(|c| c.starts_with("action hang")).count()
}

/// A started actor capped at `config`'s `max_actions` whose `hang` action
/// waits at the returned gate.
async fn gated(config: ActorConfig) -> (Harness, Gate, ActorTaskHandle) {
    let h = Harness::with_config(config);
    h.start(1).await;
    let gate = Gate::new();
    *h.hooks.action_gate.lock().unwrap() = Some(gate.clone());
    let handle = h.dispatcher.active_actor("actor").unwrap();
    (h, gate, handle)
}

/// Calls `hang` in a task of its own.
fn hang(handle: &ActorTaskHandle) -> tokio::task::JoinHandle<anyhow::Result<Vec<u8>>> {
    let handle = handle.clone();
    tokio::spawn(async move { handle.action("hang".into(), vec![]).await })
}

async fn settle() {
    // The paused clock advances only once every task is idle: whatever
    // could start has started when this returns.
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(start_paused = true)]
async fn actions_past_the_cap_wait_for_a_slot() {
    let (h, gate, handle) = gated(ActorConfig { max_actions: 2, ..ActorConfig::default() }).await;
    let callers: Vec<_> = (0..4).map(|_| hang(&handle)).collect();
    gate.entered().await;
    gate.entered().await;
    settle().await;
    assert_eq!(started(&h), 2, "{:?}", h.hooks.calls());

    gate.release();
    gate.entered().await;
    settle().await;
    assert_eq!(started(&h), 3, "a freed slot was not taken by the next in line");

    for _ in 0..3 {
        gate.release();
    }
    for caller in callers {
        caller.await.unwrap().expect("every action ran");
    }
    assert_eq!(started(&h), 4);
}

#[tokio::test(start_paused = true)]
async fn a_full_line_answers_overloaded_and_the_actor_keeps_serving() {
    let config = ActorConfig { max_actions: 1, dispatch_queue_capacity: 1, ..ActorConfig::default() };
    let (_h, gate, handle) = gated(config).await;
    let running = hang(&handle);
    gate.entered().await;
    let waiting = hang(&handle);
    settle().await;

    let err = handle.action("hang".into(), vec![]).await.expect_err("a third action past the line");
    let text = format!("{err:#}");
    assert!(text.contains("overloaded"), "{text}");

    gate.release();
    gate.entered().await;
    gate.release();
    running.await.unwrap().unwrap();
    waiting.await.unwrap().unwrap();
    handle.action("ping".into(), vec![]).await.expect("the actor still serves");
}

#[tokio::test(start_paused = true)]
async fn an_action_whose_caller_left_while_it_waited_never_starts() {
    let (h, gate, handle) = gated(ActorConfig { max_actions: 1, ..ActorConfig::default() }).await;
    let running = hang(&handle);
    gate.entered().await;
    let waiting = tokio::spawn({
        let handle = handle.clone();
        async move { handle.http_action(vec![], Default::default(), "hang".into(), vec![]).await }
    });
    settle().await;
    waiting.abort();
    settle().await;

    gate.release();
    running.await.unwrap().unwrap();
    settle().await;
    assert_eq!(started(&h), 1, "the abandoned action ran: {:?}", h.hooks.calls());
    handle.action("ping".into(), vec![]).await.expect("the slot was given back");
}

#[test]
fn the_default_cap_is_128() {
    assert_eq!(ActorConfig::default().max_actions, 128);
}
