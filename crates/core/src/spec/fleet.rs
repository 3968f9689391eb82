//! Flotilla's own kinds (flotilla.dev/v1alpha1): `Fleet`, the clusters a service runs on, and
//! `FleetRollout`, how a Rollout reaches them in waves and what happens when a cluster fails.
//!
//! The shapes follow what a reader of ApplicationSet knows: a list generator with an explicit wave
//! per cluster, or RollingSync-style ordered steps of label selectors with `maxUpdate`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::common::{Duration, IntOrPercent};
use super::kube::ObjectMeta;
use super::rollout::{AnalysisRunArgument as Argument, AnalysisTemplateRef};

/// A set of clusters and how to reach each one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fleet {
    /// `flotilla.dev/v1alpha1`.
    pub api_version: String,
    /// `Fleet`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "crate::spec::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The clusters.
    pub spec: FleetSpec,
}

/// The clusters of a fleet.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetSpec {
    /// Every cluster of the fleet; names are unique.
    #[serde(default)]
    pub clusters: Vec<Cluster>,
    /// Clusters read from the hub's spoke Secrets (Argo CD's cluster Secrets and kubeconfig
    /// Secrets), as an ApplicationSet cluster generator selects them: only under a hub source
    /// (`flotilla serve` with `hub:`), which adds one cluster per selected Secret to `clusters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spokes: Option<Spokes>,
}

/// The spoke Secrets a Fleet in a hub takes as its clusters, and how each is driven.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spokes {
    /// Which Secrets: their labels and annotations are the clusters' labels (default: every
    /// spoke Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<SpokeSelector>,
    /// The namespace of the Rollout in every spoke (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Who owns the Rollout's `spec` in the spokes (default: the FleetRollout's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_source: Option<RolloutSource>,
}

/// A label selector over spoke Secrets, as Kubernetes writes one.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpokeSelector {
    /// Labels that must hold these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl SpokeSelector {
    /// Whether a spoke with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl Spokes {
    /// Whether a spoke with these labels joins the fleet.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }
}

/// One cluster: its identity, labels, and endpoints.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cluster {
    /// Unique name; reaches analysis as the `cluster` argument.
    pub name: String,
    /// Region; reaches analysis as the `region` argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Labels that FleetRollout selectors match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// How the controller drives this cluster's traffic and workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<ClusterEndpoint>,
    /// This cluster's metrics provider; its address reaches analysis as `metrics-address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsEndpoint>,
}

/// How the controller reaches a cluster's data plane. Exactly one field is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterEndpoint {
    /// The control API of a Flotilla agent (`http://127.0.0.1:7101`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A Kubernetes API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesEndpoint>,
}

/// A Kubernetes API endpoint: how to reach the cluster's API server (a kubeconfig and one of
/// its contexts, as `kubectl` would) and where the Rollout lives.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesEndpoint {
    /// A kubeconfig file (relative paths from the controller's working directory; default: what
    /// `kubectl` reads, `$KUBECONFIG` or `~/.kube/config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context (default: its `current-context`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// API server URL, replacing the context's cluster server when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Namespace the Rollout lives in (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The hub Secret (`namespace/name`) holding this spoke's credentials, in place of a
    /// kubeconfig: set by the hub source for the clusters of a Fleet's `spokes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Who owns the Rollout's `spec` in this cluster, overriding the FleetRollout's
    /// `rolloutSource`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_source: Option<RolloutSource>,
    /// The cluster's place in an Istio mesh: required when a Fleet's Rollout routes through
    /// Istio in more than one cluster (lint checks), so that its subsets never select another
    /// cluster's Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioMembership>,
}

/// A Kubernetes cluster's place in an Istio mesh.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioMembership {
    /// The mesh's id (`meshID` in the Istio installation); clusters that share one see each
    /// other's endpoints (multi-primary or primary-remote).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh_id: Option<String>,
    /// The cluster's id in the mesh (`values.global.multiCluster.clusterName`), the value of
    /// `topology.istio.io/cluster` on its endpoints: DestinationRule subsets select it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The Rollout's Services are cluster-local in this mesh (MeshConfig
    /// `serviceSettings[].settings.clusterLocal`), so host-based routing never reaches another
    /// cluster's Pods.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_local: bool,
}

/// Who owns a Kubernetes cluster's Rollout `spec`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum RolloutSource {
    /// Whoever applied it (Argo CD, Flux): Flotilla writes only its status and the objects it
    /// owns.
    #[default]
    Cluster,
    /// Flotilla applies the spec per cluster with its own field manager, never forced.
    Flotilla,
}

impl Cluster {
    /// Whether this cluster's Rollout spec is owned in the cluster (a Kubernetes cluster with
    /// `rolloutSource: cluster`, its own or else `fleet_source`, the FleetRollout's; the
    /// default): Flotilla then never writes it, and reads the fleet's revision from it.
    pub fn spec_in_cluster(&self, fleet_source: Option<RolloutSource>) -> bool {
        self.endpoint
            .as_ref()
            .and_then(|e| e.kubernetes.as_ref())
            .is_some_and(|k| {
                k.rollout_source.or(fleet_source).unwrap_or_default() == RolloutSource::Cluster
            })
    }
}

impl KubernetesEndpoint {
    /// The namespace of the Rollout (`default` when unset).
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}

/// A cluster's metrics provider: its address, how the controller reaches it, or both.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricsEndpoint {
    /// Provider address, e.g. a Prometheus at `http://127.0.0.1:9090`; it replaces the
    /// template's Prometheus address and reaches analysis as `metrics-address`. Unset: the
    /// template's own address is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// How the controller reaches the provider. `apiserver` (Kubernetes clusters only): an
    /// in-cluster Service address (`http://prometheus.monitoring:9090`) is reached through the
    /// cluster's API server's service proxy, with the cluster's own credentials. Unset: directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<MetricsVia>,
}

impl MetricsEndpoint {
    /// Whether in-cluster addresses go through the cluster's API server.
    pub fn via_apiserver(&self) -> bool {
        self.via == Some(MetricsVia::Apiserver)
    }
}

/// How the controller reaches a cluster's metrics provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MetricsVia {
    /// Through the cluster's API server's service proxy
    /// (`/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy/…`).
    Apiserver,
}

/// A multi-cluster rollout: which Rollout, to which clusters, in which waves, with which gates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetRollout {
    /// `flotilla.dev/v1alpha1`.
    pub api_version: String,
    /// `FleetRollout`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "crate::spec::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The desired behaviour.
    pub spec: FleetRolloutSpec,
}

/// The desired behaviour of a FleetRollout.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetRolloutSpec {
    /// The Fleet's `metadata.name`.
    pub fleet: String,
    /// The Rollout's `metadata.name`: the same Rollout runs on every target cluster.
    pub rollout: String,
    /// How clusters are grouped into waves.
    pub waves: WaveSelection,
    /// How long a wave must stay validated before the next starts (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake_time: Option<Duration>,
    /// An analysis that must pass after each wave's bake, before the next wave starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_analysis: Option<WaveAnalysis>,
    /// Per-cluster analysis arguments that override the Rollout's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_overrides: Vec<ClusterOverride>,
    /// What happens when clusters fail or cannot be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// What a new fleet revision does to one in flight (default `supersede`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_new_revision: Option<NewRevisionPolicy>,
    /// Who owns the Rollout's `spec` in Kubernetes clusters (default `cluster`); a cluster's
    /// `endpoint.kubernetes.rolloutSource` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_source: Option<RolloutSource>,
}

/// Wave membership: an explicit list, or ordered label-selector steps. Exactly one is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaveSelection {
    /// List generator: each cluster with its wave number (waves run in ascending order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<Vec<WaveElement>>,
    /// RollingSync-style steps: step N is wave N+1 and takes the clusters its selector matches
    /// that no earlier step took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<WaveStep>>,
    /// Every wave moves in lockstep (default false): its clusters start together and pass each
    /// of their Rollout's steps together, a barrier before each next step. A step's own
    /// `lockstep` overrides this for its wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockstep: Option<bool>,
}

/// One cluster's place in a list-generated wave layout.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaveElement {
    /// The cluster's name in the Fleet.
    pub cluster: String,
    /// The wave number, 1 or more; equal numbers deploy in parallel.
    pub wave: u32,
}

/// One label-selected wave.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaveStep {
    /// Labels a cluster must all have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Expressions a cluster's labels must all satisfy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// At most this many (or this percent, rounded up) of the step's clusters progress at once
    /// (default: all; ignored in a lockstep wave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_update: Option<IntOrPercent>,
    /// This wave moves in lockstep (overrides `waves.lockstep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockstep: Option<bool>,
}

/// A label selector requirement, as Kubernetes and ApplicationSet write it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// How the key relates to the values.
    pub operator: SelectorOperator,
    /// Values for `In` and `NotIn`; must be empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A label selector operator.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum SelectorOperator {
    /// The label's value is one of the values.
    #[default]
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl FleetRollout {
    /// The waves this rollout forms over a fleet's clusters: wave number → cluster names, in
    /// order. A list assigns waves explicitly; with steps, step N is wave N+1 and takes the
    /// clusters its selector matches that no earlier step took.
    pub fn waves(&self, clusters: &[Cluster]) -> BTreeMap<u32, Vec<String>> {
        let mut waves: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        if let Some(list) = &self.spec.waves.list {
            for element in list {
                waves
                    .entry(element.wave)
                    .or_default()
                    .push(element.cluster.clone());
            }
        } else if let Some(steps) = &self.spec.waves.steps {
            let mut taken = BTreeSet::new();
            for (i, step) in steps.iter().enumerate() {
                for cluster in clusters {
                    if !taken.contains(&cluster.name) && step.matches(&cluster.labels) {
                        taken.insert(cluster.name.clone());
                        waves
                            .entry(i as u32 + 1)
                            .or_default()
                            .push(cluster.name.clone());
                    }
                }
            }
        }
        waves
    }
}

impl FleetRollout {
    /// Whether wave number `number` (1-based, as [`FleetRollout::waves`] numbers them) moves in
    /// lockstep: its step's own `lockstep`, else `waves.lockstep`.
    pub fn lockstep(&self, number: u32) -> bool {
        let own = self
            .spec
            .waves
            .steps
            .as_ref()
            .and_then(|s| s.get((number as usize).wrapping_sub(1)))
            .and_then(|s| s.lockstep);
        own.or(self.spec.waves.lockstep).unwrap_or(false)
    }
}

/// A lockstep wave whose clusters hold Rollouts with different steps (`rolloutSource:
/// cluster`, each cluster's Rollout read there): its barriers cannot be passed together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockstepMismatch {
    /// The wave's number, 1-based.
    pub wave: u32,
    /// The FleetRollout field that makes the wave lockstep (`spec.waves.steps[i].lockstep` or
    /// `spec.waves.lockstep`).
    pub path: String,
    /// What each cluster of the wave holds, e.g. `eu-west: 5 canary steps; us-east: 3 canary
    /// steps`.
    pub message: String,
}

impl FleetRollout {
    /// The lockstep waves whose clusters hold Rollouts of different step counts (or strategies:
    /// a blue-green has no steps to pass together), given the Rollout each cluster holds;
    /// clusters absent from `held` are not compared.
    pub fn lockstep_mismatches(
        &self,
        clusters: &[Cluster],
        held: &BTreeMap<String, &super::rollout::Rollout>,
    ) -> Vec<LockstepMismatch> {
        let mut out = Vec::new();
        for (number, names) in self.waves(clusters) {
            if !self.lockstep(number) {
                continue;
            }
            let shapes: Vec<(&str, String)> = names
                .iter()
                .filter_map(|name| Some((name.as_str(), held.get(name)?.steps_shape())))
                .collect();
            if shapes.iter().all(|(_, shape)| *shape == shapes[0].1) {
                continue;
            }
            let own = self
                .spec
                .waves
                .steps
                .as_ref()
                .and_then(|s| s.get(number as usize - 1))
                .and_then(|s| s.lockstep)
                .is_some();
            let path = if own {
                format!("spec.waves.steps[{}].lockstep", number - 1)
            } else {
                "spec.waves.lockstep".to_owned()
            };
            let held: Vec<String> = shapes
                .iter()
                .map(|(name, shape)| format!("{name}: {shape}"))
                .collect();
            out.push(LockstepMismatch {
                wave: number,
                path,
                message: format!(
                    "wave {number} moves in lockstep, but its clusters' Rollouts have different steps ({}): the barrier needs the same steps in every cluster",
                    held.join("; ")
                ),
            });
        }
        out
    }
}

impl WaveStep {
    /// Whether a cluster with these labels is selected by this step.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl LabelSelectorRequirement {
    /// Whether a cluster with these labels satisfies the requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// An analysis run between waves, over the whole wave.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaveAnalysis {
    /// The templates to run.
    pub templates: Vec<AnalysisTemplateRef>,
    /// Arguments for the templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
}

/// Arguments that one cluster's analysis receives instead of the Rollout's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterOverride {
    /// The cluster's name in the Fleet.
    pub cluster: String,
    /// Argument values for this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
}

/// What happens when clusters fail or cannot be reached.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailurePolicy {
    /// Which clusters roll back when one fails (default `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_scope: Option<RollbackScope>,
    /// Failed clusters a wave tolerates before the fleet halts (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failed_clusters: Option<u32>,
    /// What to do with a cluster that cannot be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<UnreachablePolicy>,
    /// What a failed cluster does to the rest of its lockstep wave (default `abortWave`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockstep: Option<LockstepFailure>,
}

/// What a failed cluster does to the rest of its lockstep wave.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum LockstepFailure {
    /// Every cluster of the wave returns to its stable at once and the fleet halts; only the
    /// failed cluster records a rejection.
    #[default]
    AbortWave,
    /// The failed cluster is rolled back alone (counted against `maxFailedClusters`) and the
    /// barrier no longer waits for it.
    Continue,
}

/// Which clusters roll back when one fails.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum RollbackScope {
    /// Only the clusters whose analysis failed; validated clusters stay.
    #[default]
    Failed,
    /// Every cluster of the failing wave that runs the new revision.
    Wave,
    /// Every cluster of the fleet that runs the new revision.
    Fleet,
}

/// How long an unreachable cluster is retried, and what happens after.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnreachablePolicy {
    /// How long to retry (with backoff) before acting (default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// What to do after the timeout (default `halt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<UnreachableAction>,
}

/// What happens to a cluster unreachable past its timeout.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum UnreachableAction {
    /// Halt the fleet.
    #[default]
    Halt,
    /// Skip the cluster (reported as Skipped, never as validated) and continue.
    Skip,
}

/// What a new fleet revision does to a rollout in flight.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum NewRevisionPolicy {
    /// Abort in-flight canaries of the old revision, keep what was promoted, restart at wave 1.
    #[default]
    Supersede,
    /// Let the rollout in flight finish (or halt) first, then start the new revision at wave 1.
    Queue,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_operators_match_like_kubernetes() {
        let req = |operator, values: &[&str]| LabelSelectorRequirement {
            key: "wave".into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let canary = labels(&[("wave", "canary")]);
        let none = labels(&[]);
        assert!(req(SelectorOperator::In, &["canary"]).matches(&canary));
        assert!(!req(SelectorOperator::In, &["canary"]).matches(&none));
        assert!(req(SelectorOperator::NotIn, &["prod"]).matches(&canary));
        assert!(req(SelectorOperator::NotIn, &["prod"]).matches(&none));
        assert!(req(SelectorOperator::Exists, &[]).matches(&canary));
        assert!(req(SelectorOperator::DoesNotExist, &[]).matches(&none));
    }

    #[test]
    fn a_fleet_rollout_parses_and_rejects_unknown_fields() {
        let value = serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "FleetRollout",
            "metadata": {"name": "payment-api"},
            "spec": {
                "fleet": "payments", "rollout": "payment-api",
                "waves": {"list": [{"cluster": "canary-eu-west", "wave": 1}]},
                "bakeTime": "10m",
                "failurePolicy": {"rollbackScope": "failed", "unreachable": {"timeout": "5m", "action": "skip"}}
            }
        });
        let parsed: FleetRollout = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(parsed.spec.bake_time, Some(Duration::from_secs(600)));
        let mut bad = value;
        bad["spec"]["waves"]["lists"] = serde_json::json!([]);
        assert!(serde_json::from_value::<FleetRollout>(bad).is_err());
    }
}
