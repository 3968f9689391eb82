//! Rules for AnalysisTemplates, ClusterAnalysisTemplates and AnalysisRuns: Argo's validation,
//! argument declarations, conditions that compile, and the evidence and population checks.

use std::collections::BTreeSet;

use super::{EXECUTABLE_PROVIDERS, INJECTED_ARGS, Index, Sink, placeholders};
use crate::analysis::{Condition, MetricResult, measurement_phase};
use crate::manifest::LoadedManifest;
use crate::spec::IntOrString;
use crate::spec::analysis::{AnalysisPhase, AnalysisTemplateSpec, Argument, Metric};

pub(super) fn check_template(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    spec: &AnalysisTemplateSpec,
) {
    // Arguments declared by included templates count too (Argo merges them).
    let mut args = spec.args.clone();
    for reference in &spec.templates {
        if let Some((_, included)) = index.template(
            &reference.template_name,
            reference.cluster_scope == Some(true),
        ) {
            args.extend(included.spec.args.iter().cloned());
        }
    }
    check_metrics(
        sink,
        loaded,
        &spec.metrics,
        "spec.metrics",
        &args,
        spec.templates.is_empty(),
    );
    for (i, reference) in spec.templates.iter().enumerate() {
        let cluster_scope = reference.cluster_scope == Some(true);
        if index
            .template(&reference.template_name, cluster_scope)
            .is_none()
        {
            sink.warn(
                loaded,
                "ref/template-not-found",
                format!("spec.templates[{i}].templateName"),
                format!("template {:?} is not among the linted files (it may exist where the analysis runs; --strict makes this an error)", reference.template_name),
            );
        }
    }
    let names: Vec<&str> = spec.metrics.iter().map(|m| m.name.as_str()).collect();
    for (field, rules) in [
        (
            "dryRun",
            spec.dry_run
                .iter()
                .map(|d| d.metric_name.as_str())
                .collect::<Vec<_>>(),
        ),
        (
            "measurementRetention",
            spec.measurement_retention
                .iter()
                .map(|d| d.metric_name.as_str())
                .collect(),
        ),
    ] {
        for (i, pattern) in rules.iter().enumerate() {
            let path = format!("spec.{field}[{i}].metricName");
            match regex::Regex::new(pattern) {
                Err(error) => sink.error(
                    loaded,
                    "analysis/metric-name-pattern",
                    path,
                    format!("metricName {pattern:?} is not a valid regular expression: {error}"),
                ),
                Ok(re) if spec.templates.is_empty() && !names.iter().any(|n| re.is_match(n)) => {
                    sink.error(
                        loaded,
                        "analysis/metric-name-pattern",
                        path,
                        format!("{field} rule {pattern:?} matches no metric of this template"),
                    )
                }
                Ok(_) => {}
            }
        }
    }
}

fn int_value(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: &str,
    value: &Option<IntOrString>,
) -> Option<i64> {
    let value = value.as_ref()?;
    if value.is_templated() {
        return None;
    }
    match value.as_int() {
        Some(v) => Some(v),
        None => {
            sink.error(
                loaded,
                "schema",
                path.to_owned(),
                format!("{value:?} is neither an integer nor an {{{{args.x}}}} placeholder"),
            );
            None
        }
    }
}

/// Replaces every `{{args.x}}` with a number, so a templated condition can be compiled.
fn with_placeholders_filled(condition: &str) -> String {
    let mut out = String::with_capacity(condition.len());
    let mut rest = condition;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        match rest[start..].find("}}") {
            Some(end) => {
                out.push('1');
                rest = &rest[start + end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

pub(super) fn check_metrics(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    metrics: &[Metric],
    base: &str,
    args: &[Argument],
    must_have_metrics: bool,
) {
    if metrics.is_empty() && must_have_metrics {
        sink.error(
            loaded,
            "analysis/metrics-required",
            base.to_owned(),
            "at least one metric is required",
        );
    }
    let declared: BTreeSet<&str> = args.iter().map(|a| a.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    for (i, metric) in metrics.iter().enumerate() {
        let path = format!("{base}[{i}]");
        if !seen.insert(metric.name.as_str()) {
            sink.error(
                loaded,
                "analysis/unique-metric-names",
                format!("{path}.name"),
                format!("metric name {:?} is used twice", metric.name),
            );
        }
        let kinds = metric.provider.kinds();
        match kinds.len() {
            0 => sink.error(
                loaded,
                "analysis/one-provider",
                format!("{path}.provider"),
                "a metric needs exactly one provider; none is set",
            ),
            1 if ["builtin", "compare", "sequential"].contains(&kinds[0]) => {
                sink.push(
                    loaded,
                    crate::diagnostic::Severity::Note,
                    "flotilla/extension",
                    format!("{path}.provider.{}", kinds[0]),
                    format!("the {} provider is a Flotilla extension (not Argo-compatible); it reads the agent's traffic statistics (or those `flotilla simulate` synthesises)", kinds[0]),
                );
                for (field, message) in crate::analysis::compare::problems(&metric.provider) {
                    sink.error(
                        loaded,
                        "flotilla/composite-metric",
                        format!("{path}.provider.{field}"),
                        message,
                    );
                }
                if let Some(compare) = &metric.provider.compare
                    && compare.canary.builtin.as_ref().is_some_and(|b| {
                        b.metric == crate::spec::analysis::BuiltinStatistic::ErrorRate
                    })
                {
                    sink.warn(
                        loaded,
                        "flotilla/zero-inflated",
                        format!("{path}.provider.compare.canary"),
                        "error rates per step are mostly zeros (Kayenta's issue #426): a rank-sum comparison then sees ties, not a regression; use the `sequential` provider for error rates",
                    );
                }
            }
            1 => {
                if !EXECUTABLE_PROVIDERS.contains(&kinds[0]) {
                    sink.warn(
                        loaded,
                        "provider/not-executable",
                        format!("{path}.provider.{}", kinds[0]),
                        format!("Flotilla cannot execute the {} provider yet; this metric parses and lints but cannot run", kinds[0]),
                    );
                }
                for (field, message) in crate::analysis::provider_checks::problems(&metric.provider)
                {
                    sink.error(
                        loaded,
                        "provider/fields",
                        format!("{path}.provider.{field}"),
                        message,
                    );
                }
                if let Some((field, message)) =
                    crate::analysis::provider_checks::credentials(&metric.provider)
                {
                    sink.push(
                        loaded,
                        crate::diagnostic::Severity::Note,
                        "provider/credentials",
                        format!("{path}.provider.{field}"),
                        message,
                    );
                }
            }
            _ => sink.error(
                loaded,
                "analysis/one-provider",
                format!("{path}.provider"),
                format!(
                    "a metric needs exactly one provider; {} are set",
                    kinds.join(", ")
                ),
            ),
        }

        let count = int_value(sink, loaded, &format!("{path}.count"), &metric.count);
        let failure_limit = int_value(
            sink,
            loaded,
            &format!("{path}.failureLimit"),
            &metric.failure_limit,
        );
        let inconclusive_limit = int_value(
            sink,
            loaded,
            &format!("{path}.inconclusiveLimit"),
            &metric.inconclusive_limit,
        );
        let consecutive_success = int_value(
            sink,
            loaded,
            &format!("{path}.consecutiveSuccessLimit"),
            &metric.consecutive_success_limit,
        );
        let consecutive_error = int_value(
            sink,
            loaded,
            &format!("{path}.consecutiveErrorLimit"),
            &metric.consecutive_error_limit,
        );
        if let Some(count) = count {
            if count < 0 {
                sink.error(
                    loaded,
                    "analysis/limits",
                    format!("{path}.count"),
                    format!("count must be >= 0 (got {count})"),
                );
            }
            if count > 1 && metric.interval.is_none() {
                sink.error(
                    loaded,
                    "analysis/count-interval",
                    format!("{path}.interval"),
                    format!(
                        "metric {:?} has count {count} > 1 but no interval",
                        metric.name
                    ),
                );
            }
            if count > 0 {
                let fl = failure_limit.unwrap_or(0).max(0);
                let cs = consecutive_success.unwrap_or(0).max(0);
                if count < fl + cs {
                    sink.error(loaded, "analysis/count-limits", format!("{path}.count"), format!("count ({count}) must be >= failureLimit ({fl}) + consecutiveSuccessLimit ({cs})"));
                }
                let il = inconclusive_limit.unwrap_or(0);
                if count < il {
                    sink.error(
                        loaded,
                        "analysis/count-limits",
                        format!("{path}.count"),
                        format!("count ({count}) must be >= inconclusiveLimit ({il})"),
                    );
                }
            }
        }
        if let Some(fl) = failure_limit {
            if fl < -1 {
                sink.error(
                    loaded,
                    "analysis/limits",
                    format!("{path}.failureLimit"),
                    format!("failureLimit must be >= -1 (got {fl})"),
                );
            }
            if fl == -1
                && consecutive_success.unwrap_or(0) <= 0
                && metric.consecutive_failure_limit.is_none()
            {
                sink.error(loaded, "analysis/limits", format!("{path}.failureLimit"), "failureLimit -1 (never fail) needs consecutiveSuccessLimit > 0, or the metric can never complete");
            }
        }
        for (field, value) in [
            ("inconclusiveLimit", inconclusive_limit),
            ("consecutiveErrorLimit", consecutive_error),
            ("consecutiveSuccessLimit", consecutive_success),
        ] {
            if let Some(v) = value.filter(|v| *v < 0) {
                sink.error(
                    loaded,
                    "analysis/limits",
                    format!("{path}.{field}"),
                    format!("{field} must be >= 0 (got {v})"),
                );
            }
        }

        // Flotilla's extensions: valid, and flagged so a user knows Argo would refuse them.
        if let Some(v) = int_value(
            sink,
            loaded,
            &format!("{path}.consecutiveFailureLimit"),
            &metric.consecutive_failure_limit,
        ) && v < 1
        {
            sink.error(
                loaded,
                "analysis/limits",
                format!("{path}.consecutiveFailureLimit"),
                format!("consecutiveFailureLimit must be >= 1 (got {v})"),
            );
        }
        for (field, used) in [
            (
                "consecutiveFailureLimit",
                metric.consecutive_failure_limit.is_some(),
            ),
            ("onInconclusive", metric.on_inconclusive.is_some()),
        ] {
            if used {
                sink.push(loaded, crate::diagnostic::Severity::Note, "flotilla/extension", format!("{path}.{field}"), format!("{field} is a Flotilla extension: not Argo-compatible, Argo Rollouts would reject this template"));
            }
        }

        // Arguments: every placeholder must be declared or injected.
        let text = serde_json::to_string(metric).unwrap_or_default();
        for name in placeholders(&text) {
            if !declared.contains(name) && !INJECTED_ARGS.contains(&name) {
                sink.error(loaded, "args/undeclared", path.clone(), format!("metric {:?} uses {{{{args.{name}}}}}, which is neither declared in spec.args nor injected by Flotilla (cluster, region, metrics-address)", metric.name));
            }
        }

        // Conditions must compile; then, do they pass on no evidence?
        let mut compiled = [None, None];
        for (slot, (field, condition)) in [
            ("successCondition", &metric.success_condition),
            ("failureCondition", &metric.failure_condition),
        ]
        .into_iter()
        .enumerate()
        {
            let Some(condition) = condition else { continue };
            match Condition::compile(&with_placeholders_filled(condition)) {
                Ok(c) if c.reads_baseline() && metric.baseline.is_none() => sink.error(
                    loaded,
                    "flotilla/baseline",
                    format!("{path}.{field}"),
                    "the condition reads `baseline`, but the metric sets no `baseline:` calibration",
                ),
                Ok(_) if kinds.contains(&"compare") || kinds.contains(&"sequential") => sink.warn(
                    loaded,
                    "flotilla/composite-conditions",
                    format!("{path}.{field}"),
                    "a compare or sequential metric decides each measurement itself; this condition is never evaluated",
                ),
                Ok(c) => compiled[slot] = Some(c),
                Err(error) => sink.error(
                    loaded,
                    "analysis/condition",
                    format!("{path}.{field}"),
                    error.to_string(),
                ),
            }
        }
        let broken = (metric.success_condition.is_some() && compiled[0].is_none())
            || (metric.failure_condition.is_some() && compiled[1].is_none());
        let measures_values = !["job", "kayenta", "compare", "sequential"]
            .iter()
            .any(|k| kinds.contains(k));
        if !broken && measures_values {
            let no_evidence = [
                ("no data (nil)", MetricResult::Nil),
                ("an empty result", MetricResult::Vector(vec![])),
                ("NaN", MetricResult::Scalar(f64::NAN)),
                ("[NaN]", MetricResult::Vector(vec![f64::NAN])),
            ];
            let passing: Vec<&str> = no_evidence
                .iter()
                .filter(|(_, result)| {
                    measurement_phase(compiled[0].as_ref(), compiled[1].as_ref(), result)
                        == AnalysisPhase::Successful
                })
                .map(|(label, _)| *label)
                .collect();
            if !passing.is_empty() {
                let field = if metric.success_condition.is_some() {
                    "successCondition"
                } else if metric.failure_condition.is_some() {
                    "failureCondition"
                } else {
                    "provider"
                };
                sink.warn(
                    loaded,
                    "analysis/passes-without-evidence",
                    format!("{path}.{field}"),
                    format!(
                        "metric {:?} is assessed Successful on {}: it can pass with no data. Argo keeps that verdict; Flotilla never validates a cluster on it. Guard the condition (e.g. `len(result) > 0 && !isNaN(result[0]) && …`)",
                        metric.name,
                        passing.join(", ")
                    ),
                );
            }
        }

        if let Some(prometheus) = &metric.provider.prometheus
            && let Some(query) = &prometheus.query
            && !selects_canary(query)
        {
            sink.warn(
                        loaded,
                        "analysis/query-selects-canary",
                        format!("{path}.provider.prometheus.query"),
                        format!(
                            "the query of metric {:?} has no label that selects the canary (a pod-template hash, version, revision or canary/subset label): it judges stable and canary traffic together",
                            metric.name
                        ),
                    );
        }
    }
}

/// Whether a query text restricts itself to the canary population.
fn selects_canary(query: &str) -> bool {
    let lower = query.to_ascii_lowercase();
    [
        "canary",
        "pod_template_hash",
        "pod-template-hash",
        "version",
        "revision",
        "subset",
        "hash",
    ]
    .iter()
    .any(|token| lower.contains(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_with_a_number() {
        assert_eq!(
            with_placeholders_filled("result[0] < {{args.max}}"),
            "result[0] < 1"
        );
        assert_eq!(
            with_placeholders_filled("no placeholders"),
            "no placeholders"
        );
    }

    #[test]
    fn canary_selection_is_recognised_in_queries() {
        assert!(selects_canary(
            "sum(rate(x{rollouts_pod_template_hash=\"{{args.canary-hash}}\"}[5m]))"
        ));
        assert!(selects_canary("sum(rate(x{subset=\"canary\"}[1m]))"));
        assert!(!selects_canary(
            "sum(rate(http_requests_total{cluster=\"{{args.cluster}}\"}[5m]))"
        ));
    }
}
