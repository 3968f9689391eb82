//! Istio VirtualServices and DestinationRules as Argo's controller edits them, on the object
//! as read: the canary's and the stable's weights in the http, tls and tcp routes the Rollout
//! names (host-based: destinations whose host is the canary or stable Service; subset-based:
//! destinations whose subset is the DestinationRule's canary or stable subset), header routes
//! as named http routes placed first in `managedRoutes` order, and the DestinationRule's two
//! subsets labelled with the revisions' pod-template hashes (and, in a multi-primary mesh, the
//! cluster's `topology.istio.io/cluster`, so a subset never selects another cluster's Pods).
//! Pure: the backend reads, then writes back with the `resourceVersion` it read.

use std::collections::BTreeMap;

use flotilla_core::backend::MirrorRoute;
use flotilla_core::rollout::Weights;
use flotilla_core::spec::rollout::{HeaderRoutingMatch, IstioTcpRoute, IstioTlsRoute, StringMatch};
use serde_json::{Value, json};

use super::gateway::RouteError;

/// The label a DestinationRule subset selects a revision's Pods by.
pub const HASH_LABEL: &str = "rollouts-pod-template-hash";

/// The label Istio gives every endpoint with the id of the cluster it runs in.
pub const CLUSTER_LABEL: &str = "topology.istio.io/cluster";

/// What a route destination is for the Rollout.
#[derive(Debug, Clone, Copy)]
pub struct Targets<'a> {
    /// `canaryService`.
    pub canary_service: &'a str,
    /// `stableService`.
    pub stable_service: &'a str,
    /// The DestinationRule's (canary, stable) subsets (None: host-based).
    pub subsets: Option<(&'a str, &'a str)>,
    /// `additionalSubsetNames`: weights left as they are, taken from the stable's share.
    pub additional: &'a [String],
}

/// The routes of one VirtualService the Rollout names.
#[derive(Debug, Clone, Copy)]
pub struct Selected<'a> {
    /// `routes`: http routes by name (empty: the only unmanaged http route).
    pub http: &'a [String],
    /// `tlsRoutes`: by port and SNI hosts (empty: the first tls route, if any).
    pub tls: &'a [IstioTlsRoute],
    /// `tcpRoutes`: by port (empty: the first tcp route, if any).
    pub tcp: &'a [IstioTcpRoute],
}

/// What Flotilla wants of one VirtualService.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VirtualServiceWanted {
    /// The canary's weight (None: none asked yet; the routes' weights stand).
    pub weights: Option<Weights>,
    /// Header routes in effect, by name.
    pub header_routes: BTreeMap<String, Vec<HeaderRoutingMatch>>,
    /// Mirror routes in effect, by name.
    pub mirror_routes: BTreeMap<String, MirrorRoute>,
    /// `managedRoutes`, in order: http routes of these names not in effect are removed, those
    /// in effect come first in this order.
    pub managed: Vec<String>,
}

/// A destination's host up to its first dot (`payments-canary.shop.svc` → `payments-canary`),
/// as Argo compares it.
fn short_host(destination: &Value) -> &str {
    let host = destination["destination"]["host"].as_str().unwrap_or("");
    host.split('.').next().unwrap_or("")
}

fn subset(destination: &Value) -> &str {
    destination["destination"]["subset"].as_str().unwrap_or("")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Canary,
    Stable,
    Additional,
    Other,
}

fn role(destination: &Value, targets: Targets<'_>) -> Role {
    let (host, subset) = (short_host(destination), subset(destination));
    match targets.subsets {
        Some((canary, _)) if !subset.is_empty() && subset == canary => Role::Canary,
        Some((_, stable)) if !subset.is_empty() && subset == stable => Role::Stable,
        _ if !subset.is_empty() && targets.additional.iter().any(|a| a == subset) => {
            Role::Additional
        }
        _ if !targets.canary_service.is_empty() && host == targets.canary_service => Role::Canary,
        _ if !targets.stable_service.is_empty() && host == targets.stable_service => Role::Stable,
        _ => Role::Other,
    }
}

/// The http routes' indices the Rollout weighs, as Argo picks them.
fn http_indices(
    routes: &[Value],
    names: &[String],
    managed: &[String],
) -> Result<Vec<usize>, RouteError> {
    let name = |r: &Value| r["name"].as_str().unwrap_or("").to_owned();
    if names.is_empty() && routes.is_empty() {
        // A VirtualService of tls or tcp routes only.
        return Ok(Vec::new());
    }
    if names.is_empty() {
        let unmanaged: Vec<usize> = (0..routes.len())
            .filter(|&i| !managed.contains(&name(&routes[i])))
            .collect();
        return match unmanaged.as_slice() {
            [only] => Ok(vec![*only]),
            [] => Ok(Vec::new()),
            _ => Err(RouteError(
                "spec.http has more than one route: name the ones to weigh in the Rollout's virtualService.routes".into(),
            )),
        };
    }
    names
        .iter()
        .map(|n| {
            routes.iter().position(|r| name(r) == *n).ok_or_else(|| {
                RouteError(format!("http route {n:?} not found in the VirtualService"))
            })
        })
        .collect()
}

/// The one port a route's matches name (a match without one counts as port 0, as Argo counts
/// it); None when they name several (Argo never matches such a route).
fn single_port(route: &Value) -> Option<i64> {
    let mut ports: Vec<i64> = route["match"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|m| m["port"].as_i64().unwrap_or(0))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    match ports.as_slice() {
        [] => Some(0),
        [port] => Some(*port),
        _ => None,
    }
}

/// Without selectors: the only route of `kind` (none: no route), several being an error, as
/// Argo's validation has it.
fn only_route(routes: &[Value], kind: &str) -> Result<Vec<usize>, RouteError> {
    match routes.len() {
        0 => Ok(Vec::new()),
        1 => Ok(vec![0]),
        _ => Err(RouteError(format!(
            "spec.{kind} has more than one route: select the ones to weigh in the Rollout's virtualService.{kind}Routes"
        ))),
    }
}

/// The tls routes matching each selector (one port, equal to the selector's, and the same set
/// of SNI hosts).
fn tls_indices(routes: &[Value], selectors: &[IstioTlsRoute]) -> Result<Vec<usize>, RouteError> {
    if selectors.is_empty() {
        return only_route(routes, "tls");
    }
    let mut out = Vec::new();
    for selector in selectors {
        let mut wanted: Vec<&str> = selector.sni_hosts.iter().map(String::as_str).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let found: Vec<usize> = routes
            .iter()
            .enumerate()
            .filter(|(_, route)| {
                let mut sni: Vec<&str> = route["match"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .flat_map(|m| m["sniHosts"].as_array().map_or(&[][..], Vec::as_slice))
                    .filter_map(Value::as_str)
                    .collect();
                sni.sort_unstable();
                sni.dedup();
                single_port(route) == Some(selector.port.unwrap_or(0)) && sni == wanted
            })
            .map(|(i, _)| i)
            .collect();
        if found.is_empty() {
            return Err(RouteError(format!(
                "no tls route matches port {} and SNI hosts {:?}",
                selector.port.unwrap_or(0),
                selector.sni_hosts
            )));
        }
        out.extend(found);
    }
    Ok(out)
}

/// The tcp routes matching each selector's port (one port, equal to the selector's).
fn tcp_indices(routes: &[Value], selectors: &[IstioTcpRoute]) -> Result<Vec<usize>, RouteError> {
    if selectors.is_empty() {
        return only_route(routes, "tcp");
    }
    let mut out = Vec::new();
    for selector in selectors {
        let found: Vec<usize> = routes
            .iter()
            .enumerate()
            .filter(|(_, route)| single_port(route) == Some(selector.port.unwrap_or(0)))
            .map(|(i, _)| i)
            .collect();
        if found.is_empty() {
            return Err(RouteError(format!(
                "no tcp route matches port {}",
                selector.port.unwrap_or(0)
            )));
        }
        out.extend(found);
    }
    Ok(out)
}

fn array<'a>(vs: &'a Value, key: &str) -> &'a [Value] {
    vs["spec"][key].as_array().map_or(&[], Vec::as_slice)
}

/// Every weighted route as (kind, index), checked to name both the canary and the stable.
fn weighted(
    vs: &Value,
    targets: Targets<'_>,
    selected: Selected<'_>,
    managed: &[String],
) -> Result<Vec<(&'static str, usize)>, RouteError> {
    let mut out = Vec::new();
    for i in http_indices(array(vs, "http"), selected.http, managed)? {
        out.push(("http", i));
    }
    for i in tls_indices(array(vs, "tls"), selected.tls)? {
        out.push(("tls", i));
    }
    for i in tcp_indices(array(vs, "tcp"), selected.tcp)? {
        out.push(("tcp", i));
    }
    if out.is_empty() {
        return Err(RouteError(
            "the VirtualService has no http, tls or tcp route to weigh".into(),
        ));
    }
    for &(kind, i) in &out {
        let destinations = array(vs, kind)[i]["route"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        for (want, what) in [(Role::Canary, "canary"), (Role::Stable, "stable")] {
            if !destinations.iter().any(|d| role(d, targets) == want) {
                return Err(RouteError(match targets.subsets {
                    Some((canary, stable)) => format!(
                        "{kind}[{i}] has no destination with the {what} subset {:?}",
                        if want == Role::Canary { canary } else { stable }
                    ),
                    None => format!(
                        "{kind}[{i}] has no destination with the {what} Service {:?}",
                        if want == Role::Canary {
                            targets.canary_service
                        } else {
                            targets.stable_service
                        }
                    ),
                }));
            }
        }
    }
    Ok(out)
}

/// The (canary, stable) weights of every weighted route, in order; the additional subsets'
/// weights count in the stable's share, which [`edited`] carves them out of (so a route
/// holding the weights Flotilla asked for reads back as asked).
pub fn weights_of(
    vs: &Value,
    targets: Targets<'_>,
    selected: Selected<'_>,
    managed: &[String],
) -> Result<Vec<Weights>, RouteError> {
    Ok(weighted(vs, targets, selected, managed)?
        .into_iter()
        .map(|(kind, i)| {
            let destinations = array(vs, kind)[i]["route"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let sum = |want: Role| -> i32 {
                destinations
                    .iter()
                    .filter(|d| role(d, targets) == want)
                    .map(|d| d["weight"].as_i64().unwrap_or(0) as i32)
                    .sum()
            };
            Weights {
                canary: sum(Role::Canary),
                stable: sum(Role::Stable) + sum(Role::Additional),
            }
        })
        .collect())
}

/// An Istio `StringMatch` (`exact`, `prefix` or `regex`); `what` names the condition in errors.
fn string_match(m: &StringMatch, what: &str) -> Result<Value, RouteError> {
    if let Some(exact) = &m.exact {
        Ok(json!({"exact": exact}))
    } else if let Some(prefix) = &m.prefix {
        Ok(json!({"prefix": prefix}))
    } else if let Some(regex) = &m.regex {
        Ok(json!({"regex": regex}))
    } else {
        Err(RouteError(format!(
            "the condition on {what} has no exact, prefix or regex"
        )))
    }
}

fn header_match(m: &HeaderRoutingMatch) -> Result<Value, RouteError> {
    let condition = string_match(&m.header_value, &format!("header {:?}", m.header_name))?;
    Ok(json!({"headers": {m.header_name.as_str(): condition}}))
}

/// A mirror route's conditions as Istio `HTTPMatchRequest`s (method, uri, headers).
fn mirror_matches(route: &MirrorRoute) -> Result<Vec<Value>, RouteError> {
    route
        .matches
        .iter()
        .map(|m| {
            let mut out = json!({});
            if let Some(method) = &m.method {
                out["method"] = string_match(method, "the method")?;
            }
            if let Some(path) = &m.path {
                out["uri"] = string_match(path, "the path")?;
            }
            for (name, value) in &m.headers {
                out["headers"][name.as_str()] = string_match(value, &format!("header {name:?}"))?;
            }
            Ok(out)
        })
        .collect()
}

/// The VirtualService with Flotilla's change made: weights in every weighted route (the
/// canary w, the stable 100 − w less the additional subsets' weights, others removed, as Argo
/// does), header and mirror routes as `wanted` says (first, in `managedRoutes` order: a header
/// route sends every matching request to the canary; a mirror route sends matching requests
/// where the weighted route sends them and a copy of `percentage` of them to the canary),
/// everything else as read.
pub fn edited(
    vs: &Value,
    targets: Targets<'_>,
    selected: Selected<'_>,
    wanted: &VirtualServiceWanted,
) -> Result<Value, RouteError> {
    let routes = weighted(vs, targets, selected, &wanted.managed)?;
    let mut out = vs.clone();
    if let Some(weights) = wanted.weights {
        for &(kind, i) in &routes {
            let destinations = out["spec"][kind][i]["route"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let additional: i64 = destinations
                .iter()
                .filter(|d| role(d, targets) == Role::Additional)
                .map(|d| d["weight"].as_i64().unwrap_or(0))
                .sum();
            let stable = (i64::from(weights.stable) - additional).max(0);
            let kept: Vec<Value> = destinations
                .into_iter()
                .filter_map(|mut d| {
                    match role(&d, targets) {
                        Role::Canary => d["weight"] = json!(weights.canary),
                        Role::Stable => d["weight"] = json!(stable),
                        Role::Additional => {}
                        Role::Other => return None,
                    }
                    Some(d)
                })
                .collect();
            out["spec"][kind][i]["route"] = Value::Array(kept);
        }
    }
    // Header routes: the ones in effect made again, first, in managedRoutes order.
    let http = array(&out, "http").to_vec();
    if !http.is_empty() || !wanted.header_routes.is_empty() || !wanted.mirror_routes.is_empty() {
        let weighted_http = routes
            .iter()
            .find(|(kind, _)| *kind == "http")
            .map(|&(_, i)| out["spec"]["http"][i]["route"].clone());
        let port = weighted_http.as_ref().and_then(|route| {
            route
                .as_array()
                .and_then(|d| d.iter().find(|d| role(d, targets) == Role::Canary))
                .and_then(|d| d["destination"].get("port").cloned())
        });
        // With subsets, the host of the weighted route's canary destination (the
        // DestinationRule's host); else the canary Service, as Argo names it.
        let host = match targets.subsets {
            Some(_) => weighted_http
                .as_ref()
                .and_then(|route| {
                    route
                        .as_array()?
                        .iter()
                        .find(|d| role(d, targets) == Role::Canary)?["destination"]["host"]
                        .as_str()
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| targets.canary_service.to_owned()),
            None => targets.canary_service.to_owned(),
        };
        let mut destination = json!({"host": host});
        if let Some((canary, _)) = targets.subsets {
            destination["subset"] = json!(canary);
        }
        if let Some(port) = &port {
            destination["port"] = port.clone();
        }
        let mut first = Vec::new();
        for name in &wanted.managed {
            if let Some(matches) = wanted.header_routes.get(name) {
                first.push(json!({
                    "name": name,
                    "match": matches.iter().map(header_match).collect::<Result<Vec<_>, _>>()?,
                    "route": [{"destination": destination.clone(), "weight": 100}],
                }));
            } else if let Some(mirror) = wanted.mirror_routes.get(name) {
                let Some(route) = &weighted_http else {
                    return Err(RouteError(format!(
                        "mirror route {name:?} needs a weighted http route to copy"
                    )));
                };
                let mut made = json!({
                    "name": name,
                    "route": route.clone(),
                    "mirror": destination.clone(),
                    "mirrorPercentage": {"value": mirror.percentage},
                });
                let matches = mirror_matches(mirror)?;
                if !matches.is_empty() {
                    made["match"] = Value::Array(matches);
                }
                first.push(made);
            }
        }
        let rest = http
            .into_iter()
            .filter(|r| !wanted.managed.iter().any(|m| r["name"] == m.as_str()));
        first.extend(rest);
        out["spec"]["http"] = Value::Array(first);
    }
    Ok(out)
}

/// The DestinationRule with its canary and stable subsets selecting the revisions' hashes
/// (and the cluster's id when the mesh spans clusters). Other subsets and fields are kept.
pub fn edited_destination_rule(
    dr: &Value,
    subsets: (&str, &str),
    hashes: (&str, &str),
    cluster: Option<&str>,
) -> Result<Value, RouteError> {
    let mut out = dr.clone();
    let Some(list) = out["spec"]["subsets"].as_array_mut() else {
        return Err(RouteError("the DestinationRule has no subsets".into()));
    };
    for (name, hash) in [(subsets.0, hashes.0), (subsets.1, hashes.1)] {
        let Some(subset) = list.iter_mut().find(|s| s["name"] == name) else {
            return Err(RouteError(format!(
                "the DestinationRule has no subset {name:?}"
            )));
        };
        if !subset["labels"].is_object() {
            subset["labels"] = json!({});
        }
        subset["labels"][HASH_LABEL] = json!(hash);
        if let Some(cluster) = cluster {
            subset["labels"][CLUSTER_LABEL] = json!(cluster);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO: &[String] = &[];

    fn host_based() -> Targets<'static> {
        Targets {
            canary_service: "payments-canary",
            stable_service: "payments-stable",
            subsets: None,
            additional: NO,
        }
    }

    fn subset_based() -> Targets<'static> {
        Targets {
            canary_service: "",
            stable_service: "",
            subsets: Some(("canary", "stable")),
            additional: NO,
        }
    }

    fn vs() -> Value {
        json!({"spec": {
            "hosts": ["payments"],
            "http": [{"name": "primary", "route": [
                {"destination": {"host": "payments-stable.default.svc.cluster.local", "port": {"number": 80}}, "weight": 100},
                {"destination": {"host": "payments-canary", "port": {"number": 80}}, "weight": 0}]}],
            "tcp": [{"match": [{"port": 9000}], "route": [
                {"destination": {"host": "payments-stable"}, "weight": 100},
                {"destination": {"host": "payments-canary"}, "weight": 0}]}]
        }})
    }

    fn selected() -> Selected<'static> {
        Selected {
            http: &[],
            tls: &[],
            tcp: &[],
        }
    }

    #[test]
    fn host_based_weights_go_to_http_and_tcp_routes() {
        let wanted = VirtualServiceWanted {
            weights: Some(Weights {
                canary: 20,
                stable: 80,
            }),
            ..Default::default()
        };
        let out = edited(&vs(), host_based(), selected(), &wanted).unwrap();
        assert_eq!(
            weights_of(&out, host_based(), selected(), &[]).unwrap(),
            vec![
                Weights {
                    canary: 20,
                    stable: 80
                };
                2
            ]
        );
        assert_eq!(out["spec"]["hosts"], json!(["payments"]));
    }

    #[test]
    fn subset_routes_name_both_subsets_or_are_refused() {
        let vs = json!({"spec": {"http": [{"route": [
            {"destination": {"host": "payments", "subset": "stable"}, "weight": 100},
            {"destination": {"host": "payments", "subset": "canary"}, "weight": 0},
            {"destination": {"host": "other"}, "weight": 0}]}]}});
        let wanted = VirtualServiceWanted {
            weights: Some(Weights {
                canary: 5,
                stable: 95,
            }),
            ..Default::default()
        };
        let out = edited(&vs, subset_based(), selected(), &wanted).unwrap();
        let route = out["spec"]["http"][0]["route"].as_array().unwrap();
        assert_eq!(
            route.len(),
            2,
            "a destination that is neither is dropped, as Argo does"
        );
        assert_eq!(route[1]["weight"], 5);
        let only_stable = json!({"spec": {"http": [{"route": [
            {"destination": {"host": "payments", "subset": "stable"}, "weight": 100}]}]}});
        let error = weights_of(&only_stable, subset_based(), selected(), &[]).unwrap_err();
        assert!(error.0.contains("canary subset \"canary\""), "{error:?}");
    }

    #[test]
    fn several_http_routes_need_names() {
        let mut vs = vs();
        vs["spec"]["http"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "b", "route": []}));
        assert!(weights_of(&vs, host_based(), selected(), &[]).is_err());
        let names = ["primary".to_owned()];
        let chosen = Selected {
            http: &names,
            ..selected()
        };
        assert_eq!(weights_of(&vs, host_based(), chosen, &[]).unwrap().len(), 2);
    }

    #[test]
    fn header_routes_come_first_and_go_when_no_longer_in_effect() {
        use flotilla_core::spec::rollout::StringMatch;
        let mut wanted = VirtualServiceWanted {
            weights: Some(Weights {
                canary: 0,
                stable: 100,
            }),
            managed: vec!["beta".into()],
            ..Default::default()
        };
        wanted.header_routes.insert(
            "beta".into(),
            vec![HeaderRoutingMatch {
                header_name: "x-beta".into(),
                header_value: StringMatch {
                    exact: Some("1".into()),
                    ..Default::default()
                },
            }],
        );
        let out = edited(&vs(), host_based(), selected(), &wanted).unwrap();
        let http = out["spec"]["http"].as_array().unwrap();
        assert_eq!(http[0]["name"], "beta");
        assert_eq!(http[0]["match"][0]["headers"]["x-beta"]["exact"], "1");
        assert_eq!(http[0]["route"][0]["destination"]["port"]["number"], 80);
        wanted.header_routes.clear();
        let again = edited(&out, host_based(), selected(), &wanted).unwrap();
        assert_eq!(again["spec"]["http"].as_array().unwrap().len(), 1);
        assert_eq!(again["spec"]["http"][0]["name"], "primary");
    }

    #[test]
    fn subsets_select_the_hashes_and_the_cluster() {
        let dr = json!({"spec": {"host": "payments", "subsets": [
            {"name": "canary", "labels": {"app": "payments"}},
            {"name": "stable"},
            {"name": "legacy", "labels": {"v": "0"}}]}});
        let out =
            edited_destination_rule(&dr, ("canary", "stable"), ("c1", "s1"), Some("east")).unwrap();
        let subsets = out["spec"]["subsets"].as_array().unwrap();
        assert_eq!(
            subsets[0]["labels"],
            json!({"app": "payments", HASH_LABEL: "c1", CLUSTER_LABEL: "east"})
        );
        assert_eq!(
            subsets[1]["labels"],
            json!({HASH_LABEL: "s1", CLUSTER_LABEL: "east"})
        );
        assert_eq!(subsets[2], dr["spec"]["subsets"][2]);
        assert!(edited_destination_rule(&dr, ("canary", "gone"), ("c", "s"), None).is_err());
    }

    #[test]
    fn mirror_routes_copy_the_weighted_route_and_mirror_to_the_canary() {
        use flotilla_core::spec::rollout::{RouteMatch, StringMatch};
        let mut wanted = VirtualServiceWanted {
            weights: Some(Weights {
                canary: 10,
                stable: 90,
            }),
            managed: vec!["shadow".into()],
            ..Default::default()
        };
        wanted.mirror_routes.insert(
            "shadow".into(),
            MirrorRoute {
                matches: vec![RouteMatch {
                    method: Some(StringMatch {
                        exact: Some("GET".into()),
                        ..Default::default()
                    }),
                    path: Some(StringMatch {
                        prefix: Some("/pay".into()),
                        ..Default::default()
                    }),
                    headers: Default::default(),
                }],
                percentage: 35,
            },
        );
        let out = edited(&vs(), host_based(), selected(), &wanted).unwrap();
        let http = out["spec"]["http"].as_array().unwrap();
        assert_eq!(http.len(), 2);
        let mirror = &http[0];
        assert_eq!(mirror["name"], "shadow");
        assert_eq!(mirror["match"][0]["method"]["exact"], "GET");
        assert_eq!(mirror["match"][0]["uri"]["prefix"], "/pay");
        assert_eq!(mirror["mirror"]["host"], "payments-canary");
        assert_eq!(mirror["mirror"]["port"]["number"], 80);
        assert_eq!(
            mirror["mirrorPercentage"]["value"],
            json!(35),
            "as the API server returns it"
        );
        assert_eq!(
            mirror["route"], http[1]["route"],
            "the same split as the weighted route"
        );
        // The mirror route is managed: it is not the weighted route, and goes when removed.
        assert_eq!(
            weights_of(&out, host_based(), selected(), &wanted.managed).unwrap(),
            vec![
                Weights {
                    canary: 10,
                    stable: 90
                };
                2
            ]
        );
        wanted.mirror_routes.clear();
        let again = edited(&out, host_based(), selected(), &wanted).unwrap();
        assert_eq!(again["spec"]["http"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn additional_subsets_keep_their_weight_out_of_the_stables_share() {
        let additional = ["legacy".to_owned()];
        let targets = Targets {
            additional: &additional,
            ..subset_based()
        };
        let vs = json!({"spec": {"http": [{"route": [
            {"destination": {"host": "payments", "subset": "stable"}, "weight": 90},
            {"destination": {"host": "payments", "subset": "canary"}, "weight": 0},
            {"destination": {"host": "payments", "subset": "legacy"}, "weight": 10}]}]}});
        let asked = Weights {
            canary: 30,
            stable: 70,
        };
        let wanted = VirtualServiceWanted {
            weights: Some(asked),
            ..Default::default()
        };
        let out = edited(&vs, targets, selected(), &wanted).unwrap();
        let route = &out["spec"]["http"][0]["route"];
        assert_eq!(route[0]["weight"], 60);
        assert_eq!(route[1]["weight"], 30);
        assert_eq!(route[2]["weight"], 10);
        assert_eq!(weights_of(&out, targets, selected(), &[]).unwrap(), [asked]);
    }

    #[test]
    fn tls_and_tcp_routes_are_chosen_as_argo_chooses_them() {
        let split = json!([
            {"destination": {"host": "payments-stable"}, "weight": 100},
            {"destination": {"host": "payments-canary"}, "weight": 0}]);
        // Only tcp routes: no http route needed.
        let tcp_only = json!({"spec": {"tcp": [
            {"match": [{"port": 9000}, {"port": 9001}], "route": split},
            {"match": [{"port": 9000}], "route": split}]}});
        let ports = [IstioTcpRoute { port: Some(9000) }];
        let chosen = Selected {
            tcp: &ports,
            ..selected()
        };
        assert_eq!(
            weighted(&tcp_only, host_based(), chosen, &[]).unwrap(),
            [("tcp", 1)],
            "a route matching two ports is never chosen"
        );
        // Two tcp routes and no selector: refused, not the first taken.
        let error = weights_of(&tcp_only, host_based(), selected(), &[]).unwrap_err();
        assert!(
            error.0.contains("spec.tcp has more than one route"),
            "{error:?}"
        );
        // A tls match without a port is port 0.
        let tls = json!({"spec": {"tls": [{"match": [{"sniHosts": ["b", "a"]}], "route": split}]}});
        let selectors = [IstioTlsRoute {
            port: None,
            sni_hosts: vec!["a".into(), "b".into()],
        }];
        let chosen = Selected {
            tls: &selectors,
            ..selected()
        };
        assert_eq!(
            weighted(&tls, host_based(), chosen, &[]).unwrap(),
            [("tls", 0)]
        );
        let nothing = json!({"spec": {"hosts": ["payments"]}});
        assert!(weights_of(&nothing, host_based(), selected(), &[]).is_err());
    }
}
