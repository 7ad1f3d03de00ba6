//! When a cron job fires next, and the checks of its settings, with the
//! reference's semantics (docs/queues-cron.md):
//!
//! - an expression has exactly five fields (minute, hour, day of month,
//!   month, day of week) and is parsed and stepped by `croner` 2.2 with its
//!   default options, as the reference does;
//! - it is read in an IANA time zone (`chrono-tz`, default `UTC`); an
//!   occurrence that falls in a daylight-saving gap does not exist and is
//!   skipped (croner moves it to the end of the gap; the reference, and we,
//!   look again from there);
//! - an `every` job fires every `interval` ms (at least 5 s) from when it
//!   was set; fires missed while the actor could not run collapse into one,
//!   and the next is the first step of the interval after now.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use serde_json::json;

use crate::error::RivetError;

/// Shortest `every` interval.
pub const MIN_INTERVAL_MS: i64 = 5_000;
/// `maxHistory` when not given.
pub const DEFAULT_MAX_HISTORY: i64 = 100;
/// Largest `maxHistory` (and `history` limit).
pub const MAX_HISTORY: i64 = 1_000;
/// Entries `history(name)` returns when no limit is given.
pub const DEFAULT_HISTORY_LIMIT: i64 = 20;
/// Longest job name, in UTF-8 bytes.
pub const MAX_NAME_LEN: usize = 128;

/// How a job repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cadence {
    Cron { expression: String, timezone: String },
    Every { interval_ms: i64 },
}

impl Cadence {
    /// `cron` or `every`: the job's kind, and the fire's.
    pub fn kind(&self) -> &'static str {
        match self {
            Cadence::Cron { .. } => "cron",
            Cadence::Every { .. } => "every",
        }
    }

    /// A checked cron cadence (`timezone` defaults to `UTC`).
    pub fn cron(expression: &str, timezone: Option<&str>) -> anyhow::Result<Self> {
        let timezone = timezone.unwrap_or("UTC");
        parse_timezone(timezone)?;
        parse_expression(expression)?;
        Ok(Cadence::Cron { expression: expression.to_string(), timezone: timezone.to_string() })
    }

    /// A checked interval cadence.
    pub fn every(interval_ms: i64) -> anyhow::Result<Self> {
        if interval_ms < MIN_INTERVAL_MS {
            return Err(RivetError::new(
                crate::error_codes::SCHEDULE_INVALID_INTERVAL,
                format!("Schedule interval must be at least {MIN_INTERVAL_MS} ms; received {interval_ms} ms."),
            )
            .with_metadata(json!({ "intervalMs": interval_ms, "minimumMs": MIN_INTERVAL_MS }))
            .into_anyhow());
        }
        Ok(Cadence::Every { interval_ms })
    }

    /// The first trigger of a job set at `now_ms`.
    pub fn first(&self, now_ms: i64) -> anyhow::Result<i64> {
        match self {
            Cadence::Cron { expression, timezone } => {
                next_cron(&parse_expression(expression)?, parse_timezone(timezone)?, now_ms)
            }
            Cadence::Every { interval_ms } => Ok(now_ms.saturating_add(*interval_ms)),
        }
    }

    /// The trigger after one due at `trigger_at` fired at `now_ms`: the
    /// first occurrence after now (missed ones are not made up).
    pub fn after(&self, trigger_at: i64, now_ms: i64) -> anyhow::Result<i64> {
        match self {
            // Never the occurrence that just fired, even if the clock reads
            // a little before it (the task fires a wake-up it armed for).
            Cadence::Cron { .. } => self.first(now_ms.max(trigger_at)),
            Cadence::Every { interval_ms } => {
                let interval = (*interval_ms).max(MIN_INTERVAL_MS);
                let steps = now_ms.saturating_sub(trigger_at).max(0) / interval + 1;
                Ok(trigger_at.saturating_add(interval.saturating_mul(steps)))
            }
        }
    }
}

pub fn parse_timezone(timezone: &str) -> anyhow::Result<Tz> {
    timezone.parse::<Tz>().map_err(|_| {
        RivetError::new(
            crate::error_codes::SCHEDULE_INVALID_TIMEZONE,
            format!("Schedule timezone '{timezone}' is invalid."),
        )
        .with_metadata(json!({ "timezone": timezone }))
        .into_anyhow()
    })
}

pub fn parse_expression(expression: &str) -> anyhow::Result<Cron> {
    if expression.split_whitespace().count() != 5 {
        return Err(invalid_expression("expected exactly five fields"));
    }
    Cron::new(expression).parse().map_err(|err| invalid_expression(&err.to_string()))
}

fn invalid_expression(reason: &str) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::SCHEDULE_INVALID_CRON_EXPRESSION,
        format!("Cron expression is invalid: {reason}"),
    )
    .with_metadata(json!({ "reason": reason }))
    .into_anyhow()
}

/// The first occurrence of `cron` in `timezone` strictly after `after_ms`,
/// skipping occurrences that fall in a daylight-saving gap.
pub fn next_cron(cron: &Cron, timezone: Tz, after_ms: i64) -> anyhow::Result<i64> {
    let after = DateTime::<Utc>::from_timestamp_millis(after_ms)
        .ok_or_else(|| invalid_expression("start time is outside the supported range"))?;
    let mut cursor = after.with_timezone(&timezone);
    loop {
        let next = cron.find_next_occurrence(&cursor, false).map_err(|err| invalid_expression(&err.to_string()))?;
        // croner moves a wall time that does not exist to the end of the
        // gap, where the expression does not match: look again from there.
        if cron.is_time_matching(&next).unwrap_or(false) {
            return Ok(next.timestamp_millis());
        }
        cursor = next;
    }
}

/// A job name: 1 to 128 UTF-8 bytes.
pub fn validate_name(name: &str) -> anyhow::Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_NAME_LEN {
        "must be at most 128 UTF-8 bytes"
    } else {
        return Ok(());
    };
    Err(RivetError::new(crate::error_codes::SCHEDULE_INVALID_NAME, format!("Schedule name is invalid: {reason}"))
        .with_metadata(json!({ "reason": reason }))
        .into_anyhow())
}

/// `maxHistory` (default 100) in `0..=1000`.
pub fn max_history(value: Option<i64>) -> anyhow::Result<u32> {
    in_history_range(value.unwrap_or(DEFAULT_MAX_HISTORY), 0)
}

/// The `limit` of `history(name, limit)` (default 20) in `1..=1000`.
pub fn history_limit(value: Option<i64>) -> anyhow::Result<u32> {
    in_history_range(value.unwrap_or(DEFAULT_HISTORY_LIMIT), 1)
}

fn in_history_range(value: i64, min: i64) -> anyhow::Result<u32> {
    if (min..=MAX_HISTORY).contains(&value) {
        // In 0..=1000.
        return Ok(value as u32);
    }
    Err(RivetError::new(
        crate::error_codes::SCHEDULE_INVALID_MAX_HISTORY,
        format!("Schedule maxHistory must be between {min} and {MAX_HISTORY}; received {value}."),
    )
    .with_metadata(json!({ "maxHistory": value, "maximum": MAX_HISTORY }))
    .into_anyhow())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn ms(tz: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        tz.with_ymd_and_hms(y, mo, d, h, mi, 0).single().unwrap().timestamp_millis()
    }

    fn code(err: anyhow::Error) -> String {
        RivetError::extract(&err).qualified_code()
    }

    #[test]
    fn five_fields_only() {
        for bad in ["* * * *", "0 * * * * *", "", "61 * * * *", "* * * * * * *", "nope * * * *"] {
            assert_eq!(code(parse_expression(bad).unwrap_err()), "schedule.invalid_cron_expression", "{bad}");
        }
        for good in ["* * * * *", "*/5 9-17 * * MON-FRI", "0 0 1 1 *", "30 2 * * *"] {
            parse_expression(good).unwrap();
        }
        assert_eq!(code(Cadence::cron("* * * * *", Some("Mars/Olympus")).unwrap_err()), "schedule.invalid_timezone");
        assert_eq!(
            Cadence::cron("0 9 * * *", None).unwrap(),
            Cadence::Cron { expression: "0 9 * * *".into(), timezone: "UTC".into() }
        );
    }

    #[test]
    fn next_occurrence_in_a_time_zone() {
        let utc = parse_timezone("UTC").unwrap();
        let cron = parse_expression("0 9 * * *").unwrap();
        let now = ms(utc, 2026, 3, 1, 9, 0);
        // Strictly after: at 09:00 exactly the next one is tomorrow's.
        assert_eq!(next_cron(&cron, utc, now).unwrap(), ms(utc, 2026, 3, 2, 9, 0));
        assert_eq!(next_cron(&cron, utc, now - 1).unwrap(), now);
        let paris = parse_timezone("Europe/Paris").unwrap();
        assert_eq!(next_cron(&cron, paris, now).unwrap(), ms(paris, 2026, 3, 2, 9, 0));
        assert_eq!(ms(paris, 2026, 3, 2, 9, 0), ms(utc, 2026, 3, 2, 8, 0));
    }

    #[test]
    fn occurrences_in_a_daylight_saving_gap_are_skipped() {
        // New York springs forward on 2026-03-08: 02:00 to 03:00 does not exist.
        let ny = parse_timezone("America/New_York").unwrap();
        let cron = parse_expression("30 2 * * *").unwrap();
        let before = ms(ny, 2026, 3, 7, 12, 0);
        assert_eq!(next_cron(&cron, ny, before).unwrap(), ms(ny, 2026, 3, 9, 2, 30));
        // The hour that repeats in autumn fires once.
        let fall = parse_expression("30 1 * * *").unwrap();
        let first = next_cron(&fall, ny, ms(ny, 2026, 10, 31, 12, 0)).unwrap();
        let second = next_cron(&fall, ny, first).unwrap();
        assert_eq!(second - first, 25 * 3_600_000, "the next day's 01:30, a 25-hour day later");
    }

    #[test]
    fn a_cron_fire_read_early_by_the_clock_is_not_repeated() {
        let cron = Cadence::cron("* * * * *", None).unwrap();
        let utc = parse_timezone("UTC").unwrap();
        let at = ms(utc, 2026, 3, 1, 9, 0);
        assert_eq!(cron.after(at, at - 1).unwrap(), at + 60_000);
        assert_eq!(cron.after(at, at + 90_000).unwrap(), at + 120_000, "missed ones collapse");
    }

    #[test]
    fn every_collapses_missed_fires() {
        let every = Cadence::every(10_000).unwrap();
        assert_eq!(every.first(1_000).unwrap(), 11_000);
        assert_eq!(every.after(11_000, 11_000).unwrap(), 21_000);
        assert_eq!(every.after(11_000, 11_500).unwrap(), 21_000);
        // Woken 35 s late: one fire, the next on the original grid.
        assert_eq!(every.after(11_000, 46_000).unwrap(), 51_000);
        assert_eq!(every.after(11_000, 51_000).unwrap(), 61_000);
        assert_eq!(code(Cadence::every(4_999).unwrap_err()), "schedule.invalid_interval");
    }

    #[test]
    fn names_and_history_bounds() {
        validate_name("a").unwrap();
        validate_name(&"é".repeat(64)).unwrap();
        assert_eq!(code(validate_name("").unwrap_err()), "schedule.invalid_name");
        assert_eq!(code(validate_name(&"x".repeat(129)).unwrap_err()), "schedule.invalid_name");
        assert_eq!(max_history(None).unwrap(), 100);
        assert_eq!(max_history(Some(0)).unwrap(), 0);
        assert_eq!(code(max_history(Some(1001)).unwrap_err()), "schedule.invalid_max_history");
        assert_eq!(code(max_history(Some(-1)).unwrap_err()), "schedule.invalid_max_history");
        assert_eq!(history_limit(None).unwrap(), 20);
        assert_eq!(code(history_limit(Some(0)).unwrap_err()), "schedule.invalid_max_history");
    }
}
