//! The races of "consumed with the state" (docs/queues-cron.md): a receive
//! leaves the message in storage until a save of a state read after its
//! handling is acknowledged. A generation ending sooner (a crash: the
//! context dropped without a save), a failed save or a closed fence hand
//! it to the next generation again, in its place.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::*;
use crate::actor::link::MemoryLink;
use crate::actor::{storage, ActorContext};

fn any(count: usize) -> Receive {
    Receive { count, timeout: Some(Duration::ZERO), ..Receive::default() }
}

fn bodies(messages: &[QueueMessage]) -> Vec<Vec<u8>> {
    messages.iter().map(|m| m.body.clone()).collect()
}

/// The next generation of `ctx`'s actor, its queue loaded (what a start
/// after a crash sees: only what reached storage).
async fn restart(ctx: &ActorContext, generation: u32) -> ActorContext {
    let next = ActorContext::for_test_sharing(ctx, generation);
    load(&next).await.unwrap();
    next
}

async fn with_link() -> (ActorContext, Arc<MemoryLink>) {
    let link = Arc::new(MemoryLink::default());
    (ActorContext::for_test_with("a", 1, link.clone()), link)
}

#[tokio::test]
async fn a_receive_then_a_crash_before_the_save_delivers_again_in_order() {
    let ctx = ActorContext::for_test("a", 1);
    for i in 1..=5u8 {
        send(&ctx, "q", vec![i]).await.unwrap();
    }
    // 1 and 2 are handled and saved; 3 is taken; the generation dies.
    assert_eq!(bodies(&next_batch(&ctx, any(2)).await.unwrap()), [vec![1], vec![2]]);
    assert_eq!(bodies(&next_batch(&ctx, any(1)).await.unwrap()), [vec![3]]);
    // The save reads the state (serializeState) after the receive of 3.
    ctx.set_state(b"1+2".to_vec());
    storage::save_record(&ctx).await.unwrap();
    assert_eq!(ctx.queue().len(), 2, "3 taken: not queued here any more");

    let next = restart(&ctx, 2).await;
    assert_eq!(next.queue().headers().iter().map(|h| h.id).collect::<Vec<_>>(), [3, 4, 5]);
    assert_eq!(bodies(&next_batch(&next, any(5)).await.unwrap()), [vec![3], vec![4], vec![5]]);
}

#[tokio::test]
async fn a_save_consumes_only_what_was_handled_before_its_state_was_read() {
    let ctx = ActorContext::for_test("a", 1);
    send(&ctx, "q", vec![1]).await.unwrap();
    next_batch(&ctx, any(1)).await.unwrap();
    // The state is read, then the handling is recorded (the JS thread ran
    // the next receive after serializeState): this save must not consume.
    ctx.set_state(b"before".to_vec());
    mark_handled(&ctx);
    storage::save_record(&ctx).await.unwrap();
    assert_eq!(restart(&ctx, 2).await.queue().len(), 1, "its change is not in the saved state");

    ctx.set_state(b"after".to_vec());
    storage::save_record(&ctx).await.unwrap();
    assert!(restart(&ctx, 3).await.queue().is_empty());
}

#[tokio::test]
async fn a_failed_save_or_a_closed_fence_delivers_again() {
    let (ctx, link) = with_link().await;
    send(&ctx, "q", vec![1]).await.unwrap();
    next_batch(&ctx, any(1)).await.unwrap();
    mark_handled(&ctx);
    ctx.set_state(b"1".to_vec());
    link.failing_puts.store(1, Ordering::SeqCst);
    assert!(storage::save_record(&ctx).await.is_err());
    assert_eq!(restart(&ctx, 2).await.queue().len(), 1, "the failed save consumed nothing");

    // The fence closes (lost, or stopped) before the save: nothing lands.
    ctx.end_writes_now();
    assert!(storage::save_record(&ctx).await.is_err());
    let next = restart(&ctx, 3).await;
    assert_eq!(bodies(&next_batch(&next, any(1)).await.unwrap()), [vec![1]]);
}

#[tokio::test]
async fn a_sender_is_answered_only_once_the_consuming_save_is_acknowledged() {
    let (ctx, link) = with_link().await;
    let mut sender = {
        let ctx = ctx.clone();
        tokio::spawn(async move { enqueue_and_wait(&ctx, "job", vec![1], None, None).await })
    };
    let receive = Receive { completable: true, count: 1, ..Receive::default() };
    let message = next_batch(&ctx, receive).await.unwrap().pop().unwrap();
    message.complete(Some(vec![9])).unwrap();
    // What a save's serializeState does: read the state now.
    ctx.set_state(b"done".to_vec());
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!((&mut sender).now_or_never().is_none(), "no answer before the save");

    link.failing_puts.store(1, Ordering::SeqCst);
    assert!(storage::save_record(&ctx).await.is_err());
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!((&mut sender).now_or_never().is_none(), "no answer for a failed save");

    storage::save_record(&ctx).await.unwrap();
    assert_eq!(sender.await.unwrap().unwrap(), Some(vec![9]));
    assert!(restart(&ctx, 2).await.queue().is_empty());
}

#[tokio::test]
async fn a_message_that_keeps_ending_its_generation_becomes_a_dead_letter() {
    let mut ctx = ActorContext::for_test("a", 1);
    send(&ctx, "q", b"poison".to_vec()).await.unwrap();
    send(&ctx, "q", b"fine".to_vec()).await.unwrap();
    let tries = ctx.queue().limits().max_deliveries;
    assert_eq!(tries, limits::DEFAULT_MAX_DELIVERIES);
    // Each generation takes it and dies without a save.
    for generation in 1..=tries {
        let next = restart(&ctx, generation + 1).await;
        assert_eq!(bodies(&next_batch(&next, any(1)).await.unwrap()), [b"poison".to_vec()]);
        ctx = next;
    }
    let next = restart(&ctx, tries + 2).await;
    assert_eq!(bodies(&next_batch(&next, any(1)).await.unwrap()), [b"fine".to_vec()], "the one behind it");
    let dead = Receive { names: Receive::names(Some(vec![format!("{DEAD_LETTER_PREFIX}q")])), ..any(5) };
    let letters = next_batch(&next, dead).await.unwrap();
    assert_eq!(bodies(&letters), [b"poison".to_vec()]);
    assert_eq!(letters[0].name, "$dead:q");
    assert_eq!(letters[0].id, 1, "same id: kept in its place");
}

#[tokio::test]
async fn a_graceful_stop_consumes_what_was_taken_and_counts_no_try() {
    let ctx = ActorContext::for_test("a", 1);
    send(&ctx, "plain", vec![1]).await.unwrap();
    send(&ctx, "job", vec![2]).await.unwrap();
    next_batch(&ctx, Receive { names: Receive::names(Some(vec!["plain".into()])), ..any(1) }).await.unwrap();
    let job = Receive { names: Receive::names(Some(vec!["job".into()])), completable: true, ..any(1) };
    next_batch(&ctx, job).await.unwrap();
    // The final save: every plain message taken is handled; a completable
    // one not completed stays queued, its try put back.
    use crate::actor::lifecycle::Phase;
    for phase in [Phase::Starting, Phase::Started, Phase::Stopping(crate::actor::commands::ShutdownKind::Sleep)] {
        ctx.enter(phase);
    }
    ctx.enter(Phase::Finalizing);
    assert_eq!(ctx.phase(), Phase::Finalizing);
    mark_handled(&ctx);
    ctx.set_state(b"final".to_vec());
    storage::save_record(&ctx).await.unwrap();
    let next = restart(&ctx, 2).await;
    assert_eq!(next.queue().headers().iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["job"]);
    assert_eq!(next.queue().state(|s| s.receipts.tries(2)), 0);
}

#[tokio::test]
async fn consumed_records_are_deleted_by_a_later_receive() {
    let (ctx, link) = with_link().await;
    send(&ctx, "q", vec![1]).await.unwrap();
    send(&ctx, "q", vec![2]).await.unwrap();
    next_batch(&ctx, any(1)).await.unwrap();
    mark_handled(&ctx);
    ctx.set_state(b"1".to_vec());
    storage::save_record(&ctx).await.unwrap();
    let queue_keys = |link: &MemoryLink| {
        link.kv.lock().unwrap().keys().filter(|(_, k)| k.first() == Some(&6) && k.len() > 2).count()
    };
    assert_eq!(queue_keys(&link), 5, "two messages and one try count still stored");
    next_batch(&ctx, any(1)).await.unwrap();
    assert_eq!(queue_keys(&link), 3, "message 1's records are gone");
}
