//! Traffic statistics on the wire: the window a statistics query asks for, and what the agent
//! answers for one subset over one window (requests by status class, rates, latency quantiles).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The width of one bucket of the agent's statistics, in seconds: windows are read in whole
/// buckets.
pub const BUCKET_SECONDS: u64 = 10;

/// The window of `GET /v1/subsets/{subset}/stats`: either `window` (a duration such as `2m`)
/// ending `offset` ago (default now), or `start` and `end` in Unix seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WindowQuery {
    /// The window's length (`30s`, `2m`, `1h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// How long ago the window ends (default `0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// Start, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    /// End, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
    /// A latency quantile to report, 0..=1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile: Option<f64>,
    /// `GET /v1/subsets/{subset}/series` only: the length of each window of the series (at
    /// least 10s, the bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// A subset's traffic over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// The subset.
    pub subset: String,
    /// Start of the window, Unix seconds (bucket-aligned: buckets that start at or after
    /// `start - start % 10` are included).
    pub start: u64,
    /// End of the window, Unix seconds.
    pub end: u64,
    /// Requests answered.
    pub requests: u64,
    /// Requests by status class (`1xx` … `5xx`).
    pub by_class: BTreeMap<String, u64>,
    /// 5xx answers.
    pub errors: u64,
    /// 5xx / requests; absent with no requests.
    pub error_rate: Option<f64>,
    /// Requests per second over the window.
    pub request_rate: f64,
    /// Latency quantiles in milliseconds; absent with no requests.
    pub latency_ms: Option<Latency>,
    /// The quantile asked for, if any.
    pub quantile: Option<QuantileValue>,
}

/// Latency quantiles in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// One asked-for latency quantile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantileValue {
    /// The quantile, 0..=1.
    pub q: f64,
    /// Its latency in milliseconds; absent with no requests.
    pub ms: Option<f64>,
}
