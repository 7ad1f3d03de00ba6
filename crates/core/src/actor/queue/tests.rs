use std::time::Duration;

use super::*;
use crate::actor::ActorContext;
use crate::error::RivetError;

fn code(err: &anyhow::Error) -> String {
    RivetError::extract(err).qualified_code()
}

fn any(count: usize) -> Receive {
    Receive { count, timeout: Some(Duration::ZERO), ..Receive::default() }
}

fn bodies(messages: &[QueueMessage]) -> Vec<Vec<u8>> {
    messages.iter().map(|m| m.body.clone()).collect()
}

#[tokio::test]
async fn messages_are_received_in_order_and_survive_a_new_generation() {
    let ctx = ActorContext::for_test("a", 1);
    for i in 0..5u8 {
        let sent = send(&ctx, if i % 2 == 0 { "even" } else { "odd" }, vec![i]).await.unwrap();
        assert_eq!(sent.id, u64::from(i) + 1);
    }
    let first = next_batch(&ctx, any(2)).await.unwrap();
    assert_eq!(bodies(&first), [vec![0], vec![1]]);
    // Handled, and consumed by the save (test_consumed.rs has the rest).
    mark_handled(&ctx);
    ctx.set_state(b"read by the save".to_vec());
    crate::actor::storage::save_record(&ctx).await.unwrap();

    // The next generation sees what is left, in order, with the same ids.
    let next = ActorContext::for_test_sharing(&ctx, 2);
    load(&next).await.unwrap();
    assert_eq!(next.queue().headers().iter().map(|h| h.id).collect::<Vec<_>>(), [3, 4, 5]);
    let evens = Receive { names: Receive::names(Some(vec!["even".into()])), ..any(10) };
    assert_eq!(bodies(&next_batch(&next, evens).await.unwrap()), [vec![2], vec![4]]);
    assert_eq!(bodies(&next_batch(&next, any(10)).await.unwrap()), [vec![3]]);
    assert!(next_batch(&next, any(1)).await.unwrap().is_empty());

    // Ids keep growing after the queue emptied.
    assert_eq!(send(&next, "x", vec![]).await.unwrap().id, 6);
    let third = ActorContext::for_test_sharing(&ctx, 3);
    load(&third).await.unwrap();
    assert_eq!(send(&third, "x", vec![]).await.unwrap().id, 7);
}

/// A message keeps its sender's ray ID, also in the next generation; the
/// ray does not count against the message size limit.
#[tokio::test]
async fn a_message_keeps_its_senders_ray_id() {
    let ctx = ActorContext::for_test("a", 1);
    send_from(&ctx, "q", vec![1], Some("ray-1".into())).await.unwrap();
    send(&ctx, "q", vec![2]).await.unwrap();
    send_from(&ctx, "q", vec![0; 65_536 - store::header_len("q", None)], Some("ray-3".into())).await.unwrap();
    let next = ActorContext::for_test_sharing(&ctx, 2);
    load(&next).await.unwrap();
    let rays: Vec<_> = next_batch(&next, any(3)).await.unwrap().into_iter().map(|m| m.ray_id).collect();
    assert_eq!(rays, [Some("ray-1".to_string()), None, Some("ray-3".to_string())]);
}

#[tokio::test]
async fn limits_are_structured_errors() {
    let ctx = ActorContext::for_test("a", 1);
    let limits = ctx.queue().limits();
    assert_eq!((limits.max_size, limits.max_message_size), (1000, 65_536));
    let too_big = vec![0; 65_536];
    let err = send(&ctx, "q", too_big).await.unwrap_err();
    assert_eq!(code(&err), "queue.message_too_large");
    assert_eq!(RivetError::extract(&err).metadata.unwrap()["limit"], 65_536);
    // Name and header count: the largest body that fits.
    send(&ctx, "q", vec![0; 65_536 - store::header_len("q", None)]).await.unwrap();

    // A body is one KV value: a larger setting is lowered to that limit.
    assert_eq!(Limits::new(2, 1 << 20).max_message_size, crate::actor::kv::MAX_VALUE_SIZE);
    assert_eq!(Limits::new(0, 1).max_size, 1);
    let ctx = ActorContext::for_test("b", 1);
    for i in 0..1000u32 {
        send(&ctx, "q", i.to_le_bytes().to_vec()).await.unwrap();
    }
    let err = send(&ctx, "q", vec![]).await.unwrap_err();
    assert_eq!(code(&err), "queue.full");
    assert_eq!(RivetError::extract(&err).message, "Queue is full. Limit is 1000 messages.");
    next_batch(&ctx, any(1)).await.unwrap();
    send(&ctx, "q", vec![]).await.unwrap();
}

#[tokio::test]
async fn completable_messages_stay_until_completed_and_answer_the_sender() {
    let ctx = ActorContext::for_test("a", 1);
    let sender = {
        let ctx = ctx.clone();
        tokio::spawn(async move { enqueue_and_wait(&ctx, "job", vec![1], None, None).await })
    };
    let receive = Receive { completable: true, count: 1, ..Receive::default() };
    let message = next_batch(&ctx, receive.clone()).await.unwrap().pop().unwrap();
    assert!(message.is_completable());
    // Not completed yet: still queued, received again.
    let again = next_batch(&ctx, receive.clone()).await.unwrap().pop().unwrap();
    assert_eq!(again.id, message.id);
    message.complete(Some(vec![9])).unwrap();
    // Answered once the save consuming it is acknowledged.
    ctx.set_state(b"read by the save".to_vec());
    crate::actor::storage::save_record(&ctx).await.unwrap();
    assert_eq!(sender.await.unwrap().unwrap(), Some(vec![9]));
    assert_eq!(code(&message.complete(None).unwrap_err()), "queue.already_completed");

    let plain = send(&ctx, "job", vec![2]).await.unwrap();
    assert_eq!(code(&plain.complete(None).unwrap_err()), "queue.complete_not_configured");
    let received = next_batch(&ctx, receive).await.unwrap().pop().unwrap();
    assert!(!complete_persisted(&ctx, received.id, "other", None).unwrap());
    assert!(complete_persisted(&ctx, received.id, "job", None).unwrap());
    assert!(!complete_persisted(&ctx, received.id, "job", None).unwrap());
    assert!(ctx.queue().is_empty());
}

#[tokio::test(start_paused = true)]
async fn waits_end_on_arrival_timeout_and_abort() {
    let ctx = ActorContext::for_test("a", 1);
    // A timeout gives an empty batch, or queue.timed_out for the waits by name.
    let timed = Receive { timeout: Some(Duration::from_millis(50)), count: 1, ..Receive::default() };
    assert!(next_batch(&ctx, timed.clone()).await.unwrap().is_empty());
    let named = Receive { names: Receive::names(Some(vec!["a".into()])), ..timed.clone() };
    assert_eq!(code(&wait_for_names(&ctx, named.clone()).await.unwrap_err()), "queue.timed_out");
    assert_eq!(code(&wait_for_names_available(&ctx, named).await.unwrap_err()), "queue.timed_out");
    let err = enqueue_and_wait(&ctx, "nobody", vec![], Some(Duration::from_millis(10)), None).await.unwrap_err();
    assert_eq!(code(&err), "queue.timed_out");

    // A blocked receive is counted, and woken by a send.
    let waiting = {
        let ctx = ctx.clone();
        let receive = Receive { names: Receive::names(Some(vec!["b".into()])), count: 1, ..Receive::default() };
        tokio::spawn(async move { wait_for_names(&ctx, receive).await })
    };
    while ctx.queue().blocked_receives() == 0 {
        tokio::task::yield_now().await;
    }
    send(&ctx, "a", vec![1]).await.unwrap();
    send(&ctx, "b", vec![2]).await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!((got.name.as_str(), got.body.as_slice()), ("b", &[2][..]));
    assert_eq!(ctx.queue().blocked_receives(), 0);

    // The caller's signal, then the actor's abort, end a wait with actor.aborted.
    let signal = CancellationToken::new();
    let waiting = {
        let ctx = ctx.clone();
        let receive = Receive {
            names: Receive::names(Some(vec!["c".into()])),
            count: 1,
            signal: Some(signal.clone()),
            ..Receive::default()
        };
        tokio::spawn(async move { next_batch(&ctx, receive).await })
    };
    tokio::task::yield_now().await;
    signal.cancel();
    assert_eq!(code(&waiting.await.unwrap().unwrap_err()), "actor.aborted");
    ctx.abort_token().cancel();
    let receive = Receive { names: Receive::names(Some(vec!["c".into()])), count: 1, ..Receive::default() };
    assert_eq!(code(&next_batch(&ctx, receive).await.unwrap_err()), "actor.aborted");
    // Queued messages are still handed out while stopping ("a", and the
    // message of the `enqueueAndWait` that timed out: only its wait ended).
    assert_eq!(next_batch(&ctx, Receive { count: 5, ..Receive::default() }).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_closed_generation_neither_sends_nor_takes() {
    let ctx = ActorContext::for_test("a", 1);
    send(&ctx, "q", vec![1]).await.unwrap();
    ctx.end_writes_now();
    assert_eq!(code(&send(&ctx, "q", vec![2]).await.unwrap_err()), "actor.stopping");
    assert_eq!(code(&next_batch(&ctx, any(1)).await.unwrap_err()), "actor.stopping");
    let next = ActorContext::for_test_sharing(&ctx, 2);
    load(&next).await.unwrap();
    assert_eq!(bodies(&next_batch(&next, any(5)).await.unwrap()), [vec![1]]);
}

#[tokio::test]
async fn reset_empties_the_queue_and_drops_waiting_senders() {
    let ctx = ActorContext::for_test("a", 1);
    send(&ctx, "q", vec![1]).await.unwrap();
    let sender = {
        let ctx = ctx.clone();
        tokio::spawn(async move { enqueue_and_wait(&ctx, "q", vec![2], None, None).await })
    };
    while ctx.queue().len() < 2 {
        tokio::task::yield_now().await;
    }
    reset(&ctx).await.unwrap();
    assert_eq!(code(&sender.await.unwrap().unwrap_err()), "queue.completion_waiter_dropped");
    assert!(ctx.queue().is_empty());
    let next = ActorContext::for_test_sharing(&ctx, 2);
    load(&next).await.unwrap();
    assert!(next.queue().is_empty());
    assert_eq!(send(&next, "q", vec![]).await.unwrap().id, 3);
}

#[tokio::test]
async fn a_dropped_enqueue_and_wait_leaves_no_waiter() {
    let ctx = ActorContext::for_test("a", 1);
    let sender = {
        let ctx = ctx.clone();
        tokio::spawn(async move { enqueue_and_wait(&ctx, "q", vec![1], None, None).await })
    };
    while ctx.queue().completions(|c| c.len()) == 0 {
        tokio::task::yield_now().await;
    }
    sender.abort();
    let _ = sender.await;
    assert_eq!(ctx.queue().completions(|c| c.len()), 0);
    // The message itself stays queued.
    assert_eq!(ctx.queue().len(), 1);
}
