//! The Kubernetes backend's traffic routes: the Gateway API routes a Rollout names
//! (`trafficRouting.plugins["argoproj-labs/gatewayAPI"]`) given the engine's weights and header
//! routes (read, edited by [`gateway`], written back with the `resourceVersion` read; on a
//! conflict read again and only Flotilla's change made again), and read back for the engine's
//! weight verification. A writer that keeps reverting the weights is named in a
//! `TrafficRoutingConflict` after [`REVERTS`] reverts, and Flotilla stops writing the route for
//! [`CONFLICT_BACKOFF`] instead of fighting it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flotilla_core::backend::{BackendError, ClusterDesired, ClusterNotice};
use flotilla_core::rollout::Weights;
use flotilla_core::spec::rollout::{
    GATEWAY_API_PLUGIN, GatewayApiRouting, GatewayRoute, gateway_api_field,
};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::Value;

use super::gateway::{self, Backends, RouteWanted};
use super::{KubeBackend, post_params};

/// How many times the weights Flotilla wrote may be reverted by another writer (the route
/// changed since Flotilla's write, and Flotilla must write the same again) before the cluster is
/// held with a `TrafficRoutingConflict`.
pub const REVERTS: u32 = 3;

/// How long Flotilla leaves a route alone after naming a conflict on it, before trying once more.
pub const CONFLICT_BACKOFF: Duration = Duration::from_secs(30);

/// How many times one write is tried again on a fresh read when the route changed meanwhile.
const ATTEMPTS: usize = 5;

/// What the backend remembers of one route.
#[derive(Debug, Default)]
pub(super) struct RouteMemory {
    /// What Flotilla last wrote there and the `resourceVersion` its write returned.
    wrote: Option<(RouteWanted, String)>,
    /// How many times since then another writer changed the route back.
    reverts: u32,
    /// Since when Flotilla has left the route alone for a conflict it named.
    conflict_since: Option<Instant>,
}

/// The route's kind as the API serves it.
fn resource(route: &GatewayRoute) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        route.kind.kind(),
    ))
}

/// The route's resource, as errors name it (`httproutes.gateway.networking.k8s.io`).
fn resource_name(route: &GatewayRoute) -> String {
    format!("{}.gateway.networking.k8s.io", route.kind.plural())
}

/// The Gateway API configuration of `rollout` (None: it routes no traffic through Gateway API)
/// and the Services its rules send to.
fn gateway_of(
    rollout: &Value,
) -> Result<Option<(GatewayApiRouting, String, String)>, BackendError> {
    let canary = &rollout["spec"]["strategy"]["canary"];
    let Some(config) = canary["trafficRouting"]["plugins"].get(GATEWAY_API_PLUGIN) else {
        return Ok(None);
    };
    let routing = GatewayApiRouting::parse(config).map_err(|e| BackendError::Invalid {
        field: gateway_api_field(&e.path),
        message: e.message,
    })?;
    let service = |key: &str| {
        canary[key]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| BackendError::Invalid {
                field: format!("spec.strategy.canary.{key}"),
                message: "Gateway API routing needs canaryService and stableService".to_owned(),
            })
    };
    Ok(Some((
        routing,
        service("canaryService")?,
        service("stableService")?,
    )))
}

impl KubeBackend {
    fn route_api(
        &self,
        client: &kube::Client,
        routing: &GatewayApiRouting,
        route: &GatewayRoute,
    ) -> (Api<DynamicObject>, String) {
        let namespace = routing.namespace.as_deref().unwrap_or(self.namespace());
        (
            Api::namespaced_with(client.clone(), namespace, &resource(route)),
            format!("{} {namespace}/{}", route.kind.kind(), route.name),
        )
    }

    fn route_missing(&self, route: &GatewayRoute, key: &str) -> BackendError {
        BackendError::Invalid {
            field: gateway_api_field(&route.path),
            message: format!(
                "cluster {:?}: {key} not found: the canary is held at the weight it has until the route exists",
                self.cluster
            ),
        }
    }

    /// Gives each route of the Rollout the engine's weights, header routes and label; returns the
    /// notices of the weights changed (Argo's `TrafficWeightUpdated`).
    pub(super) async fn route_traffic(
        &self,
        client: &kube::Client,
        rollout: &Value,
        desired: &ClusterDesired,
    ) -> Result<Vec<ClusterNotice>, BackendError> {
        let Some((routing, canary, stable)) = gateway_of(rollout)? else {
            return Ok(Vec::new());
        };
        let backends = Backends {
            canary: &canary,
            stable: &stable,
        };
        let mut notices = Vec::new();
        for route in &routing.routes {
            let wanted = RouteWanted {
                weights: desired.weights,
                header_routes: if route.use_header_routes {
                    desired
                        .header_routes
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                } else {
                    BTreeMap::new()
                },
                managed: desired.managed_routes.clone(),
                label: routing.in_progress_label.clone(),
            };
            if wanted.weights.is_none()
                && wanted.header_routes.is_empty()
                && wanted.managed.is_empty()
            {
                // Nothing asked of the route yet (a first deployment): its weights stand.
                continue;
            }
            let (api, key) = self.route_api(client, &routing, route);
            let invalid = |message: String| BackendError::Invalid {
                field: gateway_api_field(&route.path),
                message: format!("cluster {:?}: {key}: {message}", self.cluster),
            };
            for attempt in 1..=ATTEMPTS {
                let read = api
                    .get_opt(&route.name)
                    .await
                    .map_err(|e| self.fail("get", &resource_name(route), e))?
                    .ok_or_else(|| self.route_missing(route, &key))?;
                let read = serde_json::to_value(read).unwrap_or_default();
                let edited = gateway::edited(&read, backends, &wanted).map_err(|e| invalid(e.0))?;
                let version = read["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                {
                    let mut memory = self.memory.lock().expect("memory lock");
                    let remembered = memory.routes.entry(key.clone()).or_default();
                    if gateway::holds(&read, &edited) {
                        if remembered.wrote.as_ref().is_some_and(|(w, _)| *w == wanted) {
                            remembered.reverts = 0;
                            remembered.conflict_since = None;
                        }
                        break;
                    }
                    if remembered.wrote.as_ref().is_some_and(|(w, _)| *w != wanted) {
                        // New weights (a step, an abort): a new count.
                        remembered.reverts = 0;
                        remembered.conflict_since = None;
                    }
                    if attempt == 1
                        && remembered
                            .wrote
                            .as_ref()
                            .is_some_and(|(w, v)| *w == wanted && *v != version)
                    {
                        remembered.reverts += 1;
                    }
                    if remembered.reverts >= REVERTS {
                        let since = *remembered.conflict_since.get_or_insert_with(Instant::now);
                        if since.elapsed() < CONFLICT_BACKOFF {
                            return Err(BackendError::TrafficRoutingConflict {
                                route: key.clone(),
                                manager: gateway::rules_writer(&read),
                                message: format!(
                                    "cluster {:?}: the weights Flotilla wrote were changed back {} times; Flotilla leaves the route alone for {} s (with Argo CD, ignore differences on /spec/rules/*/backendRefs/*/weight and the route's {} label)",
                                    self.cluster,
                                    remembered.reverts,
                                    CONFLICT_BACKOFF.as_secs(),
                                    routing
                                        .in_progress_label
                                        .as_ref()
                                        .map_or("in-progress", |(k, _)| k.as_str()),
                                ),
                            });
                        }
                        // Once more after the backoff: a writer told to let go has let go.
                        remembered.conflict_since = None;
                    }
                }
                let object: DynamicObject =
                    serde_json::from_value(edited).map_err(|e| invalid(e.to_string()))?;
                match api.replace(&route.name, &post_params(), &object).await {
                    Ok(written) => {
                        let written_version = written
                            .metadata
                            .resource_version
                            .clone()
                            .unwrap_or_default();
                        self.memory
                            .lock()
                            .expect("memory lock")
                            .routes
                            .entry(key.clone())
                            .or_default()
                            .wrote = Some((wanted.clone(), written_version));
                        let before = gateway::weights_of(&read, backends, &wanted.managed)
                            .ok()
                            .and_then(|w| w.first().copied());
                        if let (Some(before), Some(after)) = (before, wanted.weights)
                            && before.canary != after.canary
                        {
                            notices.push(ClusterNotice {
                                warning: false,
                                reason: "TrafficWeightUpdated".to_owned(),
                                message: format!(
                                    "Traffic weight updated from {} to {} ({key})",
                                    before.canary, after.canary
                                ),
                            });
                        }
                        break;
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 && attempt < ATTEMPTS => {
                        tracing::debug!(cluster = %self.cluster, route = %key, "the route changed since it was read; reading it again");
                    }
                    Err(error) => {
                        return Err(self.fail("update", &resource_name(route), error));
                    }
                }
            }
        }
        Ok(notices)
    }

    /// The weights in effect on the Rollout's routes (None: it has none, or one is missing, so
    /// no weight can be verified): those of every rule naming both Services when all agree,
    /// else the first that differs from the engine's.
    pub(super) async fn routed_weights(
        &self,
        client: &kube::Client,
        rollout: &Value,
        desired: &ClusterDesired,
    ) -> Result<Option<Weights>, BackendError> {
        let Some((routing, canary, stable)) = gateway_of(rollout)? else {
            return Ok(None);
        };
        let backends = Backends {
            canary: &canary,
            stable: &stable,
        };
        let mut all = Vec::new();
        for route in &routing.routes {
            let (api, key) = self.route_api(client, &routing, route);
            let Some(read) = api
                .get_opt(&route.name)
                .await
                .map_err(|e| self.fail("get", &resource_name(route), e))?
            else {
                tracing::debug!(cluster = %self.cluster, route = %key, "route not found; no weight verified");
                return Ok(None);
            };
            let read = serde_json::to_value(read).unwrap_or_default();
            match gateway::weights_of(&read, backends, &desired.managed_routes) {
                Ok(weights) => all.extend(weights),
                Err(_) => return Ok(None),
            }
        }
        let wanted = desired.weights;
        Ok(all
            .iter()
            .find(|w| wanted.is_some_and(|d| d != **w))
            .or(all.first())
            .copied())
    }
}
