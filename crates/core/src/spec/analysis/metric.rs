//! One metric: what to measure, how often, and how to judge each measurement; its provider
//! block, with Flotilla's extensions (the `builtin` read of the agent's traffic, the `compare`
//! and `sequential` composite metrics, and a calibrated metric's reference).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::providers::{
    CloudWatchMetric, DatadogMetric, GraphiteMetric, InfluxdbMetric, JobMetric, KayentaMetric,
    NewRelicMetric, PrometheusMetric, SkyWalkingMetric, WavefrontMetric, WebMetric,
};
use crate::spec::common::{Duration, IntOrString};

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
    pub direction: Option<crate::spec::judge::Direction>,
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
    pub nan_strategy: Option<crate::spec::judge::NanStrategy>,
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
    pub measure: Option<crate::spec::judge::EffectSizeMeasure>,
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
    pub strategy: Option<crate::spec::judge::OutlierStrategy>,
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
