//! What the queue knows of the messages this generation took: the book
//! that lets a receive leave the message in storage until the state it
//! changed is saved (docs/queues-cron.md, "Consumed with the state").
//!
//! One message's way through a generation:
//!
//! | from | event | to |
//! |------|-------|----|
//! | `Queued` | a receive takes it, its try counted in storage first | `Taken` |
//! | `Queued` | a receive finds `maxQueueDeliveries` tries behind it | `DeadLetter` |
//! | `Taken` | a later receive begins, a workflow flush begins, or the final save begins (not completable) | `Handled` |
//! | `Taken` | `complete(response)` | `Handled` |
//! | `Taken` | the generation ends | `Queued` |
//! | `Handled` | a save whose state was read after it is acknowledged | `Consumed` |
//! | `Handled` | the generation ends before that | `Queued` |
//! | `Consumed` | its records are deleted | `Gone` |
//!
//! `Queued` after the generation ended means: the next generation loads it
//! again, in its place by id, with one try more. A dead letter is queued
//! again under the name `$dead:<name>`, which only a receive naming it
//! takes. `Handled` carries the handling's sequence number: a save consumes
//! exactly the messages handled before the state it writes was read
//! (`mark`), so the consumption and the state it produced land in one put.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Header;

/// Where one message is in its way through a generation (the table above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Queued,
    Taken,
    Handled,
    Consumed,
    DeadLetter,
    Gone,
}

impl Stage {
    /// Whether `self → to` is a transition of the table above.
    pub fn can_become(self, to: Stage) -> bool {
        use Stage::*;
        matches!(
            (self, to),
            (Queued, Taken | DeadLetter) | (Taken, Handled | Queued) | (Handled, Consumed | Queued) | (Consumed, Gone)
        )
    }
}

/// The name prefix of a dead letter.
pub const DEAD_LETTER_PREFIX: &str = "$dead:";

/// A message this generation took.
#[derive(Debug, Clone)]
pub(super) struct Taken {
    pub header: Header,
    pub stage: Stage,
    pub completable: bool,
    /// The handling's sequence number (`Handled` only).
    pub handled_at: u64,
    /// The answer for its `enqueueAndWait` sender (`complete`), sent once
    /// it is consumed.
    pub answer: Option<Option<Vec<u8>>>,
    /// Tries stored before this generation counted its own.
    pub tries_before: u32,
}

/// The book of one generation's taken messages.
#[derive(Debug, Default)]
pub(super) struct Receipts {
    taken: BTreeMap<u64, Taken>,
    /// Bumped by every handling.
    seq: u64,
    /// Stored tries of queued messages (absent: none).
    tries: HashMap<u64, u32>,
    /// Consumed messages whose records are not deleted yet.
    unswept: BTreeSet<u64>,
}

/// Why `complete` refused.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NotCompleted {
    /// Not taken (or already handled) in this generation.
    NotTaken,
}

impl Receipts {
    pub fn tries(&self, id: u64) -> u32 {
        self.tries.get(&id).copied().unwrap_or(0)
    }

    pub fn set_tries(&mut self, tries: HashMap<u64, u32>) {
        self.tries = tries;
    }

    /// Whether this generation already counted a try of `id`.
    pub fn counted(&self, id: u64) -> bool {
        self.taken.contains_key(&id)
    }

    /// `Queued → Taken` (a completable message taken again stays as it is).
    pub fn take(&mut self, header: Header, completable: bool) {
        let id = header.id;
        if self.taken.contains_key(&id) {
            return;
        }
        let tries_before = self.tries(id);
        self.taken
            .insert(id, Taken { header, stage: Stage::Taken, completable, handled_at: 0, answer: None, tries_before });
        self.tries.insert(id, tries_before.saturating_add(1));
    }

    /// `Taken → Handled` for every message not waiting for `complete`;
    /// how many moved.
    pub fn handle_all(&mut self) -> usize {
        let seq = self.seq + 1;
        let mut moved = 0;
        for taken in self.taken.values_mut().filter(|t| t.stage == Stage::Taken && !t.completable) {
            taken.stage = Stage::Handled;
            taken.handled_at = seq;
            moved += 1;
        }
        if moved > 0 {
            self.seq = seq;
        }
        moved
    }

    /// `Taken → Handled` for `id`, answering its sender with `response`
    /// once consumed. A queued message never taken here is taken first
    /// (`completePersisted` of a message RivetKit knows from elsewhere).
    pub fn complete(&mut self, id: u64, queued: Option<Header>, response: Option<Vec<u8>>) -> Result<(), NotCompleted> {
        if let Some(header) = queued {
            self.take(header, true);
        }
        let taken = self.taken.get_mut(&id).filter(|t| t.stage == Stage::Taken).ok_or(NotCompleted::NotTaken)?;
        self.seq += 1;
        taken.stage = Stage::Handled;
        taken.handled_at = self.seq;
        taken.answer = Some(response);
        Ok(())
    }

    /// The current handling sequence number: a state read now covers every
    /// message handled so far.
    pub fn mark(&self) -> u64 {
        self.seq
    }

    /// Messages handled at or before `mark` (what a save of a state read at
    /// `mark` consumes).
    pub fn covered(&self, mark: u64) -> Vec<u64> {
        self.taken.values().filter(|t| t.stage == Stage::Handled && t.handled_at <= mark).map(|t| t.header.id).collect()
    }

    /// Messages taken and not handled, with the tries stored before this
    /// generation counted its own (the final save puts those back: a
    /// graceful stop is no failed try).
    pub fn unhandled(&self) -> Vec<(u64, u32)> {
        self.taken.values().filter(|t| t.stage == Stage::Taken).map(|t| (t.header.id, t.tries_before)).collect()
    }

    /// `Handled → Consumed` for `ids`: their answers to send.
    pub fn consume(&mut self, ids: &[u64]) -> Vec<(u64, Option<Vec<u8>>)> {
        let mut answers = Vec::new();
        for id in ids {
            if let Some(taken) = self.taken.remove(id) {
                debug_assert!(taken.stage.can_become(Stage::Consumed));
                self.tries.remove(id);
                self.unswept.insert(*id);
                if let Some(answer) = taken.answer {
                    answers.push((*id, answer));
                }
            }
        }
        answers
    }

    /// Consumed messages whose records are still to delete (up to `n`).
    pub fn unswept(&self, n: usize) -> Vec<u64> {
        self.unswept.iter().take(n).copied().collect()
    }

    /// Every consumed message whose records may still exist, with `more`.
    pub fn consumed_with(&self, more: &[u64]) -> BTreeSet<u64> {
        self.unswept.iter().chain(more).copied().collect()
    }

    pub fn set_unswept(&mut self, ids: BTreeSet<u64>) {
        self.unswept = ids;
    }

    /// `Consumed → Gone`.
    pub fn swept(&mut self, ids: &[u64]) {
        for id in ids {
            self.unswept.remove(id);
        }
    }

    /// Whether `id` was taken here and not consumed yet.
    pub fn holds(&self, id: u64) -> bool {
        self.taken.contains_key(&id)
    }

    /// Forgets everything (`reset`).
    pub fn clear(&mut self) {
        *self = Self { seq: self.seq, ..Self::default() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &str) -> Stage {
        match name {
            "Queued" => Stage::Queued,
            "Taken" => Stage::Taken,
            "Handled" => Stage::Handled,
            "Consumed" => Stage::Consumed,
            "DeadLetter" => Stage::DeadLetter,
            "Gone" => Stage::Gone,
            other => panic!("unknown stage {other} in the table"),
        }
    }

    /// The module doc's table and `can_become` say the same.
    #[test]
    fn the_table_allows_only_its_transitions() {
        let source = include_str!("receipts.rs");
        let rows: BTreeSet<(String, String)> = source
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .map(|row| {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                (cells[0].trim_end_matches('`').to_string(), cells[2].trim_matches('`').to_string())
            })
            .collect();
        assert_eq!(rows.len(), 7, "{rows:?}");
        let all = [Stage::Queued, Stage::Taken, Stage::Handled, Stage::Consumed, Stage::DeadLetter, Stage::Gone];
        for from in all {
            for to in all {
                let listed = rows.iter().any(|(f, t)| stage(f) == from && stage(t) == to);
                assert_eq!(from.can_become(to), listed, "{from:?} -> {to:?}");
            }
        }
    }

    fn header(id: u64) -> Header {
        Header { id, name: "q".into(), created_at: 0, ray_id: None }
    }

    #[test]
    fn a_save_consumes_only_what_was_handled_before_its_state_was_read() {
        let mut r = Receipts::default();
        r.take(header(1), false);
        let before = r.mark();
        assert_eq!(r.handle_all(), 1);
        r.take(header(2), false);
        assert!(r.covered(before).is_empty(), "read before the handling");
        assert_eq!(r.covered(r.mark()), [1]);
        r.complete(3, Some(header(3)), Some(vec![7])).unwrap();
        assert_eq!(r.complete(3, None, None), Err(NotCompleted::NotTaken));
        assert_eq!(r.consume(&r.covered(r.mark())), [(3, Some(vec![7]))]);
        assert_eq!(r.unhandled(), [(2, 0)]);
        assert_eq!(r.consumed_with(&[]).into_iter().collect::<Vec<_>>(), [1, 3]);
        r.swept(&[1]);
        assert_eq!(r.unswept(10), [3]);
    }

    #[test]
    fn a_completable_message_waits_for_its_completion() {
        let mut r = Receipts::default();
        r.set_tries(HashMap::from([(5, 2)]));
        r.take(header(5), true);
        assert_eq!(r.tries(5), 3);
        assert_eq!(r.handle_all(), 0);
        assert_eq!(r.unhandled(), [(5, 2)], "a graceful stop puts its tries back");
        r.take(header(5), true);
        assert_eq!(r.tries(5), 3, "one try per generation");
    }
}
