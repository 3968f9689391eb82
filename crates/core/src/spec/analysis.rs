//! Argo Rollouts' analysis kinds: `AnalysisTemplate`, `ClusterAnalysisTemplate`, `AnalysisRun`
//! and `Experiment` (argoproj.io/v1alpha1), complete as of Argo Rollouts v1.9.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::kube::{LabelSelector, PodTemplateSpec};
use super::{Duration, IntOrString, ObjectMeta};

// ---------------------------------------------------------------------------------------------
// Top-level kinds
// ---------------------------------------------------------------------------------------------

/// An AnalysisTemplate or ClusterAnalysisTemplate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplate {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `AnalysisTemplate` or `ClusterAnalysisTemplate`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "super::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The template.
    pub spec: AnalysisTemplateSpec,
}

/// An AnalysisRun.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRun {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `AnalysisRun`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "super::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The run's spec.
    pub spec: AnalysisRunSpec,
    /// The run's observed state, as the controller records it; absent on a fresh run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AnalysisRunStatus>,
}

/// An Experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Experiment {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `Experiment`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "super::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The experiment's spec.
    pub spec: ExperimentSpec,
    /// The experiment's observed state, as the controller records it; absent on a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ExperimentStatus>,
}

// ---------------------------------------------------------------------------------------------
// AnalysisTemplate spec and its building blocks
// ---------------------------------------------------------------------------------------------

/// The body of an AnalysisTemplate or ClusterAnalysisTemplate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplateSpec {
    /// Metrics measured by runs created from this template (may be empty when `templates` is set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    /// Parameters the template declares; substituted as `{{args.<name>}}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// Metrics evaluated in dry-run mode: measured and reported, never deciding the run's phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric caps on how many measurements are kept in the run's status (upstream default 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// Other templates whose metrics, args and settings are merged into this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<AnalysisTemplateRef>,
}

/// A reference from one template to another, to be merged in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplateRef {
    /// Name of the referenced template (upstream's schema leaves it optional, but an empty name
    /// can never resolve, so it is required here).
    pub template_name: String,
    /// Look the name up among ClusterAnalysisTemplates instead of namespaced ones (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scope: Option<bool>,
}

/// Selects metrics to run in dry-run mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DryRun {
    /// Metric name pattern (an unanchored regular expression; `*` or `.*` selects every metric).
    pub metric_name: String,
}

/// Caps the number of measurements kept for matching metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasurementRetention {
    /// Metric name pattern the cap applies to (an unanchored regular expression).
    pub metric_name: String,
    /// Number of most recent measurements to keep (upstream default without a rule: 10).
    pub limit: i32,
}

/// A template or run argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Argument {
    /// Name used in `{{args.<name>}}` placeholders.
    pub name: String,
    /// Literal value; when neither this nor `valueFrom` is set the caller must supply one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where to read the value from instead of a literal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

impl Argument {
    /// The Secret key the argument's value comes from (`valueFrom.secretKeyRef`), if it does.
    pub fn secret_key_ref(&self) -> Option<&SecretKeyRef> {
        self.value_from.as_ref()?.secret_key_ref.as_ref()
    }
}

/// Source of an argument's value: exactly one of the fields is expected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueFrom {
    /// A key of a Secret in the run's namespace (the value is redacted in status and logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// A field of the owning object, e.g. `metadata.labels['app']`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<FieldRef>,
}

/// A key inside a Kubernetes Secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key within the Secret's data.
    pub key: String,
}

/// A path to a field of the owning object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRef {
    /// Dotted path of the field, e.g. `metadata.name`.
    pub field_path: String,
}

/// One metric: what to measure, how often, and how to judge each measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metric {
    /// Metric name, unique within the run.
    pub name: String,
    /// Pause between measurements; without it a single measurement is taken (unless `count` > 1,
    /// which requires an interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Duration>,
    /// Wait before the first measurement (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay: Option<Duration>,
    /// Number of measurements; default 1 without an interval, unbounded with an interval only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<IntOrString>,
    /// Expression over `result` that marks a measurement Successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<String>,
    /// Expression over `result` that marks a measurement Failed (wins over the success condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_condition: Option<String>,
    /// Failed measurements tolerated before the metric fails (default 0; -1 disables the check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_limit: Option<IntOrString>,
    /// Inconclusive measurements tolerated before the metric is Inconclusive (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive_limit: Option<IntOrString>,
    /// Consecutive errored measurements tolerated before the metric errors (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_error_limit: Option<IntOrString>,
    /// Consecutive successes that end the metric as Successful (default 0: disabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_success_limit: Option<IntOrString>,
    /// Flotilla extension (not Argo-compatible): fail only after this many failed measurements
    /// in a row, so one blip does not roll back a release. When set and `failureLimit` is not,
    /// only the streak counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failure_limit: Option<IntOrString>,
    /// Flotilla extension (not Argo-compatible): what an Inconclusive verdict of this metric does
    /// to the rollout (default `pause`, as Argo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_inconclusive: Option<OnInconclusive>,
    /// Flotilla extension (not Argo-compatible): calibrate the conditions on this cluster's own
    /// reference. The `baseline` variable of the conditions then holds the metric read over the
    /// reference window (for `builtin`: the stable subset's traffic before the run started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Calibration>,
    /// The system queried for each measurement.
    pub provider: MetricProvider,
}

/// Where a metric's conditions take their per-cluster reference from (a Flotilla extension).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Calibration {
    /// The reference window, ending when the run started (default 30m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// Fewest requests in the reference window (builtin; default 200): with fewer the cluster
    /// has no reference and the measurement is Inconclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u64>,
}

impl Calibration {
    /// (window ms, min requests) with the defaults.
    pub fn resolved(&self) -> (u64, u64) {
        (
            self.window
                .as_ref()
                .and_then(|d| d.as_millis())
                .unwrap_or(30 * 60_000),
            self.min_requests.unwrap_or(200),
        )
    }
}

/// A comparison metric (a Flotilla extension): the canary's series judged against a baseline
/// series with Kayenta's rank-sum method. The baseline is the stable version's concurrent traffic
/// in the same cluster, or (with `reference`) the same query over a past window of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareMetric {
    /// The provider answering the canary's series (`builtin` or `prometheus`).
    pub canary: Box<MetricProvider>,
    /// The provider answering the baseline's series (default for `builtin`: the same statistic of
    /// the stable subset; required otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Box<MetricProvider>>,
    /// Read the baseline over a past window instead of concurrently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<ReferenceWindow>,
    /// The span of each series, ending at the measurement (default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// The series' resolution (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Duration>,
    /// Fewest points on each side for a comparison (default 3); fewer record no measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_points: Option<u64>,
    /// Which change fails (default `increase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<super::judge::Direction>,
    /// Confidence level of the shift interval (default 0.98).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// The interval must clear ±tolerance·|estimate| (default 0.25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// Effect-size gates (default: mean ratio, neutral limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect_size: Option<CompareEffectSize>,
    /// NaN handling (default `remove`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nan_strategy: Option<super::judge::NanStrategy>,
    /// Outlier handling (default keep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outliers: Option<CompareOutliers>,
    /// Missing data fails the measurement instead of leaving it without a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub must_have_data: Option<bool>,
}

/// A past window for a comparison's baseline: exactly one field is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReferenceWindow {
    /// The same window this long ago (e.g. `24h`: the same hour a day earlier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<Duration>,
    /// The window of this length that ended when the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_start: Option<Duration>,
}

/// A comparison's effect-size gates.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareEffectSize {
    /// `meanRatio` (default) or `cles`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure: Option<super::judge::EffectSizeMeasure>,
    /// Least effect size for `High`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_increase: Option<f64>,
    /// Greatest effect size for `Low`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_decrease: Option<f64>,
}

/// A comparison's outlier handling.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareOutliers {
    /// `keep` (default) or `remove`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<super::judge::OutlierStrategy>,
    /// IQR factor (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
}

/// A sequential test of the canary's error rate against the stable's in the same cluster (a
/// Flotilla extension over the `builtin` traffic statistics): Wald's SPRT from the run's start.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SequentialMetric {
    /// False-alarm rate (default 0.01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Miss rate at `ratio` (default 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    /// Error-rate ratio (canary / stable) to detect (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Canary requests before any decision (default 100); fewer record no measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u64>,
    /// The windows the counts are read in (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Duration>,
}

/// Which traffic statistic a `builtin` metric reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuiltinStatistic {
    /// Failed requests (5xx) over all requests in the window.
    ErrorRate,
    /// A latency quantile over the window, in seconds.
    Latency,
    /// Requests per second over the window.
    RequestRate,
    /// Requests served in the window (a count).
    Requests,
    /// Failed (5xx) requests in the window (a count).
    Errors,
}

/// Which subset of traffic a `builtin` metric reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TrafficSubset {
    /// The canary's traffic.
    #[default]
    Canary,
    /// The stable's traffic.
    Stable,
}

/// A Flotilla `builtin` metric: the router's own traffic statistics for one subset over a
/// window. With fewer than `minRequests` requests in the window it returns no value (nil), so
/// a thin window is never evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BuiltinMetric {
    /// The statistic.
    pub metric: BuiltinStatistic,
    /// For `latency`: the quantile (default 0.95).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile: Option<f64>,
    /// The subset (default `canary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<TrafficSubset>,
    /// The window ending at the measurement (default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// Fewest requests in the window for a value (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u64>,
}

impl BuiltinMetric {
    /// Argo-style defaults: quantile 0.95, subset canary, window 2 minutes, 50 requests.
    pub fn resolved(&self) -> (BuiltinStatistic, f64, TrafficSubset, u64, u64) {
        (
            self.metric,
            self.quantile.unwrap_or(0.95),
            self.subset.unwrap_or_default(),
            self.window
                .as_ref()
                .and_then(|d| d.as_millis())
                .unwrap_or(120_000),
            self.min_requests.unwrap_or(50),
        )
    }
}

/// What an Inconclusive metric does to its rollout (a Flotilla extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnInconclusive {
    /// Pause the rollout for a human (Argo's behaviour).
    #[default]
    Pause,
    /// Abort the rollout.
    Abort,
}

// ---------------------------------------------------------------------------------------------
// Metric providers
// ---------------------------------------------------------------------------------------------

/// The measurement backend of a metric. Exactly one field should be set (each plugin entry
/// counts as one provider); lint checks this, parsing does not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricProvider {
    /// A Prometheus (or compatible) query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusMetric>,
    /// A Kayenta canary judgement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kayenta: Option<KayentaMetric>,
    /// A generic HTTP request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<WebMetric>,
    /// A Datadog query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datadog: Option<DatadogMetric>,
    /// A Wavefront query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wavefront: Option<WavefrontMetric>,
    /// A New Relic NRQL query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_relic: Option<NewRelicMetric>,
    /// A Kubernetes Job whose completion is the measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobMetric>,
    /// An AWS CloudWatch GetMetricData query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_watch: Option<CloudWatchMetric>,
    /// A Graphite query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphite: Option<GraphiteMetric>,
    /// An InfluxDB Flux query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub influxdb: Option<InfluxdbMetric>,
    /// An Apache SkyWalking GraphQL query (JSON key is all lower case: `skywalking`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "skywalking"
    )]
    pub skywalking: Option<SkyWalkingMetric>,
    /// Flotilla extension (not Argo-compatible): traffic statistics of the cluster's own router
    /// (a Flotilla agent, or the simulator's synthetic traffic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<BuiltinMetric>,
    /// Flotilla extension: the canary's series against a baseline series (rank-sum judge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<CompareMetric>,
    /// Flotilla extension: a sequential test of canary versus stable error rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<SequentialMetric>,
    /// Metric plugins by name (`"<org>/<plugin>"`), each with its own free-form configuration.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugin: BTreeMap<String, serde_json::Value>,
}

impl MetricProvider {
    /// The configured providers, by their JSON key. A plugin map contributes one `"plugin"` per
    /// entry, as upstream counts each entry as a provider, so `kinds().len() == 1` is exactly
    /// upstream's "one provider" rule.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        let flags = [
            ("prometheus", self.prometheus.is_some()),
            ("kayenta", self.kayenta.is_some()),
            ("web", self.web.is_some()),
            ("datadog", self.datadog.is_some()),
            ("wavefront", self.wavefront.is_some()),
            ("newRelic", self.new_relic.is_some()),
            ("job", self.job.is_some()),
            ("cloudWatch", self.cloud_watch.is_some()),
            ("graphite", self.graphite.is_some()),
            ("influxdb", self.influxdb.is_some()),
            ("skywalking", self.skywalking.is_some()),
            ("builtin", self.builtin.is_some()),
            ("compare", self.compare.is_some()),
            ("sequential", self.sequential.is_some()),
        ];
        kinds.extend(flags.iter().filter(|(_, set)| *set).map(|(name, _)| *name));
        kinds.extend(self.plugin.keys().map(|_| "plugin"));
        kinds
    }
}

/// A Prometheus query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusMetric {
    /// Base URL of the Prometheus server (falls back to the controller's configured address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// PromQL expression; `result` is a scalar or a list of floats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// How to authenticate to the server (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<Authentication>,
    /// Query timeout in whole seconds (upstream default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    /// Skip TLS certificate verification (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    /// Extra HTTP headers sent with the query.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<WebMetricHeader>,
    /// Run a range query instead of an instant query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_query: Option<PrometheusRangeQuery>,
}

/// Bounds of a Prometheus range query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusRangeQuery {
    /// Range start as an expression, e.g. `now() - duration("1h")`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// Range end as an expression, e.g. `now()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Resolution step between samples, e.g. `"1m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Duration>,
}

/// Credentials for a metric backend (Prometheus and web providers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Authentication {
    /// AWS SigV4 request signing (Amazon Managed Prometheus).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigv4: Option<Sigv4Config>,
    /// OAuth2 client-credentials flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2Config>,
    /// HTTP basic authentication (added upstream after v1.9.1, on the main branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuthConfig>,
}

/// AWS SigV4 signing settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sigv4Config {
    /// AWS region the request is signed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Named AWS credentials profile used to sign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// IAM role assumed to sign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
}

/// OAuth2 client-credentials settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuth2Config {
    /// Token endpoint URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
    /// OAuth2 client id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// OAuth2 client secret (usually an `{{args.x}}` fed from a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes requested with the token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// HTTP basic-auth credentials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BasicAuthConfig {
    /// User name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password or access token (usually an `{{args.x}}` fed from a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// One HTTP header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebMetricHeader {
    /// Header name.
    pub key: String,
    /// Header value.
    pub value: String,
}

/// A Kayenta canary analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KayentaMetric {
    /// Base URL of the Kayenta service.
    pub address: String,
    /// Application name reported to Kayenta.
    pub application: String,
    /// Name of the stored canary configuration.
    pub canary_config_name: String,
    /// Kayenta account holding the metrics.
    pub metrics_account_name: String,
    /// Kayenta account holding the canary configuration.
    pub configuration_account_name: String,
    /// Kayenta account used for result storage.
    pub storage_account_name: String,
    /// Score thresholds for the verdict.
    pub threshold: KayentaThreshold,
    /// Control/experiment scope pairs to compare.
    pub scopes: Vec<KayentaScope>,
    /// Judge over a look-back window rather than a fixed range (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookback: Option<bool>,
}

/// Kayenta score thresholds: score ≥ pass is Successful, ≥ marginal Inconclusive, else Failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KayentaThreshold {
    /// Minimum score for a pass.
    pub pass: i64,
    /// Minimum score for a marginal (Inconclusive) result.
    pub marginal: i64,
}

/// A named pair of control and experiment scopes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KayentaScope {
    /// Scope name.
    pub name: String,
    /// The baseline's scope.
    pub control_scope: KayentaScopeDetail,
    /// The canary's scope.
    pub experiment_scope: KayentaScopeDetail,
}

/// One side of a Kayenta comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KayentaScopeDetail {
    /// Scope selector (e.g. a replica-set or pod-template-hash value).
    pub scope: String,
    /// Region of the metrics.
    pub region: String,
    /// Sample step in seconds.
    pub step: i64,
    /// Window start timestamp (default: computed from the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// Window end timestamp (default: computed from the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
}

/// A generic HTTP request whose JSON response is the measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebMetric {
    /// HTTP verb: `GET` (default), `POST` or `PUT`; upstream forwards any other verb unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Request URL.
    pub url: String,
    /// Extra HTTP headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<WebMetricHeader>,
    /// Raw request body (POST/PUT only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Request timeout in whole seconds (upstream default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// JSONPath selecting `result` from the response (upstream default `{$}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_path: Option<String>,
    /// Skip TLS certificate verification (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    /// Request body as structured JSON (POST/PUT only; exclusive with `body`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_body: Option<serde_json::Value>,
    /// How to authenticate the request (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<Authentication>,
}

/// A Datadog metrics query (v1 single query, or v2 named queries combined by a formula).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DatadogMetric {
    /// Query time window, not the polling rate (upstream default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Duration>,
    /// A single metrics query (v1 or v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Named queries referenced by `formula` (v2 only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queries: BTreeMap<String, String>,
    /// Formula over the named `queries` (v2 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<String>,
    /// Datadog API version, `v1` (default) or `v2`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiVersion"
    )]
    pub api_version: Option<String>,
    /// v2 aggregator: avg, min, max, sum, last, percentile, mean, l2norm or area (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregator: Option<String>,
    /// Secret holding the Datadog API and app keys (default: the controller's `datadog` Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<DatadogSecretRef>,
    /// HTTP timeout for Datadog API calls (upstream default `10s`; added after v1.9.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<Duration>,
}

/// Which Secret holds Datadog credentials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DatadogSecretRef {
    /// Secret name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Look the Secret up in the run's namespace instead of the controller's (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaced: Option<bool>,
}

/// A Wavefront query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WavefrontMetric {
    /// Wavefront server address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Wavefront query expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// A New Relic NRQL query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewRelicMetric {
    /// Secret holding the account settings (upstream default `newrelic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// NRQL query.
    pub query: String,
    /// Query time limit in whole seconds (default: New Relic's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// A Kubernetes Job run per measurement: completion is Successful, failure is Failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobMetric {
    /// Labels and annotations for the created Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The Job's spec.
    pub spec: k8s_openapi::api::batch::v1::JobSpec,
}

/// An AWS CloudWatch GetMetricData query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudWatchMetric {
    /// Look-back window of the query (upstream default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Duration>,
    /// The GetMetricData queries.
    pub metric_data_queries: Vec<CloudWatchMetricDataQuery>,
}

/// One GetMetricData query: a metric statistic or an expression over other queries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudWatchMetricDataQuery {
    /// Query id, referenced by expressions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Math expression over other queries (exclusive with `metricStat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// Human-readable label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The metric and statistic to fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_stat: Option<CloudWatchMetricStat>,
    /// Period in seconds for expression queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<IntOrString>,
    /// Whether this query's values are returned (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_data: Option<bool>,
}

/// A CloudWatch metric and the statistic to compute over it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudWatchMetricStat {
    /// The metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<CloudWatchMetricStatMetric>,
    /// Aggregation period in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<IntOrString>,
    /// Statistic, e.g. `Average`, `Sum`, `p99`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stat: Option<String>,
    /// Unit, e.g. `Count`, `Seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// A CloudWatch metric identity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudWatchMetricStatMetric {
    /// Dimension filters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<CloudWatchMetricDimension>,
    /// Metric name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_name: Option<String>,
    /// Metric namespace, e.g. `AWS/ApplicationELB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// One CloudWatch dimension filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudWatchMetricDimension {
    /// Dimension name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Dimension value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A Graphite query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GraphiteMetric {
    /// Graphite server address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Graphite target expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// An InfluxDB Flux query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InfluxdbMetric {
    /// Secret holding the InfluxDB connection settings (upstream default `influxdb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Flux query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// An Apache SkyWalking GraphQL query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkyWalkingMetric {
    /// SkyWalking OAP server address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// GraphQL query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Query time window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Duration>,
}

// ---------------------------------------------------------------------------------------------
// Phases
// ---------------------------------------------------------------------------------------------

/// The phase of an AnalysisRun, one of its metrics, one measurement, or an Experiment.
///
/// Serialized exactly as `Pending`, `Running`, `Successful`, `Failed`, `Error`, `Inconclusive`.
/// Pending and Running are in progress; the other four are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum AnalysisPhase {
    /// Not started yet (no measurement taken).
    #[default]
    Pending,
    /// In progress.
    Running,
    /// Completed and passed.
    Successful,
    /// Completed and failed its criteria.
    Failed,
    /// Could not be measured (provider, query or expression error).
    Error,
    /// Completed without a clear pass or fail.
    Inconclusive,
}

impl AnalysisPhase {
    /// Rank in Argo's "worst wins" order, Successful (0) < Running < Pending < Inconclusive <
    /// Error < Failed (5): a run's phase is the highest-ranked phase among its metrics.
    pub fn severity(self) -> u8 {
        match self {
            AnalysisPhase::Successful => 0,
            AnalysisPhase::Running => 1,
            AnalysisPhase::Pending => 2,
            AnalysisPhase::Inconclusive => 3,
            AnalysisPhase::Error => 4,
            AnalysisPhase::Failed => 5,
        }
    }

    /// Whether the phase is final (Successful, Failed, Error or Inconclusive).
    pub fn is_completed(self) -> bool {
        !matches!(self, AnalysisPhase::Pending | AnalysisPhase::Running)
    }

    /// The phase's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AnalysisPhase::Pending => "Pending",
            AnalysisPhase::Running => "Running",
            AnalysisPhase::Successful => "Successful",
            AnalysisPhase::Failed => "Failed",
            AnalysisPhase::Error => "Error",
            AnalysisPhase::Inconclusive => "Inconclusive",
        }
    }
}

/// Reads an optional phase where Go clients may write the empty string for "not set yet".
fn blank_phase_as_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<AnalysisPhase>, D::Error> {
    let text: Option<String> = Option::deserialize(deserializer)?;
    match text.as_deref() {
        None | Some("") => Ok(None),
        Some(name) => {
            AnalysisPhase::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(name))
                .map(Some)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AnalysisRun
// ---------------------------------------------------------------------------------------------

/// The body of an AnalysisRun: the resolved metrics and arguments of one analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunSpec {
    /// Metrics to measure (required).
    pub metrics: Vec<Metric>,
    /// Argument values for the run's placeholders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// Stop the run early; in-flight measurements are terminated (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<bool>,
    /// Metrics evaluated in dry-run mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric caps on retained measurements (default 10 each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// When to garbage-collect the finished run (default: kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_strategy: Option<TtlStrategy>,
}

/// Time-to-live of a finished AnalysisRun.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TtlStrategy {
    /// Seconds to keep the run after it completes, whatever the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_after_completion: Option<i32>,
    /// Seconds to keep the run after it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_after_failure: Option<i32>,
    /// Seconds to keep the run after it succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_after_success: Option<i32>,
}

/// The observed state of an AnalysisRun.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunStatus {
    /// Overall phase; Go clients write `""` before the first reconcile, read here as `None`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "blank_phase_as_none"
    )]
    pub phase: Option<AnalysisPhase>,
    /// Why the run is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Per-metric results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metric_results: Vec<MetricResult>,
    /// When the run started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the run completed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Tally of the wet (non-dry-run) metrics' final phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_summary: Option<RunSummary>,
    /// Tally of the dry-run metrics' final phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_summary: Option<RunSummary>,
}

/// Counts of metrics by final phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunSummary {
    /// Number of metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Metrics that ended Successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful: Option<i32>,
    /// Metrics that ended Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Metrics that ended Inconclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive: Option<i32>,
    /// Metrics that ended in Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<i32>,
}

/// The state and recent measurements of one metric in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricResult {
    /// The metric's name.
    pub name: String,
    /// The metric's aggregate phase.
    pub phase: AnalysisPhase,
    /// Most recent measurements, oldest first (capped by measurement retention, default 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurements: Vec<Measurement>,
    /// Why the metric is in its phase (e.g. the last error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Measurements that did not error (successful + failed + inconclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Successful measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful: Option<i32>,
    /// Failed measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Inconclusive measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive: Option<i32>,
    /// Errored measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<i32>,
    /// Errors in a row; reset by any non-error measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_error: Option<i32>,
    /// Successes in a row; reset by any other outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_success: Option<i32>,
    /// Whether the metric runs in dry-run mode (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Provider state for the metric, e.g. the resolved Prometheus query.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// One measurement of a metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Measurement {
    /// The measurement's verdict (Running while in flight).
    pub phase: AnalysisPhase,
    /// Explanation, e.g. a provider error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the measurement started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the value was collected (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The measured value, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Provider state for the measurement, e.g. a Job name or Kayenta run id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// When an in-flight measurement should next be polled (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Experiment
// ---------------------------------------------------------------------------------------------

/// The body of an Experiment: ReplicaSets to run side by side and analyses to run against them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentSpec {
    /// The ReplicaSets to run (required).
    pub templates: Vec<ExperimentTemplate>,
    /// How long to run once every template is available (default: until terminated or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Duration>,
    /// Seconds a template may take to become available before the experiment fails (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
    /// Stop the experiment early (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<bool>,
    /// Analyses to run during the experiment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analyses: Vec<ExperimentAnalysisTemplateRef>,
    /// Seconds to wait before scaling the ReplicaSets down at the end (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i32>,
    /// Metrics of the analyses evaluated in dry-run mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric caps on retained measurements in the analyses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// Labels and annotations added to the AnalysisRuns the experiment creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_run_metadata: Option<AnalysisRunMetadata>,
}

/// One ReplicaSet an Experiment runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentTemplate {
    /// Template name, unique within the experiment.
    pub name: String,
    /// Desired pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Seconds a ready pod must stay up to count as available (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Pod selector; must match the template's labels and differ from other templates'.
    pub selector: LabelSelector,
    /// The pods to create.
    pub template: PodTemplateSpec,
    /// Create a Service for this template's pods (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ExperimentTemplateService>,
}

/// The Service an Experiment creates for one template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentTemplateService {
    /// Service name (default: generated from the experiment and template names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Extra metadata stamped on created AnalysisRuns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunMetadata {
    /// Extra labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An analysis an Experiment runs, from a named template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentAnalysisTemplateRef {
    /// Analysis name within the experiment.
    pub name: String,
    /// The AnalysisTemplate (or ClusterAnalysisTemplate) to instantiate.
    pub template_name: String,
    /// Look the template up at cluster scope (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scope: Option<bool>,
    /// Argument values for the created run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// Keep the experiment running until this analysis completes (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_for_completion: Option<bool>,
}

/// The observed state of an Experiment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentStatus {
    /// Overall phase, combining ReplicaSet health and analysis results.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "blank_phase_as_none"
    )]
    pub phase: Option<AnalysisPhase>,
    /// Why the experiment is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Per-template ReplicaSet state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template_statuses: Vec<ExperimentTemplateStatus>,
    /// When every template became available; the duration counts from here (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_at: Option<String>,
    /// Kubernetes-style conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ExperimentCondition>,
    /// State of the experiment's AnalysisRuns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis_runs: Vec<ExperimentAnalysisRunStatus>,
}

/// The state of one Experiment template's ReplicaSet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentTemplateStatus {
    /// Template name.
    pub name: String,
    /// Pods matching the selector.
    pub replicas: i32,
    /// Pods running the current template.
    pub updated_replicas: i32,
    /// Ready pods.
    pub ready_replicas: i32,
    /// Pods ready for at least `minReadySeconds`.
    pub available_replicas: i32,
    /// Hash collisions met when naming the ReplicaSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// The template's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TemplateStatusCode>,
    /// Why the template is in its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Last state change; restarts the progress-deadline clock (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Name of the Service created for the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The ReplicaSet's pod-template hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash: Option<String>,
}

/// The state of one Experiment template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TemplateStatusCode {
    /// Pods are being created or becoming available.
    Progressing,
    /// All pods available; the experiment is running.
    Running,
    /// Finished normally.
    Successful,
    /// Missed its progress deadline or otherwise failed.
    Failed,
    /// Could not be reconciled.
    Error,
}

/// A condition on an Experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub condition_type: ExperimentConditionType,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last update (RFC 3339; Go writes `null` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// Last change of `status` (RFC 3339; Go writes `null` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Machine-readable reason for the last transition.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// The kinds of Experiment condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExperimentConditionType {
    /// The spec is invalid; nothing progresses until it is fixed.
    InvalidSpec,
    /// The experiment finished.
    Completed,
    /// ReplicaSets are being created or scaled.
    Progressing,
    /// Every template is available and the duration clock runs.
    Running,
    /// A pod could not be created or deleted.
    ReplicaFailure,
}

/// The state of one AnalysisRun an Experiment created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentAnalysisRunStatus {
    /// Analysis name from the spec.
    pub name: String,
    /// The AnalysisRun's object name.
    pub analysis_run: String,
    /// The AnalysisRun's phase.
    pub phase: AnalysisPhase,
    /// The AnalysisRun's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(value: serde_json::Value) -> AnalysisTemplate {
        serde_json::from_value(value).expect("template parses")
    }

    fn prometheus_template() -> serde_json::Value {
        json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AnalysisTemplate",
            "metadata": {"name": "success-rate"},
            "spec": {
                "args": [
                    {"name": "service-name"},
                    {"name": "prometheus-port", "value": "9090"},
                    {"name": "token", "valueFrom": {"secretKeyRef": {"name": "prom", "key": "token"}}},
                    {"name": "app", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}
                ],
                "dryRun": [{"metricName": "latency"}],
                "measurementRetention": [{"metricName": ".*", "limit": 20}],
                "metrics": [{
                    "name": "success-rate",
                    "interval": "5m",
                    "initialDelay": "30s",
                    "count": 3,
                    "successCondition": "result[0] >= 0.95",
                    "failureLimit": 2,
                    "consecutiveErrorLimit": 4,
                    "provider": {"prometheus": {
                        "address": "http://prometheus.example.com:{{args.prometheus-port}}",
                        "query": "sum(irate(istio_requests_total{reporter=\"source\",destination_service=~\"{{args.service-name}}\",response_code!~\"5.*\"}[5m]))",
                        "timeout": 20,
                        "insecure": true,
                        "headers": [{"key": "Authorization", "value": "Bearer {{args.token}}"}],
                        "authentication": {
                            "sigv4": {"region": "us-east-1", "profile": "default", "roleArn": "arn:aws:iam::1:role/x"},
                            "oauth2": {"tokenUrl": "https://idp/token", "clientId": "c", "clientSecret": "s", "scopes": ["a", "b"]},
                            "basicAuth": {"username": "u", "password": "{{args.token}}"}
                        },
                        "rangeQuery": {"start": "now() - duration(\"1h\")", "end": "now()", "step": "1m"}
                    }}
                }],
                "templates": [{"templateName": "base", "clusterScope": true}]
            }
        })
    }

    #[test]
    fn realistic_prometheus_template_parses() {
        let t = template(prometheus_template());
        let metric = &t.spec.metrics[0];
        assert_eq!(metric.interval, Some(Duration::from_secs(300)));
        assert_eq!(metric.initial_delay, Some(Duration::from_secs(30)));
        assert_eq!(metric.count, Some(IntOrString::Int(3)));
        assert_eq!(metric.provider.kinds(), vec!["prometheus"]);
        let prom = metric.provider.prometheus.as_ref().unwrap();
        assert_eq!(prom.timeout, Some(20));
        let auth = prom.authentication.as_ref().unwrap();
        assert_eq!(
            auth.sigv4.as_ref().unwrap().role_arn.as_deref(),
            Some("arn:aws:iam::1:role/x")
        );
        assert_eq!(auth.oauth2.as_ref().unwrap().scopes, vec!["a", "b"]);
        assert_eq!(
            prom.range_query.as_ref().unwrap().step,
            Some(Duration::from_secs(60))
        );
        assert_eq!(t.spec.args.len(), 4);
        assert_eq!(t.spec.measurement_retention[0].limit, 20);
        assert_eq!(t.spec.templates[0].cluster_scope, Some(true));
    }

    #[test]
    fn web_and_job_metrics_parse() {
        let t = template(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "ClusterAnalysisTemplate",
            "metadata": {"name": "checks"},
            "spec": {"metrics": [
                {
                    "name": "webmetric",
                    "successCondition": "result.ok == true",
                    "provider": {"web": {
                        "method": "POST",
                        "url": "http://svc.{{args.namespace}}/check",
                        "headers": [{"key": "Content-Type", "value": "application/json"}],
                        "jsonBody": {"service": "{{args.service}}", "window": 5},
                        "timeoutSeconds": 20,
                        "jsonPath": "{$.data}",
                        "authentication": {"oauth2": {"tokenUrl": "https://idp/token"}}
                    }}
                },
                {
                    "name": "load-test",
                    "provider": {"job": {
                        "metadata": {"labels": {"team": "a"}},
                        "spec": {
                            "backoffLimit": 1,
                            "template": {"spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "t", "image": "busybox", "command": ["sh", "-c", "true"]}]
                            }}
                        }
                    }}
                }
            ]}
        }));
        let web = t.spec.metrics[0].provider.web.as_ref().unwrap();
        assert_eq!(web.method.as_deref(), Some("POST"));
        assert_eq!(
            web.json_body,
            Some(json!({"service": "{{args.service}}", "window": 5}))
        );
        assert_eq!(web.timeout_seconds, Some(20));
        let job = t.spec.metrics[1].provider.job.as_ref().unwrap();
        assert_eq!(job.spec.backoff_limit, Some(1));
        assert_eq!(t.spec.metrics[1].provider.kinds(), vec!["job"]);
    }

    #[test]
    fn other_providers_parse() {
        let provider: MetricProvider = serde_json::from_value(json!({
            "datadog": {"apiVersion": "v2", "interval": "5m", "queries": {"a": "sum:x{*}"},
                        "formula": "a", "aggregator": "avg", "secretRef": {"name": "dd", "namespaced": true}},
            "cloudWatch": {"interval": "10m", "metricDataQueries": [{
                "id": "rate", "expression": "errors / requests", "returnData": true, "period": "{{args.p}}",
                "metricStat": {"metric": {"namespace": "AWS/ELB", "metricName": "x",
                               "dimensions": [{"name": "LB", "value": "y"}]}, "period": 300, "stat": "Sum", "unit": "Count"}
            }]},
            "kayenta": {"address": "http://k", "application": "a", "canaryConfigName": "c",
                        "metricsAccountName": "m", "configurationAccountName": "c", "storageAccountName": "s",
                        "threshold": {"pass": 90, "marginal": 75},
                        "scopes": [{"name": "default",
                                    "controlScope": {"scope": "app=a", "region": "us", "step": 60, "start": "2020-01-01T00:00:00Z"},
                                    "experimentScope": {"scope": "app=b", "region": "us", "step": 60}}]},
            "newRelic": {"profile": "nr", "query": "SELECT 1", "timeout": 10},
            "wavefront": {"address": "w", "query": "ts(x)"},
            "graphite": {"address": "g", "query": "target"},
            "influxdb": {"profile": "i", "query": "from(bucket: \"b\")"},
            "skywalking": {"address": "s", "query": "q", "interval": "3m"},
            "plugin": {"argoproj-labs/sample": {"address": "x", "n": 3}}
        }))
        .unwrap();
        assert_eq!(
            provider.kinds(),
            vec![
                "kayenta",
                "datadog",
                "wavefront",
                "newRelic",
                "cloudWatch",
                "graphite",
                "influxdb",
                "skywalking",
                "plugin"
            ]
        );
        let cw = provider.cloud_watch.as_ref().unwrap();
        assert!(
            cw.metric_data_queries[0]
                .period
                .as_ref()
                .unwrap()
                .is_templated()
        );
    }

    #[test]
    fn analysis_run_with_status_parses() {
        let run: AnalysisRun = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AnalysisRun",
            "metadata": {"name": "guestbook-6c54544bf9-2-1", "namespace": "default"},
            "spec": {
                "args": [{"name": "service-name", "value": "guestbook"}],
                "terminate": true,
                "ttlStrategy": {"secondsAfterCompletion": 3600, "secondsAfterFailure": 60, "secondsAfterSuccess": 30},
                "metrics": [{"name": "sleep", "interval": "{{args.interval}}", "provider": {"web": {"url": "http://x"}}}]
            },
            "status": {
                "phase": "Failed",
                "message": "Metric \"sleep\" assessed Failed due to failed (1) > failureLimit (0)",
                "startedAt": "2024-01-01T00:00:00Z",
                "completedAt": "2024-01-01T00:05:00Z",
                "runSummary": {"count": 1, "failed": 1},
                "dryRunSummary": {},
                "metricResults": [{
                    "name": "sleep",
                    "phase": "Failed",
                    "count": 1,
                    "failed": 1,
                    "consecutiveError": 0,
                    "consecutiveSuccess": 0,
                    "dryRun": false,
                    "metadata": {"ResolvedPrometheusQuery": "up"},
                    "measurements": [{
                        "phase": "Failed",
                        "startedAt": "2024-01-01T00:00:00Z",
                        "finishedAt": "2024-01-01T00:00:05Z",
                        "value": "[0.5]",
                        "metadata": {"job-name": "x"},
                        "resumeAt": "2024-01-01T00:00:10Z"
                    }]
                }]
            }
        }))
        .unwrap();
        assert_eq!(
            run.spec.metrics[0].interval,
            Some(Duration::Templated("{{args.interval}}".into()))
        );
        let status = run.status.as_ref().unwrap();
        assert_eq!(status.phase, Some(AnalysisPhase::Failed));
        assert_eq!(
            status.metric_results[0].measurements[0].value.as_deref(),
            Some("[0.5]")
        );
        assert_eq!(status.run_summary.as_ref().unwrap().failed, Some(1));
        assert_eq!(
            run.spec
                .ttl_strategy
                .as_ref()
                .unwrap()
                .seconds_after_success,
            Some(30)
        );
    }

    #[test]
    fn blank_run_phase_reads_as_unset() {
        let status: AnalysisRunStatus =
            serde_json::from_value(json!({"phase": "", "runSummary": {}})).unwrap();
        assert_eq!(status.phase, None);
        assert!(serde_json::from_value::<AnalysisRunStatus>(json!({"phase": "Done"})).is_err());
    }

    #[test]
    fn unknown_field_inside_metric_is_rejected() {
        let mut value = prometheus_template();
        value["spec"]["metrics"][0]["failureLimt"] = json!(3);
        let err = serde_json::from_value::<AnalysisTemplate>(value).unwrap_err();
        assert!(err.to_string().contains("failureLimt"), "{err}");

        let mut value = prometheus_template();
        value["spec"]["metrics"][0]["provider"]["prometheus"]["querry"] = json!("up");
        assert!(serde_json::from_value::<AnalysisTemplate>(value).is_err());
    }

    #[test]
    fn round_trip_is_identity() {
        let t = template(prometheus_template());
        let back: AnalysisTemplate =
            serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(t, back);
    }

    #[test]
    fn templated_count_parses() {
        let metric: Metric = serde_json::from_value(json!({
            "name": "m",
            "interval": "{{args.interval}}",
            "count": "{{args.count}}",
            "failureLimit": "{{args.failures}}",
            "inconclusiveLimit": "1",
            "consecutiveSuccessLimit": 2,
            "provider": {"plugin": {"org/name": {}}}
        }))
        .unwrap();
        assert_eq!(
            metric.count,
            Some(IntOrString::String("{{args.count}}".into()))
        );
        assert!(metric.count.as_ref().unwrap().is_templated());
        assert_eq!(
            metric.inconclusive_limit.as_ref().unwrap().as_int(),
            Some(1)
        );
        assert_eq!(metric.provider.kinds(), vec!["plugin"]);
    }

    #[test]
    fn experiment_with_status_parses_and_round_trips() {
        let exp: Experiment = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "exp"},
            "spec": {
                "duration": "5m",
                "progressDeadlineSeconds": 30,
                "scaleDownDelaySeconds": 10,
                "templates": [{
                    "name": "baseline",
                    "replicas": 1,
                    "minReadySeconds": 5,
                    "selector": {"matchLabels": {"app": "x"}},
                    "template": {"metadata": {"labels": {"app": "x"}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                    "service": {"name": "baseline-svc"}
                }],
                "analyses": [{"name": "a", "templateName": "t", "clusterScope": false,
                              "args": [{"name": "x", "value": "y"}], "requiredForCompletion": true}],
                "dryRun": [{"metricName": "m"}],
                "measurementRetention": [{"metricName": "m", "limit": 5}],
                "analysisRunMetadata": {"labels": {"l": "v"}, "annotations": {"a": "v"}}
            },
            "status": {
                "phase": "Running",
                "availableAt": "2024-01-01T00:00:00Z",
                "templateStatuses": [{"name": "baseline", "replicas": 1, "updatedReplicas": 1,
                                      "readyReplicas": 1, "availableReplicas": 1, "status": "Running",
                                      "lastTransitionTime": "2024-01-01T00:00:00Z", "podTemplateHash": "abc"}],
                "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                                "message": "ok", "lastUpdateTime": "2024-01-01T00:00:00Z",
                                "lastTransitionTime": null}],
                "analysisRuns": [{"name": "a", "analysisRun": "exp-a", "phase": "Running"}]
            }
        }))
        .unwrap();
        let status = exp.status.as_ref().unwrap();
        assert_eq!(
            status.template_statuses[0].status,
            Some(TemplateStatusCode::Running)
        );
        assert_eq!(
            status.conditions[0].condition_type,
            ExperimentConditionType::Progressing
        );
        let back: Experiment = serde_json::from_value(serde_json::to_value(&exp).unwrap()).unwrap();
        assert_eq!(exp, back);
    }

    #[test]
    fn severity_follows_worst_wins_order() {
        use AnalysisPhase::*;
        let order = [Successful, Running, Pending, Inconclusive, Error, Failed];
        for pair in order.windows(2) {
            assert!(pair[0].severity() < pair[1].severity(), "{pair:?}");
        }
        assert_eq!(
            serde_json::to_value(Inconclusive).unwrap(),
            json!("Inconclusive")
        );
        assert!(Error.is_completed() && !Pending.is_completed());
    }
}
