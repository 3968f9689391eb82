//! The agent as a cluster backend: [`AgentBackend`] converges an agent to a
//! [`ClusterDesired`] over its control API, reads what it runs back as a [`ClusterObserved`],
//! and measures `builtin` metrics from its traffic statistics.
//!
//! The rollout engine thinks in revisions; the agent in two subsets, `stable` and `canary`, each
//! running one version (the image's tag). The mapping:
//!
//! - the revision serving stable traffic (the stable one, or blue-green's active one) runs in
//!   the `stable` subset: switching it to a new version surges (the old replicas serve until as
//!   many new ones are ready, so no request is dropped);
//! - the canary revision (the current one when it is not the serving one) runs in the `canary`
//!   subset; any other revision (an old stable kept for its scale-down delay) runs nowhere any
//!   more, the surge having replaced it;
//! - a write order that drops nothing: the stable subset, then a growing canary, then the
//!   weights and routes, and only then a shrinking or emptied canary (emptied once the weights
//!   send it nothing: what is left of a promoted or aborted canary);
//! - routes: each managed route in effect is set; a managed route not in effect is removed;
//!   routes by other names (the agent's own configuration) are never touched.
//!
//! Every write is idempotent and made only where the agent differs, so a restarted controller
//! may ensure the same state again. Revision identity is the version the subset runs.

use std::collections::BTreeMap;

use flotilla_core::analysis::{MeasureRequest, Measurer, Outcome};
use flotilla_core::backend::{
    BackendError, BoxFuture, Capabilities, ClusterBackend, ClusterCommand, ClusterDesired,
    ClusterObserved, ObservedRevision, capabilities::TrafficProviders, image_version,
};
use flotilla_core::rollout::{ReplicaCounts, RevisionNumber, Weights};
use flotilla_core::spec::rollout::{HeaderRoutingMatch, RouteMatch, StringMatch};

use crate::builtin::BuiltinProvider;
use crate::client::{AgentClient, ClientError};
use crate::wire::{AgentStatus, CANARY, HeaderMatch, MirrorSpec, RouteSpec, STABLE};

/// One agent as the controller drives it.
#[derive(Debug, Clone)]
pub struct AgentBackend {
    client: AgentClient,
    builtin: BuiltinProvider,
}

impl AgentBackend {
    /// What every agent can do: its router stands in for any traffic provider; a header route
    /// matches one header; a mirror route copies requests matching at most one header.
    pub fn capabilities() -> Capabilities {
        Capabilities {
            backend: "agent".to_owned(),
            traffic: TrafficProviders::Any,
            header_route_matches: 1,
            mirroring: true,
            mirror_headers: 1,
            mirror_method_path: false,
            mirror_alternatives: 1,
            mirror_providers: Vec::new(),
            templates: false,
        }
    }

    /// The agent whose control API `client` calls; `clock` is the caller's wall clock (the
    /// `builtin` provider's live windows end at its `now`).
    pub fn new(client: AgentClient, clock: crate::builtin::Clock) -> AgentBackend {
        AgentBackend {
            builtin: BuiltinProvider::new(client.clone(), clock),
            client,
        }
    }

    /// The control API client.
    pub fn client(&self) -> &AgentClient {
        &self.client
    }

    async fn converge(&self, desired: &ClusterDesired) -> Result<(), BackendError> {
        let status = self.client.status().await.map_err(typed)?;
        let subset = |name: &str| status.subsets.iter().find(|s| s.subset == name);
        // 1. The stable subset runs the serving revision.
        if let Some(serving) = desired.serving {
            let version = version_of(desired, serving)?;
            let stable = subset(STABLE);
            let replicas = match desired.replicas(serving) {
                Some(n) => n.max(0) as u32,
                // Not asked: keep what serves (a promoted canary's size at the switch).
                None => stable
                    .map_or(0, |s| s.desired_replicas)
                    .max(subset(CANARY).map_or(0, |c| c.desired_replicas)),
            };
            if stable.is_none_or(|s| s.version != version || s.desired_replicas != replicas) {
                self.client
                    .scale(STABLE, &version, replicas)
                    .await
                    .map_err(typed)?;
            }
        }
        // 2. A growing canary, before any traffic is sent to it.
        let canary = desired.canary();
        let canary_target = match canary {
            Some(revision) => Some((
                version_of(desired, revision)?,
                desired.replicas(revision).unwrap_or(0).max(0) as u32,
            )),
            None => None,
        };
        let running = subset(CANARY);
        if let Some((version, replicas)) = &canary_target
            && *replicas > 0
            && running.is_none_or(|c| &c.version != version || c.desired_replicas < *replicas)
        {
            self.client
                .scale(CANARY, version, *replicas)
                .await
                .map_err(typed)?;
        }
        // 3. Weights and routes.
        let mut canary_weight = status.weights.canary;
        if let Some(weights) = desired.weights {
            let want = weights.canary.max(0) as u32;
            if want != status.weights.canary {
                canary_weight = self.client.set_weights(want).await.map_err(typed)?.canary;
            }
        }
        self.routes(desired, &status).await?;
        // 4. A shrinking or emptied canary, once traffic allows.
        if let Some(running) = running
            && running.desired_replicas > 0
        {
            match &canary_target {
                // The canary keeps its version and shrinks: to nothing only once it gets no
                // traffic.
                Some((version, replicas))
                    if &running.version == version
                        && *replicas < running.desired_replicas
                        && (*replicas > 0 || canary_weight == 0) =>
                {
                    self.client
                        .scale(CANARY, version, *replicas)
                        .await
                        .map_err(typed)?;
                }
                Some((version, _)) if &running.version == version => {}
                // The canary subset runs a version no revision wants there (or nothing is a
                // canary any more): emptied once it gets no traffic.
                _ if canary_target.as_ref().is_none_or(|(_, n)| *n == 0) && canary_weight == 0 => {
                    self.client
                        .scale(CANARY, &running.version, 0)
                        .await
                        .map_err(typed)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    async fn routes(
        &self,
        desired: &ClusterDesired,
        status: &AgentStatus,
    ) -> Result<(), BackendError> {
        for (name, matches) in &desired.header_routes {
            let route = header_route(name, matches)?;
            let same = status
                .routes
                .iter()
                .any(|r| serde_json::to_value(r).ok() == serde_json::to_value(&route).ok());
            if !same {
                self.client.set_route(&route).await.map_err(typed)?;
            }
        }
        for name in &desired.managed_routes {
            if !desired.header_routes.contains_key(name)
                && status.routes.iter().any(|r| &r.name == name)
            {
                match self.client.remove_route(name).await {
                    Ok(_) | Err(ClientError::Api { status: 404, .. }) => {}
                    Err(e) => return Err(typed(e)),
                }
            }
        }
        for (name, route) in &desired.mirror_routes {
            let mirror = mirror_route(name, &route.matches, route.percentage)?;
            let same = status
                .mirrors
                .iter()
                .any(|m| serde_json::to_value(m).ok() == serde_json::to_value(&mirror).ok());
            if !same {
                self.client.set_mirror(&mirror).await.map_err(typed)?;
            }
        }
        for name in &desired.managed_routes {
            if !desired.mirror_routes.contains_key(name)
                && status.mirrors.iter().any(|m| &m.name == name)
            {
                match self.client.remove_mirror(name).await {
                    Ok(_) | Err(ClientError::Api { status: 404, .. }) => {}
                    Err(e) => return Err(typed(e)),
                }
            }
        }
        Ok(())
    }

    async fn read(&self, desired: &ClusterDesired) -> Result<ClusterObserved, BackendError> {
        let status = self.client.status().await.map_err(typed)?;
        let serving = status
            .subsets
            .iter()
            .find(|s| s.subset == STABLE && s.desired_replicas > 0)
            .map(|s| s.version.clone());
        let mut revisions = BTreeMap::new();
        for (number, revision) in &desired.revisions {
            if revision.image.is_empty() {
                continue;
            }
            let version = image_version(&revision.image);
            let mut counts = ReplicaCounts::default();
            for subset in status.subsets.iter().filter(|s| s.version == version) {
                if subset.subset != STABLE && subset.subset != CANARY {
                    continue;
                }
                counts.replicas += subset.desired_replicas as i32;
                counts.ready += subset.available_replicas as i32;
                counts.available += subset.available_replicas as i32;
            }
            revisions.insert(
                *number,
                ObservedRevision {
                    identity: version,
                    counts,
                    requested: None,
                },
            );
        }
        Ok(ClusterObserved {
            revisions,
            weights: Some(Weights {
                canary: status.weights.canary as i32,
                stable: status.weights.stable as i32,
            }),
            serving,
            rollout: None,
            spec_replicas: None,
            secrets: Default::default(),
        })
    }
}

impl ClusterBackend for AgentBackend {
    fn capabilities(&self) -> Capabilities {
        AgentBackend::capabilities()
    }

    fn ensure<'a>(
        &'a self,
        desired: &'a ClusterDesired,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.converge(desired))
    }

    fn observe<'a>(
        &'a self,
        desired: &'a ClusterDesired,
    ) -> BoxFuture<'a, Result<ClusterObserved, BackendError>> {
        Box::pin(self.read(desired))
    }

    /// An agent has no operator of its own: no command is ever issued in it.
    fn commands(&self) -> BoxFuture<'_, Result<Vec<ClusterCommand>, BackendError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn measure_builtin<'a>(&'a self, request: &'a MeasureRequest) -> BoxFuture<'a, Outcome> {
        Box::pin(self.builtin.measure(request))
    }
}

/// The version a revision runs (its image's tag), or Invalid when its image is unknown.
fn version_of(desired: &ClusterDesired, revision: RevisionNumber) -> Result<String, BackendError> {
    match desired.revisions.get(&revision) {
        Some(r) if !r.image.is_empty() => Ok(image_version(&r.image)),
        _ => Err(BackendError::Invalid {
            field: format!("revisions[{revision}].image"),
            message: format!("revision {revision} has no known image"),
        }),
    }
}

/// A control API failure, typed: no answer is Unreachable; the agent's 401/403 Forbidden (its
/// bearer token); 409 Conflict; 400/422 Invalid; any other answer Unreachable (retried).
fn typed(error: ClientError) -> BackendError {
    match error {
        ClientError::Api {
            status: 401 | 403,
            method,
            url,
            message,
        } => BackendError::Forbidden {
            verb: method,
            resource: url,
            message,
        },
        ClientError::Api {
            status: 409,
            message,
            ..
        } => BackendError::Conflict { message },
        ClientError::Api {
            status: 400 | 422,
            url,
            message,
            ..
        } => BackendError::Invalid {
            field: url,
            message,
        },
        other => BackendError::Unreachable {
            message: other.to_string(),
        },
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

fn header_route(name: &str, matches: &[HeaderRoutingMatch]) -> Result<RouteSpec, BackendError> {
    let [only] = matches else {
        return Err(BackendError::Invalid {
            field: format!("headerRoutes.{name}"),
            message: format!(
                "{} header conditions; the agent's router matches exactly one header per route",
                matches.len()
            ),
        });
    };
    Ok(RouteSpec {
        name: name.to_owned(),
        subset: CANARY.to_owned(),
        header: Some(header_match(&only.header_name, &only.header_value)),
        cookie: None,
    })
}

fn mirror_route(
    name: &str,
    matches: &[RouteMatch],
    percentage: i32,
) -> Result<MirrorSpec, BackendError> {
    let header = match matches {
        [] => None,
        [only] if only.method.is_none() && only.path.is_none() && only.headers.len() <= 1 => {
            only.headers.iter().next().map(|(h, v)| header_match(h, v))
        }
        _ => {
            return Err(BackendError::Invalid {
                field: format!("mirrorRoutes.{name}"),
                message:
                    "the agent's router mirrors on at most one header (no method or path match)"
                        .to_owned(),
            });
        }
    };
    Ok(MirrorSpec {
        name: name.to_owned(),
        subset: CANARY.to_owned(),
        percentage: percentage.clamp(0, 100) as u32,
        header,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_typed() {
        let api = |status| ClientError::Api {
            method: "PUT".into(),
            url: "http://127.0.0.1:1/v1/weights".into(),
            status,
            message: "no".into(),
        };
        assert!(matches!(typed(api(403)), BackendError::Forbidden { verb, .. } if verb == "PUT"));
        assert!(matches!(typed(api(409)), BackendError::Conflict { .. }));
        assert!(matches!(typed(api(400)), BackendError::Invalid { .. }));
        assert!(typed(api(503)).is_transient());
    }
}
