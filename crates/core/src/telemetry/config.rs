//! An actor type's trace sample rates: the `tracing` block of its config.

use std::collections::HashMap;

/// Rates from 0 to 1. `sampler` applies to every invocation of the actor,
/// `actions` to the actions named (over `sampler`). No rate at all leaves
/// the decision to the process rule (`OTEL_TRACES_SAMPLER`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActorTracing {
    pub sampler: Option<f64>,
    pub actions: HashMap<String, f64>,
}

impl ActorTracing {
    /// The rate of action `name`.
    pub fn for_action(&self, name: &str) -> Option<f64> {
        self.actions.get(name).copied().or(self.sampler)
    }

    /// The rate of any other invocation (a request, a queue send).
    pub fn for_actor(&self) -> Option<f64> {
        self.sampler
    }

    /// Every rate is a number from 0 to 1, and every action named is one
    /// of `known` (when the config lists its actions). The error names the
    /// field, as the other config checks do.
    pub fn validate(&self, known: &[String]) -> Result<(), (String, String)> {
        if let Some(rate) = self.sampler.filter(|r| !is_rate(*r)) {
            return Err(("tracing.sampler".into(), format!("must be a number from 0 to 1, got {rate}")));
        }
        let mut names: Vec<_> = self.actions.iter().collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        for (name, rate) in names {
            if !is_rate(*rate) {
                return Err((format!("tracing.actions.{name}"), format!("must be a number from 0 to 1, got {rate}")));
            }
            if !known.is_empty() && !known.iter().any(|k| k == name) {
                return Err((format!("tracing.actions.{name}"), "names no action of this actor".into()));
            }
        }
        Ok(())
    }
}

fn is_rate(rate: f64) -> bool {
    (0.0..=1.0).contains(&rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_checked_and_actions_must_exist() {
        let known = vec!["hot".to_owned(), "cold".to_owned()];
        let ok = ActorTracing { sampler: Some(0.0), actions: HashMap::from([("hot".into(), 1.0)]) };
        assert_eq!(ok.validate(&known), Ok(()));
        assert_eq!((ok.for_action("hot"), ok.for_action("cold"), ok.for_actor()), (Some(1.0), Some(0.0), Some(0.0)));
        let bad = ActorTracing { sampler: Some(1.5), ..Default::default() };
        assert_eq!(bad.validate(&known).unwrap_err().0, "tracing.sampler");
        let nan = ActorTracing { sampler: Some(f64::NAN), ..Default::default() };
        assert!(nan.validate(&known).is_err());
        let unknown = ActorTracing { sampler: None, actions: HashMap::from([("nope".into(), 0.5)]) };
        assert_eq!(unknown.validate(&known).unwrap_err().0, "tracing.actions.nope");
        assert_eq!(unknown.validate(&[]), Ok(()), "no action list given: names are not checked");
    }
}
