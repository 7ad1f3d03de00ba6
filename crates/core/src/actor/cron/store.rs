//! Cron jobs and their history in the actor's KV (docs/storage.md,
//! "Cron `[7]`").
//!
//! | key | value |
//! |---|---|
//! | `[7, 0, name]` | a job: `u8` version (1), `u32` LE length of a JSON head (`kind`, `expression`, `timezone`, `intervalMs`, `action`, `nextRunAt`, `lastRunAt`, `maxHistory`), the head, then the action's args (CBOR) |
//! | `[7, 1, name length u8, name, seq u64 BE]` | one fire of the job: `u8` version (1), then JSON (`action`, `scheduledAt`, `firedAt`, `finishedAt`, `result`, `error`) |
//!
//! The name's length before it keeps one job's history apart from another
//! whose name starts with the same bytes; `seq` grows with every fire, so
//! a job's history sorts oldest first. Jobs are read when the actor
//! starts; a job's history when it is first needed by this generation
//! (its first fire, or `history(name)`).

use serde::{Deserialize, Serialize};

use super::expr::Cadence;
use super::record::{CronFire, CronJob, FireResult, ScheduleErrorInfo};
use crate::actor::keys::cron::{history_end, history_prefix, job_key, jobs_range, seq_of};
use crate::actor::kv::{check_value, ENGINE_MAX_KEYS, LIST_PAGE_SIZE};
use crate::actor::ActorContext;

const VERSION: u8 = 1;
/// History entries asked for per list request (small values).
const HISTORY_PAGE: usize = LIST_PAGE_SIZE * 8;
/// An error message kept in history is cut to this many bytes.
const MAX_ERROR_MESSAGE: usize = 4 * 1024;
/// Error metadata larger than this (as JSON) is not kept in history.
const MAX_ERROR_METADATA: usize = 16 * 1024;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobHead {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interval_ms: Option<i64>,
    action: String,
    next_run_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_run_at: Option<i64>,
    max_history: u32,
}

pub(super) fn encode_job(job: &CronJob) -> anyhow::Result<Vec<u8>> {
    let (expression, timezone, interval_ms) = match &job.cadence {
        Cadence::Cron { expression, timezone } => (Some(expression.clone()), Some(timezone.clone()), None),
        Cadence::Every { interval_ms } => (None, None, Some(*interval_ms)),
    };
    let head = serde_json::to_vec(&JobHead {
        kind: job.cadence.kind().to_string(),
        expression,
        timezone,
        interval_ms,
        action: job.action.clone(),
        next_run_at: job.next_run_at,
        last_run_at: job.last_run_at,
        max_history: job.max_history,
    })?;
    let mut out = Vec::with_capacity(5 + head.len() + job.args.len());
    out.push(VERSION);
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(&job.args);
    check_value(&out)?;
    Ok(out)
}

/// A stored job, checked as `cronSet`/`cronEvery` check one (`None` when
/// unreadable).
pub(super) fn decode_job(name: &str, value: &[u8]) -> Option<CronJob> {
    let (&version, rest) = value.split_first()?;
    if version != VERSION || rest.len() < 4 {
        return None;
    }
    let len = u32::from_le_bytes(rest[..4].try_into().ok()?) as usize;
    let head: JobHead = serde_json::from_slice(rest.get(4..4 + len)?).ok()?;
    let cadence = match head.kind.as_str() {
        "cron" => Cadence::cron(head.expression.as_deref()?, head.timezone.as_deref()).ok()?,
        "every" => Cadence::every(head.interval_ms?).ok()?,
        _ => return None,
    };
    super::expr::validate_name(name).ok()?;
    let max_history = super::expr::max_history(Some(i64::from(head.max_history))).ok()?;
    Some(CronJob {
        name: name.to_string(),
        cadence,
        action: head.action,
        args: rest[4 + len..].to_vec(),
        next_run_at: head.next_run_at,
        last_run_at: head.last_run_at,
        max_history,
    })
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    action: String,
    scheduled_at: i64,
    fired_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished_at: Option<i64>,
    result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ScheduleErrorInfo>,
}

pub(super) fn encode_fire(fire: &CronFire) -> Vec<u8> {
    let mut error = fire.error.clone();
    if let Some(error) = error.as_mut() {
        if error.message.len() > MAX_ERROR_MESSAGE {
            let mut end = MAX_ERROR_MESSAGE;
            while !error.message.is_char_boundary(end) {
                end -= 1;
            }
            error.message.truncate(end);
        }
        if error.metadata.as_ref().is_some_and(|m| m.to_string().len() > MAX_ERROR_METADATA) {
            error.metadata = None;
        }
    }
    let entry = Entry {
        action: fire.action.clone(),
        scheduled_at: fire.scheduled_at,
        fired_at: fire.fired_at,
        finished_at: fire.finished_at,
        result: fire.result.as_str().to_string(),
        error,
    };
    let mut out = vec![VERSION];
    // A struct of strings, numbers and JSON values always serializes.
    out.extend_from_slice(&serde_json::to_vec(&entry).unwrap_or_default());
    out
}

pub(super) fn decode_fire(value: &[u8]) -> Option<CronFire> {
    let (&version, rest) = value.split_first()?;
    if version != VERSION {
        return None;
    }
    let entry: Entry = serde_json::from_slice(rest).ok()?;
    Some(CronFire {
        action: entry.action,
        scheduled_at: entry.scheduled_at,
        fired_at: entry.fired_at,
        finished_at: entry.finished_at,
        result: FireResult::parse(&entry.result)?,
        error: entry.error,
    })
}

/// Every stored job (unreadable ones skipped with a warning).
pub(super) async fn load_jobs(ctx: &ActorContext) -> anyhow::Result<Vec<CronJob>> {
    let (start, end) = jobs_range();
    let entries = list(ctx, start, end).await?;
    Ok(entries
        .into_iter()
        .filter_map(|(key, value)| {
            let name = std::str::from_utf8(key.get(2..)?).ok()?;
            let job = decode_job(name, &value);
            if job.is_none() {
                tracing::warn!(key = ?key, "skipping an unreadable cron job");
            }
            job
        })
        .collect())
}

/// One job's history, oldest first, with each entry's sequence number.
pub(super) async fn load_history(ctx: &ActorContext, name: &str) -> anyhow::Result<Vec<(u64, CronFire)>> {
    let entries = list(ctx, history_prefix(name), history_end(name)).await?;
    Ok(entries
        .into_iter()
        .filter_map(|(key, value)| {
            let entry = seq_of(name, &key).zip(decode_fire(&value));
            if entry.is_none() {
                tracing::warn!(key = ?key, "skipping an unreadable cron history entry");
            }
            entry
        })
        .collect())
}

async fn list(ctx: &ActorContext, mut start: Vec<u8>, end: Vec<u8>) -> anyhow::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    loop {
        let page = ctx
            .link()
            .kv_list_range(ctx.actor_id(), start.clone(), end.clone(), false, Some(HISTORY_PAGE as u64))
            .await?;
        let full = page.len() >= HISTORY_PAGE;
        if let Some((last, _)) = page.last() {
            start = last.clone();
            start.push(0);
        }
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

/// Puts entries, fenced by the generation's write fence.
pub(super) async fn put(ctx: &ActorContext, entries: Vec<(Vec<u8>, Vec<u8>)>) -> anyhow::Result<()> {
    ctx.check_writable()?;
    for chunk in crate::actor::kv::put_chunks(entries) {
        let result = ctx.link().kv_put(ctx.actor_id(), chunk, ctx.write_fence().clone()).await;
        result.or_else(|err| ctx.check_writable().and(Err(err)))?;
    }
    Ok(())
}

pub(super) async fn delete(ctx: &ActorContext, keys: Vec<Vec<u8>>) -> anyhow::Result<()> {
    for chunk in keys.chunks(ENGINE_MAX_KEYS) {
        ctx.check_writable()?;
        ctx.link().kv_delete(ctx.actor_id(), chunk.to_vec()).await?;
    }
    Ok(())
}

/// Deletes a job and all of its history.
pub(super) async fn delete_job(ctx: &ActorContext, name: &str) -> anyhow::Result<()> {
    delete(ctx, vec![job_key(name)]).await?;
    ctx.check_writable()?;
    ctx.link().kv_delete_range(ctx.actor_id(), history_prefix(name), history_end(name)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::keys::cron::history_key;

    #[test]
    fn jobs_round_trip() {
        let job = CronJob {
            name: "tick".into(),
            cadence: Cadence::Cron { expression: "*/5 * * * *".into(), timezone: "Europe/Paris".into() },
            action: "ping".into(),
            args: vec![0x81, 0x01],
            next_run_at: 1_700_000_000_000,
            last_run_at: Some(1_699_999_700_000),
            max_history: 10,
        };
        assert_eq!(decode_job("tick", &encode_job(&job).unwrap()), Some(job.clone()));
        let every = CronJob { cadence: Cadence::Every { interval_ms: 5_000 }, last_run_at: None, ..job };
        assert_eq!(decode_job("tick", &encode_job(&every).unwrap()), Some(every.clone()));
        // A record that would not pass the checks of `cronEvery` is refused.
        let bad = CronJob { cadence: Cadence::Every { interval_ms: 10 }, ..every };
        assert_eq!(decode_job("tick", &encode_job(&bad).unwrap()), None);
        assert_eq!(decode_job("tick", &[2, 0, 0, 0, 0]), None);
        let too_big = CronJob { args: vec![0; 200 * 1024], ..bad };
        assert!(encode_job(&too_big).is_err());
    }

    #[test]
    fn history_keys_keep_jobs_apart_and_sort_by_seq() {
        assert!(history_key("ab", 1) < history_key("ab", 2));
        assert!(history_key("ab", u64::MAX) < history_end("ab"));
        assert!(!history_key("abc", 0).starts_with(&history_prefix("ab")));
        assert_eq!(seq_of("ab", &history_key("ab", 77)), Some(77));
        let fire = CronFire {
            action: "ping".into(),
            scheduled_at: 1,
            fired_at: 2,
            finished_at: None,
            result: FireResult::Error,
            error: Some(ScheduleErrorInfo {
                group: "user".into(),
                code: "x".into(),
                message: "é".repeat(3000),
                metadata: Some(serde_json::json!({"big": "y".repeat(20_000)})),
            }),
        };
        let decoded = decode_fire(&encode_fire(&fire)).unwrap();
        let error = decoded.error.unwrap();
        assert!(error.message.len() <= MAX_ERROR_MESSAGE);
        assert_eq!(error.metadata, None);
        assert_eq!(decoded.result, FireResult::Error);
    }
}
