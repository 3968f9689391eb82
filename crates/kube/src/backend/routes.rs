//! The Kubernetes backend's traffic routes: the Gateway API routes a Rollout names
//! (`trafficRouting.plugins["argoproj-labs/gatewayAPI"]`, edited by [`gateway`]) and its Istio
//! VirtualServices and DestinationRule (`trafficRouting.istio`, edited by [`istio`]), given the
//! engine's weights, header and mirror routes and the revisions' hashes: each object read,
//! edited, written back with the `resourceVersion` read (on a conflict read again and only
//! Flotilla's change made again), and read back for the engine's weight verification. A writer
//! that keeps reverting Flotilla's change is named in a `TrafficRoutingConflict` after
//! [`REVERTS`] reverts, and Flotilla stops writing the object for [`CONFLICT_BACKOFF`] instead
//! of fighting it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flotilla_core::backend::{BackendError, ClusterDesired, ClusterNotice};
use flotilla_core::rollout::Weights;
use flotilla_core::spec::rollout::{
    GATEWAY_API_PLUGIN, GatewayApiRouting, GatewayRoute, IstioDestinationRule, IstioTrafficRouting,
    IstioVirtualService, gateway_api_field,
};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::Value;

use super::gateway::{self, Backends, RouteError, RouteWanted};
use super::istio::{self, Selected, Targets, VirtualServiceWanted};
use super::objects::FIELD_MANAGER;
use super::{KubeBackend, post_params};

/// How many times the change Flotilla wrote may be reverted by another writer (the object
/// changed since Flotilla's write, and Flotilla must write the same again) before the cluster is
/// held with a `TrafficRoutingConflict`.
pub const REVERTS: u32 = 3;

/// How long Flotilla leaves an object alone after naming a conflict on it, before trying once
/// more.
pub const CONFLICT_BACKOFF: Duration = Duration::from_secs(30);

/// How many times one write is tried again on a fresh read when the object changed meanwhile.
const ATTEMPTS: usize = 5;

/// The API group of Istio's networking objects, served as `v1` since Istio 1.22.
const ISTIO_GROUP: &str = "networking.istio.io";

/// A kind of routing object (all served as `v1`).
#[derive(Clone, Copy)]
struct Kind {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    /// The `spec` fields Flotilla writes there.
    fields: &'static [&'static str],
}

const VIRTUAL_SERVICE: Kind = Kind {
    group: ISTIO_GROUP,
    kind: "VirtualService",
    plural: "virtualservices",
    fields: &["http", "tls", "tcp"],
};

const DESTINATION_RULE: Kind = Kind {
    group: ISTIO_GROUP,
    kind: "DestinationRule",
    plural: "destinationrules",
    fields: &["subsets"],
};

/// What the backend remembers of one routing object.
#[derive(Debug, Default)]
pub(super) struct RouteMemory {
    /// What Flotilla last wrote there (its change, as text) and the `resourceVersion` its write
    /// returned.
    wrote: Option<(String, String)>,
    /// How many times since then another writer changed the object back.
    reverts: u32,
    /// Since when Flotilla has left the object alone for a conflict it named.
    conflict_since: Option<Instant>,
}

/// One object Flotilla edits for the Rollout's traffic.
struct Target {
    api: Api<DynamicObject>,
    name: String,
    /// As messages and the memory name it (`HTTPRoute default/web`).
    key: String,
    /// Its resource, as errors name it (`httproutes.gateway.networking.k8s.io`).
    resource: String,
    /// The Rollout's field that names it.
    field: String,
    /// The `spec` fields Flotilla writes there (another manager of these reverts Flotilla).
    fields: &'static [&'static str],
    /// What a GitOps tool must leave alone, for the conflict's message.
    ignore: String,
}

/// The object as read before Flotilla's write, and whether Flotilla wrote.
struct Written {
    before: Value,
    changed: bool,
}

/// Whether `read` already holds `edited` where Flotilla writes (its spec and labels).
fn holds(read: &Value, edited: &Value) -> bool {
    read["spec"] == edited["spec"] && read["metadata"]["labels"] == edited["metadata"]["labels"]
}

/// The field manager other than Flotilla that last wrote one of `fields` of the object's spec
/// (from its `managedFields`), or `"an unknown writer"`.
fn spec_writer(object: &Value, fields: &[&str]) -> String {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["manager"] != FIELD_MANAGER)
        .filter(|entry| {
            fields
                .iter()
                .any(|f| !entry["fieldsV1"]["f:spec"][format!("f:{f}")].is_null())
        })
        .max_by(|a, b| {
            a["time"]
                .as_str()
                .unwrap_or_default()
                .cmp(b["time"].as_str().unwrap_or_default())
        })
        .and_then(|entry| entry["manager"].as_str())
        .map_or_else(|| "an unknown writer".to_owned(), str::to_owned)
}

fn service(canary: &Value, key: &str) -> Option<String> {
    canary[key]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
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
    let needed = |key: &str| {
        service(canary, key).ok_or_else(|| BackendError::Invalid {
            field: format!("spec.strategy.canary.{key}"),
            message: "Gateway API routing needs canaryService and stableService".to_owned(),
        })
    };
    Ok(Some((
        routing,
        needed("canaryService")?,
        needed("stableService")?,
    )))
}

/// The Istio configuration of `rollout` (None: it routes no traffic through Istio).
struct IstioOf {
    routing: IstioTrafficRouting,
    canary_service: String,
    stable_service: String,
    /// `managedRoutes`, in the Rollout's order (header and mirror routes go first in it).
    managed: Vec<String>,
}

const ISTIO_FIELD: &str = "spec.strategy.canary.trafficRouting.istio";

fn istio_of(rollout: &Value) -> Result<Option<IstioOf>, BackendError> {
    let canary = &rollout["spec"]["strategy"]["canary"];
    let Some(config) = canary["trafficRouting"].get("istio") else {
        return Ok(None);
    };
    let routing: IstioTrafficRouting =
        serde_json::from_value(config.clone()).map_err(|e| BackendError::Invalid {
            field: ISTIO_FIELD.to_owned(),
            message: e.to_string(),
        })?;
    let canary_service = service(canary, "canaryService").unwrap_or_default();
    let stable_service = service(canary, "stableService").unwrap_or_default();
    if routing.destination_rule.is_none()
        && (canary_service.is_empty() || stable_service.is_empty())
    {
        let missing = if canary_service.is_empty() {
            "canaryService"
        } else {
            "stableService"
        };
        return Err(BackendError::Invalid {
            field: format!("spec.strategy.canary.{missing}"),
            message: "Istio host-based routing needs canaryService and stableService (or a destinationRule for subset-based routing)".to_owned(),
        });
    }
    if routing.virtual_service.is_none() && routing.virtual_services.is_empty() {
        return Err(BackendError::Invalid {
            field: format!("{ISTIO_FIELD}.virtualService"),
            message: "Istio routing names no VirtualService".to_owned(),
        });
    }
    let managed = canary["trafficRouting"]["managedRoutes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    Ok(Some(IstioOf {
        routing,
        canary_service,
        stable_service,
        managed,
    }))
}

impl IstioOf {
    /// Each VirtualService with the Rollout's field naming it.
    fn virtual_services(&self) -> impl Iterator<Item = (String, &IstioVirtualService)> {
        self.routing
            .virtual_service
            .iter()
            .map(|vs| (format!("{ISTIO_FIELD}.virtualService"), vs))
            .chain(
                self.routing
                    .virtual_services
                    .iter()
                    .enumerate()
                    .map(|(i, vs)| (format!("{ISTIO_FIELD}.virtualServices[{i}]"), vs)),
            )
    }

    fn targets(&self) -> Targets<'_> {
        let rule = self.routing.destination_rule.as_ref();
        Targets {
            canary_service: &self.canary_service,
            stable_service: &self.stable_service,
            subsets: rule.map(|r| (r.canary_subset_name.as_str(), r.stable_subset_name.as_str())),
            additional: rule.map_or(&[], |r| r.additional_subset_names.as_slice()),
        }
    }
}

/// A VirtualService's name and namespace from `name` or `name.namespace` as Argo reads it:
/// `.cluster.local` dropped, the namespace after the last dot.
fn virtual_service_ref(name: &str) -> (&str, Option<&str>) {
    match name.trim_end_matches(".cluster.local").rsplit_once('.') {
        Some((name, namespace)) => (name, Some(namespace)),
        None => (name, None),
    }
}

fn selected(vs: &IstioVirtualService) -> Selected<'_> {
    Selected {
        http: &vs.routes,
        tls: &vs.tls_routes,
        tcp: &vs.tcp_routes,
    }
}

fn weight_notice(
    before: Option<Weights>,
    after: Option<Weights>,
    key: &str,
) -> Option<ClusterNotice> {
    let (before, after) = (before?, after?);
    (before.canary != after.canary).then(|| ClusterNotice {
        warning: false,
        reason: "TrafficWeightUpdated".to_owned(),
        message: format!(
            "Traffic weight updated from {} to {} ({key})",
            before.canary, after.canary
        ),
    })
}

impl KubeBackend {
    /// The object `name` (in `namespace`, default the Rollout's) of `kind`; `field` is the
    /// Rollout's field naming it, `ignore` what a GitOps tool must leave alone there.
    fn target(
        &self,
        client: &kube::Client,
        kind: Kind,
        (name, namespace): (&str, Option<&str>),
        field: String,
        ignore: String,
    ) -> Target {
        let namespace = namespace.unwrap_or(self.namespace());
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(kind.group, "v1", kind.kind));
        Target {
            api: Api::namespaced_with(client.clone(), namespace, &resource),
            name: name.to_owned(),
            key: format!("{} {namespace}/{name}", kind.kind),
            resource: format!("{}.{}", kind.plural, kind.group),
            field,
            fields: kind.fields,
            ignore,
        }
    }

    fn gateway_target(
        &self,
        client: &kube::Client,
        routing: &GatewayApiRouting,
        route: &GatewayRoute,
    ) -> Target {
        self.target(
            client,
            Kind {
                group: "gateway.networking.k8s.io",
                kind: route.kind.kind(),
                plural: route.kind.plural(),
                fields: &["rules"],
            },
            (&route.name, routing.namespace.as_deref()),
            gateway_api_field(&route.path),
            format!(
                "/spec/rules/*/backendRefs/*/weight and the route's {} label",
                routing
                    .in_progress_label
                    .as_ref()
                    .map_or("in-progress", |(k, _)| k.as_str())
            ),
        )
    }

    /// A VirtualService named `name` or `name.namespace`.
    fn virtual_service_target(&self, client: &kube::Client, field: String, name: &str) -> Target {
        self.target(
            client,
            VIRTUAL_SERVICE,
            virtual_service_ref(name),
            field,
            "the routes' weights (jqPathExpressions .spec.http[].route[].weight, and of tls and tcp routes)".to_owned(),
        )
    }

    fn missing(&self, target: &Target) -> BackendError {
        BackendError::Invalid {
            field: target.field.clone(),
            message: format!(
                "cluster {:?}: {} not found: the canary is held at the weight it has until it exists",
                self.cluster, target.key
            ),
        }
    }

    /// Reads `target`, makes Flotilla's change (`wanted`, as text) with `edit` and writes it
    /// back unless the object holds it already; counts another writer's reverts and names it
    /// past [`REVERTS`].
    async fn write(
        &self,
        target: &Target,
        wanted: &str,
        edit: impl Fn(&Value) -> Result<Value, RouteError>,
    ) -> Result<Written, BackendError> {
        let invalid = |message: String| BackendError::Invalid {
            field: target.field.clone(),
            message: format!("cluster {:?}: {}: {message}", self.cluster, target.key),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let read = target
                .api
                .get_opt(&target.name)
                .await
                .map_err(|e| self.fail("get", &target.resource, e))?
                .ok_or_else(|| self.missing(target))?;
            let read = serde_json::to_value(read).unwrap_or_default();
            let edited = edit(&read).map_err(|e| invalid(e.0))?;
            let version = read["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            {
                let mut memory = self.memory.lock().expect("memory lock");
                let remembered = memory.routes.entry(target.key.clone()).or_default();
                let same = |w: &(String, String)| w.0 == wanted;
                if holds(&read, &edited) {
                    if remembered.wrote.as_ref().is_some_and(same) {
                        remembered.reverts = 0;
                        remembered.conflict_since = None;
                    }
                    return Ok(Written {
                        before: read,
                        changed: false,
                    });
                }
                if remembered.wrote.as_ref().is_some_and(|w| !same(w)) {
                    // A new change (a step, an abort): a new count.
                    remembered.reverts = 0;
                    remembered.conflict_since = None;
                }
                if attempt == 1
                    && remembered
                        .wrote
                        .as_ref()
                        .is_some_and(|w| same(w) && w.1 != version)
                {
                    remembered.reverts += 1;
                }
                if remembered.reverts >= REVERTS {
                    let since = *remembered.conflict_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < CONFLICT_BACKOFF {
                        return Err(BackendError::TrafficRoutingConflict {
                            route: target.key.clone(),
                            manager: spec_writer(&read, target.fields),
                            message: format!(
                                "cluster {:?}: what Flotilla wrote was changed back {} times; Flotilla leaves it alone for {} s (with Argo CD, ignore differences on {})",
                                self.cluster,
                                remembered.reverts,
                                CONFLICT_BACKOFF.as_secs(),
                                target.ignore,
                            ),
                        });
                    }
                    // Once more after the backoff: a writer told to let go has let go.
                    remembered.conflict_since = None;
                }
            }
            let object: DynamicObject =
                serde_json::from_value(edited).map_err(|e| invalid(e.to_string()))?;
            match target
                .api
                .replace(&target.name, &post_params(), &object)
                .await
            {
                Ok(written) => {
                    let version = written.metadata.resource_version.unwrap_or_default();
                    self.memory
                        .lock()
                        .expect("memory lock")
                        .routes
                        .entry(target.key.clone())
                        .or_default()
                        .wrote = Some((wanted.to_owned(), version));
                    return Ok(Written {
                        before: read,
                        changed: true,
                    });
                }
                Err(kube::Error::Api(status)) if status.code == 409 && attempt < ATTEMPTS => {
                    tracing::debug!(cluster = %self.cluster, object = %target.key, "changed since it was read; reading it again");
                }
                Err(error) => return Err(self.fail("update", &target.resource, error)),
            }
        }
    }

    /// Gives each routing object of the Rollout the engine's weights, header and mirror routes
    /// and label, and the DestinationRule's subsets `hashes` (canary, stable); returns the
    /// notices of what changed (Argo's `TrafficWeightUpdated`).
    pub(super) async fn route_traffic(
        &self,
        client: &kube::Client,
        rollout: &Value,
        desired: &ClusterDesired,
        hashes: Option<(String, String)>,
    ) -> Result<Vec<ClusterNotice>, BackendError> {
        let mut notices = Vec::new();
        if let Some((routing, canary, stable)) = gateway_of(rollout)? {
            let backends = Backends {
                canary: &canary,
                stable: &stable,
            };
            for route in &routing.routes {
                let wanted = RouteWanted {
                    weights: desired.weights,
                    header_routes: if route.use_header_routes {
                        desired.header_routes.clone()
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
                let target = self.gateway_target(client, &routing, route);
                let written = self
                    .write(&target, &format!("{wanted:?}"), |read| {
                        gateway::edited(read, backends, &wanted)
                    })
                    .await?;
                if written.changed {
                    let before = gateway::weights_of(&written.before, backends, &wanted.managed)
                        .ok()
                        .and_then(|w| w.first().copied());
                    notices.extend(weight_notice(before, wanted.weights, &target.key));
                }
            }
        }
        if let Some(mesh) = istio_of(rollout)? {
            notices.extend(self.route_istio(client, &mesh, desired, hashes).await?);
        }
        Ok(notices)
    }

    /// The Rollout's Istio objects: the DestinationRule's subsets first when the canary gains
    /// weight (a subset selects its revision before traffic is sent to it), the
    /// VirtualServices first when it has none or is aborted (its weight leaves before the
    /// subset moves, and a DestinationRule that cannot be written never holds weight 0 back).
    async fn route_istio(
        &self,
        client: &kube::Client,
        mesh: &IstioOf,
        desired: &ClusterDesired,
        hashes: Option<(String, String)>,
    ) -> Result<Vec<ClusterNotice>, BackendError> {
        let weights_first = desired.progress.abort || desired.weights.is_none_or(|w| w.canary == 0);
        let mut notices = Vec::new();
        if weights_first {
            notices.extend(self.route_virtual_services(client, mesh, desired).await?);
        }
        if let (Some(rule), Some(hashes)) = (&mesh.routing.destination_rule, hashes) {
            notices.extend(self.point_subsets(client, rule, hashes).await?);
        }
        if !weights_first {
            notices.extend(self.route_virtual_services(client, mesh, desired).await?);
        }
        Ok(notices)
    }

    /// The DestinationRule's canary and stable subsets select `hashes` (canary, stable), and
    /// the cluster's mesh id when it has one.
    async fn point_subsets(
        &self,
        client: &kube::Client,
        rule: &IstioDestinationRule,
        (canary_hash, stable_hash): (String, String),
    ) -> Result<Option<ClusterNotice>, BackendError> {
        let cluster = self
            .endpoint
            .istio
            .as_ref()
            .and_then(|i| i.cluster.as_deref());
        let target = self.target(
            client,
            DESTINATION_RULE,
            (&rule.name, None),
            format!("{ISTIO_FIELD}.destinationRule"),
            "the subsets' labels (jqPathExpressions .spec.subsets[].labels)".to_owned(),
        );
        let (canary, stable) = (
            rule.canary_subset_name.as_str(),
            rule.stable_subset_name.as_str(),
        );
        let written = self
            .write(
                &target,
                &format!("{canary_hash}/{stable_hash}/{cluster:?}"),
                |read| {
                    istio::edited_destination_rule(
                        read,
                        (canary, stable),
                        (&canary_hash, &stable_hash),
                        cluster,
                    )
                },
            )
            .await?;
        Ok(written.changed.then(|| ClusterNotice {
            warning: false,
            // Argo's reason and message.
            reason: "UpdatedDestinationRule".to_owned(),
            message: format!(
                "DestinationRule {} subset updated ({canary}: {canary_hash}, {stable}: {stable_hash})",
                rule.name
            ),
        }))
    }

    /// Each VirtualService of the Rollout with the engine's weights, header and mirror routes.
    async fn route_virtual_services(
        &self,
        client: &kube::Client,
        mesh: &IstioOf,
        desired: &ClusterDesired,
    ) -> Result<Vec<ClusterNotice>, BackendError> {
        let wanted = VirtualServiceWanted {
            weights: desired.weights,
            header_routes: desired.header_routes.clone(),
            mirror_routes: desired.mirror_routes.clone(),
            managed: mesh.managed.clone(),
        };
        let mut notices = Vec::new();
        if wanted.weights.is_none()
            && wanted.header_routes.is_empty()
            && wanted.mirror_routes.is_empty()
            && desired.managed_routes.is_empty()
        {
            // Nothing asked of the routes yet (a first deployment): their weights stand.
            return Ok(notices);
        }
        let targets = mesh.targets();
        for (field, vs) in mesh.virtual_services() {
            let target = self.virtual_service_target(client, field, &vs.name);
            let written = self
                .write(&target, &format!("{wanted:?}"), |read| {
                    istio::edited(read, targets, selected(vs), &wanted)
                })
                .await?;
            if written.changed {
                let before =
                    istio::weights_of(&written.before, targets, selected(vs), &wanted.managed)
                        .ok()
                        .and_then(|w| w.first().copied());
                notices.extend(weight_notice(before, wanted.weights, &target.key));
            }
        }
        Ok(notices)
    }

    /// Reads `target` (None: not found).
    async fn read_target(&self, target: &Target) -> Result<Option<Value>, BackendError> {
        let read = target
            .api
            .get_opt(&target.name)
            .await
            .map_err(|e| self.fail("get", &target.resource, e))?;
        if read.is_none() {
            tracing::debug!(cluster = %self.cluster, object = %target.key, "not found; no weight verified");
        }
        Ok(read.map(|r| serde_json::to_value(r).unwrap_or_default()))
    }

    /// The weights in effect on the Rollout's routes (None: it has none, or one is missing, so
    /// no weight can be verified): those of every weighted rule or route when all agree, else
    /// the first that differs from the engine's.
    pub(super) async fn routed_weights(
        &self,
        client: &kube::Client,
        rollout: &Value,
        desired: &ClusterDesired,
    ) -> Result<Option<Weights>, BackendError> {
        let mut all = Vec::new();
        let mut routed = false;
        if let Some((routing, canary, stable)) = gateway_of(rollout)? {
            routed = true;
            let backends = Backends {
                canary: &canary,
                stable: &stable,
            };
            for route in &routing.routes {
                let target = self.gateway_target(client, &routing, route);
                let Some(read) = self.read_target(&target).await? else {
                    return Ok(None);
                };
                match gateway::weights_of(&read, backends, &desired.managed_routes) {
                    Ok(weights) => all.extend(weights),
                    Err(_) => return Ok(None),
                }
            }
        }
        if let Some(mesh) = istio_of(rollout)? {
            routed = true;
            for (field, vs) in mesh.virtual_services() {
                let target = self.virtual_service_target(client, field, &vs.name);
                let Some(read) = self.read_target(&target).await? else {
                    return Ok(None);
                };
                match istio::weights_of(&read, mesh.targets(), selected(vs), &mesh.managed) {
                    Ok(weights) => all.extend(weights),
                    Err(_) => return Ok(None),
                }
            }
        }
        if !routed {
            return Ok(None);
        }
        let wanted = desired.weights;
        Ok(all
            .iter()
            .find(|w| wanted.is_some_and(|d| d != **w))
            .or(all.first())
            .copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_writer_of_the_spec_fields_is_named() {
        let mut r = json!({"metadata": {}, "spec": {}});
        assert_eq!(spec_writer(&r, &["rules"]), "an unknown writer");
        r["metadata"]["managedFields"] = json!([
            {"manager": "argocd-controller", "time": "2026-12-05T10:00:00Z", "fieldsV1": {"f:spec": {"f:rules": {}}}},
            {"manager": "flotilla", "time": "2026-12-05T10:00:05Z", "fieldsV1": {"f:spec": {"f:rules": {}}}},
            {"manager": "kubectl-edit", "time": "2026-12-05T10:00:03Z", "fieldsV1": {"f:metadata": {}}},
            {"manager": "istio-admin", "time": "2026-12-05T10:00:04Z", "fieldsV1": {"f:spec": {"f:http": {}}}},
        ]);
        assert_eq!(spec_writer(&r, &["rules"]), "argocd-controller");
        assert_eq!(spec_writer(&r, &["http", "tcp"]), "istio-admin");
    }

    #[test]
    fn a_virtual_service_is_named_as_argo_reads_it() {
        assert_eq!(virtual_service_ref("payments"), ("payments", None));
        assert_eq!(
            virtual_service_ref("payments.shop"),
            ("payments", Some("shop"))
        );
        assert_eq!(virtual_service_ref("my.vs.shop"), ("my.vs", Some("shop")));
        assert_eq!(
            virtual_service_ref("payments.shop.svc.cluster.local"),
            ("payments.shop", Some("svc"))
        );
    }

    #[test]
    fn held_means_the_same_spec_and_labels() {
        let read = json!({"metadata": {"labels": {"a": "1"}, "resourceVersion": "7"}, "spec": {"rules": [1]}});
        let mut edited = read.clone();
        edited["metadata"]["resourceVersion"] = json!("8");
        assert!(holds(&read, &edited));
        edited["metadata"]["labels"]["b"] = json!("2");
        assert!(!holds(&read, &edited));
    }
}
