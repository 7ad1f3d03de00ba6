//! The actor task's timers, on a paused clock: the idle sleep timer and
//! what keeps an actor awake, throttled and awaited saves, alarms.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::doubles::*;
use crate::actor::save::SaveOptions;
use crate::actor::{storage, ActorConfig};

fn sleeps(h: &Harness) -> usize {
    h.link.sleeps.load(Ordering::SeqCst)
}

async fn advance(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(start_paused = true)]
async fn idle_actor_asks_to_sleep_after_the_timeout() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    advance(Duration::from_secs(29)).await;
    assert_eq!(sleeps(&h), 0);
    advance(Duration::from_secs(2)).await;
    assert_eq!(sleeps(&h), 1);
    assert!(ctx.sleep_requested());
}

#[tokio::test(start_paused = true)]
async fn keep_awake_region_defers_sleep_until_it_ends() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    let region = ctx.activity().begin();
    advance(Duration::from_secs(120)).await;
    assert_eq!(sleeps(&h), 0);
    ctx.activity().end(region);
    advance(Duration::from_secs(29)).await;
    assert_eq!(sleeps(&h), 0, "the timer restarts from zero when the actor becomes idle");
    advance(Duration::from_secs(2)).await;
    assert_eq!(sleeps(&h), 1);
}

#[tokio::test(start_paused = true)]
async fn request_in_flight_defers_sleep() {
    let h = Harness::new();
    h.start(1).await;
    let gate = Gate::new();
    *h.hooks.request_gate.lock().unwrap() = Some(gate.clone());
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let request = tokio::spawn(async move { handle.http(Default::default()).await });
    gate.entered().await;
    // Longer than the sleep timeout, shorter than the request timeout (60 s).
    advance(Duration::from_secs(50)).await;
    assert_eq!(sleeps(&h), 0);
    gate.release();
    request.await.unwrap().unwrap();
    advance(Duration::from_secs(31)).await;
    assert_eq!(sleeps(&h), 1);
}

#[tokio::test(start_paused = true)]
async fn no_sleep_actor_never_sleeps() {
    let h = Harness::with_config(ActorConfig { no_sleep: true, ..Default::default() });
    h.start(1).await;
    advance(Duration::from_secs(3600)).await;
    assert_eq!(sleeps(&h), 0);
}

#[tokio::test(start_paused = true)]
async fn request_save_and_wait_resolves_once_the_state_is_persisted() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    ctx.set_state(b"v2".to_vec());
    ctx.request_save_and_wait(SaveOptions::default()).await.unwrap();
    let record = storage::load_record(&ctx).await.unwrap().unwrap();
    assert_eq!(record.state, b"v2");
}

#[tokio::test(start_paused = true)]
async fn saves_are_throttled_to_the_interval() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    ctx.set_state(b"v2".to_vec());
    ctx.request_save(SaveOptions::default());
    advance(Duration::from_millis(500)).await;
    assert_ne!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"v2", "not before the interval");
    advance(Duration::from_millis(600)).await;
    assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"v2");
}

#[tokio::test(start_paused = true)]
async fn alarm_fires_on_time_and_is_cleared() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    ctx.set_alarm(Some(now_ms + 5_000)).unwrap();
    advance(Duration::from_millis(4_900)).await;
    assert!(!h.hooks.calls().contains(&"onAlarm:1".to_string()));
    advance(Duration::from_millis(200)).await;
    assert!(h.hooks.calls().contains(&"onAlarm:1".to_string()));
    assert_eq!(ctx.alarm(), None);
}

#[tokio::test(start_paused = true)]
async fn a_due_alarm_fires_on_the_next_start() {
    let h = Harness::new();
    let one = h.start(1).await;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    one.set_alarm(Some(now_ms - 1)).unwrap();
    // Persisted with the record; a stop before it fires keeps it.
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    h.start(2).await;
    advance(Duration::from_millis(10)).await;
    assert!(h.hooks.calls().contains(&"onAlarm:2".to_string()), "{:?}", h.hooks.calls());
}

/// Reference 2.3.31 (PR #5923): an alarm push acknowledged locally can be
/// lost in a drain, so every start pushes the next alarm again, even one
/// the previous generation had already pushed.
#[tokio::test(start_paused = true)]
async fn every_start_pushes_the_next_alarm_again() {
    let h = Harness::new();
    let one = h.start(1).await;
    let at = crate::actor::schedule::now_ms() + 3_600_000;
    one.set_alarm(Some(at)).unwrap();
    advance(Duration::from_millis(10)).await;
    assert_eq!(*h.link.alarm.lock().unwrap(), Some(Some(at)), "the first generation pushed it");
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));

    // The engine never kept it (lost in the drain).
    *h.link.alarm.lock().unwrap() = None;
    h.start(2).await;
    advance(Duration::from_millis(10)).await;
    assert_eq!(*h.link.alarm.lock().unwrap(), Some(Some(at)), "the next start did not push the alarm again");
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_action_fires_on_time_and_its_record_goes() {
    use crate::actor::schedule;
    let h = Harness::new();
    let ctx = h.start(1).await;
    let at = schedule::now_ms() + 3_000;
    schedule::schedule_at(&ctx, at, "tick", vec![0x80]).await.unwrap();
    assert_eq!(ctx.next_wake(), Some(at));
    advance(Duration::from_millis(2_900)).await;
    assert!(!h.hooks.calls().iter().any(|c| c.starts_with("scheduled")));
    advance(Duration::from_millis(200)).await;
    assert!(h.hooks.calls().contains(&"scheduled tick at:1".to_string()), "{:?}", h.hooks.calls());
    assert!(ctx.schedule().is_empty());
    let stored = ctx.link().kv_list_prefix("actor", vec![schedule::SCHEDULE_PREFIX], false, None).await.unwrap();
    let events: Vec<_> = stored.iter().filter(|(key, _)| key.as_slice() != crate::inspector::TOKEN_KEY).collect();
    assert!(events.is_empty(), "the record is deleted once the action finished");
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_action_due_while_asleep_fires_on_the_next_start() {
    use crate::actor::schedule;
    let h = Harness::new();
    let one = h.start(1).await;
    schedule::schedule_at(&one, schedule::now_ms() + 60_000, "later", vec![0x80]).await.unwrap();
    schedule::schedule_at(&one, schedule::now_ms() - 1, "overdue", vec![0x80]).await.unwrap();
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    let two = h.start(2).await;
    advance(Duration::from_millis(10)).await;
    let calls = h.hooks.calls();
    assert!(calls.contains(&"scheduled overdue at:2".to_string()), "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("scheduled later")));
    assert_eq!(two.schedule().list().iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["later"]);
}

#[tokio::test(start_paused = true)]
async fn an_active_run_handler_keeps_the_actor_awake_and_ends_on_stop() {
    let h = Harness::new();
    *h.hooks.has_run.lock().unwrap() = true;
    let ctx = h.start(1).await;
    assert!(ctx.run_handler_active());
    advance(Duration::from_secs(120)).await;
    assert_eq!(sleeps(&h), 0);
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    assert!(!ctx.run_handler_active());
}

#[tokio::test(start_paused = true)]
async fn a_run_loop_blocked_on_the_queue_lets_the_actor_sleep() {
    use crate::actor::queue;
    let h = Harness::new();
    *h.hooks.queue_run.lock().unwrap() = true;
    let ctx = h.start(1).await;
    advance(Duration::from_secs(20)).await;
    assert_eq!(sleeps(&h), 0);
    // A message: the loop takes it, waits again, and the idle timer starts over.
    queue::send(&ctx, "jobs", vec![7]).await.unwrap();
    advance(Duration::from_secs(29)).await;
    assert!(h.hooks.calls().contains(&"took [7]".to_string()), "{:?}", h.hooks.calls());
    assert_eq!(sleeps(&h), 0);
    advance(Duration::from_secs(2)).await;
    assert_eq!(sleeps(&h), 1, "the blocked loop does not keep it awake");
    assert!(ctx.run_handler_active());
    // The stop aborts the wait and the loop ends.
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    assert!(!ctx.run_handler_active());
}

/// A handle kept from a generation that stopped can never write again: the
/// successor's acknowledged state stays, and nothing of the stale handle
/// waits forever.
#[tokio::test(start_paused = true)]
async fn a_stopped_generation_refuses_every_write() {
    let h = Harness::new();
    let stale = h.start(1).await;
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));

    let current = h.start(2).await;
    current.set_state(b"3".to_vec());
    current.request_save_and_wait(SaveOptions { immediate: true, max_wait: None }).await.unwrap();

    let code = |err: anyhow::Error| crate::RivetError::extract(&err).qualified_code();
    stale.set_state(b"999999".to_vec());
    assert_eq!(code(storage::save_record(&stale).await.unwrap_err()), "actor.stopping");
    assert_eq!(code(stale.request_save_and_wait(SaveOptions::default()).await.unwrap_err()), "actor.stopping");
    assert_eq!(stale.request_save(SaveOptions::default()), None);
    assert_eq!(code(stale.set_alarm(Some(1)).unwrap_err()), "actor.stopping");
    assert_eq!(
        code(crate::actor::schedule::schedule_at(&stale, 1, "tick", vec![]).await.unwrap_err()),
        "actor.stopping"
    );
    let kv = crate::actor::kv::ActorKv::new(stale.clone());
    assert_eq!(code(kv.put(b"k", b"v").await.unwrap_err()), "actor.stopping");

    assert_eq!(storage::load_record(&current).await.unwrap().unwrap().state, b"3");
}

/// A save requested while the generation stops, after its final save
/// began, is answered (with the refusal) instead of waiting forever.
#[tokio::test(start_paused = true)]
async fn a_save_waiter_is_answered_when_the_generation_stops() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    let gate = Gate::new();
    *h.hooks.request_gate.lock().unwrap() = Some(gate.clone());
    let handle = h.dispatcher.active_actor("actor").unwrap();
    let request = tokio::spawn(async move { handle.http(Default::default()).await });
    gate.entered().await;
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    gate.release();
    let _ = request.await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    let waited = tokio::time::timeout(Duration::from_secs(60), ctx.request_save_and_wait(SaveOptions::default())).await;
    assert!(matches!(waited, Ok(Err(_))), "answered with an error, not left pending");
}

#[test]
fn the_run_wake_time_joins_the_engine_alarm_and_clears() {
    use crate::actor::link::MemoryLink;
    use std::sync::Arc;
    let link = Arc::new(MemoryLink::default());
    let ctx = crate::actor::ActorContext::for_test_with("actor", 1, link.clone());
    let pushed = || *link.alarm.lock().unwrap();
    ctx.set_run_wake_at(Some(5_000)).unwrap();
    assert_eq!(pushed(), Some(Some(5_000)));
    ctx.set_alarm(Some(9_000)).unwrap();
    assert_eq!(pushed(), Some(Some(5_000)), "the earlier of the two");
    ctx.set_run_wake_at(None).unwrap();
    assert_eq!(pushed(), Some(Some(9_000)));
    ctx.set_alarm(None).unwrap();
    assert_eq!(pushed(), Some(None));
    assert_eq!(ctx.run_wake_at(), None);
}

#[tokio::test(start_paused = true)]
async fn final_save_is_tried_again_when_the_engine_fails_a_write() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    ctx.set_state(vec![7, 7, 7]);
    // The engine's store answers the next two writes with an error, as it
    // does under load; the third goes through.
    h.link.failing_puts.store(2, Ordering::SeqCst);
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()), "the stop succeeds once a retry went through");
    assert_eq!(h.link.failing_puts.load(Ordering::SeqCst), 0);
    let record = storage::load_record(&h.ctx(2)).await.unwrap().expect("a record");
    assert_eq!(record.state, vec![7, 7, 7], "the final state reached the store");
}
