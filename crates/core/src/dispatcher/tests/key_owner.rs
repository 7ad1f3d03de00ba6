//! I13: a new keyed actor serves only once the engine's key index names it
//! the owner (docs/generations.md). The engine's answers are scripted on
//! the `MemoryLink`.

use super::doubles::*;
use crate::actor::link::KeyOwner;
use crate::RivetError;

fn answers(h: &Harness, script: Vec<KeyOwner>) {
    *h.link.key_owners.lock().unwrap() = script.into();
}

fn woke(h: &Harness, generation: u32) -> bool {
    h.hooks.calls().contains(&format!("createState:{generation}"))
}

#[tokio::test(start_paused = true)]
async fn the_owner_starts_once_the_reservation_is_decided() {
    let h = Harness::new();
    answers(&h, vec![KeyOwner::Pending, KeyOwner::Pending, KeyOwner::Actor("actor".into())]);
    h.start(1).await;
    assert!(woke(&h, 1), "{:?}", h.hooks.calls());
    assert!(h.link.key_owners.lock().unwrap().is_empty(), "asked until the index named it");
    assert!(h.dispatcher.active_actor("actor").is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_loser_of_the_create_race_never_runs_its_hooks_and_its_traffic_gets_destroyed_duplicate_key() {
    let h = Harness::new();
    answers(&h, vec![KeyOwner::Pending, KeyOwner::Actor("winner".into())]);
    h.start_actor(h.ctx(1)).await.expect("the failed start is accepted");
    assert!(!woke(&h, 1), "no state was built: {:?}", h.hooks.calls());
    let err = RivetError::extract(&h.dispatcher.active_actor("actor").expect_err("refused"));
    assert_eq!((err.group.as_str(), err.code.as_str()), ("actor", "destroyed_duplicate_key"));
    assert_eq!(err.metadata, Some(serde_json::json!({ "existing_actor_id": "winner" })));
}

#[tokio::test(start_paused = true)]
async fn an_index_that_never_decides_delays_the_start_by_the_bound_only() {
    let h = Harness::new();
    answers(&h, vec![KeyOwner::Pending; 1000]);
    let started = tokio::time::Instant::now();
    h.start(1).await;
    assert!(woke(&h, 1));
    let waited = started.elapsed();
    assert!(waited >= std::time::Duration::from_secs(9) && waited <= std::time::Duration::from_secs(11), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn an_actor_with_a_record_is_not_checked_again() {
    let h = Harness::new();
    h.start(1).await;
    let (stop, rx) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, crate::dispatcher::StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(rx.await.unwrap(), Ok(()));
    answers(&h, vec![KeyOwner::Actor("someone else".into())]);
    h.start(2).await;
    assert_eq!(h.link.key_owners.lock().unwrap().len(), 1, "the wake did not ask");
}
