//! A start whose hooks fail is accepted: its traffic gets the start error,
//! the crash is reported after the linger, and its stop completes at once.

use std::sync::atomic::Ordering;

use super::doubles::*;
use crate::dispatcher::start::{AFTER_SERVED, FAILED_START_LINGER};
use crate::dispatcher::StopReason;
use crate::RivetError;

fn refusal(h: &Harness) -> Option<RivetError> {
    h.dispatcher.active_actor("actor").err().map(|e| RivetError::extract(&e))
}

fn crash_reports(h: &Harness) -> usize {
    // `MemoryLink` counts crash reports with sleep intents.
    h.link.sleeps.load(Ordering::SeqCst)
}

async fn advance(d: std::time::Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(start_paused = true)]
async fn failed_start_is_accepted_and_its_traffic_gets_the_structured_error() {
    let h = Harness::new();
    *h.hooks.wake_error.lock().unwrap() =
        Some(RivetError::foreign("user", "boom", "onWake says no").with_metadata(serde_json::json!({ "why": 1 })));
    h.start_actor(h.ctx(1)).await.expect("the failed start is accepted");
    assert!(!h.dispatcher.is_starting(&key(1)) && h.dispatcher.record(&key(1)).is_none());

    let e = refusal(&h).expect("traffic is refused");
    assert_eq!((e.qualified_code().as_str(), e.message.as_str()), ("user.boom", "onWake says no"));
    assert_eq!(e.metadata, Some(serde_json::json!({ "why": 1 })));
    assert_eq!(e.actor.as_ref().map(|a| a.generation), Some(1));
    assert_eq!(crash_reports(&h), 0, "not before the linger");
    assert_eq!(h.dispatcher.failed_start_error("actor").map(|e| e.qualified_code()).as_deref(), Some("user.boom"));

    advance(FAILED_START_LINGER + std::time::Duration::from_millis(1)).await;
    assert_eq!(crash_reports(&h), 1, "the crash is reported once the linger is over");
    assert_eq!(refusal(&h).unwrap().qualified_code(), "user.boom", "still answered until stopped");

    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    assert_eq!(refusal(&h).unwrap().qualified_code(), "actor.not_found");
}

#[tokio::test(start_paused = true)]
async fn an_unstructured_hook_error_is_an_internal_error() {
    let h = Harness::new();
    *h.hooks.fail_wake.lock().unwrap() = true;
    h.start(1).await;
    let e = refusal(&h).unwrap();
    assert_eq!(e.qualified_code(), "core.internal_error");
    assert!(!e.is_public(), "masked for clients");
}

#[tokio::test(start_paused = true)]
async fn a_stop_within_the_linger_completes_and_nothing_is_reported() {
    let h = Harness::new();
    *h.hooks.fail_wake.lock().unwrap() = true;
    h.start(1).await;
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::GoingAway, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    advance(FAILED_START_LINGER * 2).await;
    assert_eq!(crash_reports(&h), 0);
    assert_eq!(refusal(&h).unwrap().qualified_code(), "actor.not_found");
}

#[tokio::test(start_paused = true)]
async fn a_lost_failed_generation_reports_nothing() {
    let h = Harness::new();
    *h.hooks.fail_wake.lock().unwrap() = true;
    let ctx = h.start(1).await;
    ctx.mark_lost();
    advance(FAILED_START_LINGER * 2).await;
    assert_eq!(crash_reports(&h), 0);
}

#[tokio::test(start_paused = true)]
async fn a_newer_generation_supersedes_the_failed_one() {
    let h = Harness::new();
    *h.hooks.fail_wake.lock().unwrap() = true;
    h.start(1).await;
    *h.hooks.fail_wake.lock().unwrap() = false;
    h.start(2).await;
    assert!(refusal(&h).is_none(), "generation 2 serves");
    assert!(h.dispatcher.failed_start_error("actor").is_none());
    advance(FAILED_START_LINGER * 2).await;
    assert_eq!(crash_reports(&h), 0, "the superseded failure is not reported");
    // A late stop for the failed generation completes without touching 2.
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    assert!(refusal(&h).is_none());
}

/// The crash is reported once the waking traffic got the error, however
/// late that traffic arrives within the linger; never before it.
#[tokio::test(start_paused = true)]
async fn the_crash_waits_for_the_waking_traffic() {
    let h = Harness::new();
    *h.hooks.fail_wake.lock().unwrap() = true;
    h.start(1).await;
    advance(FAILED_START_LINGER / 2).await;
    assert_eq!(crash_reports(&h), 0, "no traffic yet: the actor is not put to sleep under it");
    assert_eq!(refusal(&h).unwrap().qualified_code(), "core.internal_error");
    advance(AFTER_SERVED + std::time::Duration::from_millis(1)).await;
    assert_eq!(crash_reports(&h), 1, "reported once the traffic got its answer");
}
