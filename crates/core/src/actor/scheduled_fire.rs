//! What a scheduled action learns about why it runs. Both one-shot events
//! ([`super::schedule`]) and cron jobs ([`super::cron`]) fire actions, so
//! the type lives in a leaf both can import.

/// What the action learns about why it runs (`scheduledFire`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledFire {
    /// `"at"` for `after`/`at` events, `"cron"` or `"every"` for cron jobs.
    pub kind: &'static str,
    /// The event's id, or the cron job's name.
    pub id: String,
    /// The cron job's name (`None` for events).
    pub name: Option<String>,
    pub scheduled_at: i64,
    pub fired_at: i64,
}
