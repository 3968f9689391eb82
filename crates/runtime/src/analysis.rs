//! Running analysis for real: loading a template from a file, resolving arguments and secrets,
//! driving the core's run machine on the wall clock through a [`Measurer`], and backtests over
//! past windows.

use std::collections::BTreeMap;
use std::path::Path;

use flotilla_core::analysis::plan::{ArgValue, PlanError, RunPlan, resolve};
use flotilla_core::analysis::run::Run;
use flotilla_core::analysis::{
    MeasureRequest, Measurer, Millis, Outcome, measurement_verdict_with,
};
use flotilla_core::diagnostic::Severity;
use flotilla_core::lint::{self, Options};
use flotilla_core::spec::Manifest;
use flotilla_core::spec::analysis::{
    AnalysisPhase, AnalysisTemplate, AnalysisTemplateSpec, Argument,
};
use tokio::task::JoinSet;

use crate::clock::wall_clock;
use crate::files;
use crate::secrets::Secrets;

/// Why an analysis could not start: bad input, reported before anything runs (exit code 4).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] files::ReadError),
    /// The file holds content errors.
    #[error("{0}")]
    Invalid(String),
    /// The arguments do not resolve.
    #[error("{file}: {source}")]
    Plan {
        /// The template file.
        file: String,
        /// Why.
        source: PlanError,
    },
}

/// Loads the AnalysisTemplate (or ClusterAnalysisTemplate) a file holds, with the templates it
/// includes (`spec.templates`) flattened in from the same file, as Argo flattens them.
pub fn load_template(path: &Path, name: Option<&str>) -> Result<AnalysisTemplateSpec, InputError> {
    let (manifests, mut diagnostics) = files::load_files(&[path.to_path_buf()])?;
    diagnostics.extend(
        lint::lint(&manifests, Options::default())
            .into_iter()
            .filter(|d| d.rule != "ref/template-not-found"),
    );
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect();
    if !errors.is_empty() {
        return Err(InputError::Invalid(errors.join("\n")));
    }
    let templates: Vec<&AnalysisTemplate> = manifests
        .iter()
        .filter_map(|m| match &m.manifest {
            Manifest::AnalysisTemplate(t) | Manifest::ClusterAnalysisTemplate(t) => {
                Some(t.as_ref())
            }
            _ => None,
        })
        .collect();
    let by_name = |n: &str| {
        templates
            .iter()
            .copied()
            .find(|t| t.metadata.name.as_deref() == Some(n))
    };
    let chosen = match name {
        Some(n) => by_name(n).ok_or_else(|| {
            InputError::Invalid(format!(
                "{}: no AnalysisTemplate named {n:?}",
                path.display()
            ))
        })?,
        None => match templates.as_slice() {
            [one] => one,
            [] => {
                return Err(InputError::Invalid(format!(
                    "{}: holds no AnalysisTemplate",
                    path.display()
                )));
            }
            many => {
                // The one no other template includes is the entry point.
                let included: Vec<&str> = many
                    .iter()
                    .flat_map(|t| t.spec.templates.iter().map(|r| r.template_name.as_str()))
                    .collect();
                let roots: Vec<&AnalysisTemplate> = many
                    .iter()
                    .copied()
                    .filter(|t| !included.contains(&t.metadata.name.as_deref().unwrap_or("")))
                    .collect();
                match roots.as_slice() {
                    [one] => *one,
                    _ => {
                        return Err(InputError::Invalid(format!(
                            "{}: holds {} AnalysisTemplates; choose one with --name",
                            path.display(),
                            many.len()
                        )));
                    }
                }
            }
        },
    };
    let mut spec = chosen.spec.clone();
    let mut pending: Vec<String> = spec
        .templates
        .iter()
        .map(|r| r.template_name.clone())
        .collect();
    spec.templates.clear();
    let mut seen = Vec::new();
    while let Some(next) = pending.pop() {
        if seen.contains(&next) {
            continue;
        }
        let included = by_name(&next).ok_or_else(|| {
            InputError::Invalid(format!(
                "{}: template {next:?} is included but not in the file",
                path.display()
            ))
        })?;
        spec.metrics.extend(included.spec.metrics.iter().cloned());
        for arg in &included.spec.args {
            if !spec.args.iter().any(|a| a.name == arg.name) {
                spec.args.push(arg.clone());
            }
        }
        spec.dry_run.extend(included.spec.dry_run.iter().cloned());
        spec.measurement_retention
            .extend(included.spec.measurement_retention.iter().cloned());
        pending.extend(
            included
                .spec
                .templates
                .iter()
                .map(|r| r.template_name.clone()),
        );
        seen.push(next);
    }
    Ok(spec)
}

/// Resolves the arguments a run receives: given values first, then secrets for template
/// arguments that name one; the template's own defaults are applied by the plan.
pub fn resolve_args(
    template_args: &[Argument],
    given: &BTreeMap<String, String>,
    secrets: &Secrets,
) -> Result<BTreeMap<String, ArgValue>, String> {
    let mut args: BTreeMap<String, ArgValue> = given
        .iter()
        .map(|(k, v)| (k.clone(), ArgValue::plain(v.clone())))
        .collect();
    for arg in template_args {
        if args.contains_key(&arg.name) {
            continue;
        }
        if let Some(secret) = arg
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
        {
            let value = secrets
                .read(&secret.name, &secret.key)
                .map_err(|e| format!("args.{}: {e}", arg.name))?;
            args.insert(
                arg.name.clone(),
                ArgValue {
                    value,
                    secret: true,
                },
            );
        } else if arg
            .value_from
            .as_ref()
            .is_some_and(|v| v.field_ref.is_some())
            && arg.value.is_none()
        {
            return Err(format!(
                "args.{}: fieldRef arguments take their value from a Rollout; pass --arg {}=VALUE",
                arg.name, arg.name
            ));
        }
    }
    Ok(args)
}

/// Builds a plan, checking that every provider can run here before anything runs.
pub fn plan(
    file: &Path,
    spec: &AnalysisTemplateSpec,
    args: &BTreeMap<String, ArgValue>,
    supported: &[&str],
) -> Result<RunPlan, InputError> {
    let plan = resolve(spec, args).map_err(|source| InputError::Plan {
        file: file.display().to_string(),
        source,
    })?;
    for metric in &plan.metrics {
        for kind in metric.provider.kinds() {
            if !supported.contains(&kind) {
                return Err(InputError::Invalid(format!(
                    "{}: metric {:?} uses the {kind} provider, which Flotilla cannot execute (supported: {})",
                    file.display(),
                    metric.name,
                    supported.join(", ")
                )));
            }
        }
        // A provider block that cannot run (Argo's Datadog rules, a missing query, a CloudWatch
        // query without an id...) is bad input, refused before anything runs.
        if let Some((field, message)) =
            flotilla_core::analysis::provider_checks::problems(&metric.provider)
                .into_iter()
                .next()
        {
            return Err(InputError::Invalid(format!(
                "{}: metric {:?}: provider.{field}: {message}",
                file.display(),
                metric.name
            )));
        }
    }
    Ok(plan)
}

/// A finished measurement, as the driver reports it while the run goes on.
#[derive(Debug, Clone)]
pub struct MeasurementEvent {
    /// The metric.
    pub metric: String,
    /// When it finished.
    pub at: Millis,
    /// Its phase.
    pub phase: AnalysisPhase,
    /// Its value.
    pub value: String,
    /// Its message.
    pub message: String,
}

/// Drives a run on the wall clock until it completes (or `stop` resolves, which terminates it),
/// taking due measurements concurrently and cancelling in-flight ones when the run terminates.
pub async fn drive<M, F>(
    plan: &RunPlan,
    measurer: &M,
    mut on_measurement: impl FnMut(&MeasurementEvent),
    stop: F,
) -> Run
where
    M: Measurer + Clone + 'static,
    F: std::future::Future<Output = ()>,
{
    let mut run = Run::new(plan, wall_clock());
    let mut in_flight: JoinSet<(usize, Outcome)> = JoinSet::new();
    let mut handles: BTreeMap<usize, tokio::task::AbortHandle> = BTreeMap::new();
    tokio::pin!(stop);
    let mut stopped = false;
    loop {
        let now = wall_clock();
        for request in run.poll_due(plan, now) {
            let measurer = measurer.clone();
            let index = request.metric_index;
            let handle =
                in_flight.spawn(async move { (index, measure_owned(&measurer, request).await) });
            handles.insert(index, handle);
        }
        run.assess(plan, now);
        for index in run.to_cancel() {
            if let Some(handle) = handles.remove(&index) {
                handle.abort();
            }
            run.handle_outcome(plan, index, wall_clock(), Outcome::Terminated);
        }
        run.assess(plan, wall_clock());
        if run.is_completed() && handles.is_empty() {
            break;
        }
        let sleep_until = run
            .next_due(plan)
            .map(|due| (due - wall_clock()).max(0) as u64);
        if sleep_until.is_none() && in_flight.is_empty() {
            // Nothing due and nothing in flight: the run can make no further progress.
            run.terminate();
            run.assess(plan, wall_clock());
            break;
        }
        tokio::select! {
            joined = in_flight.join_next(), if !in_flight.is_empty() => {
                if let Some(Ok((index, outcome))) = joined {
                    handles.remove(&index);
                    let now = wall_clock();
                    run.handle_outcome(plan, index, now, outcome);
                    if let Some(m) = run.metrics[index].measurements.back() {
                        on_measurement(&MeasurementEvent {
                            metric: run.metrics[index].name.clone(),
                            at: now,
                            phase: m.phase,
                            value: m.value.clone(),
                            message: m.message.clone(),
                        });
                    }
                }
            }
            _ = tokio::time::sleep(std::time::Duration::from_millis(sleep_until.unwrap_or(0))), if sleep_until.is_some() => {}
            _ = &mut stop, if !stopped => {
                stopped = true;
                run.terminate();
            }
        }
    }
    run
}

async fn measure_owned<M: Measurer>(measurer: &M, request: MeasureRequest) -> Outcome {
    flotilla_core::analysis::compare::measure(measurer, &request).await
}

/// One evaluation of a backtest: a metric at a past instant.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BacktestPoint {
    /// The instant evaluated (ms since the epoch).
    pub at: Millis,
    /// The metric.
    pub metric: String,
    /// The measurement's phase.
    pub phase: AnalysisPhase,
    /// The value, as Argo stores it.
    pub value: String,
    /// Why it failed or errored.
    pub message: String,
}

/// Evaluates every metric at each step of `[start, end]`, as Prometheus answered at that time.
pub async fn backtest<M: Measurer>(
    plan: &RunPlan,
    measurer: &M,
    start: Millis,
    end: Millis,
    step: u64,
) -> Vec<BacktestPoint> {
    let mut points = Vec::new();
    let mut at = start;
    while at <= end {
        for (index, metric) in plan.metrics.iter().enumerate() {
            let request = MeasureRequest {
                metric_index: index,
                metric: metric.name.clone(),
                provider: metric.provider.clone(),
                at,
                window: None,
                not_before: None,
                step: None,
                baseline: metric.baseline.clone(),
                reference: None,
                last: false,
            };
            let outcome = flotilla_core::analysis::compare::measure(measurer, &request).await;
            let (phase, value, message) = match outcome {
                Outcome::Value { result, metadata } => {
                    let baseline = flotilla_core::analysis::compare::baseline_variables(&metadata);
                    let (phase, error) = measurement_verdict_with(
                        metric.success.as_ref(),
                        metric.failure.as_ref(),
                        &result,
                        metric.baseline.is_some().then_some(&baseline),
                    );
                    (phase, result.to_argo_string(), error.unwrap_or_default())
                }
                // Too little evidence at that instant: no verdict.
                Outcome::Deferred(reason) => (AnalysisPhase::Running, String::new(), reason),
                Outcome::Decided {
                    phase,
                    value,
                    message,
                    ..
                } => (phase, value, message),
                Outcome::Error(message) => (AnalysisPhase::Error, String::new(), message),
                Outcome::Terminated => (
                    AnalysisPhase::Inconclusive,
                    String::new(),
                    "Metric Terminated".into(),
                ),
            };
            points.push(BacktestPoint {
                at,
                metric: metric.name.clone(),
                phase,
                value: plan.redact(&value),
                message: plan.redact(&message),
            });
        }
        at += step.max(1) as Millis;
    }
    points
}

#[cfg(test)]
mod tests {
    #[test]
    fn lint_knows_exactly_the_providers_the_runtime_executes() {
        let mut lint: Vec<&str> = flotilla_core::lint::EXECUTABLE_PROVIDERS.to_vec();
        let mut runtime: Vec<&str> = flotilla_providers::SUPPORTED.to_vec();
        lint.sort();
        runtime.sort();
        assert_eq!(lint, runtime);
    }

    #[test]
    fn secrets_come_from_the_environment_or_a_directory() {
        assert_eq!(
            super::Secrets::env_name("prom-auth", "token"),
            "FLOTILLA_SECRET_PROM_AUTH_TOKEN"
        );
        let dir = std::env::temp_dir().join(format!("flotilla-secrets-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("db")).unwrap();
        std::fs::write(dir.join("db").join("password"), "hunter2\n").unwrap();
        let secrets = super::Secrets {
            dir: Some(dir.clone()),
        };
        assert_eq!(secrets.read("db", "password").unwrap(), "hunter2");
        let missing = secrets.read("db", "nope").unwrap_err();
        assert!(missing.contains("FLOTILLA_SECRET_DB_NOPE"), "{missing}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
