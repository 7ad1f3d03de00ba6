//! The records of cron jobs: a job, a fire and how it went. A leaf that
//! the jobs, their operations and their store share.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::expr::Cadence;

/// One job, as `cronGet` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJob {
    pub name: String,
    pub cadence: Cadence,
    pub action: String,
    /// CBOR-encoded argument array, passed to the action as is.
    pub args: Vec<u8>,
    /// ms since the epoch.
    pub next_run_at: i64,
    /// When its action last started.
    pub last_run_at: Option<i64>,
    pub max_history: u32,
}

/// How a fire went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireResult {
    Running,
    Ok,
    Error,
    /// Not run: the job's previous run was still going.
    Skipped,
}

impl FireResult {
    pub fn as_str(self) -> &'static str {
        match self {
            FireResult::Running => "running",
            FireResult::Ok => "ok",
            FireResult::Error => "error",
            FireResult::Skipped => "skipped",
        }
    }

    pub(super) fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "running" => FireResult::Running,
            "ok" => FireResult::Ok,
            "error" => FireResult::Error,
            "skipped" => FireResult::Skipped,
            _ => return None,
        })
    }
}

/// A failed fire's error, as clients may see it (internal details masked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleErrorInfo {
    pub group: String,
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// One entry of a job's history.
#[derive(Debug, Clone, PartialEq)]
pub struct CronFire {
    pub action: String,
    pub scheduled_at: i64,
    pub fired_at: i64,
    pub finished_at: Option<i64>,
    pub result: FireResult,
    pub error: Option<ScheduleErrorInfo>,
}
