//! The cluster-backend port: what the controller asks of one cluster, whatever kind it is (a
//! Flotilla agent, a Kubernetes API server), and what it hears back.
//!
//! The port is level-triggered and shaped for a cluster that lags and has other writers:
//!
//! - the controller states the cluster's whole desired state ([`ClusterDesired`], computed from
//!   the rollout engine's state by [`ClusterDesired::of`]) with [`ClusterBackend::ensure`];
//!   calling it again with the same state is harmless, and a newer state replaces an older one;
//! - it hears what the cluster really runs ([`ClusterObserved`]: per revision, the replicas, the
//!   backend's own identity for it, the weights in effect) with [`ClusterBackend::observe`], and
//!   the operator commands issued in the cluster ([`ClusterCommand`]) with
//!   [`ClusterBackend::commands`]; the rollout engine advances on observations only, never on a
//!   write having returned;
//! - failures are typed ([`BackendError`]): unreachable and conflict are retried, forbidden and
//!   invalid hold the cluster with a condition naming what was refused;
//! - a backend declares its [`Capabilities`], and a Rollout that needs one the backend lacks is
//!   refused by name before it runs ([`capabilities::missing`]).
//!
//! The trait returns boxed futures so the runtime can hold backends of several kinds behind one
//! `dyn ClusterBackend`; nothing here performs I/O.

pub mod capabilities;
pub mod desired;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

pub use capabilities::{Capabilities, Missing, missing};
pub use desired::{ClusterDesired, DesiredProgress, DesiredRevision, DesiredRun, MirrorRoute};

use crate::analysis::{MeasureRequest, Outcome};
use crate::rollout::{Observed, ReplicaCounts, RevisionNumber, Weights};

/// A boxed, sendable future: what the port's methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a backend could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum BackendError {
    /// The cluster did not answer (retried with backoff; the cluster's observation goes stale
    /// and the fleet machine sees it unreachable).
    #[error("unreachable: {message}")]
    Unreachable {
        /// What failed.
        message: String,
    },
    /// The cluster refused the write for want of a permission: the cluster is held with a
    /// condition naming the verb and the resource until a write succeeds.
    #[error("forbidden: cannot {verb} {resource}: {message}")]
    Forbidden {
        /// The refused verb (`patch`, `create`…).
        verb: String,
        /// The resource (`rollouts.argoproj.io`, `replicasets`…).
        resource: String,
        /// The cluster's own words.
        message: String,
    },
    /// Another writer changed the object since it was read: retried at once on a fresh read,
    /// never dropped.
    #[error("conflict: {message}")]
    Conflict {
        /// What conflicted.
        message: String,
    },
    /// Another field manager owns a field the desired state sets (Kubernetes server-side apply,
    /// never forced): the cluster is held with a condition naming the field and the manager
    /// until the other writer lets go or the desired state changes; Flotilla does not fight.
    #[error("ownership conflict: {field} is owned by {manager}: {message}")]
    OwnershipConflict {
        /// The contested field path (`spec.template`).
        field: String,
        /// The field manager that owns it.
        manager: String,
        /// The cluster's own words.
        message: String,
    },
    /// Another writer keeps changing back the traffic weights Flotilla writes on a route (Argo
    /// CD's self-heal without `ignoreDifferences` on the weights, say): the cluster is held with
    /// a condition naming the route and that writer's field manager, and the backend stops
    /// writing the route for a while instead of fighting it.
    #[error(
        "traffic routing conflict: {route}: its weights are changed back by {manager}: {message}"
    )]
    TrafficRoutingConflict {
        /// The route (`HTTPRoute default/web`).
        route: String,
        /// The field manager that changed the weights back.
        manager: String,
        /// The cluster's own words.
        message: String,
    },
    /// The cluster refused the desired state as invalid: the cluster is held with a condition
    /// naming the field until the desired state changes.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The field path refused.
        field: String,
        /// Why.
        message: String,
    },
}

impl BackendError {
    /// Whether retrying the same desired state may succeed without anyone acting
    /// (unreachable, conflict); forbidden and invalid need a human or a new desired state.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BackendError::Unreachable { .. } | BackendError::Conflict { .. }
        )
    }

    /// A short condition for a held cluster's status (`Forbidden: cannot patch rollouts`).
    pub fn condition(&self) -> String {
        match self {
            BackendError::Unreachable { message } => format!("Unreachable: {message}"),
            BackendError::Forbidden {
                verb,
                resource,
                message,
            } => format!("Forbidden: cannot {verb} {resource}: {message}"),
            BackendError::Conflict { message } => format!("Conflict: {message}"),
            BackendError::Invalid { field, message } => format!("Invalid {field}: {message}"),
            BackendError::OwnershipConflict {
                field,
                manager,
                message,
            } => format!("OwnershipConflict: {field} is owned by {manager}: {message}"),
            BackendError::TrafficRoutingConflict {
                route,
                manager,
                message,
            } => format!(
                "TrafficRoutingConflict: {route}: its weights are changed back by {manager}: {message}"
            ),
        }
    }
}

/// One revision as the cluster runs it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedRevision {
    /// The identity the backend gives the revision (the agent: the version its workload runs;
    /// Kubernetes: the pod-template-hash of its ReplicaSet).
    pub identity: String,
    /// Replica counts.
    #[serde(flatten)]
    pub counts: ReplicaCounts,
    /// The replicas the revision's workload is asked for, when that differs in time from the
    /// replicas that exist (Kubernetes: the ReplicaSet's `spec.replicas`, its Pods made after;
    /// None: the backend makes them as it is asked, as the agent does). Whether a decision was
    /// carried out is judged on this, not on Pods still being scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<i32>,
}

impl ObservedRevision {
    /// The replicas the workload is asked for: `requested`, else those that exist.
    pub fn requested_replicas(&self) -> i32 {
        self.requested.unwrap_or(self.counts.replicas)
    }
}

/// What a cluster really runs, read from the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterObserved {
    /// Per revision of the desired state the observation was read against.
    pub revisions: BTreeMap<RevisionNumber, ObservedRevision>,
    /// The weights in effect (None: the cluster routes no traffic by weight).
    pub weights: Option<Weights>,
    /// The version the cluster serves its stable traffic with, whatever the desired state says
    /// (None: nothing runs): what a first start adopts and drift is checked against.
    pub serving: Option<String>,
    /// The Rollout as the cluster holds it, when its spec is owned there (Kubernetes,
    /// `rolloutSource: cluster`: Argo CD or Flux applied it): where the fleet reads its revision
    /// from. Only `apiVersion`, `kind`, `metadata` (name, namespace, labels, annotations) and
    /// `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<serde_json::Value>,
    /// The replicas the cluster's Rollout asks for when the cluster owns that number
    /// (Kubernetes: its live `spec.replicas`, which an HPA scales through the scale subresource
    /// and, with `rolloutSource: cluster`, Argo CD applies): the engine sizes the revisions by
    /// it. None: the backend has no such object (the agent), and the spec's count holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_replicas: Option<i32>,
    /// The values of the Secrets `secret_refs` of the desired state named, as read in the
    /// cluster, by (name, key); one absent was not found there. Never serialized.
    #[serde(skip)]
    pub secrets: BTreeMap<(String, String), String>,
}

impl ClusterObserved {
    /// The observation as the rollout engine reads it.
    pub fn engine_view(&self) -> Observed {
        Observed {
            replicas: self
                .revisions
                .iter()
                .map(|(number, revision)| (*number, revision.counts))
                .collect(),
            weights: self.weights,
            analysis: BTreeMap::new(),
            spec_replicas: self.spec_replicas,
        }
    }
}

/// An operator command issued in the cluster itself (`kubectl argo rollouts abort`), which the
/// controller turns into a fleet command for that cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCommand {
    /// Unique per command in its cluster (a command heard twice is applied once).
    pub id: String,
    /// Who or what issued it, as the cluster says (`kubectl argo rollouts abort`, a user name).
    pub origin: String,
    /// What was asked.
    pub verb: ClusterVerb,
}

/// The verbs a cluster can send back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ClusterVerb {
    /// Abort this cluster's update.
    Abort,
    /// Promote this cluster (past its current pause, or `full`: every remaining step).
    Promote {
        /// Skip every remaining step.
        full: bool,
    },
    /// Retry the failed clusters.
    Retry,
    /// Pause this cluster's update where it stands (`spec.paused: true`).
    Pause,
    /// Resume this cluster's update (`spec.paused` back to false).
    Resume,
}

/// What the controller tells the people watching one cluster, where they look there (an Event
/// on the Rollout in Kubernetes, `kubectl describe rollout`): a decision about that cluster, or
/// a command issued there and refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNotice {
    /// A warning (something refused or failed), else a normal notice.
    pub warning: bool,
    /// A machine-readable reason in UpperCamelCase, e.g. `FleetCommandRefused`.
    pub reason: String,
    /// What happened, for a person.
    pub message: String,
}

/// One cluster, as the controller drives it.
///
/// # Contract
/// - `ensure` makes the cluster converge towards `desired` and returns once the writes were
///   accepted (not once they took effect: convergence is seen in `observe`). It is idempotent
///   and may be called again with the same or a newer state at any time, also after a restart.
/// - `observe` reads what the cluster runs, mapping what it finds to the revisions of `desired`
///   (the last state ensured); it never writes.
/// - `commands` returns the operator commands issued in the cluster since the last call.
/// - `notify` writes a notice where the cluster's users look; it never fails the rollout.
pub trait ClusterBackend: Send + Sync {
    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;
    /// Converge towards `desired`.
    fn ensure<'a>(&'a self, desired: &'a ClusterDesired)
    -> BoxFuture<'a, Result<(), BackendError>>;
    /// What the cluster runs, per revision of `desired`.
    fn observe<'a>(
        &'a self,
        desired: &'a ClusterDesired,
    ) -> BoxFuture<'a, Result<ClusterObserved, BackendError>>;
    /// Commands issued in the cluster since the last call.
    fn commands(&self) -> BoxFuture<'_, Result<Vec<ClusterCommand>, BackendError>>;
    /// Measures a `builtin` metric from the cluster's own traffic statistics (an error outcome
    /// where the backend has none).
    fn measure_builtin<'a>(&'a self, request: &'a MeasureRequest) -> BoxFuture<'a, Outcome>;
    /// Takes a `job` metric's measurement in the cluster (Kubernetes: a Job there, as Argo's
    /// `job` provider makes it), or None: the job runs where the controller runs (the local
    /// `job` provider). By default None.
    fn measure_job<'a>(&'a self, request: &'a MeasureRequest) -> Option<BoxFuture<'a, Outcome>> {
        let _ = request;
        None
    }
    /// The cluster's own way into its network for metric providers that live there (a Fleet
    /// cluster's `metrics.via: apiserver`: Kubernetes' service proxy), or None: providers are
    /// reached directly. By default None.
    fn service_proxy(&self) -> Option<&dyn crate::analysis::ServiceProxy> {
        None
    }
    /// Tells the cluster's watchers `notice`, best effort (a notice that cannot be written is
    /// logged, never an error of the rollout). By default there is nowhere to tell it: the
    /// fleet's audit log and notifications carry it anyway.
    fn notify<'a>(&'a self, notice: &'a ClusterNotice) -> BoxFuture<'a, ()> {
        let _ = notice;
        Box::pin(async {})
    }
}

/// The version an image runs, as clusters report it: its tag (`registry/app:1.9.0` → `1.9.0`),
/// its digest when pinned by one, or `latest` without either.
pub fn image_version(image: &str) -> String {
    if let Some((_, digest)) = image.split_once('@') {
        return digest.to_owned();
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if !tag.is_empty() => tag.to_owned(),
        _ => "latest".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_the_image_tag_or_digest() {
        assert_eq!(image_version("registry.example/payment-api:1.9.0"), "1.9.0");
        assert_eq!(image_version("localhost:5000/app"), "latest");
        assert_eq!(image_version("localhost:5000/app:2"), "2");
        assert_eq!(image_version("app@sha256:abc"), "sha256:abc");
    }
}
