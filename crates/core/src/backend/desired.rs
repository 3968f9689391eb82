//! A cluster's desired state, computed from the rollout engine's state: every revision with its
//! image and replicas, which one serves the stable traffic, the canary's weight and the routes in
//! effect. What a backend converges to; the engine's own state stays the single source.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::run::Run;
use crate::rollout::{PauseCondition, Phase, RevisionNumber, RolloutState, RunKey, Weights};
use crate::spec::rollout::{HeaderRoutingMatch, Rollout, RouteMatch};
use crate::time::Millis;

/// One revision the cluster should run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredRevision {
    /// The core's pod-template hash of the revision.
    pub hash: String,
    /// The first container's image (what the agent's workload template runs).
    pub image: String,
    /// Replicas the engine asks for (None: it has not asked; what runs is left as it is).
    pub replicas: Option<i32>,
    /// The revision's pod template (`spec.template` of its Rollout), for backends that create
    /// workloads from it (Kubernetes: the ReplicaSet's template and its pod-template hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<serde_json::Value>,
}

/// An analysis run of the cluster's rollout, for a backend that reports runs in the cluster
/// (Kubernetes: an AnalysisRun object beside the Rollout). A report, not a desired state: the
/// runtime hands runs to `observe` only, never to `ensure`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredRun {
    /// Which run.
    pub key: RunKey,
    /// Its spec as an AnalysisRun's: the merged templates' `metrics` and the argument values
    /// (a secret one without its value).
    pub spec: serde_json::Value,
    /// Its state: phase, metrics and measurements.
    pub run: Run,
}

/// Where the engine is in the update, as a backend reports it in the cluster (Kubernetes: the
/// Rollout's `status`, as Argo writes it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredProgress {
    /// The canary step being executed (== the number of steps once all are done).
    pub step_index: Option<u32>,
    /// The phase.
    pub phase: Phase,
    /// The phase's message.
    pub message: String,
    /// Whether the update is aborted.
    pub abort: bool,
    /// When it was aborted.
    pub aborted_at: Option<Millis>,
    /// Why it was aborted.
    pub abort_cause: String,
    /// Pause conditions in effect.
    pub pause_conditions: Vec<PauseCondition>,
    /// Whether the controller itself paused (inconclusive analysis).
    pub controller_pause: bool,
    /// Whether `promote --full` was requested and not yet done.
    pub promote_full: bool,
    /// Whether the progress deadline was exceeded.
    pub deadline_exceeded: bool,
    /// Whether an operator paused the rollout (`spec.paused`, `kubectl argo rollouts pause`).
    #[serde(default)]
    pub paused: bool,
}

/// A mirror route in effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MirrorRoute {
    /// Request conditions; a request matching any one of them is mirrored.
    pub matches: Vec<RouteMatch>,
    /// Percentage of matching requests mirrored.
    pub percentage: i32,
}

/// Everything a cluster should run and route, at one moment of its rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDesired {
    /// Every revision the engine knows (old ones kept for their scale-down delay included), with
    /// its image when known and the replicas asked for it.
    pub revisions: BTreeMap<RevisionNumber, DesiredRevision>,
    /// The revision that serves the stable traffic: the stable one, or for blue-green the
    /// active one.
    pub serving: Option<RevisionNumber>,
    /// The revision of the current pod template.
    pub current: Option<RevisionNumber>,
    /// Blue-green: the revision behind the preview service.
    pub preview: Option<RevisionNumber>,
    /// The weights asked for (routed canaries).
    pub weights: Option<Weights>,
    /// Header routes in effect, by name.
    pub header_routes: BTreeMap<String, Vec<HeaderRoutingMatch>>,
    /// Mirror routes in effect, by name.
    pub mirror_routes: BTreeMap<String, MirrorRoute>,
    /// Every route name the Rollout owns (`trafficRouting.managedRoutes`): a backend removes
    /// those not in effect, and never touches a route by another name.
    pub managed_routes: std::collections::BTreeSet<String>,
    /// Where the engine is (for backends that report it in the cluster).
    #[serde(default)]
    pub progress: DesiredProgress,
    /// The cluster's analysis runs, for backends that report them (filled by the runtime for
    /// `observe` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<DesiredRun>,
    /// The Rollout the cluster runs, as a manifest, for backends that apply its spec
    /// (Kubernetes with `rolloutSource: flotilla`); filled by the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<serde_json::Value>,
    /// The Secrets (name, key) the cluster's analysis arguments read there
    /// (`valueFrom.secretKeyRef`), for backends whose clusters hold Secrets (Kubernetes): their
    /// values come back in [`super::ClusterObserved::secrets`]. Never sent anywhere.
    #[serde(skip)]
    pub secret_refs: std::collections::BTreeSet<(String, String)>,
}

impl ClusterDesired {
    /// The desired state of a cluster whose rollout engine is in `state`, running `rollout`;
    /// `images` gives each known pod-template hash's image (a revision whose hash is unknown
    /// gets an empty image, which a backend refuses as invalid).
    pub fn of(
        state: &RolloutState,
        rollout: &Rollout,
        images: &BTreeMap<String, String>,
    ) -> ClusterDesired {
        let revisions = state
            .revisions
            .iter()
            .map(|revision| {
                (
                    revision.number,
                    DesiredRevision {
                        hash: revision.hash.clone(),
                        image: images.get(&revision.hash).cloned().unwrap_or_default(),
                        replicas: state.desired_replicas.get(&revision.number).copied(),
                        template: None,
                    },
                )
            })
            .collect();
        let max = crate::rollout::engine::max_weight(rollout.canary());
        let weights = state.desired_weight.map(|canary| Weights {
            canary,
            stable: max - canary,
        });
        ClusterDesired {
            revisions,
            serving: state.active.or(state.stable),
            current: state.current,
            preview: state.preview,
            weights,
            header_routes: header_routes(state, rollout),
            mirror_routes: mirror_routes(state, rollout),
            managed_routes: rollout
                .canary()
                .and_then(|c| c.traffic_routing.as_ref())
                .map(|r| r.managed_routes.iter().map(|m| m.name.clone()).collect())
                .unwrap_or_default(),
            progress: DesiredProgress {
                step_index: state.step_index,
                phase: state.phase,
                message: state.message.clone(),
                abort: state.abort,
                aborted_at: state.aborted_at,
                abort_cause: state.abort_cause.clone(),
                pause_conditions: state.pause_conditions.clone(),
                controller_pause: state.controller_pause,
                promote_full: state.promote_full,
                deadline_exceeded: state.deadline_exceeded,
                paused: state.paused,
            },
            runs: Vec::new(),
            rollout: None,
            secret_refs: Default::default(),
        }
    }

    /// The canary revision: the current one when it is not the one serving stable traffic.
    pub fn canary(&self) -> Option<RevisionNumber> {
        self.current.filter(|c| Some(*c) != self.serving)
    }

    /// Replicas asked for a revision (None when the engine has not asked).
    pub fn replicas(&self, revision: RevisionNumber) -> Option<i32> {
        self.revisions.get(&revision).and_then(|r| r.replicas)
    }
}

/// The steps reached so far (every step of the current one and before).
fn steps_reached<'a>(
    state: &RolloutState,
    rollout: &'a Rollout,
) -> impl Iterator<Item = &'a crate::spec::rollout::CanaryStep> {
    let steps = rollout.canary().map_or(&[][..], |c| c.steps.as_slice());
    let reached = state
        .step_index
        .map_or(0, |i| (i as usize + 1).min(steps.len()));
    steps[..reached].iter()
}

/// Each header route the engine holds in effect, with the conditions of the last step that set
/// it (the engine keeps the names; the conditions are the spec's).
fn header_routes(
    state: &RolloutState,
    rollout: &Rollout,
) -> BTreeMap<String, Vec<HeaderRoutingMatch>> {
    let mut routes = BTreeMap::new();
    for step in steps_reached(state, rollout) {
        if let Some(route) = &step.set_header_route {
            let name = route.name.clone().unwrap_or_default();
            if state.header_routes.contains(&name) && !route.r#match.is_empty() {
                routes.insert(name, route.r#match.clone());
            }
        }
    }
    routes
}

/// Each mirror route the engine holds in effect, as the last step that set it says.
fn mirror_routes(state: &RolloutState, rollout: &Rollout) -> BTreeMap<String, MirrorRoute> {
    let mut routes = BTreeMap::new();
    for step in steps_reached(state, rollout) {
        if let Some(route) = &step.set_mirror_route
            && state.mirror_routes.contains(&route.name)
            && !route.r#match.is_empty()
        {
            routes.insert(
                route.name.clone(),
                MirrorRoute {
                    matches: route.r#match.clone(),
                    percentage: route.percentage.unwrap_or(100),
                },
            );
        }
    }
    routes
}
