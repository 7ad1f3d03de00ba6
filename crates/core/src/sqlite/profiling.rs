//! SQLite profiling (`sqliteProfiling` of the actor config; docs/sqlite.md,
//! "Profiling"; docs/versions.md for the two shapes RivetKit sends).
//!
//! Every statement an actor runs counts toward its actor's aggregate
//! (count, total and longest time). A statement selected by its exact SQL
//! text (`queries`) or by its fingerprint (`fingerprints`, as profile logs
//! print it) gets a label of its own: its fingerprint, an aggregate of its
//! own. Statements slower than `slowOperationThresholdMs` are logged with
//! their fingerprint (the profile log). RivetKit 2.3's `enabled: false`
//! turns the labels and the log off (the aggregate is a few counters).
//!
//! `RIVETKIT_SQLITE_PROFILING`, a JSON object with `queries` and/or
//! `fingerprints` arrays, replaces every actor's selection in this process
//! (`{}` clears it), as RivetKit 3.0's variable does.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::RivetError;

/// `config.invalid` for the variable.
fn invalid(variable: &str, reason: &str) -> RivetError {
    RivetError::new(crate::error_codes::CONFIG_INVALID, format!("{variable} {reason}"))
}

/// Labels an actor tracks at most by default (`maxTrackedStatementFingerprints`).
pub const DEFAULT_MAX_TRACKED: usize = 256;
/// The label of the statements not selected: the actor's aggregate.
pub const ACTOR_LABEL: &str = "actor";

/// An actor type's profiling settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SqliteProfiling {
    /// Off: no labels and no profile log (RivetKit 2.3's `enabled: false`).
    pub enabled: bool,
    /// Exact SQL texts that get their own label.
    pub queries: HashSet<String>,
    /// Fingerprints ([`fingerprint`]) that get their own label.
    pub fingerprints: HashSet<String>,
    /// Own labels at most; statements past it count toward the aggregate.
    pub max_tracked: usize,
    /// Statements at least this slow are logged (none: no log).
    pub slow_threshold: Option<Duration>,
}

impl Default for SqliteProfiling {
    fn default() -> Self {
        Self {
            enabled: true,
            queries: HashSet::new(),
            fingerprints: HashSet::new(),
            max_tracked: DEFAULT_MAX_TRACKED,
            slow_threshold: None,
        }
    }
}

impl SqliteProfiling {
    /// The process-wide override `raw` (`RIVETKIT_SQLITE_PROFILING`)
    /// applied: its `queries`/`fingerprints` replace the selection.
    /// Anything but a JSON object of string arrays is `config.invalid`.
    pub fn with_override(mut self, raw: Option<&str>) -> Result<Self, RivetError> {
        let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else { return Ok(self) };
        const VAR: &str = crate::env::RIVETKIT_SQLITE_PROFILING;
        let value: serde_json::Value =
            serde_json::from_str(raw).map_err(|e| invalid(VAR, &format!("is not JSON: {e}")))?;
        let object = value.as_object().ok_or_else(|| invalid(VAR, "must be a JSON object"))?;
        let list = |name: &str| -> Result<HashSet<String>, RivetError> {
            match object.get(name) {
                None => Ok(HashSet::new()),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|item| item.as_str().map(str::to_owned))
                    .collect::<Option<_>>()
                    .ok_or_else(|| invalid(VAR, &format!("`{name}` must be an array of strings"))),
                Some(_) => Err(invalid(VAR, &format!("`{name}` must be an array of strings"))),
            }
        };
        self.queries = list("queries")?;
        self.fingerprints = list("fingerprints")?;
        Ok(self)
    }

    /// The label `sql` is counted under.
    pub fn label(&self, sql: &str) -> String {
        self.start(sql).label.into_owned()
    }

    /// What a statement about to run is counted as; its fingerprint is
    /// computed only when a selection or the profile log needs it.
    pub fn start(&self, sql: &str) -> Pending {
        let selecting = !self.queries.is_empty() || !self.fingerprints.is_empty();
        let (label, print) = if self.enabled && (selecting || self.slow_threshold.is_some()) {
            let print = fingerprint(sql);
            let selected = self.queries.contains(sql) || self.fingerprints.contains(&print);
            (if selected { Cow::Owned(print.clone()) } else { Cow::Borrowed(ACTOR_LABEL) }, Some(print))
        } else {
            (Cow::Borrowed(ACTOR_LABEL), None)
        };
        Pending { label, fingerprint: print, started: std::time::Instant::now() }
    }
}

/// A statement being run: its label, and when it began.
#[derive(Debug)]
pub struct Pending {
    label: Cow<'static, str>,
    fingerprint: Option<String>,
    started: std::time::Instant,
}

/// A statement's fingerprint: its text with literals replaced by `?`,
/// whitespace collapsed and words lowercased, hashed (FNV-1a, 64 bits) to
/// 16 hex digits. Statements that differ only in their literals share it.
pub fn fingerprint(sql: &str) -> String {
    let mut normal = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut space = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                // A string literal ('' escapes a quote).
                loop {
                    match chars.next() {
                        Some('\'') if chars.peek() == Some(&'\'') => {
                            chars.next();
                        }
                        Some('\'') | None => break,
                        Some(_) => {}
                    }
                }
                push_token(&mut normal, &mut space, "?");
            }
            c if c.is_ascii_digit() && !normal.ends_with(|p: char| p.is_alphanumeric() || p == '_') => {
                while chars.peek().is_some_and(|n| n.is_ascii_alphanumeric() || *n == '.') {
                    chars.next();
                }
                push_token(&mut normal, &mut space, "?");
            }
            c if c.is_whitespace() => space = !normal.is_empty(),
            c => {
                let lower: String = c.to_lowercase().collect();
                push_token(&mut normal, &mut space, &lower);
            }
        }
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in normal.trim_end_matches(';').bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn push_token(out: &mut String, space: &mut bool, token: &str) {
    if std::mem::take(space) {
        out.push(' ');
    }
    out.push_str(token);
}

/// The aggregate of one label.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProfileEntry {
    pub count: u64,
    pub total: Duration,
    pub longest: Duration,
}

/// One generation's counters, by label.
#[derive(Debug, Default)]
pub struct Profile {
    entries: Mutex<HashMap<String, ProfileEntry>>,
}

impl Profile {
    /// Counts a statement that ended now.
    pub fn finish(&self, settings: &SqliteProfiling, pending: Pending) {
        let took = pending.started.elapsed();
        self.count(settings, pending, took);
    }

    /// Counts one statement that took `took` (tests give the time).
    pub fn record(&self, settings: &SqliteProfiling, sql: &str, took: Duration) {
        self.count(settings, settings.start(sql), took);
    }

    fn count(&self, settings: &SqliteProfiling, pending: Pending, took: Duration) {
        let mut label = pending.label;
        {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            let tracked = entries.len() - usize::from(entries.contains_key(ACTOR_LABEL));
            if label != ACTOR_LABEL && !entries.contains_key(label.as_ref()) && tracked >= settings.max_tracked {
                label = Cow::Borrowed(ACTOR_LABEL);
            }
            let entry = match entries.get_mut(label.as_ref()) {
                Some(entry) => entry,
                None => entries.entry(label.clone().into_owned()).or_default(),
            };
            entry.count += 1;
            entry.total += took;
            entry.longest = entry.longest.max(took);
        }
        if let (Some(threshold), Some(print)) = (settings.slow_threshold, &pending.fingerprint) {
            if took >= threshold {
                tracing::info!(fingerprint = %print, label = %label, took_ms = took.as_millis() as u64, "slow SQLite statement");
            }
        }
    }

    /// The counters now, by label.
    pub fn snapshot(&self) -> HashMap<String, ProfileEntry> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_spacing_do_not_change_the_fingerprint() {
        let a = fingerprint("SELECT * FROM t WHERE id = 1 AND name = 'x'");
        assert_eq!(a, fingerprint("select *  from t\nwhere id = 42 and name = 'it''s';"));
        assert_ne!(a, fingerprint("SELECT * FROM u WHERE id = 1 AND name = 'x'"));
        assert_eq!(fingerprint("SELECT x1 FROM t"), fingerprint("select X1 from T"));
        assert_ne!(fingerprint("SELECT x1 FROM t"), fingerprint("SELECT x2 FROM t"));
        assert_eq!(a.len(), 16);
    }

    #[test]
    fn selected_statements_get_their_own_label() {
        let by_text = "SELECT count(*) FROM notes";
        let by_print = "INSERT INTO notes (body) VALUES ('a')";
        let settings = SqliteProfiling {
            queries: HashSet::from([by_text.to_owned()]),
            fingerprints: HashSet::from([fingerprint("INSERT INTO notes (body) VALUES ('zzz')")]),
            ..SqliteProfiling::default()
        };
        let profile = Profile::default();
        for sql in [by_text, by_text, by_print, "DELETE FROM notes"] {
            profile.record(&settings, sql, Duration::from_millis(2));
        }
        let snapshot = profile.snapshot();
        assert_eq!(snapshot[&fingerprint(by_text)].count, 2, "an exact text");
        assert_eq!(snapshot[&fingerprint(by_print)].count, 1, "a fingerprint, whatever the literals");
        assert_eq!(snapshot[ACTOR_LABEL].count, 1, "the rest: the actor's aggregate");
        // Exact text only: the same statement spelled otherwise is not selected.
        assert_eq!(settings.label("select count(*) from notes"), ACTOR_LABEL);
        // Off (RivetKit 2.3's `enabled: false`): the aggregate only.
        let off = SqliteProfiling { enabled: false, ..settings };
        assert_eq!(off.label(by_text), ACTOR_LABEL);
    }

    #[test]
    fn labels_are_bounded() {
        let settings = SqliteProfiling {
            queries: (0..10).map(|i| format!("SELECT {i} FROM t{i}")).collect(),
            max_tracked: 3,
            ..SqliteProfiling::default()
        };
        let profile = Profile::default();
        for i in 0..10 {
            profile.record(&settings, &format!("SELECT {i} FROM t{i}"), Duration::ZERO);
        }
        let snapshot = profile.snapshot();
        assert_eq!(snapshot.len(), 4, "three labels and the aggregate");
        assert_eq!(snapshot[ACTOR_LABEL].count, 7);
    }

    #[test]
    fn the_environment_replaces_the_selection() {
        let configured = SqliteProfiling { queries: HashSet::from(["SELECT 1".to_owned()]), ..Default::default() };
        let over = configured.clone().with_override(Some(r#"{"fingerprints":["abc"]}"#)).unwrap();
        assert!(over.queries.is_empty());
        assert_eq!(over.fingerprints, HashSet::from(["abc".to_owned()]));
        let cleared = configured.clone().with_override(Some("{}")).unwrap();
        assert!(cleared.queries.is_empty() && cleared.fingerprints.is_empty());
        assert_eq!(configured.clone().with_override(None).unwrap(), configured);
        for bad in ["[]", "nope", r#"{"queries":"SELECT 1"}"#, r#"{"queries":[1]}"#] {
            let err = configured.clone().with_override(Some(bad)).unwrap_err();
            assert_eq!(err.qualified_code(), "config.invalid", "{bad}");
        }
    }
}
