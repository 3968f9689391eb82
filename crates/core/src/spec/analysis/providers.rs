//! The settings of Argo Rollouts' metric providers (Prometheus, Kayenta, Web, Datadog,
//! Wavefront, New Relic, Job, CloudWatch, Graphite, InfluxDB, SkyWalking).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::spec::common::{Duration, IntOrString};
use crate::spec::kube::ObjectMeta;

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
