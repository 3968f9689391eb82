//! What a cluster backend can do, and which of it a Rollout needs: a Rollout that needs a
//! capability its cluster's backend lacks is refused by name, by lint and by `serve`, before it
//! runs (never a write retried forever at its first header route).

use serde::{Deserialize, Serialize};

use crate::spec::rollout::{GATEWAY_API_PLUGIN, GatewayApiRouting, Rollout, gateway_api_field};

/// Which traffic providers a backend drives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TrafficProviders {
    /// Every `trafficRouting` block: the backend routes by weight itself whatever the Rollout
    /// names (the agent's built-in router stands in for Istio, NGINX, Gateway API…).
    Any,
    /// Only these (`trafficRouting` keys, plugin names as `plugins/NAME`); a Rollout without
    /// `trafficRouting` is always accepted (a replica-based canary).
    Only(Vec<String>),
}

/// A backend's capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// The backend's name (`agent`, `kubernetes`), for messages.
    pub backend: String,
    /// Traffic providers driven.
    pub traffic: TrafficProviders,
    /// Header routes (`setHeaderRoute`): the most header conditions one route may have
    /// (0: none).
    pub header_route_matches: usize,
    /// Mirror routes (`setMirrorRoute`): whether supported at all.
    pub mirroring: bool,
    /// Mirror routes: the most header conditions one condition may have.
    pub mirror_headers: usize,
    /// Mirror routes: whether method and path conditions are supported.
    pub mirror_method_path: bool,
    /// Mirror routes: the most alternative conditions (`match` entries) one route may have.
    #[serde(default = "one")]
    pub mirror_alternatives: usize,
    /// Mirror routes: the traffic providers that carry them, as in [`TrafficProviders::Only`]
    /// (empty: whichever the backend drives).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirror_providers: Vec<String>,
    /// Whether the backend makes workloads from pod templates and applies the Rollout itself
    /// (Kubernetes): its desired state then carries each revision's template and the Rollout.
    #[serde(default)]
    pub templates: bool,
}

fn one() -> usize {
    1
}

/// A capability a Rollout needs and the backend lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The capability, by name (`header routes with 2 conditions`, `traffic provider alb`).
    pub capability: String,
    /// The field path in the Rollout that needs it.
    pub path: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (at {})", self.capability, self.path)
    }
}

/// What `rollout` needs that `capabilities` lacks (empty: it can run).
pub fn missing(rollout: &Rollout, capabilities: &Capabilities) -> Vec<Missing> {
    let mut out = Vec::new();
    let Some(canary) = rollout.canary() else {
        return out;
    };
    let named: Vec<String> = canary
        .traffic_routing
        .iter()
        .flat_map(|routing| {
            routing
                .providers()
                .into_iter()
                .filter(|name| *name != "plugins")
                .map(str::to_owned)
                .chain(routing.plugin_names().map(|p| format!("plugins/{p}")))
        })
        .collect();
    if let (Some(routing), TrafficProviders::Only(known)) =
        (&canary.traffic_routing, &capabilities.traffic)
    {
        for name in &named {
            if !known.contains(name) {
                let field = match name.strip_prefix("plugins/") {
                    Some(plugin) => format!("plugins[{plugin}]"),
                    None => name.clone(),
                };
                out.push(Missing {
                    capability: format!("traffic provider {name}"),
                    path: format!("spec.strategy.canary.trafficRouting.{field}"),
                });
            } else if let Some(config) = name
                .strip_prefix("plugins/")
                .filter(|p| *p == GATEWAY_API_PLUGIN)
                .and_then(|p| routing.plugins.get(p))
                && let Err(error) = GatewayApiRouting::parse(config)
            {
                out.push(Missing {
                    capability: format!("Gateway API routing as configured: {}", error.message),
                    path: gateway_api_field(&error.path),
                });
            }
        }
    }
    for (i, step) in canary.steps.iter().enumerate() {
        if let Some(route) = &step.set_header_route {
            let n = route.r#match.len();
            if n > capabilities.header_route_matches {
                let capability = if capabilities.header_route_matches == 0 {
                    "header routes".to_owned()
                } else {
                    format!(
                        "header routes with {n} conditions (at most {})",
                        capabilities.header_route_matches
                    )
                };
                out.push(Missing {
                    capability,
                    path: format!("spec.strategy.canary.steps[{i}].setHeaderRoute.match"),
                });
            }
        }
        if let Some(route) = &step.set_mirror_route {
            let path = format!("spec.strategy.canary.steps[{i}].setMirrorRoute");
            if !capabilities.mirroring {
                out.push(Missing {
                    capability: "mirror routes".to_owned(),
                    path,
                });
                continue;
            }
            if !capabilities.mirror_providers.is_empty()
                && !named
                    .iter()
                    .any(|n| capabilities.mirror_providers.contains(n))
            {
                out.push(Missing {
                    capability: format!(
                        "mirror routes through {} (only through {})",
                        if named.is_empty() {
                            "replica ratios".to_owned()
                        } else {
                            named.join(", ")
                        },
                        capabilities.mirror_providers.join(", ")
                    ),
                    path,
                });
                continue;
            }
            if route.r#match.len() > capabilities.mirror_alternatives {
                out.push(Missing {
                    capability: format!(
                        "mirror routes with {} alternative conditions (at most {})",
                        route.r#match.len(),
                        capabilities.mirror_alternatives
                    ),
                    path: format!("{path}.match"),
                });
            }
            for (j, m) in route.r#match.iter().enumerate() {
                if !capabilities.mirror_method_path && (m.method.is_some() || m.path.is_some()) {
                    out.push(Missing {
                        capability: "mirror routes on method or path".to_owned(),
                        path: format!("{path}.match[{j}]"),
                    });
                }
                if m.headers.len() > capabilities.mirror_headers {
                    out.push(Missing {
                        capability: format!(
                            "mirror routes on {} headers (at most {})",
                            m.headers.len(),
                            capabilities.mirror_headers
                        ),
                        path: format!("{path}.match[{j}].headers"),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kubernetes_like() -> Capabilities {
        Capabilities {
            backend: "k".into(),
            traffic: TrafficProviders::Only(vec![
                format!("plugins/{GATEWAY_API_PLUGIN}"),
                "istio".into(),
            ]),
            header_route_matches: 16,
            mirroring: true,
            mirror_headers: 16,
            mirror_method_path: true,
            mirror_alternatives: 16,
            mirror_providers: vec!["istio".into()],
            templates: true,
        }
    }

    fn mirrored(routing: serde_json::Value) -> Rollout {
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "app"},
            "spec": {"strategy": {"canary": {
                "canaryService": "c", "stableService": "s",
                "trafficRouting": routing,
                "steps": [{"setWeight": 10}, {"setMirrorRoute": {"name": "m",
                    "match": [{"method": {"exact": "GET"}}, {"path": {"prefix": "/a"}}]}}]}}}
        }))
        .expect("a Rollout")
    }

    #[test]
    fn mirror_routes_go_only_through_the_providers_that_carry_them() {
        let istio = mirrored(
            json!({"istio": {"virtualService": {"name": "vs"}}, "managedRoutes": [{"name": "m"}]}),
        );
        assert_eq!(missing(&istio, &kubernetes_like()), vec![]);
        let gateway = mirrored(
            json!({"plugins": {GATEWAY_API_PLUGIN: {"httpRoute": "r"}}, "managedRoutes": [{"name": "m"}]}),
        );
        let lacks = missing(&gateway, &kubernetes_like());
        assert_eq!(lacks.len(), 1, "{lacks:?}");
        assert_eq!(
            lacks[0].path,
            "spec.strategy.canary.steps[1].setMirrorRoute"
        );
        assert!(
            lacks[0].capability.contains("only through istio"),
            "{lacks:?}"
        );
        // An agent's router mirrors on one condition at most.
        let agent = Capabilities {
            traffic: TrafficProviders::Any,
            mirror_alternatives: 1,
            mirror_providers: Vec::new(),
            ..kubernetes_like()
        };
        let lacks = missing(&istio, &agent);
        assert!(
            lacks[0]
                .capability
                .contains("2 alternative conditions (at most 1)"),
            "{lacks:?}"
        );
    }
}
