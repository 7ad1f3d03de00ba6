//! A new actor with a key serves only once the engine names it the key's
//! owner (invariant I13, docs/generations.md).
//!
//! Why: when many clients `getOrCreate` a key that does not exist yet, the
//! engine creates several actors and destroys all but one once the key's
//! reservation is decided. An actor that served calls before it lost would
//! answer them from a state that is then thrown away (acknowledged updates
//! lost, values answered twice). Engine 2.3.19 on one node was not seen to
//! start a loser (docs/testing.md); this check makes the outcome impossible
//! on this host whatever the engine does, for one round trip per new actor.

use std::time::Duration;

use tokio::time::Instant;

use super::link::KeyOwner;
use super::ActorContext;
use crate::error::catalog;

/// How long a first start waits for the key's reservation to be decided.
/// Past it the actor serves (and the log says so): the engine is slow or
/// its index does not answer, and refusing would keep the actor down.
const DECISION_WAIT: Duration = Duration::from_secs(10);
const FIRST_POLL: Duration = Duration::from_millis(20);
const MAX_POLL: Duration = Duration::from_millis(250);

/// Returns once this actor may serve under its key; fails with
/// `actor.destroyed_duplicate_key` when another actor holds the key.
pub async fn confirm(ctx: &ActorContext) -> anyhow::Result<()> {
    if ctx.key().segments().is_empty() {
        return Ok(());
    }
    let key = ctx.key().format();
    let asked = Instant::now();
    let deadline = asked + DECISION_WAIT;
    let mut poll = FIRST_POLL;
    loop {
        match ctx.link().key_owner(ctx.actor_id(), ctx.name(), &key).await {
            Ok(KeyOwner::Unknown) => return Ok(()),
            Ok(KeyOwner::Actor(owner)) if owner == ctx.actor_id() => {
                tracing::debug!(
                    actor_id = %ctx.actor_id(),
                    key = %key,
                    elapsed_us = asked.elapsed().as_micros() as u64,
                    "the engine names this actor the key's owner"
                );
                return Ok(());
            }
            Ok(KeyOwner::Actor(owner)) => {
                tracing::info!(
                    actor_id = %ctx.actor_id(),
                    key = %key,
                    owner = %owner,
                    "another actor holds this key; this one does not start (the engine destroys it)"
                );
                return Err(catalog::actor_duplicate_key(&key, &owner).into_anyhow());
            }
            Ok(KeyOwner::Pending) => {}
            Err(err) => {
                tracing::warn!(
                    actor_id = %ctx.actor_id(),
                    key = %key,
                    error = %format!("{err:#}"),
                    "could not ask the engine who holds this actor's key; starting without the check"
                );
                return Ok(());
            }
        }
        if Instant::now() + poll > deadline {
            tracing::warn!(
                actor_id = %ctx.actor_id(),
                key = %key,
                waited_ms = DECISION_WAIT.as_millis() as u64,
                "the engine has not decided who holds this actor's key; starting anyway"
            );
            return Ok(());
        }
        tokio::select! {
            biased;
            _ = ctx.lost_token().cancelled() => {
                return Err(catalog::actor_stopping(Some("declared lost before it started")).into_anyhow());
            }
            _ = tokio::time::sleep(poll) => {}
        }
        poll = (poll * 2).min(MAX_POLL);
    }
}
