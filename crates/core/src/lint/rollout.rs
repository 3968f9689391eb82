//! Rules for Rollouts (Argo's validation, service cross-checks, analysis references, and the
//! single-cluster anti-patterns) and for standalone Experiments.

use std::collections::BTreeMap;

use super::{INJECTED_ARGS, Index, Sink};
use crate::manifest::LoadedManifest;
use crate::spec::analysis::Experiment;
use crate::spec::rollout::{AnalysisRunArgument, AnalysisTemplateRef, CanaryStrategy, Rollout};

/// Checks one analysis template reference and the arguments passed to it.
type ArgsCheck<'a> = dyn Fn(&mut Sink, &str, &AnalysisTemplateRef, &[AnalysisRunArgument]) + 'a;

/// Routers that can weight experiment templates (Argo: SMI, ALB, Istio, and plugins).
const EXPERIMENT_WEIGHT_ROUTERS: &[&str] = &["smi", "alb", "istio", "plugins"];
/// Routers that implement setHeaderRoute.
const HEADER_ROUTE_ROUTERS: &[&str] = &["istio", "alb", "apisix", "plugins"];
/// Routers that implement setMirrorRoute.
const MIRROR_ROUTE_ROUTERS: &[&str] = &["istio", "plugins"];

pub(super) fn check_rollout(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    rollout: &Rollout,
) {
    let spec = &rollout.spec;
    let replicas = spec.replicas.unwrap_or(1);
    for (field, value) in [
        ("replicas", spec.replicas),
        ("minReadySeconds", spec.min_ready_seconds),
        ("revisionHistoryLimit", spec.revision_history_limit),
        ("progressDeadlineSeconds", spec.progress_deadline_seconds),
    ] {
        if let Some(v) = value.filter(|v| *v < 0) {
            sink.error(
                loaded,
                "argo/non-negative",
                format!("spec.{field}"),
                format!("must be greater than or equal to 0 (got {v})"),
            );
        }
    }
    if spec.workload_ref.is_some() {
        if spec
            .template
            .as_ref()
            .is_some_and(|t| t.spec.is_some() || t.metadata.is_some())
        {
            sink.error(
                loaded,
                "argo/workload-ref",
                "spec.template",
                "template must be empty for workload reference rollout",
            );
        }
    } else {
        match &spec.selector {
            None => sink.error(
                loaded,
                "argo/selector-required",
                "spec.selector",
                "Rollout has missing field '.spec.selector'",
            ),
            Some(selector) => {
                let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && selector
                        .match_expressions
                        .as_ref()
                        .is_none_or(|m| m.is_empty());
                if empty {
                    sink.error(
                        loaded,
                        "argo/selector-required",
                        "spec.selector",
                        "empty selector is invalid for deployment",
                    );
                }
            }
        }
        match &spec.template {
            None => sink.error(loaded, "argo/containers-required", "spec.template.spec.containers", "Required value: a pod template with at least one container is required (unless workloadRef is set)"),
            Some(template) => {
                let containers = template.spec.as_ref().map_or(0, |s| s.containers.len());
                if containers == 0 {
                    sink.error(loaded, "argo/containers-required", "spec.template.spec.containers", "Required value: a pod template must have at least one container");
                }
                if let (Some(selector), labels) = (&spec.selector, template.metadata.as_ref().and_then(|m| m.labels.as_ref())) {
                    for (key, value) in selector.match_labels.iter().flatten() {
                        if labels.and_then(|l| l.get(key)) != Some(value) {
                            sink.error(
                                loaded,
                                "argo/selector-matches-template",
                                "spec.template.metadata.labels",
                                format!("`selector` does not match template `labels`: the template has no label {key}={value}"),
                            );
                        }
                    }
                }
            }
        }
    }
    let progress_deadline = spec.progress_deadline_seconds.unwrap_or(600);
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    if progress_deadline <= min_ready {
        sink.error(
            loaded,
            "argo/progress-deadline",
            "spec.progressDeadlineSeconds",
            format!("must be greater than minReadySeconds ({progress_deadline} <= {min_ready})"),
        );
    }
    let Some(strategy) = &spec.strategy else {
        sink.error(
            loaded,
            "argo/strategy",
            "spec.strategy",
            "Rollout has missing field '.spec.strategy': set canary or blueGreen",
        );
        return;
    };
    match (&strategy.canary, &strategy.blue_green) {
        (Some(_), Some(_)) => sink.error(
            loaded,
            "argo/strategy",
            "spec.strategy",
            "Multiple Strategies can not be listed",
        ),
        (None, None) => sink.error(
            loaded,
            "argo/strategy",
            "spec.strategy",
            "Rollout has missing field '.spec.strategy': set canary or blueGreen",
        ),
        _ => {}
    }
    let template_labels: Option<&BTreeMap<String, String>> = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    let check_service = |sink: &mut Sink, path: &str, service_name: &str| {
        let (Some(service), Some(labels)) = (index.services.get(service_name), template_labels)
        else {
            return;
        };
        let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
        for (key, value) in selector.into_iter().flatten() {
            if key == "rollouts-pod-template-hash" {
                continue;
            }
            if labels.get(key) != Some(value) {
                sink.error(
                    loaded,
                    "argo/service-selector",
                    path,
                    format!(
                        "Service {service_name:?} selects {key}={value}, which the Rollout's pod template labels do not match"
                    ),
                );
            }
        }
    };
    let args_resolvable = |sink: &mut Sink,
                           path: &str,
                           reference: &AnalysisTemplateRef,
                           args: &[AnalysisRunArgument]| {
        check_template_ref(
            index,
            sink,
            loaded,
            path,
            &reference.template_name,
            reference.is_cluster_scope(),
            args,
        );
    };

    if let Some(blue_green) = &strategy.blue_green {
        let base = "spec.strategy.blueGreen";
        if blue_green.preview_service.as_deref() == Some(blue_green.active_service.as_str()) {
            sink.error(loaded, "argo/distinct-services", format!("{base}.activeService"), "This rollout uses the same service for the active and preview services, but two different services are required.");
        }
        check_service(
            sink,
            &format!("{base}.activeService"),
            &blue_green.active_service,
        );
        if let Some(preview) = &blue_green.preview_service {
            check_service(sink, &format!("{base}.previewService"), preview);
        }
        if let (Some(limit), Some(history)) = (
            blue_green.scale_down_delay_revision_limit,
            spec.revision_history_limit.or(Some(10)),
        ) && history < limit
        {
            sink.error(loaded, "argo/revision-limit", format!("{base}.scaleDownDelayRevisionLimit"), "This rollout's revision history limit can not be smaller than the rollout's scale down limit");
        }
        check_anti_affinity(
            sink,
            loaded,
            &format!("{base}.antiAffinity"),
            blue_green.anti_affinity.as_ref(),
        );
        for (field, analysis) in [
            ("prePromotionAnalysis", &blue_green.pre_promotion_analysis),
            ("postPromotionAnalysis", &blue_green.post_promotion_analysis),
        ] {
            if let Some(analysis) = analysis {
                for (i, reference) in analysis.templates.iter().enumerate() {
                    args_resolvable(
                        sink,
                        &format!("{base}.{field}.templates[{i}]"),
                        reference,
                        &analysis.args,
                    );
                }
            }
        }
    }

    if let Some(canary) = &strategy.canary {
        check_canary(
            index,
            sink,
            loaded,
            spec.revision_history_limit,
            canary,
            replicas,
            &check_service,
            &args_resolvable,
        );
    }
}

fn check_anti_affinity(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: &str,
    anti_affinity: Option<&crate::spec::rollout::AntiAffinity>,
) {
    let Some(anti_affinity) = anti_affinity else {
        return;
    };
    let preferred = anti_affinity
        .preferred_during_scheduling_ignored_during_execution
        .as_ref();
    let required = anti_affinity
        .required_during_scheduling_ignored_during_execution
        .as_ref();
    if preferred.is_some() == required.is_some() {
        sink.error(
            loaded,
            "argo/anti-affinity",
            path.to_owned(),
            "AntiAffinity must have exactly one strategy listed",
        );
    }
    if let Some(preferred) = preferred
        && !(1..=100).contains(&preferred.weight)
    {
        sink.error(
            loaded,
            "argo/anti-affinity",
            format!("{path}.preferredDuringSchedulingIgnoredDuringExecution.weight"),
            "AntiAffinity weight must be between 1-100",
        );
    }
}

fn check_string_match(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: String,
    value: &crate::spec::rollout::StringMatch,
    alb: bool,
) {
    let set = [
        value.exact.is_some(),
        value.prefix.is_some(),
        value.regex.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if alb {
        if value.exact.as_deref().is_none_or(str::is_empty)
            || value.prefix.is_some()
            || value.regex.is_some()
        {
            sink.error(
                loaded,
                "argo/string-match",
                path,
                "SetHeaderRoute match value invalid. ALB supports 'exact' value only",
            );
        }
    } else if set == 0 {
        sink.error(loaded, "argo/string-match", path, "StringMatch value missed, match value must have one of the following: exact, regex, prefix");
    } else if set > 1 {
        sink.error(
            loaded,
            "argo/string-match",
            path,
            "StringMatch match value must have exactly one of the following: exact, regex, prefix",
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn check_canary(
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
    if let (Some(limit), Some(history)) = (
        canary.scale_down_delay_revision_limit,
        revision_history_limit.or(Some(10)),
    ) && history < limit
    {
        sink.error(loaded, "argo/revision-limit", format!("{base}.scaleDownDelayRevisionLimit"), "This rollout's revision history limit can not be smaller than the rollout's scale down limit");
    }
    check_anti_affinity(
        sink,
        loaded,
        &format!("{base}.antiAffinity"),
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

/// Checks that a referenced template exists among the linted files (a warning otherwise: it may
/// exist where the rollout runs) and that every argument it needs is supplied.
fn check_template_ref(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: &str,
    name: &str,
    cluster_scope: bool,
    args: &[AnalysisRunArgument],
) {
    let kind = if cluster_scope {
        "ClusterAnalysisTemplate"
    } else {
        "AnalysisTemplate"
    };
    let Some((_, template)) = index.template(name, cluster_scope) else {
        sink.warn(
            loaded,
            "ref/template-not-found",
            format!("{path}.templateName"),
            format!("{kind} {name:?} is not among the linted files (it may exist where the rollout runs; --strict makes this an error)"),
        );
        return;
    };
    let overridden = index.overridden_args(loaded.manifest.name());
    for arg in &template.spec.args {
        let has_default = arg.value.is_some() || arg.value_from.is_some();
        let supplied = args.iter().any(|a| a.name == arg.name)
            || INJECTED_ARGS.contains(&arg.name.as_str())
            || overridden.contains(arg.name.as_str());
        if !has_default && !supplied {
            sink.error(
                loaded,
                "args/unresolved",
                path.to_owned(),
                format!("args.{} was not resolved: {kind} {name:?} declares it without a value and this reference does not pass it", arg.name),
            );
        }
    }
}

pub(super) fn check_experiment(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    experiment: &Experiment,
) {
    let spec = &experiment.spec;
    if spec.templates.is_empty() {
        sink.error(
            loaded,
            "argo/experiment-templates",
            "spec.templates",
            "an Experiment needs at least one template",
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, template) in spec.templates.iter().enumerate() {
        let path = format!("spec.templates[{i}]");
        if !seen.insert(template.name.as_str()) {
            sink.error(
                loaded,
                "argo/experiment-templates",
                format!("{path}.name"),
                format!("template name {:?} is used twice", template.name),
            );
        }
        let containers = template
            .template
            .spec
            .as_ref()
            .map_or(0, |s| s.containers.len());
        if containers == 0 {
            sink.error(
                loaded,
                "argo/containers-required",
                format!("{path}.template.spec.containers"),
                "a pod template must have at least one container",
            );
        }
    }
    for (a, analysis) in spec.analyses.iter().enumerate() {
        let args: Vec<AnalysisRunArgument> = analysis
            .args
            .iter()
            .map(|arg| AnalysisRunArgument {
                name: arg.name.clone(),
                value: arg.value.clone(),
                value_from: None,
            })
            .collect();
        check_template_ref(
            index,
            sink,
            loaded,
            &format!("spec.analyses[{a}]"),
            &analysis.template_name,
            analysis.cluster_scope == Some(true),
            &args,
        );
    }
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
