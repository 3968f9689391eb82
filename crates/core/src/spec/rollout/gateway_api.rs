//! The Gateway API traffic router's configuration, as Argo Rollouts' users write it for the
//! `argoproj-labs/gatewayAPI` plugin (`trafficRouting.plugins["argoproj-labs/gatewayAPI"]`):
//! which HTTPRoutes and GRPCRoutes carry the canary's weight, in which namespace, and the label
//! set on them while a canary is in progress. Parsed here (no I/O) so that lint and the
//! Kubernetes backend read it the same way.

use serde_json::Value;

/// The plugin's name, as `trafficRouting.plugins` keys it.
pub const GATEWAY_API_PLUGIN: &str = "argoproj-labs/gatewayAPI";

/// The plugin's label on a route while a canary is in progress (its default key and value).
pub const IN_PROGRESS_LABEL: (&str, &str) =
    ("rollouts.argoproj.io/gatewayapi-canary", "in-progress");

/// A kind of Gateway API route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RouteKind {
    /// `HTTPRoute` (gateway.networking.k8s.io/v1).
    Http,
    /// `GRPCRoute` (gateway.networking.k8s.io/v1).
    Grpc,
}

impl RouteKind {
    /// The kind, as the API names it.
    pub fn kind(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
        }
    }

    /// The resource's plural, as the API serves it.
    pub fn plural(self) -> &'static str {
        match self {
            RouteKind::Http => "httproutes",
            RouteKind::Grpc => "grpcroutes",
        }
    }
}

/// One route carrying the canary's weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRoute {
    /// Its kind.
    pub kind: RouteKind,
    /// Its name.
    pub name: String,
    /// Whether `setHeaderRoute` steps add their rules to it (a single `httpRoute` always;
    /// in `httpRoutes[]`, as each entry's `useHeaderRoutes` says).
    pub use_header_routes: bool,
    /// Where the configuration names it (`httpRoutes[1].name`), for messages.
    pub path: String,
}

/// The plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayApiRouting {
    /// The routes, in the order the configuration names them.
    pub routes: Vec<GatewayRoute>,
    /// Their namespace (None: the Rollout's).
    pub namespace: Option<String>,
    /// The label set on each route while the canary has weight (None: disabled).
    pub in_progress_label: Option<(String, String)>,
}

/// A configuration Flotilla cannot drive, at a path under the plugin's block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfigError {
    /// The field path, relative to the plugin's block (`tcpRoute`, `httpRoutes[0].name`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// The field path in a Rollout of `path` under the plugin's block (`tcpRoute` →
/// `spec.strategy.canary.trafficRouting.plugins[argoproj-labs/gatewayAPI].tcpRoute`).
pub fn gateway_api_field(path: &str) -> String {
    let base = format!("spec.strategy.canary.trafficRouting.plugins[{GATEWAY_API_PLUGIN}]");
    if path.is_empty() {
        base
    } else {
        format!("{base}.{path}")
    }
}

impl GatewayApiRouting {
    /// Reads the plugin's block. TCPRoute and TLSRoute (experimental, v1alpha2) and the
    /// route selectors are refused by name: Flotilla does not drive them, and a canary whose
    /// routes are silently skipped would take no traffic.
    pub fn parse(config: &Value) -> Result<GatewayApiRouting, GatewayConfigError> {
        let fail = |path: &str, message: String| GatewayConfigError {
            path: path.to_owned(),
            message,
        };
        let Some(object) = config.as_object() else {
            return Err(fail("", "the plugin's configuration must be a map".into()));
        };
        for unsupported in [
            "tcpRoute",
            "tcpRoutes",
            "tlsRoute",
            "tlsRoutes",
            "httpRouteSelector",
            "grpcRouteSelector",
            "tcpRouteSelector",
            "tlsRouteSelector",
        ] {
            if object.contains_key(unsupported) {
                return Err(fail(
                    unsupported,
                    format!(
                        "Flotilla drives HTTPRoutes and GRPCRoutes named in httpRoute(s)/grpcRoute(s); {unsupported} is not driven"
                    ),
                ));
            }
        }
        let string = |key: &str| -> Result<Option<String>, GatewayConfigError> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                Some(_) => Err(fail(key, "must be a non-empty string".into())),
            }
        };
        let mut routes = Vec::new();
        for (kind, single, list) in [
            (RouteKind::Http, "httpRoute", "httpRoutes"),
            (RouteKind::Grpc, "grpcRoute", "grpcRoutes"),
        ] {
            if let Some(name) = string(single)? {
                routes.push(GatewayRoute {
                    kind,
                    name,
                    use_header_routes: true,
                    path: single.to_owned(),
                });
            }
            match object.get(list) {
                None | Some(Value::Null) => {}
                Some(Value::Array(entries)) => {
                    for (i, entry) in entries.iter().enumerate() {
                        let name = entry["name"]
                            .as_str()
                            .filter(|n| !n.is_empty())
                            .ok_or_else(|| {
                                fail(
                                    &format!("{list}[{i}].name"),
                                    "each route needs a name".into(),
                                )
                            })?;
                        let use_header_routes = match &entry["useHeaderRoutes"] {
                            Value::Null => false,
                            Value::Bool(b) => *b,
                            _ => {
                                return Err(fail(
                                    &format!("{list}[{i}].useHeaderRoutes"),
                                    "must be true or false".into(),
                                ));
                            }
                        };
                        routes.push(GatewayRoute {
                            kind,
                            name: name.to_owned(),
                            use_header_routes,
                            path: format!("{list}[{i}].name"),
                        });
                    }
                }
                Some(_) => {
                    return Err(fail(
                        list,
                        "must be a list of {name, useHeaderRoutes}".into(),
                    ));
                }
            }
        }
        if routes.is_empty() {
            return Err(fail(
                "",
                "names no route: set httpRoute, httpRoutes, grpcRoute or grpcRoutes".into(),
            ));
        }
        for (i, route) in routes.iter().enumerate() {
            if routes[..i]
                .iter()
                .any(|r| r.kind == route.kind && r.name == route.name)
            {
                return Err(fail(
                    &route.path,
                    format!("{} {:?} is named twice", route.kind.kind(), route.name),
                ));
            }
        }
        let disabled = match object.get("disableInProgressLabel") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(fail(
                    "disableInProgressLabel",
                    "must be true or false".into(),
                ));
            }
        };
        let key = string("inProgressLabelKey")?.unwrap_or_else(|| IN_PROGRESS_LABEL.0.to_owned());
        let value =
            string("inProgressLabelValue")?.unwrap_or_else(|| IN_PROGRESS_LABEL.1.to_owned());
        Ok(GatewayApiRouting {
            routes,
            namespace: string("namespace")?,
            in_progress_label: (!disabled).then_some((key, value)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_plugins_shapes_are_read() {
        let one =
            GatewayApiRouting::parse(&json!({"httpRoute": "web", "namespace": "shop"})).unwrap();
        assert_eq!(one.routes.len(), 1);
        assert_eq!(one.routes[0].kind, RouteKind::Http);
        assert!(one.routes[0].use_header_routes);
        assert_eq!(one.namespace.as_deref(), Some("shop"));
        assert_eq!(
            one.in_progress_label,
            Some((
                IN_PROGRESS_LABEL.0.to_owned(),
                IN_PROGRESS_LABEL.1.to_owned()
            ))
        );
        let many = GatewayApiRouting::parse(&json!({
            "httpRoutes": [{"name": "a", "useHeaderRoutes": true}, {"name": "b"}],
            "grpcRoute": "g",
            "disableInProgressLabel": true,
        }))
        .unwrap();
        let names: Vec<(RouteKind, &str, bool)> = many
            .routes
            .iter()
            .map(|r| (r.kind, r.name.as_str(), r.use_header_routes))
            .collect();
        assert_eq!(
            names,
            [
                (RouteKind::Http, "a", true),
                (RouteKind::Http, "b", false),
                (RouteKind::Grpc, "g", true)
            ]
        );
        assert_eq!(many.in_progress_label, None);
    }

    #[test]
    fn what_flotilla_does_not_drive_is_refused_by_name() {
        let error = GatewayApiRouting::parse(&json!({"tcpRoute": "t"})).unwrap_err();
        assert_eq!(error.path, "tcpRoute");
        let error = GatewayApiRouting::parse(&json!({"namespace": "x"})).unwrap_err();
        assert!(error.message.contains("names no route"), "{error:?}");
        let error = GatewayApiRouting::parse(&json!({"httpRoutes": [{"useHeaderRoutes": true}]}))
            .unwrap_err();
        assert_eq!(error.path, "httpRoutes[0].name");
        let error =
            GatewayApiRouting::parse(&json!({"httpRoute": "a", "httpRoutes": [{"name": "a"}]}))
                .unwrap_err();
        assert_eq!(error.path, "httpRoutes[0].name");
    }
}
