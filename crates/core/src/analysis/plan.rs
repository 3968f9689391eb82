//! From an AnalysisTemplate and argument values to a run plan: arguments substituted, limits
//! resolved to numbers with Argo's defaults, conditions compiled, dry-run and retention rules
//! applied. A plan that cannot be built is an Error run, never a panic.

use std::collections::BTreeMap;

use serde_json::Value;

use super::condition::{Condition, ConditionError};
use crate::spec::IntOrString;
use crate::spec::analysis::{AnalysisTemplateSpec, Metric, MetricProvider, OnInconclusive};

/// The injected argument naming a cluster's metrics endpoint.
pub const METRICS_ADDRESS_ARG: &str = "metrics-address";

/// Argo's default number of measurements kept per metric.
pub const DEFAULT_MEASUREMENT_RETENTION: usize = 10;
/// Argo's default consecutive error limit.
pub const DEFAULT_CONSECUTIVE_ERROR_LIMIT: i64 = 4;

/// An argument value handed to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgValue {
    /// The value.
    pub value: String,
    /// Whether it came from a secret: then it is redacted from every message and output.
    pub secret: bool,
}

impl ArgValue {
    /// A plain (non-secret) value.
    pub fn plain(value: impl Into<String>) -> Self {
        ArgValue {
            value: value.into(),
            secret: false,
        }
    }
}

/// Why a plan could not be built (the run is then an Error run with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// An argument has no value from any source.
    #[error("args.{0} was not resolved")]
    Unresolved(String),
    /// A placeholder names an argument the template does not declare.
    #[error("failed to resolve {{{{args.{0}}}}}")]
    Undeclared(String),
    /// The metric is invalid after substitution.
    #[error("metric {metric:?}: {reason}")]
    InvalidMetric {
        /// The metric's name.
        metric: String,
        /// What is wrong.
        reason: String,
    },
    /// A dry-run or retention rule is invalid or matches nothing.
    #[error("{0}")]
    InvalidRule(String),
}

/// One metric, ready to run.
#[derive(Debug, Clone)]
pub struct MetricPlan {
    /// The metric's name.
    pub name: String,
    /// Time between measurements, in milliseconds.
    pub interval: Option<u64>,
    /// Delay before the first measurement, in milliseconds.
    pub initial_delay: Option<u64>,
    /// `count` as written (0 or None: see [`MetricPlan::effective_count`]).
    pub count: Option<i64>,
    /// Failures tolerated (`failed > failureLimit` fails; -1 disables).
    pub failure_limit: i64,
    /// Inconclusive measurements tolerated.
    pub inconclusive_limit: i64,
    /// Consecutive errors tolerated.
    pub consecutive_error_limit: i64,
    /// Consecutive successes that complete the metric (0: disabled).
    pub consecutive_success_limit: i64,
    /// Flotilla extension: consecutive failures that fail the metric.
    pub consecutive_failure_limit: Option<i64>,
    /// Flotilla extension: what an Inconclusive verdict does to the rollout.
    pub on_inconclusive: OnInconclusive,
    /// The success condition.
    pub success: Option<Condition>,
    /// The failure condition.
    pub failure: Option<Condition>,
    /// The provider block, arguments substituted.
    pub provider: std::sync::Arc<MetricProvider>,
    /// Whether the metric runs in dry-run mode (reported apart, never decides).
    pub dry_run: bool,
    /// How many measurements to keep.
    pub retention: usize,
    /// Flotilla extension: the per-cluster reference its conditions read as `baseline`.
    pub baseline: Option<crate::spec::analysis::Calibration>,
}

impl MetricPlan {
    /// How long (ms) a measurement with evidence stays current: the interval plus the
    /// provider's timeout (Prometheus `timeout`, default 30 s; web `timeoutSeconds`, default
    /// 10 s; a provider's own `timeout` where it has one), or twice the interval for a provider
    /// with no timeout. None for a metric with no interval (measured once: its measurement is
    /// its evidence).
    pub fn fresh_for(&self) -> Option<u64> {
        let interval = self.interval?;
        let p = &*self.provider;
        let seconds =
            |t: Option<i64>, default: Option<i64>| t.or(default).map(|s| s.max(0) as u64 * 1000);
        let timeout = if let Some(prometheus) = &p.prometheus {
            seconds(prometheus.timeout, Some(30))
        } else if let Some(web) = &p.web {
            seconds(web.timeout_seconds, Some(10))
        } else if let Some(new_relic) = &p.new_relic {
            seconds(new_relic.timeout, None)
        } else {
            None
        };
        Some(interval + timeout.unwrap_or(interval))
    }

    /// Argo's effective count: no (or zero) count and no interval → 1; interval only → none
    /// (runs until terminated); otherwise the count.
    pub fn effective_count(&self) -> Option<i64> {
        match self.count {
            None | Some(0) => {
                if self.interval.is_none() {
                    Some(1)
                } else {
                    None
                }
            }
            Some(count) => Some(count),
        }
    }

    /// Whether the failure limit applies (Argo: failureLimit >= 0; Flotilla: or a streak limit).
    pub fn failure_applicable(&self) -> bool {
        self.failure_limit >= 0 || self.consecutive_failure_limit.is_some()
    }
}

/// A whole run, ready to execute.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// The metrics, in template order.
    pub metrics: Vec<MetricPlan>,
    /// Secret values to redact from messages.
    pub secrets: Vec<String>,
}

impl RunPlan {
    /// Replaces every secret value in a text with `*****`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        self.redact_in_place(&mut out);
        out
    }

    /// Replaces every secret value in a text with `*****`, allocating only when one occurs.
    pub fn redact_in_place(&self, text: &mut String) {
        for secret in self.secrets.iter().filter(|s| !s.is_empty()) {
            if text.contains(secret.as_str()) {
                *text = text.replace(secret.as_str(), "*****");
            }
        }
    }
}

/// Substitutes `{{args.name}}` in every string of a JSON value.
fn substitute(value: &mut Value, args: &BTreeMap<String, ArgValue>) -> Result<(), PlanError> {
    match value {
        Value::String(text) => {
            if !text.contains("{{") {
                return Ok(());
            }
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(start) = rest.find("{{") {
                out.push_str(&rest[..start]);
                let after = &rest[start + 2..];
                let Some(end) = after.find("}}") else {
                    out.push_str(&rest[start..]);
                    rest = "";
                    break;
                };
                let inner = after[..end].trim();
                match inner.strip_prefix("args.") {
                    Some(name) => {
                        let name = name.trim();
                        let arg = args
                            .get(name)
                            .ok_or_else(|| PlanError::Undeclared(name.to_owned()))?;
                        out.push_str(&arg.value);
                    }
                    // Not an argument placeholder (e.g. an experiment's): leave it as written.
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            out.push_str(rest);
            *text = out;
            Ok(())
        }
        Value::Array(items) => items.iter_mut().try_for_each(|item| substitute(item, args)),
        Value::Object(map) => map.values_mut().try_for_each(|item| substitute(item, args)),
        _ => Ok(()),
    }
}

fn limit(
    metric: &str,
    field: &str,
    value: &Option<IntOrString>,
    default: i64,
) -> Result<i64, PlanError> {
    match value {
        None => Ok(default),
        Some(v) => v.as_int().ok_or_else(|| PlanError::InvalidMetric {
            metric: metric.to_owned(),
            reason: format!("{field} {v:?} is not an integer"),
        }),
    }
}

fn compile(
    metric: &str,
    field: &str,
    condition: &Option<String>,
) -> Result<Option<Condition>, PlanError> {
    condition
        .as_deref()
        .map(|c| {
            Condition::compile(c).map_err(|ConditionError(reason)| PlanError::InvalidMetric {
                metric: metric.to_owned(),
                reason: format!("{field}: {reason}"),
            })
        })
        .transpose()
}

fn duration(
    metric: &str,
    field: &str,
    value: &Option<crate::spec::Duration>,
) -> Result<Option<u64>, PlanError> {
    match value {
        None => Ok(None),
        Some(d) => d
            .as_millis()
            .map(Some)
            .ok_or_else(|| PlanError::InvalidMetric {
                metric: metric.to_owned(),
                reason: format!("{field} {d} is not a duration"),
            }),
    }
}

/// Matches Argo's metricName rules (unanchored regular expressions) against metric names.
fn matching_rule<'a>(
    rules: &'a [(String, usize)],
    name: &str,
) -> Result<Option<&'a (String, usize)>, PlanError> {
    for rule in rules {
        let re = regex::Regex::new(&rule.0)
            .map_err(|e| PlanError::InvalidRule(format!("invalid metricName {:?}: {e}", rule.0)))?;
        if re.is_match(name) {
            return Ok(Some(rule));
        }
    }
    Ok(None)
}

/// Builds a run plan from a template spec and the arguments handed to it.
///
/// Arguments come from `supplied` (the Rollout's args, per-cluster overrides and injected
/// arguments, secrets already resolved by the caller) and fall back to the template's own
/// `value`. A template argument with neither is [`PlanError::Unresolved`].
pub fn resolve(
    spec: &AnalysisTemplateSpec,
    supplied: &BTreeMap<String, ArgValue>,
) -> Result<RunPlan, PlanError> {
    let mut args: BTreeMap<String, ArgValue> = supplied.clone();
    for declared in &spec.args {
        if args.contains_key(&declared.name) {
            continue;
        }
        match &declared.value {
            Some(value) => {
                args.insert(declared.name.clone(), ArgValue::plain(value.clone()));
            }
            None => return Err(PlanError::Unresolved(declared.name.clone())),
        }
    }
    let secrets: Vec<String> = args
        .values()
        .filter(|a| a.secret)
        .map(|a| a.value.clone())
        .collect();
    let dry_run_rules: Vec<(String, usize)> = spec
        .dry_run
        .iter()
        .map(|d| (d.metric_name.clone(), 0))
        .collect();
    let retention_rules: Vec<(String, usize)> = spec
        .measurement_retention
        .iter()
        .map(|r| (r.metric_name.clone(), r.limit.max(0) as usize))
        .collect();
    for (rules, what) in [
        (&dry_run_rules, "dryRun"),
        (&retention_rules, "measurementRetention"),
    ] {
        for rule in rules.iter() {
            let re = regex::Regex::new(&rule.0).map_err(|e| {
                PlanError::InvalidRule(format!("invalid {what} metricName {:?}: {e}", rule.0))
            })?;
            if !spec.metrics.iter().any(|m| re.is_match(&m.name)) {
                return Err(PlanError::InvalidRule(format!(
                    "{what} metric rule '{}' does not match any metric",
                    rule.0
                )));
            }
        }
    }
    let mut metrics = Vec::with_capacity(spec.metrics.len());
    let mut names = std::collections::BTreeSet::new();
    for metric in &spec.metrics {
        if !names.insert(metric.name.clone()) {
            return Err(PlanError::InvalidMetric {
                metric: metric.name.clone(),
                reason: "duplicate metric name".into(),
            });
        }
        let mut value = serde_json::to_value(metric).map_err(|e| PlanError::InvalidMetric {
            metric: metric.name.clone(),
            reason: e.to_string(),
        })?;
        // One template serves every cluster: a Prometheus address is the cluster's metrics
        // endpoint unless the template places `{{args.metrics-address}}` itself (also inside a
        // comparison's two series).
        for at in [
            "/provider",
            "/provider/compare/canary",
            "/provider/compare/baseline",
        ] {
            if let (Some(address), Some(cluster_address)) = (
                value.pointer_mut(&format!("{at}/prometheus/address")),
                args.get(METRICS_ADDRESS_ARG),
            ) {
                if !address
                    .as_str()
                    .is_some_and(|a| a.contains("{{args.metrics-address}}"))
                {
                    *address = Value::String(cluster_address.value.clone());
                }
            } else if let (Some(prometheus), Some(cluster_address)) = (
                value.pointer_mut(&format!("{at}/prometheus")),
                args.get(METRICS_ADDRESS_ARG),
            ) && let Value::Object(prometheus) = prometheus
            {
                prometheus.insert(
                    "address".into(),
                    Value::String(cluster_address.value.clone()),
                );
            }
        }
        substitute(&mut value, &args)?;
        let resolved: Metric =
            serde_json::from_value(value).map_err(|e| PlanError::InvalidMetric {
                metric: metric.name.clone(),
                reason: format!("after argument substitution: {e}"),
            })?;
        let name = resolved.name.clone();
        let kinds = resolved.provider.kinds();
        if kinds.len() != 1 {
            return Err(PlanError::InvalidMetric {
                metric: name,
                reason: if kinds.is_empty() {
                    "no provider is set".into()
                } else {
                    format!("multiple providers are set: {}", kinds.join(", "))
                },
            });
        }
        if let Some((field, reason)) = super::compare::problems(&resolved.provider)
            .into_iter()
            .next()
        {
            return Err(PlanError::InvalidMetric {
                metric: name,
                reason: format!("provider.{field}: {reason}"),
            });
        }
        let failure_limit_default =
            if resolved.consecutive_failure_limit.is_some() && resolved.failure_limit.is_none() {
                -1
            } else {
                0
            };
        let plan = MetricPlan {
            interval: duration(&name, "interval", &resolved.interval)?,
            initial_delay: duration(&name, "initialDelay", &resolved.initial_delay)?,
            count: resolved
                .count
                .as_ref()
                .map(|c| limit(&name, "count", &Some(c.clone()), 0))
                .transpose()?,
            failure_limit: limit(
                &name,
                "failureLimit",
                &resolved.failure_limit,
                failure_limit_default,
            )?,
            inconclusive_limit: limit(&name, "inconclusiveLimit", &resolved.inconclusive_limit, 0)?,
            consecutive_error_limit: limit(
                &name,
                "consecutiveErrorLimit",
                &resolved.consecutive_error_limit,
                DEFAULT_CONSECUTIVE_ERROR_LIMIT,
            )?,
            consecutive_success_limit: limit(
                &name,
                "consecutiveSuccessLimit",
                &resolved.consecutive_success_limit,
                0,
            )?,
            consecutive_failure_limit: resolved
                .consecutive_failure_limit
                .as_ref()
                .map(|v| limit(&name, "consecutiveFailureLimit", &Some(v.clone()), 0))
                .transpose()?,
            on_inconclusive: resolved.on_inconclusive.unwrap_or_default(),
            success: compile(&name, "successCondition", &resolved.success_condition)?,
            failure: compile(&name, "failureCondition", &resolved.failure_condition)?,
            baseline: resolved.baseline.clone(),
            provider: std::sync::Arc::new(resolved.provider),
            dry_run: matching_rule(&dry_run_rules, &name)?.is_some(),
            retention: matching_rule(&retention_rules, &name)?
                .map_or(DEFAULT_MEASUREMENT_RETENTION, |r| r.1),
            name: name.clone(),
        };
        validate(&plan)?;
        metrics.push(plan);
    }
    Ok(RunPlan { metrics, secrets })
}

/// Argo's metric validation (`utils/analysis/factory.go`), on resolved values.
fn validate(metric: &MetricPlan) -> Result<(), PlanError> {
    let invalid = |reason: String| {
        Err(PlanError::InvalidMetric {
            metric: metric.name.clone(),
            reason,
        })
    };
    if let Some(count) = metric.count {
        if count > 1 && metric.interval.is_none() {
            return invalid(
                "more than one measurement was specified, but no interval was specified".into(),
            );
        }
        let failure = metric.failure_limit.max(0);
        if count > 0 && count < failure + metric.consecutive_success_limit {
            return invalid(format!(
                "count must be >= failureLimit + consecutiveSuccessLimit ({count} < {failure} + {})",
                metric.consecutive_success_limit
            ));
        }
        if count > 0 && count < metric.inconclusive_limit {
            return invalid(format!(
                "count must be >= inconclusiveLimit ({count} < {})",
                metric.inconclusive_limit
            ));
        }
    }
    for (field, condition) in [
        ("successCondition", &metric.success),
        ("failureCondition", &metric.failure),
    ] {
        if metric.baseline.is_none() && condition.as_ref().is_some_and(|c| c.reads_baseline()) {
            return invalid(format!(
                "{field} reads `baseline`, but the metric sets no `baseline:` calibration"
            ));
        }
    }
    if metric.failure_limit < -1 {
        return invalid(format!(
            "failureLimit must be >= -1 (got {})",
            metric.failure_limit
        ));
    }
    if metric.failure_limit == -1
        && metric.consecutive_success_limit <= 0
        && metric.consecutive_failure_limit.is_none()
    {
        return invalid("failureLimit -1 needs consecutiveSuccessLimit > 0".into());
    }
    for (field, value) in [
        ("inconclusiveLimit", metric.inconclusive_limit),
        ("consecutiveErrorLimit", metric.consecutive_error_limit),
        ("consecutiveSuccessLimit", metric.consecutive_success_limit),
    ] {
        if value < 0 {
            return invalid(format!("{field} must be >= 0 (got {value})"));
        }
    }
    if metric.consecutive_failure_limit.is_some_and(|v| v < 1) {
        return invalid("consecutiveFailureLimit must be >= 1".into());
    }
    Ok(())
}
