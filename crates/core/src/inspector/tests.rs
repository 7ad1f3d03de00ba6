use super::*;
use crate::actor::{schedule, ActorContext};

#[tokio::test]
async fn the_token_is_created_once_at_the_exact_key_and_kept_across_generations() {
    let first = ActorContext::for_test("a", 1);
    ensure_token(&first).await.unwrap();
    let stored = first.link().kv_get("a", vec![TOKEN_KEY.to_vec()]).await.unwrap();
    let token = String::from_utf8(stored[0].clone().expect("token stored at [3]")).unwrap();
    assert_eq!(token.len(), 43, "32 bytes, base64url without padding");
    assert!(verify(&first, Some(&token)).is_ok());

    let second = ActorContext::for_test_sharing(&first, 2);
    ensure_token(&second).await.unwrap();
    assert!(verify(&second, Some(&token)).is_ok(), "the next generation keeps the token");
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_refused_with_a_structured_error() {
    let ctx = ActorContext::for_test("a", 1);
    ensure_token(&ctx).await.unwrap();
    for bearer in [None, Some(""), Some("nope")] {
        let err = verify(&ctx, bearer).unwrap_err();
        assert_eq!((err.group.as_str(), err.code.as_str()), ("inspector", "unauthorized"));
    }
}

#[tokio::test]
async fn scheduled_events_skip_the_token_key() {
    let ctx = ActorContext::for_test("a", 1);
    ensure_token(&ctx).await.unwrap();
    schedule::schedule_at(&ctx, schedule::now_ms() + 60_000, "tick", vec![0x80]).await.unwrap();
    let next = ActorContext::for_test_sharing(&ctx, 2);
    schedule::load(&next).await.unwrap();
    let events = next.schedule().list();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].action, "tick");
}

#[test]
fn the_snapshot_counts_state_writes_connections_and_clients() {
    let ctx = ActorContext::for_test("a", 1);
    let before = snapshot(&ctx);
    ctx.set_state(vec![1]);
    let guard = ClientGuard::new(&ctx);
    let after = snapshot(&ctx);
    assert_eq!(after.state_revision, before.state_revision + 1);
    assert_eq!(after.connected_clients, 1);
    drop(guard);
    assert_eq!(snapshot(&ctx).connected_clients, 0);
    assert_eq!(after.queue_size, 0);
}
