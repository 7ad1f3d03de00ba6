//! The output gate (docs/durability.md): an answer leaves only once the
//! engine acknowledged a save covering what its work changed; a save that
//! fails, or a generation that ends first, refuses the answer instead.

use std::sync::atomic::Ordering::SeqCst;

use super::doubles::*;
use crate::actor::{storage, ActorConfig, OutputGate};
use crate::error::RivetError;

fn stateful(gate: OutputGate) -> Harness {
    Harness::with_config(ActorConfig { has_state: true, output_gate: gate, ..ActorConfig::default() })
}

#[tokio::test(start_paused = true)]
async fn an_answer_waits_for_the_save_of_its_change() {
    let h = stateful(OutputGate::On);
    let ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let puts = h.link.puts.load(SeqCst);
    handle.action("set:one".into(), vec![]).await.unwrap();
    handle.output_gate().await.expect("the save is acknowledged");
    assert_eq!(h.link.puts.load(SeqCst), puts + 1, "one save");
    let record = storage::load_record(&ctx).await.unwrap().expect("a record");
    assert_eq!(record.state, b"one".to_vec(), "the change is in the engine before the answer");
}

#[tokio::test(start_paused = true)]
async fn gates_opened_together_share_one_save_and_an_unchanged_state_writes_nothing() {
    let h = stateful(OutputGate::On);
    let _ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    handle.action("set:a".into(), vec![]).await.unwrap();
    handle.output_gate().await.unwrap();
    let puts = h.link.puts.load(SeqCst);
    // Ten answers at once, after one more change: one save covers them.
    handle.action("set:b".into(), vec![]).await.unwrap();
    let gates: Vec<_> = (0..10).map(|_| handle.output_gate()).collect();
    for result in futures::future::join_all(gates).await {
        result.unwrap();
    }
    assert!(h.link.puts.load(SeqCst) - puts <= 2, "group commit, not one write per answer");
    // A read-only answer: the record did not change, so nothing is written.
    let puts = h.link.puts.load(SeqCst);
    handle.action("read".into(), vec![]).await.unwrap();
    handle.output_gate().await.unwrap();
    assert_eq!(h.link.puts.load(SeqCst), puts);
}

#[tokio::test(start_paused = true)]
async fn a_failed_save_refuses_the_answer() {
    let h = stateful(OutputGate::On);
    let _ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    h.link.failing_puts.store(1, SeqCst);
    handle.action("set:x".into(), vec![]).await.unwrap();
    let err = handle.output_gate().await.unwrap_err();
    let e = RivetError::extract(&err);
    assert_eq!(e.qualified_code(), "actor.save_unconfirmed");
    assert!(e.is_public(), "clients see why (503)");
    // The actor keeps working: the next answer passes once a save lands.
    handle.action("set:y".into(), vec![]).await.unwrap();
    handle.output_gate().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lost_generation_refuses_waiting_and_later_answers() {
    let h = stateful(OutputGate::On);
    let ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    handle.action("set:x".into(), vec![]).await.unwrap();
    ctx.lost_token().cancel();
    let err = handle.output_gate().await.unwrap_err();
    assert_eq!(RivetError::extract(&err).qualified_code(), "actor.save_unconfirmed");
    let saved = storage::load_record(&ctx).await.unwrap().map(|r| r.state);
    assert_ne!(saved, Some(b"x".to_vec()), "the lost generation's change was not written");
    let later = handle.output_gate().await.unwrap_err();
    assert_eq!(RivetError::extract(&later).qualified_code(), "actor.save_unconfirmed");
}

#[tokio::test(start_paused = true)]
async fn off_answers_at_once() {
    let h = stateful(OutputGate::Off);
    let _ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let puts = h.link.puts.load(SeqCst);
    handle.action("set:x".into(), vec![]).await.unwrap();
    handle.output_gate().await.unwrap();
    assert_eq!(h.link.puts.load(SeqCst), puts, "no save was asked for");
}

/// The engine's sleep stop for generation 1, held inside `onSleep`.
async fn sleep_held_in_on_sleep(h: &Harness) -> (Gate, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let sleep_gate = Gate::new();
    *h.hooks.sleep_gate.lock().unwrap() = Some(sleep_gate.clone());
    let stop = {
        let (d, stop) = (h.dispatcher.clone(), crate::dispatcher::StopHandle::new(|_| {}));
        tokio::spawn(async move { d.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await })
    };
    sleep_gate.entered().await;
    (sleep_gate, stop)
}

/// RivetKit drops the actor's state from memory at the end of `onSleep`:
/// with the gate, new answered work is refused during sleep grace (it
/// never runs; the client retries on the next generation), and the hook
/// runs once nothing answered is left to save (docs/durability.md, "Sleep
/// grace").
#[tokio::test(start_paused = true)]
async fn during_sleep_grace_new_answered_work_is_refused_and_retried_elsewhere() {
    let h = stateful(OutputGate::On);
    let ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    handle.action("set:before".into(), vec![]).await.unwrap();
    handle.output_gate().await.unwrap();
    let (sleep_gate, stop) = sleep_held_in_on_sleep(&h).await;

    let err = handle.action("set:during".into(), vec![]).await.unwrap_err();
    let e = RivetError::extract(&err);
    assert_eq!(e.qualified_code(), "actor.restarting");
    assert_eq!(e.metadata.as_ref().and_then(|m| m.get("retryable")), Some(&serde_json::json!(true)));
    assert!(!h.hooks.calls().iter().any(|c| c.starts_with("action:set:during")), "it never ran");

    sleep_gate.release();
    stop.await.unwrap().unwrap();
    assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"before".to_vec());
}

#[tokio::test(start_paused = true)]
async fn with_the_gate_off_sleep_grace_still_serves() {
    let h = stateful(OutputGate::Off);
    let _ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let (sleep_gate, stop) = sleep_held_in_on_sleep(&h).await;
    handle.action("set:during".into(), vec![]).await.expect("served during grace, as in the reference");
    sleep_gate.release();
    stop.await.unwrap().unwrap();
}
