//! The admission table of docs/generations.md.

use super::doubles::*;
use crate::dispatcher::StopReason;
use crate::RivetError;

fn refusal(h: &Harness) -> Option<String> {
    h.dispatcher.active_actor("actor").err().map(|e| RivetError::extract(&e).qualified_code())
}

#[tokio::test(start_paused = true)]
async fn unknown_actor_is_not_found() {
    let h = Harness::new();
    assert_eq!(refusal(&h).as_deref(), Some("actor.not_found"));
}

#[tokio::test(start_paused = true)]
async fn active_actor_routes_even_after_it_asked_to_sleep() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    assert_eq!(refusal(&h), None);
    ctx.sleep().unwrap();
    assert_eq!(refusal(&h), None);
}

#[tokio::test(start_paused = true)]
async fn lost_active_actor_is_stopping() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    ctx.mark_lost();
    assert_eq!(refusal(&h).as_deref(), Some("actor.stopping"));
}

#[tokio::test(start_paused = true)]
async fn destroying_actor_refuses() {
    let h = Harness::new();
    h.start(1).await;
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::Destroy, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    assert_eq!(refusal(&h).as_deref(), Some("actor.not_found"));
}

#[tokio::test(start_paused = true)]
async fn starting_actor_is_not_routed() {
    let h = Harness::new();
    let gate = h.gates.arm(&key(1));
    let start = h.spawn_start(h.ctx(1));
    gate.entered().await;
    assert_eq!(refusal(&h).as_deref(), Some("actor.not_found"));
    gate.release();
    start.await.unwrap().unwrap();
    assert_eq!(refusal(&h), None);
}

#[tokio::test(start_paused = true)]
async fn errors_carry_the_actor_specifier() {
    let h = Harness::new();
    let ctx = h.start(7).await;
    ctx.mark_lost();
    let err = h.dispatcher.active_actor("actor").unwrap_err();
    let e = RivetError::extract(&err);
    assert_eq!(e.actor.unwrap().generation, 7);
}
