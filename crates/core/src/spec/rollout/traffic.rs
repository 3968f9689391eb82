//! Traffic routing: the routers a canary shifts weight through (Istio, NGINX, ALB, SMI,
//! Ambassador, App Mesh, Traefik, Apisix, plugins) and the routes Flotilla manages on them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Traffic routing for a canary (upstream `RolloutTrafficRouting`): one or more provider blocks,
/// plus routes and the total weight.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrafficRouting {
    /// Istio VirtualService/DestinationRule routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioTrafficRouting>,
    /// NGINX Ingress controller routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nginx: Option<NginxTrafficRouting>,
    /// AWS Load Balancer Controller routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alb: Option<AlbTrafficRouting>,
    /// SMI TrafficSplit routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smi: Option<SmiTrafficRouting>,
    /// Ambassador (Emissary) Mapping routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambassador: Option<AmbassadorTrafficRouting>,
    /// AWS App Mesh routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_mesh: Option<AppMeshTrafficRouting>,
    /// Traefik weighted TraefikService routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traefik: Option<TraefikTrafficRouting>,
    /// Routes the Rollout owns (header and mirror routes), highest precedence first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_routes: Vec<ManagedRoute>,
    /// Apache APISIX routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apisix: Option<ApisixTrafficRouting>,
    /// Traffic-router plugins (Gateway API, Contour, …): plugin name → free-form configuration.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugins: BTreeMap<String, serde_json::Value>,
    /// The weight that means "all traffic" (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_traffic_weight: Option<i32>,
}

impl TrafficRouting {
    /// Default of `maxTrafficWeight`.
    pub const DEFAULT_MAX_TRAFFIC_WEIGHT: i32 = 100;

    /// JSON names of the configured provider blocks, in declaration order (`"istio"`, `"nginx"`,
    /// `"alb"`, `"smi"`, `"ambassador"`, `"appMesh"`, `"traefik"`, `"apisix"`), followed by
    /// `"plugins"` when at least one plugin is configured (see [`TrafficRouting::plugin_names`]).
    pub fn providers(&self) -> Vec<&'static str> {
        let configured = [
            ("istio", self.istio.is_some()),
            ("nginx", self.nginx.is_some()),
            ("alb", self.alb.is_some()),
            ("smi", self.smi.is_some()),
            ("ambassador", self.ambassador.is_some()),
            ("appMesh", self.app_mesh.is_some()),
            ("traefik", self.traefik.is_some()),
            ("apisix", self.apisix.is_some()),
            ("plugins", !self.plugins.is_empty()),
        ];
        configured
            .into_iter()
            .filter_map(|(name, is_set)| is_set.then_some(name))
            .collect()
    }

    /// Names of the configured traffic-router plugins, sorted.
    pub fn plugin_names(&self) -> impl Iterator<Item = &str> {
        self.plugins.keys().map(String::as_str)
    }

    /// The weight that means "all traffic": `maxTrafficWeight`, or 100 when absent.
    pub fn max_traffic_weight(&self) -> i32 {
        self.max_traffic_weight
            .unwrap_or(Self::DEFAULT_MAX_TRAFFIC_WEIGHT)
    }
}

/// A route the Rollout manages (upstream spells the type `MangedRoutes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedRoute {
    /// Route name, referenced by `setHeaderRoute`/`setMirrorRoute` steps.
    pub name: String,
}

/// Istio routing: VirtualService(s) whose weights are edited, and optionally a DestinationRule
/// whose subsets are pointed at the canary and stable pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTrafficRouting {
    /// A single VirtualService (use this or `virtualServices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_service: Option<IstioVirtualService>,
    /// Subset-level routing through a DestinationRule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_rule: Option<IstioDestinationRule>,
    /// Several VirtualServices (use this or `virtualService`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_services: Vec<IstioVirtualService>,
}

/// An Istio VirtualService and the routes in it to edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioVirtualService {
    /// VirtualService name (`name` or `name.namespace`).
    pub name: String,
    /// Named HTTP routes to edit; absent = the VirtualService's only HTTP route.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
    /// TLS routes to edit, matched by port and SNI hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_routes: Vec<IstioTlsRoute>,
    /// TCP routes to edit, matched by port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp_routes: Vec<IstioTcpRoute>,
}

/// Selects a TLS route of a VirtualService (upstream `TLSRoute`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTlsRoute {
    /// Port the route matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// SNI hosts the route matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni_hosts: Vec<String>,
}

/// Selects a TCP route of a VirtualService (upstream `TCPRoute`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTcpRoute {
    /// Port the route matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
}

/// An Istio DestinationRule whose subsets track the canary and stable pod-template hashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioDestinationRule {
    /// DestinationRule name.
    pub name: String,
    /// Subset pointed at the canary pods.
    pub canary_subset_name: String,
    /// Subset pointed at the stable pods.
    pub stable_subset_name: String,
    /// Other subsets of the rule, left untouched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_subset_names: Vec<String>,
}

/// NGINX Ingress routing: a canary Ingress is generated next to the stable one(s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NginxTrafficRouting {
    /// Annotation prefix the controller is configured with (default `nginx.ingress.kubernetes.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_prefix: Option<String>,
    /// The stable Ingress (use this or `stableIngresses`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_ingress: Option<String>,
    /// Extra canary annotations, keyed without the prefix (e.g. `canary-by-header`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_ingress_annotations: BTreeMap<String, String>,
    /// Several stable Ingresses (use this or `stableIngress`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stable_ingresses: Vec<String>,
    /// Annotations copied verbatim onto the generated canary Ingress.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub canary_ingress_annotations: BTreeMap<String, String>,
}

/// AWS Load Balancer Controller routing: weighted forward actions on the Ingress(es).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlbTrafficRouting {
    /// The Ingress (use this or `ingresses`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<String>,
    /// Service port the action forwards to (required).
    pub service_port: i32,
    /// Service named in the Ingress rule the action is attached to (default: the stable service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_service: Option<String>,
    /// Annotation prefix the controller is configured with (default `alb.ingress.kubernetes.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_prefix: Option<String>,
    /// Target-group stickiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stickiness_config: Option<StickinessConfig>,
    /// Several Ingresses (use this or `ingress`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingresses: Vec<String>,
}

/// Duration-based stickiness of ALB target groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StickinessConfig {
    /// Whether stickiness is on.
    pub enabled: bool,
    /// How long a client sticks to a target group, in seconds.
    pub duration_seconds: i64,
}

/// SMI routing through a TrafficSplit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SmiTrafficRouting {
    /// Service clients address (default: the stable service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_service: Option<String>,
    /// TrafficSplit name (default: the Rollout's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_split_name: Option<String>,
}

/// Ambassador routing: canary Mappings are generated next to the listed ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmbassadorTrafficRouting {
    /// Names of the stable Mappings (at least one; lint checks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mappings: Vec<String>,
}

/// AWS App Mesh routing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshTrafficRouting {
    /// The VirtualService (and its VirtualRouter) whose routes are weighted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_service: Option<AppMeshVirtualService>,
    /// The canary and stable VirtualNodes the routes target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_node_group: Option<AppMeshVirtualNodeGroup>,
}

/// An App Mesh VirtualService and the routes of its router to edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshVirtualService {
    /// VirtualService name.
    pub name: String,
    /// HTTP routes to edit; absent = the router's only route.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
}

/// The pair of App Mesh VirtualNodes a weighted route targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshVirtualNodeGroup {
    /// VirtualNode pointed at the canary pods.
    pub canary_virtual_node_ref: AppMeshVirtualNodeReference,
    /// VirtualNode pointed at the stable pods.
    pub stable_virtual_node_ref: AppMeshVirtualNodeReference,
}

/// A reference to an App Mesh VirtualNode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshVirtualNodeReference {
    /// VirtualNode name.
    pub name: String,
}

/// Traefik routing through a weighted TraefikService.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraefikTrafficRouting {
    /// Name of the weighted TraefikService.
    pub weighted_traefik_service_name: String,
}

/// Apache APISIX routing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApisixTrafficRouting {
    /// The ApisixRoute to edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<ApisixRoute>,
}

/// An ApisixRoute and the HTTP rules in it to edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApisixRoute {
    /// ApisixRoute name.
    pub name: String,
    /// Names of the HTTP rules to edit; absent = the route's only rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}
