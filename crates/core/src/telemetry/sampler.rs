//! Which spans are recorded: the process's rule from the standard
//! `OTEL_TRACES_SAMPLER`, and an actor's own rate over it
//! (docs/telemetry.md, "Sampling").

use super::context::SpanContext;

/// The process-wide rule, read from `OTEL_TRACES_SAMPLER` and
/// `OTEL_TRACES_SAMPLER_ARG`. The default is `parentbased_always_on`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProcessSampler {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    /// Follows a caller's decision; `root` decides for new traces.
    ParentBased(Root),
}

/// What a parent-based rule does for a new trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl Default for ProcessSampler {
    fn default() -> Self {
        Self::ParentBased(Root::AlwaysOn)
    }
}

impl ProcessSampler {
    /// The rule `name` with its argument `arg`, as the OpenTelemetry
    /// environment spells them. An unknown name or a bad ratio is an error
    /// the caller logs before it falls back to the default.
    pub fn parse(name: Option<&str>, arg: Option<&str>) -> Result<Self, String> {
        let ratio = || -> Result<f64, String> {
            match arg.map(str::trim) {
                None | Some("") => Ok(1.0),
                Some(arg) => arg
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| format!("OTEL_TRACES_SAMPLER_ARG `{arg}` is not a ratio between 0 and 1")),
            }
        };
        Ok(match name.map(str::trim).unwrap_or("") {
            "" | "parentbased_always_on" => Self::ParentBased(Root::AlwaysOn),
            "parentbased_always_off" => Self::ParentBased(Root::AlwaysOff),
            "parentbased_traceidratio" => Self::ParentBased(Root::Ratio(ratio()?)),
            "always_on" => Self::AlwaysOn,
            "always_off" => Self::AlwaysOff,
            "traceidratio" => Self::Ratio(ratio()?),
            other => return Err(format!("OTEL_TRACES_SAMPLER `{other}` is not one this addon knows")),
        })
    }

    fn decide(&self, parent: Option<&SpanContext>, trace_id: &str) -> bool {
        match (self, parent) {
            (Self::AlwaysOn, _) => true,
            (Self::AlwaysOff, _) => false,
            (Self::Ratio(ratio), _) => ratio_samples(trace_id, *ratio),
            (Self::ParentBased(_), Some(parent)) => parent.is_sampled(),
            (Self::ParentBased(Root::AlwaysOn), None) => true,
            (Self::ParentBased(Root::AlwaysOff), None) => false,
            (Self::ParentBased(Root::Ratio(ratio)), None) => ratio_samples(trace_id, *ratio),
        }
    }
}

/// Whether the span of an invocation in trace `trace_id` is recorded.
///
/// `parent` is the caller's span (a request's `traceparent`). An actor's
/// rate (`actor_ratio`) lowers what is recorded and never raises it: under
/// a caller that did not sample, nothing is recorded; otherwise the rate
/// decides, by the trace id, so every host decides alike for one trace.
/// Without a rate, the process rule decides.
pub fn decide(
    process: &ProcessSampler,
    actor_ratio: Option<f64>,
    parent: Option<&SpanContext>,
    trace_id: &str,
) -> bool {
    match (actor_ratio, parent) {
        (Some(_), Some(parent)) if !parent.is_sampled() => false,
        (Some(ratio), _) => ratio_samples(trace_id, ratio),
        (None, parent) => process.decide(parent, trace_id),
    }
}

/// The trace-id ratio rule of OpenTelemetry: the low 8 bytes of the
/// trace id, shifted right by one, below `ratio * 2^63`.
pub fn ratio_samples(trace_id: &str, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio.is_nan() || ratio <= 0.0 {
        return false;
    }
    let low = trace_id.get(16..32).and_then(|hex| u64::from_str_radix(hex, 16).ok()).unwrap_or(0);
    let bound = (ratio * (1u64 << 63) as f64) as u64;
    (low >> 1) < bound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(sampled: bool) -> SpanContext {
        SpanContext::root(sampled)
    }

    #[test]
    fn an_actor_rate_lowers_and_never_raises() {
        let process = ProcessSampler::default();
        let trace = SpanContext::root(true).trace_id;
        assert!(decide(&process, Some(1.0), None, &trace));
        assert!(!decide(&process, Some(0.0), None, &trace));
        assert!(!decide(&process, Some(1.0), Some(&parent(false)), &trace), "an unsampled caller wins");
        assert!(!decide(&process, Some(0.0), Some(&parent(true)), &trace), "a rate of 0 drops a sampled caller's");
        assert!(decide(&process, None, Some(&parent(true)), &trace));
        assert!(!decide(&process, None, Some(&parent(false)), &trace));
    }

    #[test]
    fn the_ratio_rule_reads_the_low_half_of_the_trace_id() {
        assert!(ratio_samples("00000000000000000000000000000000", 0.000_001));
        assert!(!ratio_samples("0000000000000000ffffffffffffffff", 0.999_999));
        assert!(ratio_samples("0000000000000000ffffffffffffffff", 1.0));
        let sampled = (0..2000).filter(|_| ratio_samples(&SpanContext::root(true).trace_id, 0.25)).count();
        assert!((300..700).contains(&sampled), "about a quarter of 2000, got {sampled}");
    }

    #[test]
    fn the_process_rule_comes_from_the_standard_variables() {
        assert_eq!(ProcessSampler::parse(None, None), Ok(ProcessSampler::ParentBased(Root::AlwaysOn)));
        assert_eq!(ProcessSampler::parse(Some("always_off"), None), Ok(ProcessSampler::AlwaysOff));
        assert_eq!(ProcessSampler::parse(Some("traceidratio"), Some("0.5")), Ok(ProcessSampler::Ratio(0.5)));
        assert_eq!(
            ProcessSampler::parse(Some("parentbased_traceidratio"), Some("0.1")),
            Ok(ProcessSampler::ParentBased(Root::Ratio(0.1)))
        );
        assert!(ProcessSampler::parse(Some("traceidratio"), Some("2")).is_err());
        assert!(ProcessSampler::parse(Some("jaeger_remote"), None).is_err());
        let off = ProcessSampler::parse(Some("parentbased_always_off"), None).unwrap();
        assert!(!decide(&off, None, None, &SpanContext::root(true).trace_id));
        assert!(decide(&off, None, Some(&parent(true)), "x"));
    }
}
