//! Pod-level settings the strategies share: anti-affinity between the stable and the new
//! revision's pods, and the metadata added to a revision's pods.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Which inter-pod anti-affinity rule to inject: exactly one of the two (lint checks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AntiAffinity {
    /// A soft rule with a weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_during_scheduling_ignored_during_execution: Option<PreferredAntiAffinity>,
    /// A hard rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<RequiredAntiAffinity>,
}

/// A soft anti-affinity rule (upstream `PreferredDuringSchedulingIgnoredDuringExecution`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferredAntiAffinity {
    /// Weight of the rule, 1 to 100.
    pub weight: i32,
}

/// A hard anti-affinity rule (upstream `RequiredDuringSchedulingIgnoredDuringExecution`); it
/// has no settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequiredAntiAffinity {}

/// Labels and annotations added to pods (or an experiment's ReplicaSet) while they play a role.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTemplateMetadata {
    /// Extra labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}
