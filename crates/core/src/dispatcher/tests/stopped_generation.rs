//! A generation whose `onSleep`/`onDestroy` has resolved (docs/versions.md):
//! no traffic reaches it any more (it gets `actor.restarting` and the
//! client retries on the next generation), and the addon closes its
//! database itself when it ends, whether or not JavaScript closed it.

use std::time::Duration;

use tokio::sync::oneshot;

use super::doubles::*;
use crate::actor::task::DispatchCommand;
use crate::actor::{ActorConfig, ActorContext, OutputGate};
use crate::dispatcher::StopReason;
use crate::RivetError;

/// Waits (on the paused clock) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never saw {what}"));
}

fn action(ctx: &ActorContext, name: &str) -> oneshot::Receiver<anyhow::Result<Vec<u8>>> {
    let (reply, answer) = oneshot::channel();
    let cmd = DispatchCommand::Action { conn: None, message_index: None, name: name.into(), args: vec![], reply };
    assert!(ctx.dispatch_for_test(cmd), "the traffic queue has room");
    answer
}

fn has(h: &Harness, call: &str) -> bool {
    h.hooks.calls().iter().any(|c| c == call)
}

/// The generation stays in its sleep grace after `onSleep` resolved (an
/// action started before the stop still runs): an action that arrives
/// then never runs, and its caller is told to retry elsewhere.
#[tokio::test(start_paused = true)]
async fn no_action_runs_after_on_sleep_resolved() {
    // Without the output gate, sleep grace admits actions (invariant I10).
    let h = Harness::with_config(ActorConfig { output_gate: OutputGate::Off, ..ActorConfig::default() });
    let ctx = h.start(1).await;
    let hang = Gate::new();
    *h.hooks.action_gate.lock().unwrap() = Some(hang.clone());
    let sleep = Gate::new();
    *h.hooks.sleep_gate.lock().unwrap() = Some(sleep.clone());
    let long = action(&ctx, "hang");
    hang.entered().await;

    let (stop, _stopped) = stop_handle();
    let d = h.dispatcher.clone();
    let stopping = tokio::spawn(async move { d.stop_actor("actor", 1, StopReason::SleepIntent, stop).await });
    sleep.entered().await;
    // While onSleep runs, the grace still serves.
    action(&ctx, "during").await.unwrap().unwrap();
    assert!(has(&h, "action during:1"));

    sleep.release();
    until("onSleep to resolve", || ctx.signals().stop_hook_resolved()).await;
    // The dispatcher's admission refuses at once...
    let refused = h.dispatcher.active_actor("actor").map(|handle| handle.context().admit());
    if let Ok(admitted) = refused {
        let err = admitted.expect_err("admission after onSleep");
        assert_eq!(RivetError::extract(&err).qualified_code(), "actor.restarting");
    }
    // ...and so does the task, for what was already on its way.
    let late = action(&ctx, "late").await.unwrap();
    let err = late.expect_err("an action after onSleep resolved");
    assert_eq!(RivetError::extract(&err).qualified_code(), "actor.restarting");
    assert!(!has(&h, "action late:1"), "{:?}", h.hooks.calls());

    hang.release();
    long.await.unwrap().unwrap();
    stopping.await.unwrap().unwrap();
}

/// JavaScript (RivetKit 3.0) only detaches its database client at sleep:
/// the generation's database is closed by the addon once the stop is done.
#[tokio::test(start_paused = true)]
async fn the_database_is_closed_when_the_generation_ends() {
    let h = Harness::new();
    let ctx = h.start(1).await;
    let db = ctx.sqlite().clone();
    db.execute("CREATE TABLE t (x INTEGER)".into(), None).await.unwrap();
    assert!(db.is_open());

    let (stop, stopped) = stop_handle();
    h.dispatcher.stop_actor("actor", 1, StopReason::SleepIntent, stop).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), stopped).await.expect("the stop ends").unwrap().unwrap();
    assert!(has(&h, "onSleep:1"));
    assert!(db.is_shut(), "closed by the addon, not by a JS close()");
    assert!(!db.is_open());
    assert!(db.execute("SELECT 1".into(), None).await.is_err());
}
