//! The race table of docs/generations.md, rows 1–16.

use super::doubles::*;
use crate::actor::ShutdownKind;
use crate::dispatcher::{InstanceRecord, StopReason};
use crate::RivetError;

fn is_active(h: &Harness, g: u32) -> bool {
    matches!(h.dispatcher.record(&key(g)), Some(InstanceRecord::Active(_)))
}

fn code(err: &anyhow::Error) -> String {
    RivetError::extract(err).qualified_code()
}

/// Stops are spawned like envoy-client does; they may park or run a shutdown.
fn spawn_stop(
    h: &Harness,
    g: u32,
    reason: StopReason,
) -> (tokio::task::JoinHandle<anyhow::Result<()>>, tokio::sync::oneshot::Receiver<Result<(), String>>) {
    let (stop, rx) = stop_handle();
    let d = h.dispatcher.clone();
    (tokio::spawn(async move { d.stop_actor("actor", g, reason, stop).await }), rx)
}

#[tokio::test(start_paused = true)]
async fn race_01_stop_before_start_parks_and_is_completed_by_newer_start() {
    let h = Harness::new();
    let (stop, mut rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 49, StopReason::Lost, stop).await.unwrap();
    assert!(h.dispatcher.has_pending_stop(&key(49)));
    assert_eq!(signalled(&mut rx), None);

    h.start(50).await;
    assert!(is_active(&h, 50));
    assert!(!h.dispatcher.has_pending_stop(&key(49)));
    assert_eq!(signalled(&mut rx), Some(Ok(())));
}

#[tokio::test(start_paused = true)]
async fn race_02_stop_for_older_generation_parks_during_newer_start() {
    let h = Harness::new();
    let gate = h.gates.arm(&key(50));
    let start = h.spawn_start(h.ctx(50));
    gate.entered().await;

    let (stop, mut rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 49, StopReason::Lost, stop).await.unwrap();
    assert!(h.dispatcher.has_pending_stop(&key(49)));

    gate.release();
    start.await.unwrap().unwrap();
    assert!(is_active(&h, 50));
    assert_eq!(signalled(&mut rx), Some(Ok(())));
}

#[tokio::test(start_paused = true)]
async fn race_03_stop_for_current_generation_stops_it() {
    let h = Harness::new();
    h.start(50).await;
    let (stop, mut rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 50, StopReason::Lost, stop).await.unwrap();
    assert!(h.dispatcher.record(&key(50)).is_none());
    assert_eq!(h.dispatcher.current_generation("actor"), None);
    assert_eq!(signalled(&mut rx), Some(Ok(())));
}

#[tokio::test(start_paused = true)]
async fn race_04_late_stop_for_older_generation_leaves_newer_untouched() {
    let h = Harness::new();
    let one = h.start(1).await;
    let two = h.start(2).await;
    assert!(one.is_lost(), "starting 2 marks 1 lost");
    assert!(one.is_generation_finished());

    let (stop, mut rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::Lost, stop).await.unwrap();
    assert_eq!(signalled(&mut rx), Some(Ok(())));
    assert!(h.dispatcher.record(&key(1)).is_none());
    assert!(is_active(&h, 2));
    assert_eq!(h.dispatcher.current_generation("actor"), Some(2));
    assert_eq!(h.dispatcher.active_actor("actor").unwrap().context().generation(), 2);
    assert!(!two.is_lost());
}

#[tokio::test(start_paused = true)]
async fn race_05_parked_stops_are_scoped_to_the_starting_generation() {
    let h = Harness::new();
    let one = h.start(1).await;
    let gate = h.gates.arm(&key(2));
    let two = h.ctx(2);
    let start = h.spawn_start(two.clone());
    gate.entered().await;

    // The stop for 1 applies to 1 at once; it does not park behind 2.
    let (stop1, mut rx1) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::Lost, stop1).await.unwrap();
    assert!(one.is_lost());
    assert!(!h.dispatcher.has_pending_stop(&key(1)));
    assert!(h.dispatcher.record(&key(1)).is_none());
    assert_eq!(signalled(&mut rx1), Some(Ok(())));

    // A sleep for 2 parks until 2 has started, then shuts it down.
    let (stop2, rx2) = stop_handle();
    h.dispatcher.stop_actor("actor", 2, StopReason::SleepIntent, stop2).await.unwrap();
    assert!(h.dispatcher.has_pending_stop(&key(2)));
    gate.release();
    start.await.unwrap().unwrap();
    assert!(!h.dispatcher.has_pending_stop(&key(2)));
    assert_eq!(rx2.await.unwrap(), Ok(()));
    assert!(!two.is_lost());
    let calls = h.hooks.calls();
    assert!(calls.contains(&"onWake:2".to_string()) && calls.contains(&"onSleep:2".to_string()), "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn race_06_stop_for_finished_older_generation_completes_immediately() {
    let h = Harness::new();
    h.start(2).await;
    let (stop, mut rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::Lost, stop).await.unwrap();
    assert_eq!(signalled(&mut rx), Some(Ok(())));
    assert!(!h.dispatcher.has_pending_stop(&key(1)));
    assert!(is_active(&h, 2));
}

#[tokio::test(start_paused = true)]
async fn race_07_newer_generation_waits_for_older_to_finish() {
    let h = Harness::new();
    let one = h.start(1).await;
    // Hold 1 as if its storage were still closing.
    let storage_hold = one.hold_generation();
    let start = h.spawn_start(h.ctx(2));
    tokio::task::yield_now().await;
    while !one.is_lost() {
        tokio::task::yield_now().await;
    }
    assert!(!start.is_finished(), "2 must wait while 1 is unfinished");
    drop(storage_hold);
    start.await.unwrap().unwrap();
    assert!(is_active(&h, 2));
    assert_eq!(h.dispatcher.current_generation("actor"), Some(2));

    let (stop, _rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::Lost, stop).await.unwrap();
    assert!(h.dispatcher.record(&key(1)).is_none());
    assert!(is_active(&h, 2));
}

#[tokio::test(start_paused = true)]
async fn race_08_newer_generation_fails_closed_when_older_never_finishes() {
    let h = Harness::new();
    let gate = h.gates.arm(&key(1));
    let one = h.ctx(1);
    let start1 = h.spawn_start(one.clone());
    gate.entered().await;

    let two = h.ctx(2);
    let err = h.start_actor(two.clone()).await.unwrap_err();
    assert!(format!("{err:#}").contains("older generation of this actor is still running"), "{err:#}");
    assert_eq!(code(&err), "actor.stopping");
    assert!(one.is_lost());
    assert!(two.is_generation_finished());
    assert!(!h.dispatcher.is_starting(&key(2)));

    gate.release();
    let err1 = start1.await.unwrap().unwrap_err();
    assert!(format!("{err1:#}").contains("declared lost before it started"), "{err1:#}");
    one.wait_for_generation_finished().await;
    assert!(!h.dispatcher.is_starting(&key(1)));
}

#[tokio::test(start_paused = true)]
async fn race_09_lost_startup_is_released_only_after_its_task_finishes() {
    let h = Harness::new();
    let wake = Gate::new();
    *h.hooks.wake_gate.lock().unwrap() = Some(wake.clone());
    let one = h.ctx(1);
    let start = h.spawn_start(one.clone());
    wake.entered().await;
    one.mark_lost();
    let err = start.await.unwrap().unwrap_err();
    assert_eq!(code(&err), "actor.stopping");
    assert!(one.is_generation_finished());
    assert!(!h.dispatcher.is_starting(&key(1)));
}

#[tokio::test(start_paused = true)]
async fn race_10_superseded_generation_refuses_to_start() {
    let h = Harness::new();
    let two = h.start(2).await;
    let one = h.ctx(1);
    let err = h.start_actor(one.clone()).await.unwrap_err();
    assert!(format!("{err:#}").contains("newer generation of this actor is already running"), "{err:#}");
    assert!(one.is_generation_finished());
    assert!(!two.is_lost());
    assert!(h.dispatcher.record(&key(1)).is_none() && !h.dispatcher.is_starting(&key(1)));
    assert_eq!(h.dispatcher.current_generation("actor"), Some(2));
}

#[tokio::test(start_paused = true)]
async fn race_11_stopped_generation_stays_registered_until_storage_released() {
    let h = Harness::new();
    let one = h.start(1).await;
    let storage_hold = one.hold_generation();
    let (stop, mut rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::Lost, stop).await.unwrap();
    assert_eq!(signalled(&mut rx), Some(Ok(())));
    assert!(h.dispatcher.record(&key(1)).is_some(), "record kept while held");
    drop(storage_hold);
    one.wait_for_generation_finished().await;
    // The remover runs on the tracker; let it run.
    while h.dispatcher.record(&key(1)).is_some() {
        tokio::task::yield_now().await;
    }
    assert_eq!(h.dispatcher.current_generation("actor"), None);
}

#[tokio::test(start_paused = true)]
async fn race_12_duplicate_stop_for_starting_generation_completes_at_once() {
    let h = Harness::new();
    let gate = h.gates.arm(&key(1));
    let start = h.spawn_start(h.ctx(1));
    gate.entered().await;
    let (first, first_rx) = stop_handle();
    let (second, mut second_rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::SleepIntent, first).await.unwrap();
    h.dispatcher.stop_actor("actor", 1, StopReason::SleepIntent, second).await.unwrap();
    assert_eq!(signalled(&mut second_rx), Some(Ok(())));
    gate.release();
    start.await.unwrap().unwrap();
    assert_eq!(first_rx.await.unwrap(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn race_13_destroy_during_sleep_grace_refuses_new_work_and_sleep_continues() {
    let h = Harness::new();
    let sleep_gate = Gate::new();
    *h.hooks.sleep_gate.lock().unwrap() = Some(sleep_gate.clone());
    let one = h.start(1).await;

    let (sleep_task, sleep_rx) = spawn_stop(&h, 1, StopReason::SleepIntent);
    sleep_gate.entered().await;
    // Race 14: work is still routed during sleep grace.
    let routed = h.dispatcher.active_actor("actor").unwrap();
    let response = routed.http(Default::default()).await.unwrap();
    assert_eq!(response.status, 200);

    let (destroy_task, destroy_rx) = spawn_stop(&h, 1, StopReason::Destroy);
    while !one.destroy_requested() {
        tokio::task::yield_now().await;
    }
    assert!(matches!(h.dispatcher.record(&key(1)), Some(InstanceRecord::Stopping { kind: ShutdownKind::Sleep, .. })));
    assert_eq!(code(&h.dispatcher.active_actor("actor").unwrap_err()), "actor.destroying");

    sleep_gate.release();
    sleep_task.await.unwrap().unwrap();
    destroy_task.await.unwrap().unwrap();
    assert_eq!(sleep_rx.await.unwrap(), Ok(()));
    assert_eq!(destroy_rx.await.unwrap(), Ok(()));
    assert!(!h.hooks.calls().contains(&"onDestroy:1".to_string()));
}

#[tokio::test(start_paused = true)]
async fn race_15_request_after_destroy_is_refused() {
    let h = Harness::new();
    let one = h.start(1).await;
    one.destroy().unwrap();
    assert_eq!(h.link.destroys.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(code(&h.dispatcher.active_actor("actor").unwrap_err()), "actor.destroying");
}

#[tokio::test(start_paused = true)]
async fn race_16_failed_start_completes_its_parked_stop() {
    let h = Harness::new();
    *h.hooks.fail_wake.lock().unwrap() = true;
    let gate = h.gates.arm(&key(1));
    let start = h.spawn_start(h.ctx(1));
    gate.entered().await;
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::SleepIntent, stop).await.unwrap();
    gate.release();
    let err = start.await.unwrap().unwrap_err();
    assert!(format!("{err:#}").contains("onWake failed on purpose"));
    assert_eq!(rx.await.unwrap(), Ok(()));
    assert!(!h.dispatcher.is_starting(&key(1)) && h.dispatcher.record(&key(1)).is_none());
}

#[tokio::test(start_paused = true)]
async fn hooks_run_in_order_and_wake_does_not_recreate() {
    let h = Harness::new();
    h.start(1).await;
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    h.start(2).await;
    assert_eq!(
        h.hooks.calls(),
        [
            "createState:1",
            "onCreate:1",
            "createVars:1",
            "onWake:1",
            "onBeforeActorStart:1",
            "onSleep:1",
            "createVars:2",
            "onWake:2",
            "onBeforeActorStart:2"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn race_20_second_start_of_a_running_generation_is_dropped() {
    let h = Harness::new();
    let first = h.start(1).await;
    let before = h.dispatcher.active_actor("actor").unwrap();
    // The engine sends another start for generation 1 (a new command, so the
    // envoy's replay filter lets it through): no second task, no hooks again.
    let again = h.ctx(1);
    h.start_actor(again.clone()).await.expect("a duplicate start is answered as started");
    assert_eq!(
        h.hooks.calls(),
        ["createState:1", "onCreate:1", "createVars:1", "onWake:1", "onBeforeActorStart:1"],
        "the start hooks ran once"
    );
    assert!(!first.aborted(), "the running generation keeps running");
    let after = h.dispatcher.active_actor("actor").unwrap();
    assert!(before.same_task(&after), "traffic still goes to the first task");
    assert!(again.writes_closed(), "the duplicate's context can never write");
}

#[tokio::test(start_paused = true)]
async fn race_21_second_start_while_the_first_is_starting_is_dropped() {
    let h = Harness::new();
    let gate = Gate::new();
    *h.hooks.wake_gate.lock().unwrap() = Some(gate.clone());
    let first = h.spawn_start(h.ctx(1));
    gate.entered().await;
    let second = h.spawn_start(h.ctx(1));
    tokio::task::yield_now().await;
    gate.release();
    first.await.unwrap().expect("the first start");
    second.await.unwrap().expect("the duplicate is answered as started");
    let wakes = h.hooks.calls().iter().filter(|c| c.starts_with("onWake")).count();
    assert_eq!(wakes, 1, "onWake ran once: {:?}", h.hooks.calls());
    assert!(is_active(&h, 1));
}
