//! Rules for the canary strategy: its steps against the traffic router (weights, header and
//! mirror routes, experiments), replica arithmetic without routing, and its analysis
//! references.

use super::checks::{
    ArgsCheck, check_scale_down_and_anti_affinity, check_string_match, check_template_ref,
};
use crate::lint::{Index, Sink};
use crate::manifest::LoadedManifest;
use crate::spec::rollout::CanaryStrategy;

/// Routers that can weight experiment templates (Argo: SMI, ALB, Istio, and plugins).
const EXPERIMENT_WEIGHT_ROUTERS: &[&str] = &["smi", "alb", "istio", "plugins"];

/// Routers that implement setHeaderRoute.
const HEADER_ROUTE_ROUTERS: &[&str] = &["istio", "alb", "apisix", "plugins"];

/// Routers that implement setMirrorRoute.
const MIRROR_ROUTE_ROUTERS: &[&str] = &["istio", "plugins"];

#[allow(clippy::too_many_arguments)]
pub(super) fn check_canary(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    revision_history_limit: Option<i32>,
    canary: &CanaryStrategy,
    replicas: i32,
    check_service: &dyn Fn(&mut Sink, &str, &str),
    args_resolvable: &ArgsCheck<'_>,
) {
    let base = "spec.strategy.canary";
    // Argo defaults both to 25%; both explicitly zero is invalid.
    let max_surge_zero = canary.max_surge.is_some_and(|v| v.is_zero());
    let max_unavailable_zero = canary.max_unavailable.is_some_and(|v| v.is_zero());
    if max_surge_zero && max_unavailable_zero {
        sink.error(
            loaded,
            "argo/max-surge-unavailable",
            format!("{base}.maxSurge"),
            "MaxSurge and MaxUnavailable both can not be zero",
        );
    }
    let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    if nonempty(&canary.canary_service) && canary.canary_service == canary.stable_service {
        sink.error(loaded, "argo/distinct-services", format!("{base}.stableService"), "This rollout uses the same service for the stable and canary services, but two different services are required.");
    }
    for (field, service) in [
        ("canaryService", &canary.canary_service),
        ("stableService", &canary.stable_service),
    ] {
        if let Some(service) = service.as_deref().filter(|s| !s.is_empty()) {
            check_service(sink, &format!("{base}.{field}"), service);
        }
    }
    let routing = canary.traffic_routing.as_ref();
    if let Some(ping_pong) = &canary.ping_pong {
        if let Some(routing) = routing {
            if routing.alb.is_none() && routing.istio.is_none() && routing.plugins.is_empty() {
                sink.error(loaded, "argo/ping-pong", format!("{base}.trafficRouting.alb"), "Ping-pong feature works with the ALB, Istio, and plugin-based traffic routers only");
            }
            if routing
                .alb
                .as_ref()
                .is_some_and(|alb| alb.root_service.as_deref().is_none_or(str::is_empty))
            {
                sink.error(loaded, "argo/ping-pong", format!("{base}.trafficRouting.alb.rootService"), "Root service field is required for the configuration with ALB and ping-pong feature enabled");
            }
        }
        if ping_pong.ping_service.is_empty() {
            sink.error(
                loaded,
                "argo/ping-pong",
                format!("{base}.pingPong.pingService"),
                "Ping service and Pong service must to be set to use Ping-Pong feature",
            );
        }
        if ping_pong.pong_service.is_empty() {
            sink.error(
                loaded,
                "argo/ping-pong",
                format!("{base}.pingPong.pongService"),
                "Ping service and Pong service must to be set to use Ping-Pong feature",
            );
        }
        if ping_pong.ping_service == ping_pong.pong_service {
            sink.error(loaded, "argo/ping-pong", format!("{base}.pingPong.pingService"), "This rollout uses the same service for the ping and pong services, but two different services are required.");
        }
        check_service(
            sink,
            &format!("{base}.pingPong.pingService"),
            &ping_pong.ping_service,
        );
        check_service(
            sink,
            &format!("{base}.pingPong.pongService"),
            &ping_pong.pong_service,
        );
    }
    if let Some(routing) = routing {
        // Upstream's requireCanaryStableServices.
        let no_ping_pong = canary.ping_pong.is_none();
        let required = (no_ping_pong
            && (routing.alb.is_some()
                || routing
                    .istio
                    .as_ref()
                    .is_some_and(|i| i.destination_rule.is_none())))
            || routing.smi.is_some()
            || routing.apisix.is_some()
            || routing.ambassador.is_some()
            || routing.nginx.is_some()
            || routing.app_mesh.is_some()
            || routing.traefik.is_some();
        if required {
            for (field, service) in [
                ("stableService", &canary.stable_service),
                ("canaryService", &canary.canary_service),
            ] {
                if !nonempty(service) {
                    sink.error(
                        loaded,
                        "argo/routing-services",
                        format!("{base}.{field}"),
                        "Canary service and Stable service must to be set to use Traffic Routing",
                    );
                }
            }
        }
        if canary.scale_down_delay_seconds.is_some() && canary.dynamic_stable_scale == Some(true) {
            sink.error(
                loaded,
                "argo/dynamic-stable-scale",
                format!("{base}.dynamicStableScale"),
                "Canary dynamicStableScale cannot be used with scaleDownDelaySeconds",
            );
        }
        if routing.max_traffic_weight.is_some()
            && routing.nginx.is_none()
            && routing.plugins.is_empty()
        {
            sink.error(
                loaded,
                "argo/max-traffic-weight",
                format!("{base}.trafficRouting.maxTrafficWeight"),
                "Canary maxTrafficWeight in traffic routing only supported in Nginx and Plugins",
            );
        }
    } else {
        if canary.scale_down_delay_seconds.is_some() {
            sink.error(
                loaded,
                "argo/needs-traffic-routing",
                format!("{base}.scaleDownDelaySeconds"),
                "Canary scaleDownDelaySeconds can only be used with traffic routing",
            );
        }
        if canary.dynamic_stable_scale == Some(true) {
            sink.error(
                loaded,
                "argo/needs-traffic-routing",
                format!("{base}.dynamicStableScale"),
                "Canary dynamicStableScale can only be used with traffic routing",
            );
        }
    }
    check_scale_down_and_anti_affinity(
        sink,
        loaded,
        base,
        canary.scale_down_delay_revision_limit,
        revision_history_limit,
        canary.anti_affinity.as_ref(),
    );

    let providers: Vec<&str> = routing.map(|r| r.providers()).unwrap_or_default();
    let max_weight = routing.map_or(100, |r| r.max_traffic_weight());
    let managed: Option<Vec<&str>> = routing
        .filter(|r| !r.managed_routes.is_empty())
        .map(|r| r.managed_routes.iter().map(|m| m.name.as_str()).collect());

    if let Some(background) = &canary.analysis {
        for (i, reference) in background.templates.iter().enumerate() {
            args_resolvable(
                sink,
                &format!("{base}.analysis.templates[{i}]"),
                reference,
                &background.args,
            );
        }
        if let Some(start) = background.starting_step
            && (start < 0 || start as usize > canary.steps.len())
        {
            sink.error(
                loaded,
                "argo/starting-step",
                format!("{base}.analysis.startingStep"),
                format!(
                    "startingStep {start} is outside the steps (0..={})",
                    canary.steps.len()
                ),
            );
        }
    }

    for (i, step) in canary.steps.iter().enumerate() {
        let path = format!("{base}.steps[{i}]");
        let set = step.set_fields();
        // Upstream allows a route or scale step beside another kind; only these four exclude each other.
        let exclusive = [
            step.set_weight.is_some(),
            step.pause.is_some(),
            step.experiment.is_some(),
            step.analysis.is_some(),
        ];
        if set.is_empty() || exclusive.iter().filter(|s| **s).count() > 1 {
            sink.error(
                loaded,
                "argo/step-one-field",
                path.clone(),
                format!(
                    "Step must have one of the following set: experiment, setWeight, setCanaryScale, plugin or pause{}",
                    if set.is_empty() { String::new() } else { format!(" (this step sets {})", set.join(" and ")) }
                ),
            );
        }
        if let Some(weight) = step.set_weight {
            if !(0..=max_weight).contains(&weight) {
                sink.error(
                    loaded,
                    "argo/set-weight-range",
                    format!("{path}.setWeight"),
                    format!("SetWeight needs to be between 0 and {max_weight}"),
                );
            } else if routing.is_none()
                && weight > 0
                && weight < 100
                && (weight * replicas) % 100 != 0
            {
                sink.warn(
                    loaded,
                    "rollout/weight-finer-than-replica",
                    format!("{path}.setWeight"),
                    format!(
                        "setWeight {weight} is finer than one replica of {replicas}: without trafficRouting the weight follows the replica ratio, so the canary gets {}% of the pods; configure trafficRouting for precise weights",
                        canary_percent_without_routing(weight, replicas)
                    ),
                );
            }
        }
        if let Some(pause) = &step.pause
            && pause.duration.is_none()
            && canary.analysis.is_none()
        {
            sink.warn(loaded, "rollout/unguarded-indefinite-pause", format!("{path}.pause"), "an indefinite pause with no background analysis: nothing watches the canary while it waits for a human; add spec.strategy.canary.analysis");
        }
        if step.set_canary_scale.is_some() && routing.is_none() {
            sink.error(
                loaded,
                "argo/needs-traffic-routing",
                format!("{base}.trafficRouting"),
                format!("SetCanaryScale requires TrafficRouting to be set (steps[{i}])"),
            );
        }
        if let Some(route) = &step.set_header_route {
            let route_path = format!("{path}.setHeaderRoute");
            if !providers.iter().any(|p| HEADER_ROUTE_ROUTERS.contains(p)) {
                sink.error(
                    loaded,
                    "argo/needs-traffic-routing",
                    route_path.clone(),
                    "SetHeaderRoute requires TrafficRouting, supports Istio and ALB and Apisix",
                );
            } else {
                let alb = routing.is_some_and(|r| r.alb.is_some());
                for (m, header_match) in route.r#match.iter().enumerate() {
                    check_string_match(
                        sink,
                        loaded,
                        format!("{route_path}.match[{m}].headerValue"),
                        &header_match.header_value,
                        alb,
                    );
                }
            }
        }
        if let Some(route) = &step.set_mirror_route {
            let route_path = format!("{path}.setMirrorRoute");
            if !providers.iter().any(|p| MIRROR_ROUTE_ROUTERS.contains(p)) {
                sink.error(
                    loaded,
                    "argo/needs-traffic-routing",
                    route_path.clone(),
                    "SetMirrorRoute requires TrafficRouting, supports Istio and Plugins",
                );
            }
            for (m, mirror_match) in route.r#match.iter().enumerate() {
                for (field, value) in [
                    ("method", &mirror_match.method),
                    ("path", &mirror_match.path),
                ] {
                    if let Some(value) = value {
                        check_string_match(
                            sink,
                            loaded,
                            format!("{route_path}.match[{m}].{field}"),
                            value,
                            false,
                        );
                    }
                }
                for (header, value) in &mirror_match.headers {
                    check_string_match(
                        sink,
                        loaded,
                        format!("{route_path}.match[{m}].headers.{header}"),
                        value,
                        false,
                    );
                }
            }
            if let Some(p) = route.percentage.filter(|p| !(0..=100).contains(p)) {
                sink.error(
                    loaded,
                    "argo/mirror-percentage",
                    format!("{route_path}.percentage"),
                    format!("percentage must be between 0 and 100 (got {p})"),
                );
            }
        }
        if routing.is_some() && (step.set_header_route.is_some() || step.set_mirror_route.is_some())
        {
            match &managed {
                None => sink.error(
                    loaded,
                    "argo/managed-routes",
                    format!("{base}.trafficRouting.managedRoutes"),
                    "Rollout has missing field 'spec.strategy.canary.trafficRouting.managedRoutes'",
                ),
                Some(managed) => {
                    let names = [
                        step.set_header_route
                            .as_ref()
                            .map(|r| ("setHeaderRoute", r.name.as_deref().unwrap_or(""))),
                        step.set_mirror_route
                            .as_ref()
                            .map(|r| ("setMirrorRoute", r.name.as_str())),
                    ];
                    for (field, name) in names.into_iter().flatten() {
                        if !managed.contains(&name) {
                            sink.error(loaded, "argo/managed-routes", format!("{path}.{field}.name"), "Steps define a route that does not exist in spec.strategy.canary.trafficRouting.managedRoutes");
                        }
                    }
                }
            }
        }
        if let Some(analysis) = &step.analysis {
            for (t, reference) in analysis.templates.iter().enumerate() {
                args_resolvable(
                    sink,
                    &format!("{path}.analysis.templates[{t}]"),
                    reference,
                    &analysis.args,
                );
            }
        }
        if let Some(experiment) = &step.experiment {
            for (t, template) in experiment.templates.iter().enumerate() {
                if template.weight.is_none() {
                    continue;
                }
                let weight_path = format!("{path}.experiment.templates[{t}].weight");
                if routing.is_none() {
                    sink.error(
                        loaded,
                        "argo/experiment-weight",
                        weight_path,
                        "Experiment template weight cannot be set unless TrafficRouting is enabled",
                    );
                } else if !providers
                    .iter()
                    .any(|p| EXPERIMENT_WEIGHT_ROUTERS.contains(p))
                {
                    sink.error(loaded, "argo/experiment-weight", weight_path, "Experiment template weight is only available for TrafficRouting with SMI, ALB, Istio and Plugins at this time");
                }
            }
            for (a, analysis) in experiment.analyses.iter().enumerate() {
                check_template_ref(
                    index,
                    sink,
                    loaded,
                    &format!("{path}.experiment.analyses[{a}]"),
                    &analysis.template_name,
                    analysis.is_cluster_scope(),
                    &analysis.args,
                );
            }
        }
    }
}

/// The share of pods (in percent) the canary gets for a weight when replicas approximate it:
/// Argo scales the canary to ceil(replicas × weight) and the stable to ceil(replicas × (1 − weight)).
fn canary_percent_without_routing(weight: i32, replicas: i32) -> i32 {
    let canary = (weight * replicas + 99) / 100;
    let stable = ((100 - weight) * replicas + 99) / 100;
    if canary + stable == 0 {
        return 0;
    }
    canary * 100 / (canary + stable)
}

#[cfg(test)]
mod tests {
    use super::canary_percent_without_routing;

    #[test]
    fn replica_approximation_rounds_the_canary_up() {
        assert_eq!(canary_percent_without_routing(5, 4), 20);
        assert_eq!(canary_percent_without_routing(50, 4), 50);
        assert_eq!(canary_percent_without_routing(10, 3), 25);
        assert_eq!(canary_percent_without_routing(10, 1), 50);
    }
}
