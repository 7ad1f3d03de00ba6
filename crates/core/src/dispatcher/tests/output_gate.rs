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

/// The engine's store fails some writes under load ("transaction
/// failed"); the task tries again 100 ms later, and the answer waits for
/// that try instead of refusing work that was about to be durable.
#[tokio::test(start_paused = true)]
async fn an_answer_sits_through_a_save_that_fails_once() {
    let h = stateful(OutputGate::On);
    let ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    h.link.failing_puts.store(1, SeqCst);
    handle.action("set:x".into(), vec![]).await.unwrap();
    handle.output_gate().await.expect("the retried save is acknowledged");
    assert_eq!(h.link.failing_puts.load(SeqCst), 0, "the first put failed");
    let record = storage::load_record(&ctx).await.unwrap().expect("a record");
    assert_eq!(record.state, b"x".to_vec());
}

#[tokio::test(start_paused = true)]
async fn a_save_that_keeps_failing_refuses_the_answer() {
    let h = stateful(OutputGate::On);
    let _ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    h.link.failing_puts.store(crate::actor::save::WAIT_FAILED_SAVES as usize, SeqCst);
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

/// Records what reaches the client, and how many engine writes had landed
/// when it did.
struct Wire {
    log: std::sync::Mutex<Vec<(String, usize)>>,
    link: std::sync::Arc<crate::actor::link::MemoryLink>,
}

impl Wire {
    fn new(h: &Harness) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self { log: Default::default(), link: h.link.clone() })
    }
    fn push(&self, what: &str) {
        self.log.lock().unwrap().push((what.to_owned(), self.link.puts.load(SeqCst)));
    }
    fn sent(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(|(what, _)| what.clone()).collect()
    }
}

impl crate::actor::ConnTransport for Wire {
    fn send_event(&self, name: &str, _args_cbor: &[u8]) -> anyhow::Result<()> {
        self.push(&format!("event:{name}"));
        Ok(())
    }
    fn close(&self, _code: u16, _reason: &str) {
        self.push("close");
    }
}

fn subscribed(ctx: &crate::actor::ActorContext, wire: &std::sync::Arc<Wire>, event: &str) -> crate::actor::Conn {
    let conn = crate::actor::Conn::new("c".into(), vec![], Some(wire.clone()), None);
    conn.subscribe(event);
    ctx.conns().insert(conn.clone());
    conn
}

/// An event, a connection's own event and the answer after them leave in
/// the order they were produced, and only once a save covering the change
/// before them was acknowledged (docs/durability.md, "The output gate").
#[tokio::test(start_paused = true)]
async fn events_and_answers_leave_in_order_once_their_save_is_acknowledged() {
    let h = stateful(OutputGate::On);
    let ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let wire = Wire::new(&h);
    let conn = subscribed(&ctx, &wire, "changed");
    handle.action("set:x".into(), vec![]).await.unwrap();
    let puts = h.link.puts.load(SeqCst);
    // Queued from a thread that is no runtime's, as from JavaScript.
    let from_js = ctx.clone();
    let counted = std::thread::spawn(move || from_js.broadcast("changed", &[])).join().unwrap();
    assert_eq!(counted, 1, "counted when queued");
    ctx.send_event(&conn, "direct", &[]).unwrap();
    let answered = wire.clone();
    ctx.after_save(crate::actor::outbox::Kind::Answer, move |released| {
        released.unwrap();
        answered.push("answer");
    })
    .unwrap();
    assert!(wire.sent().is_empty(), "nothing leaves before the save");
    handle.output_gate().await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(wire.sent(), ["event:changed", "event:direct", "answer"]);
    for (what, at) in wire.log.lock().unwrap().iter() {
        assert!(*at > puts, "{what} left after the save of the change was written");
    }
    let record = storage::load_record(&ctx).await.unwrap().unwrap();
    assert_eq!(record.state, b"x".to_vec());
}

#[tokio::test(start_paused = true)]
async fn an_event_whose_save_failed_is_dropped_and_a_close_still_goes_out() {
    let h = stateful(OutputGate::On);
    let ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let wire = Wire::new(&h);
    let conn = subscribed(&ctx, &wire, "changed");
    // Every save fails until the event's waiter gives up.
    h.link.failing_puts.store(1000, SeqCst);
    handle.action("set:x".into(), vec![]).await.unwrap();
    ctx.broadcast("changed", &[]);
    ctx.close_conn_transport(&conn, 1000, "bye");
    assert!(wire.sent().is_empty(), "the close waits behind the event");
    let _ = handle.output_gate().await;
    for _ in 0..50 {
        if !wire.sent().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(wire.sent(), ["close"], "the unsaved change was not reported; the close kept its place");
    h.link.failing_puts.store(0, SeqCst);
    // The actor keeps working: the next event leaves once a save lands.
    let wire = Wire::new(&h);
    subscribed(&ctx, &wire, "again");
    handle.action("set:y".into(), vec![]).await.unwrap();
    ctx.broadcast("again", &[]);
    handle.output_gate().await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(wire.sent(), ["event:again"]);
}

#[tokio::test(start_paused = true)]
async fn with_the_gate_off_events_leave_at_once() {
    let h = stateful(OutputGate::Off);
    let ctx = h.start(1).await;
    let wire = Wire::new(&h);
    let conn = subscribed(&ctx, &wire, "changed");
    ctx.broadcast("changed", &[]);
    ctx.send_event(&conn, "direct", &[]).unwrap();
    assert_eq!(wire.sent(), ["event:changed", "event:direct"]);
}

#[tokio::test(start_paused = true)]
async fn a_stopped_generation_releases_what_it_held() {
    let h = stateful(OutputGate::On);
    let ctx = h.start(1).await;
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let wire = Wire::new(&h);
    subscribed(&ctx, &wire, "changed");
    handle.action("set:x".into(), vec![]).await.unwrap();
    ctx.broadcast("changed", &[]);
    let (d, stop) = (h.dispatcher.clone(), crate::dispatcher::StopHandle::new(|_| {}));
    d.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert!(wire.sent().contains(&"event:changed".to_owned()), "released by the final save: {:?}", wire.sent());
    assert!(ctx.outbox().is_empty());
}
