//! The controller's side of one agent: the core's [`TrafficRouter`] and [`WorkloadDriver`] ports
//! and the `builtin` metric provider, implemented over the agent's control API.
//!
//! The rollout engine thinks in revisions (numbers with a pod-template hash); the agent thinks
//! in two subsets, `stable` and `canary`, each running one version. [`AgentCluster`] maps one to
//! the other with a [`Placement`] the runtime sets before executing a tick's actions:
//!
//! - the stable revision runs in the `stable` subset, any other revision in the `canary`
//!   subset;
//! - `MarkStable` points the `stable` subset at the revision's version (the agent surges: the
//!   old replicas serve until as many new ones are ready, so no request is dropped);
//! - scaling a revision to zero that runs in no subset any more does nothing, and so does
//!   scaling up a revision that is neither the stable nor the current one (an old stable kept
//!   for its scale-down delay, which the agent's surge already replaced);
//! - [`AgentCluster::settle`] empties the `canary` subset once it runs the stable's version with
//!   no weight (after a promotion), which the engine never asks for by name.
//!
//! Every call is idempotent, so a restarted controller may replay them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use flotilla_core::analysis::{MeasureRequest, Measurer, MetricResult, Millis, Outcome};
use flotilla_core::rollout::ports::{PortError, TrafficRouter, WorkloadDriver};
use flotilla_core::rollout::{Observed, ReplicaCounts, RevisionNumber, Weights};
use flotilla_core::spec::analysis::{BuiltinStatistic, TrafficSubset};
use flotilla_core::spec::rollout::{HeaderRoutingMatch, RouteMatch, StringMatch};

use crate::client::{AgentClient, ClientError};
use crate::config::{CANARY, STABLE};
use crate::control::WindowQuery;
use crate::router::{HeaderMatch, MirrorSpec, RouteSpec};
use crate::stats::Window;

/// Which version each revision runs, and which revision is stable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Revision → version (the image tag the agent's workload template receives).
    pub versions: BTreeMap<RevisionNumber, String>,
    /// The stable revision.
    pub stable: Option<RevisionNumber>,
    /// The revision of the current pod template (the canary, when it is not the stable). Any
    /// other revision is an old one the engine keeps for its scale-down delay: the agent's surge
    /// already replaced it, so it is never started again (a restarted controller re-asserting
    /// `Scale{old, n}` must not bring the previous version back into the canary subset).
    pub current: Option<RevisionNumber>,
}

/// One agent as the controller drives it.
#[derive(Debug)]
pub struct AgentCluster {
    client: AgentClient,
    placement: Mutex<Placement>,
}

fn port(error: ClientError) -> PortError {
    PortError(error.to_string())
}

impl AgentCluster {
    /// A cluster whose agent's control API is `client`.
    pub fn new(client: AgentClient) -> AgentCluster {
        AgentCluster {
            client,
            placement: Mutex::new(Placement::default()),
        }
    }

    /// The control API client.
    pub fn client(&self) -> &AgentClient {
        &self.client
    }

    /// Sets the revision → version map and the stable revision (before a tick's actions).
    pub fn set_placement(&self, placement: Placement) {
        *self.placement.lock().expect("placement lock") = placement;
    }

    fn version_of(&self, revision: RevisionNumber) -> Result<String, PortError> {
        self.placement
            .lock()
            .expect("placement lock")
            .versions
            .get(&revision)
            .cloned()
            .ok_or_else(|| PortError(format!("revision {revision} has no known version")))
    }

    /// What the agent reports, as the rollout engine observes it: replica counts per revision
    /// (every subset running the revision's version counts) and the weights in effect.
    pub async fn observe(&self) -> Result<Observed, ClientError> {
        Ok(self.observe_with_stable().await?.0)
    }

    /// [`AgentCluster::observe`], and the version the `stable` subset runs (when it has
    /// replicas): what the cluster serves outside a rollout, to compare with the desired state.
    pub async fn observe_with_stable(&self) -> Result<(Observed, Option<String>), ClientError> {
        let status = self.client.status().await?;
        let stable_version = status
            .subsets
            .iter()
            .find(|s| s.subset == STABLE && s.desired_replicas > 0)
            .map(|s| s.version.clone());
        let placement = self.placement.lock().expect("placement lock").clone();
        let mut replicas = BTreeMap::new();
        for (revision, version) in &placement.versions {
            let mut counts = ReplicaCounts::default();
            for subset in status.subsets.iter().filter(|s| &s.version == version) {
                if subset.subset != STABLE && subset.subset != CANARY {
                    continue;
                }
                counts.replicas += subset.desired_replicas as i32;
                counts.ready += subset.available_replicas as i32;
                counts.available += subset.available_replicas as i32;
            }
            replicas.insert(*revision, counts);
        }
        Ok((
            Observed {
                replicas,
                weights: Some(Weights {
                    canary: status.weights.canary as i32,
                    stable: status.weights.stable as i32,
                }),
                analysis: BTreeMap::new(),
            },
            stable_version,
        ))
    }

    /// Empties the `canary` subset when it runs the stable subset's version and has no weight:
    /// what is left of a promoted canary.
    pub async fn settle(&self) -> Result<(), PortError> {
        let status = self.client.status().await.map_err(port)?;
        let find = |name: &str| status.subsets.iter().find(|s| s.subset == name);
        if let (Some(stable), Some(canary)) = (find(STABLE), find(CANARY))
            && canary.version == stable.version
            && canary.desired_replicas > 0
            && status.weights.canary == 0
        {
            self.client
                .scale(CANARY, &canary.version, 0)
                .await
                .map_err(port)?;
        }
        Ok(())
    }
}

impl WorkloadDriver for AgentCluster {
    async fn ensure(
        &self,
        revision: RevisionNumber,
        _hash: &str,
        replicas: i32,
    ) -> Result<(), PortError> {
        let version = self.version_of(revision)?;
        let replicas = replicas.max(0) as u32;
        let (stable, current) = {
            let placement = self.placement.lock().expect("placement lock");
            (placement.stable, placement.current)
        };
        if stable == Some(revision) {
            self.client
                .scale(STABLE, &version, replicas)
                .await
                .map_err(port)?;
            return Ok(());
        }
        if replicas > 0 && current != Some(revision) {
            // An old revision kept for its scale-down delay: nothing runs it here any more.
            return Ok(());
        }
        if replicas == 0 {
            // Only the canary subset is scaled down by name; a version that runs nowhere any
            // more (an old stable replaced by the promotion) needs nothing.
            let canary = self.client.subset(CANARY).await.map_err(port)?;
            if canary.version == version && canary.desired_replicas > 0 {
                self.client.scale(CANARY, &version, 0).await.map_err(port)?;
            }
            return Ok(());
        }
        self.client
            .scale(CANARY, &version, replicas)
            .await
            .map_err(port)?;
        Ok(())
    }

    async fn status(&self) -> Result<Vec<(RevisionNumber, ReplicaCounts)>, PortError> {
        let observed = self.observe().await.map_err(port)?;
        Ok(observed.replicas.into_iter().collect())
    }
}

fn header_match(name: &str, value: &StringMatch) -> HeaderMatch {
    HeaderMatch {
        name: name.to_owned(),
        exact: value.exact.clone(),
        prefix: value.prefix.clone(),
        regex: value.regex.clone(),
    }
}

impl TrafficRouter for AgentCluster {
    async fn set_weight(&self, canary: i32, _stable: i32) -> Result<(), PortError> {
        self.client
            .set_weights(canary.max(0) as u32)
            .await
            .map(drop)
            .map_err(port)
    }

    async fn set_stable(&self, revision: RevisionNumber) -> Result<(), PortError> {
        let version = self.version_of(revision)?;
        {
            let mut placement = self.placement.lock().expect("placement lock");
            placement.stable = Some(revision);
        }
        let status = self.client.status().await.map_err(port)?;
        let stable = status.subsets.iter().find(|s| s.subset == STABLE);
        if stable.is_some_and(|s| s.version == version) {
            return Ok(());
        }
        // The promoted canary's size is what the stable must hold.
        let canary = status.subsets.iter().find(|s| s.subset == CANARY);
        let replicas = stable
            .map_or(0, |s| s.desired_replicas)
            .max(canary.map_or(0, |c| c.desired_replicas));
        self.client
            .scale(STABLE, &version, replicas)
            .await
            .map(drop)
            .map_err(port)
    }

    async fn set_header_route(
        &self,
        name: &str,
        matches: &[HeaderRoutingMatch],
    ) -> Result<(), PortError> {
        let [only] = matches else {
            return Err(PortError(format!(
                "header route {name:?} has {} matches; the agent's router matches exactly one header per route",
                matches.len()
            )));
        };
        let route = RouteSpec {
            name: name.to_owned(),
            subset: CANARY.to_owned(),
            header: Some(header_match(&only.header_name, &only.header_value)),
            cookie: None,
        };
        self.client.set_route(&route).await.map(drop).map_err(port)
    }

    async fn remove_header_route(&self, name: &str) -> Result<(), PortError> {
        match self.client.remove_route(name).await {
            Ok(_) | Err(ClientError::Api { status: 404, .. }) => Ok(()),
            Err(e) => Err(port(e)),
        }
    }

    async fn set_mirror_route(
        &self,
        name: &str,
        matches: &[RouteMatch],
        percentage: i32,
    ) -> Result<(), PortError> {
        let header = match matches {
            [] => None,
            [only] if only.method.is_none() && only.path.is_none() && only.headers.len() <= 1 => {
                only.headers.iter().next().map(|(h, v)| header_match(h, v))
            }
            _ => {
                return Err(PortError(format!(
                    "mirror route {name:?}: the agent's router mirrors on at most one header (no method or path match)"
                )));
            }
        };
        let mirror = MirrorSpec {
            name: name.to_owned(),
            subset: CANARY.to_owned(),
            percentage: percentage.clamp(0, 100) as u32,
            header,
        };
        self.client
            .set_mirror(&mirror)
            .await
            .map(drop)
            .map_err(port)
    }

    async fn remove_mirror_route(&self, name: &str) -> Result<(), PortError> {
        match self.client.remove_mirror(name).await {
            Ok(_) | Err(ClientError::Api { status: 404, .. }) => Ok(()),
            Err(e) => Err(port(e)),
        }
    }

    async fn weights(&self) -> Result<Weights, PortError> {
        let w = self.client.weights().await.map_err(port)?;
        Ok(Weights {
            canary: w.canary as i32,
            stable: w.stable as i32,
        })
    }
}

/// The `builtin` metric provider: the agent's own traffic statistics for one subset over a
/// window ending at the measurement, never reaching before the run's start (a subset's earlier
/// traffic may be another version's; the agent's 10-second buckets bound what can still leak
/// in). With fewer than `minRequests` requests in the window the result is nil (no evidence),
/// never a misleading number. Latency is in seconds.
#[derive(Debug, Clone)]
pub struct BuiltinProvider {
    client: AgentClient,
}

fn wall_clock() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}

impl BuiltinProvider {
    /// Reads the agent at `client`.
    pub fn new(client: AgentClient) -> BuiltinProvider {
        BuiltinProvider { client }
    }
}

/// One statistic of a window, or None when the window has no value for it.
fn statistic_of(window: &Window, statistic: BuiltinStatistic) -> Option<f64> {
    match statistic {
        BuiltinStatistic::ErrorRate => window.error_rate,
        BuiltinStatistic::RequestRate => Some(window.request_rate),
        BuiltinStatistic::Requests => Some(window.requests as f64),
        BuiltinStatistic::Errors => Some(window.errors as f64),
        BuiltinStatistic::Latency => window
            .quantile
            .as_ref()
            .and_then(|q| q.ms)
            .map(|ms| ms / 1000.0),
    }
}

impl Measurer for BuiltinProvider {
    async fn measure(&self, request: &MeasureRequest) -> Outcome {
        let Some(builtin) = &request.provider.builtin else {
            return Outcome::Error(format!(
                "metric {:?} is not a builtin metric",
                request.metric
            ));
        };
        let (statistic, quantile, subset, window_ms, min_requests) = builtin.resolved();
        let subset = match subset {
            TrafficSubset::Canary => CANARY,
            TrafficSubset::Stable => STABLE,
        };
        let window_ms = request.window.unwrap_or(window_ms);
        let window_s = (window_ms / 1000).max(1);
        let not_before = request.not_before;
        let now = wall_clock();
        let live = now - request.at <= 15_000;
        let end_ms = if live { now } else { request.at };
        let start_ms = (end_ms - window_s as Millis * 1000).max(not_before.unwrap_or(Millis::MIN));
        // A live measurement reads the window ending now; a past one (a backtest, a reference)
        // its own; a window cut by the run's start, or a series, is read by its bounds.
        let bounded = !live
            || request.step.is_some()
            || not_before.is_some_and(|n| n > end_ms - window_s as Millis * 1000);
        let query = if bounded {
            // A live window includes the current second; a past one ends where it was asked to.
            let end = (end_ms / 1000).max(0) as u64 + u64::from(live);
            WindowQuery {
                start: Some(((start_ms / 1000).max(0) as u64).min(end.saturating_sub(1))),
                end: Some(end),
                quantile: Some(quantile),
                step: request
                    .step
                    .map(|ms| format!("{}s", (ms / 1000).max(crate::stats::BUCKET_SECONDS))),
                ..WindowQuery::default()
            }
        } else {
            WindowQuery {
                window: Some(format!("{window_s}s")),
                quantile: Some(quantile),
                ..WindowQuery::default()
            }
        };
        let mut metadata = BTreeMap::new();
        metadata.insert("subset".to_owned(), subset.to_owned());
        if request.step.is_some() {
            let windows = match self.client.series(subset, &query).await {
                Ok(w) => w,
                Err(e) => return Outcome::Error(e.to_string()),
            };
            let requests: u64 = windows.iter().map(|w| w.requests).sum();
            metadata.insert("requests".to_owned(), requests.to_string());
            if let (Some(first), Some(last)) = (windows.first(), windows.last()) {
                metadata.insert(
                    "window".to_owned(),
                    format!("{}..{}", first.start, last.end),
                );
            }
            if requests < min_requests {
                metadata.insert(
                    "reason".to_owned(),
                    format!(
                        "{requests} requests in the window, fewer than minRequests {min_requests}"
                    ),
                );
                return Outcome::Value {
                    result: MetricResult::Nil,
                    metadata,
                };
            }
            let points = windows
                .iter()
                .map(|w| statistic_of(w, statistic).unwrap_or(f64::NAN))
                .collect();
            return Outcome::Value {
                result: MetricResult::Vector(points),
                metadata,
            };
        }
        let window = match self.client.stats(subset, &query).await {
            Ok(w) => w,
            Err(e) => return Outcome::Error(e.to_string()),
        };
        metadata.insert("requests".to_owned(), window.requests.to_string());
        metadata.insert("errors".to_owned(), window.errors.to_string());
        metadata.insert(
            "window".to_owned(),
            format!("{}..{}", window.start, window.end),
        );
        if window.requests < min_requests {
            metadata.insert(
                "reason".to_owned(),
                format!(
                    "{} requests in the window, fewer than minRequests {min_requests}",
                    window.requests
                ),
            );
            return Outcome::Value {
                result: MetricResult::Nil,
                metadata,
            };
        }
        Outcome::Value {
            result: statistic_of(&window, statistic)
                .map_or(MetricResult::Nil, |v| MetricResult::Vector(vec![v])),
            metadata,
        }
    }
}

/// The version a Rollout's pod template runs, as the agent's workload template receives it: the
/// first container image's tag (`registry/app:1.9.0` → `1.9.0`), its digest when pinned by one,
/// or `latest` without either.
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
