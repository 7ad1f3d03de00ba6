//! The schedule's operations over the actor context: events persisted
//! under `[3, id]`, then pending in the context's [`super::Schedule`].
//!
//! Record value: `u8 version (1)`, `i64 LE run_at` (ms since the epoch),
//! `u16 LE` action name length, the name, then the CBOR args.

use super::ScheduledEvent;
use crate::actor::keys::schedule::event_key;
use crate::actor::keys::{INSPECTOR_TOKEN, SCHEDULE_PREFIX};
use crate::actor::ActorContext;
use crate::error::RivetError;

const RECORD_VERSION: u8 = 1;

/// `schedule.at(run_at, action, args)`: persisted, then pending; returns the id.
pub async fn schedule_at(ctx: &ActorContext, run_at: i64, action: &str, args: Vec<u8>) -> anyhow::Result<String> {
    if action.is_empty() {
        return Err(RivetError::new(
            crate::error_codes::SCHEDULE_INVALID_NAME,
            "The scheduled action name must not be empty.",
        )
        .into_anyhow());
    }
    ctx.check_writable()?;
    let schedule = ctx.schedule();
    schedule.check_capacity()?;
    let event = ScheduledEvent { id: crate::actor::conn::new_id(), action: action.to_string(), args, run_at };
    ctx.link()
        .kv_put(ctx.actor_id(), vec![(event_key(&event.id), encode_event(&event))], ctx.write_fence().clone())
        .await?;
    let id = event.id.clone();
    schedule.restore(vec![event]);
    ctx.sync_engine_alarm();
    Ok(id)
}

/// `schedule.cancel(id)`: whether a pending event was removed.
pub async fn cancel(ctx: &ActorContext, id: &str) -> anyhow::Result<bool> {
    ctx.check_writable()?;
    let removed = ctx.schedule().with(|events| events.remove(id)).is_some();
    if removed {
        ctx.sync_engine_alarm();
        forget(ctx, id).await?;
    }
    Ok(removed)
}

/// Deletes a fired or cancelled event's record.
pub(crate) async fn forget(ctx: &ActorContext, id: &str) -> anyhow::Result<()> {
    if ctx.writes_closed() {
        return Ok(());
    }
    ctx.link().kv_delete(ctx.actor_id(), vec![event_key(id)]).await
}

/// Loads the persisted events into the context (at start).
pub(crate) async fn load(ctx: &ActorContext) -> anyhow::Result<()> {
    let entries = ctx.link().kv_list_prefix(ctx.actor_id(), vec![SCHEDULE_PREFIX], false, None).await?;
    let events = entries
        .into_iter()
        // The exact key `[3]` is the inspector token, not an event.
        .filter(|(key, _)| key.as_slice() != INSPECTOR_TOKEN)
        .filter_map(|(key, value)| {
            let id = String::from_utf8(key.get(1..)?.to_vec()).ok()?;
            match decode_event(id, &value) {
                Some(event) => Some(event),
                None => {
                    tracing::warn!(key = ?key, "skipping an unreadable scheduled event");
                    None
                }
            }
        })
        .collect();
    ctx.schedule().restore(events);
    Ok(())
}

fn encode_event(event: &ScheduledEvent) -> Vec<u8> {
    let name = event.action.as_bytes();
    let name_len = u16::try_from(name.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(11 + name.len() + event.args.len());
    out.push(RECORD_VERSION);
    out.extend_from_slice(&event.run_at.to_le_bytes());
    out.extend_from_slice(&name_len.to_le_bytes());
    out.extend_from_slice(&name[..usize::from(name_len)]);
    out.extend_from_slice(&event.args);
    out
}

fn decode_event(id: String, bytes: &[u8]) -> Option<ScheduledEvent> {
    let (&version, rest) = bytes.split_first()?;
    if version != RECORD_VERSION || rest.len() < 10 {
        return None;
    }
    let run_at = i64::from_le_bytes(rest[..8].try_into().ok()?);
    let name_len = usize::from(u16::from_le_bytes(rest[8..10].try_into().ok()?));
    let rest = &rest[10..];
    let action = String::from_utf8(rest.get(..name_len)?.to_vec()).ok()?;
    let args = rest[name_len..].to_vec();
    Some(ScheduledEvent { id, action, args, run_at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let event = ScheduledEvent {
            id: "abc".into(),
            action: "fire".into(),
            args: vec![0x81, 0x01],
            run_at: 1_700_000_000_123,
        };
        assert_eq!(decode_event("abc".into(), &encode_event(&event)), Some(event));
        assert_eq!(decode_event("x".into(), &[9, 1, 2]), None);
        assert_eq!(decode_event("x".into(), &[]), None);
    }

    #[tokio::test]
    async fn events_persist_fire_in_order_and_cancel() {
        let ctx = ActorContext::for_test("a", 1);
        let late = schedule_at(&ctx, 2_000, "late", vec![0x80]).await.unwrap();
        let early = schedule_at(&ctx, 1_000, "early", vec![0x80]).await.unwrap();
        assert_eq!(ctx.schedule().next(), Some(1_000));
        assert_eq!(ctx.schedule().list().iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["early", "late"]);

        // A new generation over the same storage sees both.
        let other = ActorContext::for_test_sharing(&ctx, 2);
        load(&other).await.unwrap();
        assert_eq!(other.schedule().len(), 2);

        assert!(cancel(&ctx, &late).await.unwrap());
        assert!(!cancel(&ctx, &late).await.unwrap());
        let due = ctx.schedule().take_due(1_500);
        assert_eq!(due.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), std::slice::from_ref(&early));
        assert_eq!(ctx.schedule().next(), None);

        // Fired but not yet finished: still stored, so a crash re-fires it.
        let third = ActorContext::for_test_sharing(&ctx, 3);
        load(&third).await.unwrap();
        assert_eq!(
            third.schedule().list().iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
            std::slice::from_ref(&early)
        );
        forget(&ctx, &early).await.unwrap();
        let fourth = ActorContext::for_test_sharing(&ctx, 4);
        load(&fourth).await.unwrap();
        assert!(fourth.schedule().is_empty());
    }

    #[tokio::test]
    async fn the_limit_is_a_structured_error() {
        let ctx = ActorContext::for_test("a", 1);
        ctx.schedule().set_limit(1);
        schedule_at(&ctx, 1, "a", vec![]).await.unwrap();
        let err = schedule_at(&ctx, 1, "b", vec![]).await.unwrap_err();
        let e = RivetError::extract(&err);
        assert_eq!((e.group.as_str(), e.code.as_str()), ("schedule", "max_schedules_exceeded"));
        let err = schedule_at(&ctx, 1, "", vec![]).await.unwrap_err();
        assert_eq!(RivetError::extract(&err).code, "invalid_name");
    }
}
