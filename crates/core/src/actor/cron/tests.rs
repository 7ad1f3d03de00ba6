use super::*;
use std::sync::Arc;

use crate::actor::clock::now_ms;
use crate::actor::link::MemoryLink;
use crate::actor::schedule;
use crate::actor::ActorContext;
use crate::error::RivetError;

fn code(err: &anyhow::Error) -> String {
    RivetError::extract(err).qualified_code()
}

fn every(ms: i64) -> Cadence {
    Cadence::every(ms).unwrap()
}

async fn fire_all(ctx: &ActorContext, now: i64, outcome: Option<anyhow::Error>) -> Vec<CronDispatch> {
    let due = take_due(ctx, now, now);
    for dispatch in &due {
        let seq = begin(ctx, dispatch).await.unwrap();
        if !dispatch.skipped {
            finish(ctx, dispatch, seq, outcome.as_ref()).await;
        }
    }
    due
}

/// The last alarm pushed to the test link's engine.
fn engine_alarm(link: &MemoryLink) -> Option<Option<i64>> {
    *link.alarm.lock().unwrap()
}

fn results(fires: &[CronFire]) -> Vec<&'static str> {
    fires.iter().map(|f| f.result.as_str()).collect()
}

#[tokio::test]
async fn jobs_persist_and_share_the_schedule_limit() {
    let link = Arc::new(MemoryLink::default());
    let ctx = ActorContext::for_test_with("a", 1, link.clone());
    set(&ctx, "tick", every(10_000), "ping", vec![0x80], 5).await.unwrap();
    set(&ctx, "daily", Cadence::cron("0 9 * * *", Some("Europe/Paris")).unwrap(), "report", vec![], 100).await.unwrap();
    let tick = ctx.schedule().cron().get("tick").unwrap();
    assert!(tick.next_run_at > now_ms() && tick.next_run_at <= now_ms() + 10_000);
    assert_eq!(ctx.schedule().next(), Some(tick.next_run_at), "the earliest job is the next wake-up");
    assert_eq!(engine_alarm(&link), Some(Some(tick.next_run_at)), "pushed to the engine");
    assert_eq!(ctx.schedule().cron().list().len(), 2);

    // Setting it again with the same cadence keeps its next run.
    set(&ctx, "tick", every(10_000), "pong", vec![], 3).await.unwrap();
    let again = ctx.schedule().cron().get("tick").unwrap();
    assert_eq!((again.next_run_at, again.action.as_str(), again.max_history), (tick.next_run_at, "pong", 3));

    // A new generation reads them back.
    let next = ActorContext::for_test_sharing(&ctx, 2);
    schedule::load(&next).await.unwrap();
    load(&next).await.unwrap();
    assert_eq!(next.schedule().cron().get("tick"), Some(again));
    assert_eq!(next.schedule().next(), Some(tick.next_run_at));

    // Events and jobs count together against maxSchedules.
    next.schedule().set_limit(3);
    schedule::schedule_at(&next, i64::MAX / 2, "x", vec![]).await.unwrap();
    let err = set(&next, "third", every(5_000), "ping", vec![], 1).await.unwrap_err();
    assert_eq!(code(&err), "schedule.max_schedules_exceeded");
    let err = schedule::schedule_at(&next, 1, "x", vec![]).await.unwrap_err();
    assert_eq!(code(&err), "schedule.max_schedules_exceeded");
    // Replacing an existing job is not a new one.
    set(&next, "daily", every(60_000), "report", vec![], 1).await.unwrap();

    assert!(delete(&next, "tick").await.unwrap());
    assert!(!delete(&next, "tick").await.unwrap());
    assert_eq!(engine_alarm(&link), Some(next.schedule().next()), "the engine follows deletes");
    let third = ActorContext::for_test_sharing(&ctx, 3);
    load(&third).await.unwrap();
    assert_eq!(third.schedule().cron().list().iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), ["daily"]);
    assert_eq!(code(&delete(&third, "").await.unwrap_err()), "schedule.invalid_name");
    assert_eq!(code(&set(&third, "x", every(5_000), "", vec![], 1).await.unwrap_err()), "schedule.invalid_name");
}

#[tokio::test]
async fn fires_are_recorded_collapsed_skipped_and_pruned() {
    let ctx = ActorContext::for_test("a", 1);
    set(&ctx, "tick", every(5_000), "ping", vec![], 3).await.unwrap();
    let first = ctx.schedule().cron().get("tick").unwrap().next_run_at;

    // Not due yet.
    assert!(take_due(&ctx, first - 1, first - 1).is_empty());
    // Due, run fine.
    let due = fire_all(&ctx, first, None).await;
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].fire.kind, due[0].fire.name.as_deref()), ("every", Some("tick")));
    let job = ctx.schedule().cron().get("tick").unwrap();
    assert_eq!((job.next_run_at, job.last_run_at), (first + 5_000, Some(first)));
    assert_eq!(ctx.schedule().next(), Some(first + 5_000));

    // Woken 17 s late: one fire, and the next run stays on the grid.
    let late = first + 5_000 + 17_000;
    let err = RivetError::foreign("user", "boom", "It broke").into_anyhow();
    assert_eq!(fire_all(&ctx, late, Some(err)).await.len(), 1);
    assert_eq!(ctx.schedule().cron().get("tick").unwrap().next_run_at, first + 25_000);

    // Due while its previous run still goes: skipped.
    let running = take_due(&ctx, first + 25_000, first + 25_000).pop().unwrap();
    let seq = begin(&ctx, &running).await.unwrap();
    let skipped = fire_all(&ctx, first + 30_000, None).await;
    assert!(skipped[0].skipped);
    finish(&ctx, &running, seq, Some(&anyhow::anyhow!("secret"))).await;

    let history = history(&ctx, "tick", 20).await.unwrap();
    // Newest first, cut to maxHistory (3): the first fire is gone.
    assert_eq!(results(&history), ["skipped", "error", "error"]);
    assert_eq!(history[0].finished_at, Some(first + 30_000));
    let internal = history[1].error.as_ref().unwrap();
    assert_eq!(
        (internal.group.as_str(), internal.code.as_str(), internal.message.as_str()),
        ("core", "internal_error", "An internal error occurred")
    );
    let public = history[2].error.as_ref().unwrap();
    assert_eq!((public.code.as_str(), public.message.as_str()), ("boom", "It broke"));
    assert_eq!(history[2].scheduled_at, first + 5_000);
    assert_eq!(history[2].fired_at, late);
    assert_eq!(results(&super::history(&ctx, "tick", 1).await.unwrap()), ["skipped"]);

    // maxHistory 0 clears it and records nothing more.
    set(&ctx, "tick", every(5_000), "ping", vec![], 0).await.unwrap();
    fire_all(&ctx, first + 35_000, None).await;
    assert!(super::history(&ctx, "tick", 20).await.unwrap().is_empty());
    assert!(super::history(&ctx, "nope", 20).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_run_cut_short_by_the_end_of_its_generation_reads_as_interrupted() {
    let ctx = ActorContext::for_test("a", 1);
    set(&ctx, "tick", every(5_000), "ping", vec![], 10).await.unwrap();
    let first = ctx.schedule().cron().get("tick").unwrap().next_run_at;
    let dispatch = take_due(&ctx, first, first).pop().unwrap();
    begin(&ctx, &dispatch).await.unwrap();
    assert_eq!(results(&history(&ctx, "tick", 5).await.unwrap()), ["running"]);

    let next = ActorContext::for_test_sharing(&ctx, 2);
    load(&next).await.unwrap();
    // The advance was persisted before the action ran.
    assert_eq!(next.schedule().cron().get("tick").unwrap().next_run_at, first + 5_000);
    let fires = history(&next, "tick", 5).await.unwrap();
    assert_eq!(results(&fires), ["error"]);
    assert_eq!(fires[0].error.as_ref().unwrap().code, "interrupted");
}

#[tokio::test]
async fn a_deleted_job_stays_deleted_and_a_closed_generation_writes_nothing() {
    let ctx = ActorContext::for_test("a", 1);
    set(&ctx, "tick", every(5_000), "ping", vec![], 10).await.unwrap();
    let first = ctx.schedule().cron().get("tick").unwrap().next_run_at;
    let dispatch = take_due(&ctx, first, first).pop().unwrap();
    let seq = begin(&ctx, &dispatch).await.unwrap();
    assert!(delete(&ctx, "tick").await.unwrap());
    assert_eq!(ctx.schedule().next(), None);
    finish(&ctx, &dispatch, seq, None).await;
    // Set again under the same name: a new job, with no history.
    set(&ctx, "tick", every(5_000), "ping", vec![], 10).await.unwrap();
    assert!(history(&ctx, "tick", 5).await.unwrap().is_empty());
    let next = ActorContext::for_test_sharing(&ctx, 2);
    load(&next).await.unwrap();
    assert!(history(&next, "tick", 5).await.unwrap().is_empty());

    ctx.end_writes_now();
    assert_eq!(code(&set(&ctx, "other", every(5_000), "ping", vec![], 1).await.unwrap_err()), "actor.stopping");
    assert_eq!(code(&delete(&ctx, "tick").await.unwrap_err()), "actor.stopping");
}
