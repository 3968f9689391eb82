//! The blue-green strategy's settings: the active and preview services, auto-promotion, the
//! pre- and post-promotion analyses and the scale-down delays.

use serde::{Deserialize, Serialize};

use super::analysis_refs::RolloutAnalysis;
use super::pods::{AntiAffinity, PodTemplateMetadata};
use crate::spec::common::IntOrPercent;

/// Settings of a blue-green update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlueGreenStrategy {
    /// Service whose selector is switched to the new ReplicaSet on promotion (required).
    pub active_service: String,
    /// Service that points at the new ReplicaSet before promotion; must differ from the active one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_service: Option<String>,
    /// Replicas of the preview stack before promotion (default: the full replica count); the
    /// stack is scaled to full size before the switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_replica_count: Option<i32>,
    /// Whether to promote automatically (default true); false pauses with `BlueGreenPause`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_enabled: Option<bool>,
    /// Seconds to wait, once the preview is fully available, before auto-promoting (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_seconds: Option<i32>,
    /// Pods that may be unavailable during an update, as a count or a percentage (default 25%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrPercent>,
    /// Seconds to wait after the switch before scaling the old ReplicaSet down (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i32>,
    /// How many old ReplicaSets may wait for their scale-down delay at once (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_revision_limit: Option<i32>,
    /// Analysis that must pass before the active service is switched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_promotion_analysis: Option<RolloutAnalysis>,
    /// Pod anti-affinity injected against the other version's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<AntiAffinity>,
    /// Analysis run after the switch, before the new ReplicaSet is marked stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_promotion_analysis: Option<RolloutAnalysis>,
    /// Labels and annotations put on pods while they serve as the preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_metadata: Option<PodTemplateMetadata>,
    /// Labels and annotations put on pods while they serve as the active version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_metadata: Option<PodTemplateMetadata>,
    /// Seconds to wait after an abort before scaling the preview down (default 30; 0 = never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_scale_down_delay_seconds: Option<i32>,
}
