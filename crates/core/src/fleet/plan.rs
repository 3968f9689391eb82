//! The resolved shape of a fleet rollout: waves of clusters, per-cluster arguments, the failure
//! policy, and the analysis plans each cluster's runs use.

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::plan::{ArgValue, METRICS_ADDRESS_ARG, PlanError, RunPlan, resolve};
use crate::rollout::{AnalysisSlot, RunKey, template_hash};
use crate::spec::analysis::{AnalysisTemplate, AnalysisTemplateSpec};
use crate::spec::fleet::{
    ClusterOverride, Fleet, FleetRollout, LockstepFailure, NewRevisionPolicy, RollbackScope,
    UnreachableAction, WaveAnalysis,
};
use crate::spec::rollout::{AnalysisRunArgument, AnalysisTemplateRef, Rollout};

/// One cluster as the fleet machine needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSpec {
    /// The cluster's name.
    pub name: String,
    /// Its region (the `region` argument).
    pub region: Option<String>,
    /// Its metrics endpoint (the `metrics-address` argument).
    pub metrics_address: Option<String>,
    /// Whether its metrics are reached through its own API server (`metrics.via: apiserver`):
    /// an address then names a Service of this cluster, not a provider shared with others.
    pub metrics_in_cluster: bool,
    /// Per-cluster argument overrides.
    pub overrides: BTreeMap<String, String>,
    /// Whether an abort there stays on the aborted spec, as Argo's abort does (a Kubernetes
    /// cluster, whatever owns its Rollout spec: `kubectl argo rollouts` and Argo CD read it),
    /// until the spec changes or it is retried; elsewhere a rolled-back cluster returns to the
    /// previous spec.
    pub aborts_in_place: bool,
}

/// What happens on failure, with defaults applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Which clusters roll back when one fails.
    pub rollback_scope: RollbackScope,
    /// Failed clusters a wave tolerates.
    pub max_failed_clusters: usize,
    /// How long an unreachable cluster is retried (ms).
    pub unreachable_timeout: u64,
    /// What then.
    pub unreachable_action: UnreachableAction,
    /// What a new revision does to one in flight.
    pub on_new_revision: NewRevisionPolicy,
    /// What a failed cluster does to the rest of its lockstep wave.
    pub lockstep: LockstepFailure,
}

/// A fleet rollout resolved against its Fleet, Rollout and templates.
#[derive(Debug, Clone)]
pub struct FleetPlan {
    /// The FleetRollout's name.
    pub name: String,
    /// Waves in order, each a list of cluster names.
    pub waves: Vec<Vec<String>>,
    /// Per wave: at most this many clusters progressing at once.
    pub max_update: Vec<usize>,
    /// Per wave: whether its clusters move in lockstep (a barrier before each step).
    pub lockstep: Vec<bool>,
    /// Every targeted cluster.
    pub clusters: BTreeMap<String, ClusterSpec>,
    /// Bake time after a wave is validated (ms).
    pub bake: u64,
    /// The failure policy.
    pub policy: Policy,
    /// The analysis templates, by name.
    pub templates: BTreeMap<String, AnalysisTemplateSpec>,
    /// Each cluster's wave (0-based), for O(log n) lookups in large fleets.
    pub wave_index: BTreeMap<String, usize>,
    /// The analysis that must pass after each wave's bake (`waveAnalysis`), if any.
    pub wave_analysis: Option<WaveAnalysis>,
    /// The values of the secrets templates' arguments name (`valueFrom.secretKeyRef`), by
    /// (secret, key): read by the runtime (the core reads nothing), redacted in every output.
    pub secrets: BTreeMap<(String, String), String>,
    /// The same, as read in each cluster that holds its own Secrets (Kubernetes), by cluster:
    /// a cluster's runs take these first.
    pub cluster_secrets: BTreeMap<String, BTreeMap<(String, String), String>>,
}

/// Why a fleet rollout cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FleetPlanError(pub String);

impl FleetPlan {
    /// Resolves a FleetRollout against its Fleet, Rollout and templates.
    pub fn resolve(
        fleet: &Fleet,
        fleet_rollout: &FleetRollout,
        templates: &[AnalysisTemplate],
    ) -> Result<FleetPlan, FleetPlanError> {
        let layout = fleet_rollout.waves(&fleet.spec.clusters);
        if layout.is_empty() {
            return Err(FleetPlanError(format!(
                "FleetRollout {:?} targets no cluster",
                fleet_rollout.metadata.name.as_deref().unwrap_or("")
            )));
        }
        // Looked up by name (a fleet has thousands of clusters: no scan per cluster).
        let laid_out: BTreeSet<&str> = layout.values().flatten().map(String::as_str).collect();
        let mut overridden: BTreeMap<&str, Vec<&ClusterOverride>> = BTreeMap::new();
        for o in &fleet_rollout.spec.cluster_overrides {
            overridden.entry(o.cluster.as_str()).or_default().push(o);
        }
        let mut clusters = BTreeMap::new();
        for cluster in &fleet.spec.clusters {
            if !laid_out.contains(cluster.name.as_str()) {
                continue;
            }
            let overrides = overridden
                .get(cluster.name.as_str())
                .into_iter()
                .flatten()
                .flat_map(|o| {
                    o.args
                        .iter()
                        .filter_map(|a| a.value.clone().map(|v| (a.name.clone(), v)))
                })
                .collect();
            clusters.insert(
                cluster.name.clone(),
                ClusterSpec {
                    name: cluster.name.clone(),
                    region: cluster.region.clone(),
                    metrics_address: cluster.metrics.as_ref().and_then(|m| m.address.clone()),
                    metrics_in_cluster: cluster.metrics.as_ref().is_some_and(|m| m.via_apiserver()),
                    overrides,
                    aborts_in_place: cluster
                        .endpoint
                        .as_ref()
                        .is_some_and(|e| e.kubernetes.is_some()),
                },
            );
        }
        for wave in layout.values() {
            for name in wave {
                if !clusters.contains_key(name) {
                    return Err(FleetPlanError(format!(
                        "cluster {name:?} is not in Fleet {:?}",
                        fleet.metadata.name.as_deref().unwrap_or("")
                    )));
                }
            }
        }
        let steps = fleet_rollout.spec.waves.steps.as_ref();
        let waves: Vec<Vec<String>> = layout.values().cloned().collect();
        // Wave number N comes from step N - 1 (a step that takes no cluster leaves its number
        // unused, so the index among the waves is not the step's).
        let lockstep: Vec<bool> = layout
            .keys()
            .map(|number| fleet_rollout.lockstep(*number))
            .collect();
        // A lockstep wave starts every cluster together: its maxUpdate is ignored.
        let max_update = layout
            .iter()
            .zip(&lockstep)
            .map(|((number, wave), lockstep)| {
                steps
                    .and_then(|s| s.get((*number as usize).wrapping_sub(1)))
                    .and_then(|s| s.max_update)
                    .filter(|_| !lockstep)
                    .map_or(wave.len(), |m| {
                        m.resolve_ceil(wave.len() as i64).max(1) as usize
                    })
            })
            .collect();
        let policy = fleet_rollout
            .spec
            .failure_policy
            .clone()
            .unwrap_or_default();
        let unreachable = policy.unreachable.clone().unwrap_or_default();
        let wave_index = waves
            .iter()
            .enumerate()
            .flat_map(|(i, w)| w.iter().map(move |c| (c.clone(), i)))
            .collect();
        Ok(FleetPlan {
            wave_index,
            wave_analysis: fleet_rollout.spec.wave_analysis.clone(),
            secrets: BTreeMap::new(),
            cluster_secrets: BTreeMap::new(),
            name: fleet_rollout.metadata.name.clone().unwrap_or_default(),
            waves,
            max_update,
            lockstep,
            clusters,
            bake: fleet_rollout
                .spec
                .bake_time
                .as_ref()
                .and_then(|d| d.as_millis())
                .unwrap_or(0),
            policy: Policy {
                rollback_scope: policy.rollback_scope.unwrap_or_default(),
                max_failed_clusters: policy.max_failed_clusters.unwrap_or(0) as usize,
                unreachable_timeout: unreachable
                    .timeout
                    .as_ref()
                    .and_then(|d| d.as_millis())
                    .unwrap_or(300_000),
                unreachable_action: unreachable.action.unwrap_or_default(),
                on_new_revision: fleet_rollout.spec.on_new_revision.unwrap_or_default(),
                lockstep: policy.lockstep.unwrap_or_default(),
            },
            templates: templates
                .iter()
                .map(|t| (t.metadata.name.clone().unwrap_or_default(), t.spec.clone()))
                .collect(),
        })
    }

    /// The wave (0-based) a cluster belongs to.
    pub fn wave_of(&self, cluster: &str) -> Option<usize> {
        self.wave_index.get(cluster).copied()
    }

    /// The analysis plan for one run of one cluster: the referenced templates merged, with the
    /// Rollout's arguments, the cluster's overrides and the injected arguments.
    pub fn run_plan(
        &self,
        rollout: &Rollout,
        cluster: &str,
        run: RunKey,
    ) -> Result<RunPlan, PlanError> {
        let (spec, values) = self.run_plan_inputs(rollout, cluster, run)?;
        resolve(&spec, &values)
    }

    /// What [`FleetPlan::run_plan`] resolves: the merged template and the argument values.
    pub fn run_plan_inputs(
        &self,
        rollout: &Rollout,
        cluster: &str,
        run: RunKey,
    ) -> Result<(AnalysisTemplateSpec, BTreeMap<String, ArgValue>), PlanError> {
        let (refs, args) = analysis_refs(rollout, run.slot);
        let spec = self.merge_templates(&refs)?;
        let mut values = argument_values(rollout, &args);
        let info = self.clusters.get(cluster);
        values.insert("cluster".into(), ArgValue::plain(cluster));
        if let Some(region) = info.and_then(|i| i.region.clone()) {
            values.insert("region".into(), ArgValue::plain(region));
        }
        if let Some(address) = info.and_then(|i| i.metrics_address.clone()) {
            values.insert("metrics-address".into(), ArgValue::plain(address));
        }
        for (name, value) in info.map(|i| i.overrides.clone()).unwrap_or_default() {
            values.insert(name, ArgValue::plain(value));
        }
        self.add_secrets(Some(cluster), &spec, &mut values);
        Ok((spec, values))
    }

    /// Every (secret, key) the templates' arguments read (`valueFrom.secretKeyRef`).
    pub fn secret_refs(&self) -> std::collections::BTreeSet<(String, String)> {
        self.templates
            .values()
            .flat_map(|t| t.args.iter())
            .filter_map(|a| a.secret_key_ref())
            .map(|r| (r.name.clone(), r.key.clone()))
            .collect()
    }

    /// Secret values for the declared arguments that name one and were not given; an argument
    /// whose secret is unknown stays unresolved (the run cannot start: an Error).
    fn add_secrets(
        &self,
        cluster: Option<&str>,
        spec: &AnalysisTemplateSpec,
        values: &mut BTreeMap<String, ArgValue>,
    ) {
        let own = cluster.and_then(|c| self.cluster_secrets.get(c));
        for arg in &spec.args {
            if values.contains_key(&arg.name) {
                continue;
            }
            let Some(secret) = arg.secret_key_ref() else {
                continue;
            };
            let key = (secret.name.clone(), secret.key.clone());
            if let Some(value) = own
                .and_then(|o| o.get(&key))
                .or_else(|| self.secrets.get(&key))
            {
                values.insert(
                    arg.name.clone(),
                    ArgValue {
                        value: value.clone(),
                        secret: true,
                    },
                );
            }
        }
    }

    /// The analysis plan of wave `wave`'s (0-based) wave-level analysis: the `waveAnalysis`
    /// templates merged, with its arguments and the injected `wave` (1-based). `rollout` is the
    /// new revision's Rollout (a `podTemplateHashValue` argument takes its pod-template hash).
    /// None when the FleetRollout has no `waveAnalysis`.
    pub fn wave_run_plan(
        &self,
        rollout: &Rollout,
        wave: usize,
    ) -> Option<Result<RunPlan, PlanError>> {
        let analysis = self.wave_analysis.as_ref()?;
        Some(self.merge_templates(&analysis.templates).and_then(|spec| {
            let mut values = argument_values(rollout, &analysis.args);
            values.insert(WAVE_ARG.into(), ArgValue::plain((wave + 1).to_string()));
            self.add_secrets(None, &spec, &mut values);
            resolve(&spec, &values)
        }))
    }

    /// The referenced templates merged into one spec (metrics in order, first declaration of an
    /// argument wins).
    fn merge_templates(
        &self,
        refs: &[AnalysisTemplateRef],
    ) -> Result<AnalysisTemplateSpec, PlanError> {
        let mut spec = AnalysisTemplateSpec::default();
        for reference in refs {
            let template = self
                .templates
                .get(&reference.template_name)
                .ok_or_else(|| {
                    PlanError::InvalidRule(format!(
                        "AnalysisTemplate {:?} not found",
                        reference.template_name
                    ))
                })?;
            spec.metrics.extend(template.metrics.iter().cloned());
            for arg in &template.args {
                if !spec.args.iter().any(|a| a.name == arg.name) {
                    spec.args.push(arg.clone());
                }
            }
            spec.dry_run.extend(template.dry_run.iter().cloned());
            spec.measurement_retention
                .extend(template.measurement_retention.iter().cloned());
        }
        Ok(spec)
    }
}

/// A key that two resolutions share exactly when they resolve to the same plan: the merged
/// template, and the values of the arguments it can read (declared ones, `{{args.x}}`
/// placeholders, and `metrics-address` when a metric queries Prometheus). Clusters whose
/// templates do not read their own arguments then share one plan.
pub fn plan_key(spec: &AnalysisTemplateSpec, values: &BTreeMap<String, ArgValue>) -> String {
    let text = serde_json::to_string(spec).unwrap_or_default();
    let mut key = text.clone();
    // Conservative: a name after any `args.` (placeholders may hold spaces) counts as read.
    let placed = |name: &str| {
        text.match_indices("args.")
            .any(|(i, _)| text[i + 5..].trim_start().starts_with(name))
    };
    for (name, value) in values {
        let read = spec.args.iter().any(|a| &a.name == name)
            || placed(name)
            || (name == METRICS_ADDRESS_ARG && text.contains("prometheus"));
        if read {
            key.push('\0');
            key.push_str(name);
            key.push('\0');
            key.push_str(&value.value);
            key.push(if value.secret { '1' } else { '0' });
        }
    }
    key
}

/// The injected argument of a wave-level analysis: the wave's number, 1-based.
pub const WAVE_ARG: &str = "wave";

/// The value Argo gives `valueFrom.podTemplateHashValue`: its pod-template hash of the Rollout's
/// template, the label its Pods carry (`rollouts-pod-template-hash`) and the metrics scraped from
/// them; the core's own hash for a template Go could not decode (lint reports it).
fn argo_hash(rollout: &Rollout) -> String {
    serde_json::to_value(&rollout.spec.template)
        .ok()
        .and_then(|t| crate::rollout::pod_template_hash::pod_template_hash(&t, None).ok())
        .unwrap_or_else(|| template_hash(rollout))
}

/// Argument values given as a literal `value`, or as `valueFrom.podTemplateHashValue` (Argo's
/// pod-template hash of the Rollout); other sources are left for the template's defaults.
fn argument_values(rollout: &Rollout, args: &[AnalysisRunArgument]) -> BTreeMap<String, ArgValue> {
    let mut values = BTreeMap::new();
    for arg in args {
        if let Some(value) = &arg.value {
            values.insert(arg.name.clone(), ArgValue::plain(value.clone()));
        } else if arg
            .value_from
            .as_ref()
            .and_then(|v| v.pod_template_hash_value)
            .is_some()
        {
            values.insert(arg.name.clone(), ArgValue::plain(argo_hash(rollout)));
        }
    }
    values
}

/// The templates and arguments of one analysis slot of a Rollout.
fn analysis_refs(
    rollout: &Rollout,
    slot: AnalysisSlot,
) -> (Vec<AnalysisTemplateRef>, Vec<AnalysisRunArgument>) {
    let from = |a: &crate::spec::rollout::RolloutAnalysis| (a.templates.clone(), a.args.clone());
    match slot {
        AnalysisSlot::Step(i) => rollout
            .steps()
            .get(i as usize)
            .and_then(|s| s.analysis.as_ref())
            .map(from)
            .unwrap_or_default(),
        AnalysisSlot::Background => rollout
            .canary()
            .and_then(|c| c.analysis.as_ref())
            .map(|b| (b.templates.clone(), b.args.clone()))
            .unwrap_or_default(),
        AnalysisSlot::PrePromotion => rollout
            .blue_green()
            .and_then(|b| b.pre_promotion_analysis.as_ref())
            .map(from)
            .unwrap_or_default(),
        AnalysisSlot::PostPromotion => rollout
            .blue_green()
            .and_then(|b| b.post_promotion_analysis.as_ref())
            .map(from)
            .unwrap_or_default(),
        // The fleet's, not the Rollout's: see `FleetPlan::wave_run_plan`.
        AnalysisSlot::Wave(_) => Default::default(),
    }
}

/// The fleet revision: a content hash of the rendered Rollout (plus the Git commit, when the
/// caller has one, folded in by the caller).
pub fn fleet_revision(rollout: &Rollout) -> String {
    let text = serde_json::to_string(&rollout.spec).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}
