//! What the simulator's scenario tests share: the shipped healthy scenario, inputs that must
//! pass lint, a report's clusters by name, and events written into a scenario.

use std::collections::BTreeMap;

use super::{ClusterReport, Inputs, Report};
use crate::manifest::load_bytes;

/// The shipped healthy scenario (examples/simulate/healthy.yaml).
pub const HEALTHY: &str = include_str!("../../../../examples/simulate/healthy.yaml");

/// The inputs of a scenario file, which must load and lint without an error.
pub fn inputs(text: &str) -> Inputs {
    let load = load_bytes("scenario.yaml", text.as_bytes());
    let mut diagnostics = load.diagnostics.clone();
    diagnostics.extend(crate::lint::lint(&load.manifests, Default::default()));
    assert!(
        diagnostics
            .iter()
            .all(|d| d.severity != crate::diagnostic::Severity::Error),
        "{diagnostics:?}"
    );
    Inputs::from_manifests(&load.manifests).unwrap()
}

/// A report's clusters by name.
pub fn by_name(report: &Report) -> BTreeMap<&str, &ClusterReport> {
    report
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect()
}

/// A shipped scenario (no `events` of its own) with these events: YAML list items indented
/// for `spec.events`; none leaves it as it is.
pub fn with_events(text: &str, events: &str) -> String {
    if events.is_empty() {
        return text.to_owned();
    }
    let anchor = "  latencyObjective: 1.0\n  clusters:";
    assert!(text.contains(anchor), "no place for events");
    text.replace(
        anchor,
        &format!("  latencyObjective: 1.0\n  events:\n{events}  clusters:"),
    )
}
