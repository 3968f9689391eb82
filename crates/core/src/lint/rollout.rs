//! Rules for Rollouts (Argo's validation, service cross-checks, analysis references, and the
//! single-cluster anti-patterns) and for standalone Experiments.
//!
//! The canary strategy's rules are the child module `canary`; `checks` holds what both
//! strategies and Experiments check (anti-affinity, route matches, template references).

mod canary;
mod checks;

use std::collections::BTreeMap;

use self::canary::check_canary;
use self::checks::{check_scale_down_and_anti_affinity, check_template_ref};
use super::{Index, Sink};
use crate::manifest::LoadedManifest;
use crate::spec::analysis::Experiment;
use crate::spec::rollout::{AnalysisRunArgument, AnalysisTemplateRef, Rollout};

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
        check_scale_down_and_anti_affinity(
            sink,
            loaded,
            base,
            blue_green.scale_down_delay_revision_limit,
            spec.revision_history_limit,
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
