//! Gateway API routes (HTTPRoute, GRPCRoute) as the `argoproj-labs/gatewayAPI` plugin edits
//! them, on the route as read: the canary's and the stable's `backendRefs` weights in every rule
//! that names both Services, header routes as rules Flotilla inserts and removes by name, the
//! in-progress label. Pure: the backend reads, then writes back
//! with the `resourceVersion` it read (`routes`).

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::rollout::Weights;
use flotilla_core::spec::rollout::HeaderRoutingMatch;
use serde_json::{Value, json};

/// The Services a route's rules send the canary's and the stable's traffic to.
#[derive(Debug, Clone, Copy)]
pub struct Backends<'a> {
    /// `canaryService`.
    pub canary: &'a str,
    /// `stableService`.
    pub stable: &'a str,
}

/// What Flotilla wants of one route.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteWanted {
    /// The weights (None: the engine has not asked for any; the route's stand).
    pub weights: Option<Weights>,
    /// The header routes in effect, by name (only on routes that take them).
    pub header_routes: BTreeMap<String, Vec<HeaderRoutingMatch>>,
    /// Every route name the Rollout manages: rules of these names not in effect are removed.
    pub managed: BTreeSet<String>,
    /// The in-progress label (None: disabled).
    pub label: Option<(String, String)>,
}

/// A route Flotilla cannot edit as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteError(pub String);

/// Whether `rule` is one Flotilla inserted for a header route: named after a managed route
/// (`NAME`, or `NAME-<n>` for the copies of a route's further rules).
fn managed_rule(rule: &Value, managed: &BTreeSet<String>) -> bool {
    let Some(name) = rule["name"].as_str() else {
        return false;
    };
    managed.iter().any(|m| {
        name == m
            || name
                .strip_prefix(m.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

fn rules(route: &Value) -> &[Value] {
    route["spec"]["rules"].as_array().map_or(&[], Vec::as_slice)
}

/// A backendRef's weight (the API's default, 1, when unset).
fn weight(backend: &Value) -> i32 {
    backend["weight"].as_i64().map_or(1, |w| w as i32)
}

/// Whether a backendRef names Service `name` (core group, kind Service, by default).
fn names_service(backend: &Value, name: &str) -> bool {
    backend["name"] == name
        && backend["group"].as_str().is_none_or(str::is_empty)
        && backend["kind"].as_str().is_none_or(|k| k == "Service")
}

/// The indices of the rules (Flotilla's own aside) that name both Services.
fn weighted_rules(route: &Value, backends: Backends<'_>, managed: &BTreeSet<String>) -> Vec<usize> {
    rules(route)
        .iter()
        .enumerate()
        .filter(|(_, rule)| !managed_rule(rule, managed))
        .filter(|(_, rule)| {
            let refs = rule["backendRefs"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            refs.iter().any(|b| names_service(b, backends.canary))
                && refs.iter().any(|b| names_service(b, backends.stable))
        })
        .map(|(i, _)| i)
        .collect()
}

fn no_rule(backends: Backends<'_>) -> RouteError {
    RouteError(format!(
        "no rule names both the canary Service {:?} and the stable Service {:?} in its backendRefs",
        backends.canary, backends.stable
    ))
}

/// The weights of each rule that names both Services, in order: (canary, stable).
pub fn weights_of(
    route: &Value,
    backends: Backends<'_>,
    managed: &BTreeSet<String>,
) -> Result<Vec<Weights>, RouteError> {
    let indices = weighted_rules(route, backends, managed);
    if indices.is_empty() {
        return Err(no_rule(backends));
    }
    Ok(indices
        .into_iter()
        .map(|i| {
            let refs = rules(route)[i]["backendRefs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let sum = |name: &str| -> i32 {
                refs.iter()
                    .filter(|b| names_service(b, name))
                    .map(weight)
                    .sum()
            };
            Weights {
                canary: sum(backends.canary),
                stable: sum(backends.stable),
            }
        })
        .collect())
}

/// A header condition as a Gateway API header match: exact as `Exact`, a prefix or a regular
/// expression as `RegularExpression` (the prefix escaped), as the plugin writes them.
fn header_match(m: &HeaderRoutingMatch) -> Result<Value, RouteError> {
    let value = &m.header_value;
    let (kind, text) = if let Some(exact) = &value.exact {
        ("Exact", exact.clone())
    } else if let Some(prefix) = &value.prefix {
        ("RegularExpression", format!("{}.*", regex_escape(prefix)))
    } else if let Some(regex) = &value.regex {
        ("RegularExpression", regex.clone())
    } else {
        return Err(RouteError(format!(
            "the header route's condition on {:?} has no exact, prefix or regex",
            m.header_name
        )));
    };
    Ok(json!({"type": kind, "name": m.header_name, "value": text}))
}

fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The route with Flotilla's change made: weights in every rule naming both Services, its
/// header-route rules as `wanted` says (each one a copy of every weighted rule, its matches
/// narrowed by the headers, sending to the canary only), the label. Other rules and fields are
/// left as read.
pub fn edited(
    route: &Value,
    backends: Backends<'_>,
    wanted: &RouteWanted,
) -> Result<Value, RouteError> {
    let mut out = route.clone();
    let indices = weighted_rules(route, backends, &wanted.managed);
    if indices.is_empty() {
        return Err(no_rule(backends));
    }
    let mut rules: Vec<Value> = self::rules(route).to_vec();
    if let Some(weights) = wanted.weights {
        for &i in &indices {
            if let Some(refs) = rules[i]["backendRefs"].as_array_mut() {
                for backend in refs {
                    if names_service(backend, backends.canary) {
                        backend["weight"] = json!(weights.canary);
                    } else if names_service(backend, backends.stable) {
                        backend["weight"] = json!(weights.stable);
                    }
                }
            }
        }
    }
    // Header routes: the ones in effect made again, those no longer in effect dropped.
    let sources: Vec<Value> = indices.iter().map(|&i| rules[i].clone()).collect();
    rules.retain(|rule| !managed_rule(rule, &wanted.managed));
    for (name, matches) in &wanted.header_routes {
        let headers = matches
            .iter()
            .map(header_match)
            .collect::<Result<Vec<_>, _>>()?;
        for (n, source) in sources.iter().enumerate() {
            let canary = source["backendRefs"]
                .as_array()
                .and_then(|refs| refs.iter().find(|b| names_service(b, backends.canary)))
                .cloned()
                .unwrap_or_default();
            let mut backend = json!({"group": "", "kind": "Service", "name": backends.canary});
            if let Some(port) = canary.get("port") {
                backend["port"] = port.clone();
            }
            let narrowed: Vec<Value> = match source["matches"].as_array() {
                Some(matches) if !matches.is_empty() => matches
                    .iter()
                    .map(|m| {
                        let mut m = m.clone();
                        let mut all = m["headers"].as_array().cloned().unwrap_or_default();
                        all.extend(headers.iter().cloned());
                        m["headers"] = Value::Array(all);
                        m
                    })
                    .collect(),
                _ => vec![json!({"headers": headers})],
            };
            let mut rule = json!({
                "name": if n == 0 { name.clone() } else { format!("{name}-{n}") },
                "matches": narrowed,
                "backendRefs": [backend],
            });
            if let Some(filters) = source.get("filters") {
                rule["filters"] = filters.clone();
            }
            rules.push(rule);
        }
    }
    out["spec"]["rules"] = Value::Array(rules);
    if let Some((key, value)) = &wanted.label {
        let canary = wanted.weights.map_or(0, |w| w.canary);
        let labels = &mut out["metadata"]["labels"];
        if canary > 0 {
            if !labels.is_object() {
                *labels = json!({});
            }
            labels[key.as_str()] = json!(value);
        } else if let Some(map) = labels.as_object_mut() {
            map.remove(key);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::spec::rollout::StringMatch;

    const BACKENDS: Backends<'static> = Backends {
        canary: "web-canary",
        stable: "web-stable",
    };

    fn route() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"team": "shop"}},
            "spec": {"rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                 "backendRefs": [
                    {"name": "web-stable", "port": 80, "weight": 100},
                    {"name": "web-canary", "port": 80, "weight": 0}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/static"}}],
                 "backendRefs": [{"name": "cdn", "port": 80}]}
            ]}
        })
    }

    fn wanted(canary: i32) -> RouteWanted {
        RouteWanted {
            weights: Some(Weights {
                canary,
                stable: 100 - canary,
            }),
            label: Some((
                "rollouts.argoproj.io/gatewayapi-canary".into(),
                "in-progress".into(),
            )),
            ..RouteWanted::default()
        }
    }

    #[test]
    fn weights_go_to_the_rules_that_name_both_services_only() {
        let out = edited(&route(), BACKENDS, &wanted(30)).unwrap();
        assert_eq!(
            weights_of(&out, BACKENDS, &BTreeSet::new()).unwrap(),
            [Weights {
                canary: 30,
                stable: 70
            }]
        );
        assert_eq!(out["spec"]["rules"][1], route()["spec"]["rules"][1]);
        assert_eq!(
            out["metadata"]["labels"]["rollouts.argoproj.io/gatewayapi-canary"],
            "in-progress"
        );
        assert_eq!(out["metadata"]["labels"]["team"], "shop");
        assert_ne!(route(), out);
        assert_eq!(out, edited(&out, BACKENDS, &wanted(30)).unwrap());
        // Back to 0: the label goes.
        let back = edited(&out, BACKENDS, &wanted(0)).unwrap();
        assert!(
            back["metadata"]["labels"]
                .get("rollouts.argoproj.io/gatewayapi-canary")
                .is_none()
        );
    }

    #[test]
    fn a_route_without_both_services_is_an_error() {
        let mut r = route();
        r["spec"]["rules"][0]["backendRefs"] = json!([{"name": "web-stable"}]);
        let error = edited(&r, BACKENDS, &wanted(10)).unwrap_err();
        assert!(
            error.0.contains("web-canary") && error.0.contains("web-stable"),
            "{error:?}"
        );
        assert!(weights_of(&r, BACKENDS, &BTreeSet::new()).is_err());
    }

    #[test]
    fn header_routes_are_named_rules_inserted_and_removed() {
        let mut w = wanted(20);
        w.managed = ["beta".to_owned(), "other".to_owned()].into();
        w.header_routes.insert(
            "beta".into(),
            vec![HeaderRoutingMatch {
                header_name: "x-beta".into(),
                header_value: StringMatch {
                    prefix: Some("yes.".into()),
                    ..StringMatch::default()
                },
            }],
        );
        let out = edited(&route(), BACKENDS, &w).unwrap();
        let rules = out["spec"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(
            rules[2],
            json!({
                "name": "beta",
                "matches": [{"path": {"type": "PathPrefix", "value": "/"},
                             "headers": [{"type": "RegularExpression", "name": "x-beta", "value": "yes\\..*"}]}],
                "backendRefs": [{"group": "", "kind": "Service", "name": "web-canary", "port": 80}],
            })
        );
        // The weighted rule's weights are read without Flotilla's own rule.
        assert_eq!(
            weights_of(&out, BACKENDS, &w.managed).unwrap(),
            [Weights {
                canary: 20,
                stable: 80
            }]
        );
        // Made again, not twice; gone once not in effect; a rule of another name stays.
        assert_eq!(edited(&out, BACKENDS, &w).unwrap(), out);
        w.header_routes.clear();
        let mut theirs = out.clone();
        theirs["spec"]["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "beta-x", "backendRefs": [{"name": "cdn"}]}));
        let cleared = edited(&theirs, BACKENDS, &w).unwrap();
        let names: Vec<&Value> = cleared["spec"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["name"])
            .collect();
        assert_eq!(names, [&Value::Null, &Value::Null, &json!("beta-x")]);
    }
}
