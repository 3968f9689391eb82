//! The ports the rollout engine's decisions go through. The runtime implements them (agents
//! for traffic and workloads, the analysis driver for runs); the engine never calls them itself.

use std::future::Future;

use super::model::{ReplicaCounts, RevisionNumber, RunKey, RunReport, Weights};
use crate::spec::rollout::{HeaderRoutingMatch, RouteMatch};

/// Why an adapter could not do what was asked (the engine retries; it never assumes success).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PortError(pub String);

/// Shifts traffic between the stable and canary subsets.
///
/// # Guarantees expected
/// Changes are atomic and drop nothing: requests in flight finish where they started.
pub trait TrafficRouter: Send + Sync {
    /// Routes `canary` to the canary subset and `stable` to the stable subset.
    fn set_weight(
        &self,
        canary: i32,
        stable: i32,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Points the stable subset at a revision.
    fn set_stable(
        &self,
        revision: RevisionNumber,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Sends requests matching headers to the canary.
    fn set_header_route(
        &self,
        name: &str,
        matches: &[HeaderRoutingMatch],
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Removes a header route.
    fn remove_header_route(&self, name: &str)
    -> impl Future<Output = Result<(), PortError>> + Send;
    /// Mirrors a percentage of matching requests to the canary.
    fn set_mirror_route(
        &self,
        name: &str,
        matches: &[RouteMatch],
        percentage: i32,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Removes a mirror route.
    fn remove_mirror_route(&self, name: &str)
    -> impl Future<Output = Result<(), PortError>> + Send;
    /// The weights actually in effect (the engine verifies them before advancing).
    fn weights(&self) -> impl Future<Output = Result<Weights, PortError>> + Send;
}

/// Runs revisions.
pub trait WorkloadDriver: Send + Sync {
    /// Ensures a revision (its pod-template hash) runs `replicas` replicas.
    fn ensure(
        &self,
        revision: RevisionNumber,
        hash: &str,
        replicas: i32,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Replica counts per revision.
    fn status(
        &self,
    ) -> impl Future<Output = Result<Vec<(RevisionNumber, ReplicaCounts)>, PortError>> + Send;
}

/// Starts, terminates and reports analysis runs.
pub trait AnalysisExecutor: Send + Sync {
    /// Starts a run (idempotent: starting a started run does nothing).
    fn start(&self, run: RunKey) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Terminates a run.
    fn terminate(&self, run: RunKey) -> impl Future<Output = Result<(), PortError>> + Send;
    /// The report of a run, if it exists.
    fn report(&self, run: RunKey) -> impl Future<Output = Option<RunReport>> + Send;
}
