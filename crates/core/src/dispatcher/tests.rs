//! The race table of docs/generations.md, one test per row, plus the
//! admission table. Races are made deterministic with the dispatcher's
//! start gate and hook gates; the clock is paused so bounded waits
//! (10 s, 2 s) elapse instantly and exactly. No sleeps synchronise anything.

mod admission;
/// `pub(crate)`: the routing tests start actors with them too.
pub(crate) mod doubles;
mod drain;
mod failed_start;
mod key_owner;
mod lifecycle;
mod max_actions;
mod output_gate;
mod races;
mod stopped_generation;
mod traffic;
