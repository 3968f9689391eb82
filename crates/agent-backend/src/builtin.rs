//! The `builtin` metric provider: an agent's own traffic statistics, read over its control API.

use std::collections::BTreeMap;

use flotilla_core::analysis::{MeasureRequest, Measurer, MetricResult, Millis, Outcome};
use flotilla_core::spec::analysis::{BuiltinStatistic, TrafficSubset};

use crate::client::AgentClient;
use crate::wire::{BUCKET_SECONDS, CANARY, STABLE, Window, WindowQuery};

/// The `builtin` metric provider: the agent's own traffic statistics for one subset over a
/// window ending at the measurement, never reaching before the run's start (a subset's earlier
/// traffic may be another version's; the agent's 10-second buckets bound what can still leak
/// in). With fewer than `minRequests` requests in the window the result is nil (no evidence),
/// never a misleading number. Latency is in seconds.
#[derive(Debug, Clone)]
pub struct BuiltinProvider {
    client: AgentClient,
    clock: Clock,
}

/// The wall clock the provider reads `now` from (the caller's: this crate reads no clock), in
/// milliseconds since the Unix epoch.
pub type Clock = fn() -> Millis;

impl BuiltinProvider {
    /// Reads the agent at `client`, with `clock` for the time a live window ends.
    pub fn new(client: AgentClient, clock: Clock) -> BuiltinProvider {
        BuiltinProvider { client, clock }
    }
}

/// One statistic of a window, or None when the window has no value for it.
fn statistic_of(window: &Window, statistic: BuiltinStatistic) -> Option<f64> {
    match statistic {
        BuiltinStatistic::ErrorRate => window.error_rate,
        BuiltinStatistic::RequestRate => Some(window.request_rate),
        BuiltinStatistic::Requests => Some(window.requests as f64),
        BuiltinStatistic::Errors => Some(window.errors as f64),
        BuiltinStatistic::Latency => window
            .quantile
            .as_ref()
            .and_then(|q| q.ms)
            .map(|ms| ms / 1000.0),
    }
}

impl Measurer for BuiltinProvider {
    async fn measure(&self, request: &MeasureRequest) -> Outcome {
        let Some(builtin) = &request.provider.builtin else {
            return Outcome::Error(format!(
                "metric {:?} is not a builtin metric",
                request.metric
            ));
        };
        let (statistic, quantile, subset, window_ms, min_requests) = builtin.resolved();
        let subset = match subset {
            TrafficSubset::Canary => CANARY,
            TrafficSubset::Stable => STABLE,
        };
        let window_ms = request.window.unwrap_or(window_ms);
        let window_s = (window_ms / 1000).max(1);
        let not_before = request.not_before;
        let now = (self.clock)();
        let live = now - request.at <= 15_000;
        let end_ms = if live { now } else { request.at };
        let start_ms = (end_ms - window_s as Millis * 1000).max(not_before.unwrap_or(Millis::MIN));
        // A live measurement reads the window ending now; a past one (a backtest, a reference)
        // its own; a window cut by the run's start, or a series, is read by its bounds.
        let bounded = !live
            || request.step.is_some()
            || not_before.is_some_and(|n| n > end_ms - window_s as Millis * 1000);
        let query = if bounded {
            // A live window includes the current second; a past one ends where it was asked to.
            let end = (end_ms / 1000).max(0) as u64 + u64::from(live);
            WindowQuery {
                start: Some(((start_ms / 1000).max(0) as u64).min(end.saturating_sub(1))),
                end: Some(end),
                quantile: Some(quantile),
                step: request
                    .step
                    .map(|ms| format!("{}s", (ms / 1000).max(BUCKET_SECONDS))),
                ..WindowQuery::default()
            }
        } else {
            WindowQuery {
                window: Some(format!("{window_s}s")),
                quantile: Some(quantile),
                ..WindowQuery::default()
            }
        };
        let mut metadata = BTreeMap::new();
        metadata.insert("subset".to_owned(), subset.to_owned());
        if request.step.is_some() {
            let windows = match self.client.series(subset, &query).await {
                Ok(w) => w,
                Err(e) => return Outcome::Error(e.to_string()),
            };
            let requests: u64 = windows.iter().map(|w| w.requests).sum();
            metadata.insert("requests".to_owned(), requests.to_string());
            if let (Some(first), Some(last)) = (windows.first(), windows.last()) {
                metadata.insert(
                    "window".to_owned(),
                    format!("{}..{}", first.start, last.end),
                );
            }
            if requests < min_requests {
                metadata.insert(
                    "reason".to_owned(),
                    format!(
                        "{requests} requests in the window, fewer than minRequests {min_requests}"
                    ),
                );
                return Outcome::Value {
                    result: MetricResult::Nil,
                    metadata,
                };
            }
            let points = windows
                .iter()
                .map(|w| statistic_of(w, statistic).unwrap_or(f64::NAN))
                .collect();
            return Outcome::Value {
                result: MetricResult::Vector(points),
                metadata,
            };
        }
        let window = match self.client.stats(subset, &query).await {
            Ok(w) => w,
            Err(e) => return Outcome::Error(e.to_string()),
        };
        metadata.insert("requests".to_owned(), window.requests.to_string());
        metadata.insert("errors".to_owned(), window.errors.to_string());
        metadata.insert(
            "window".to_owned(),
            format!("{}..{}", window.start, window.end),
        );
        if window.requests < min_requests {
            metadata.insert(
                "reason".to_owned(),
                format!(
                    "{} requests in the window, fewer than minRequests {min_requests}",
                    window.requests
                ),
            );
            return Outcome::Value {
                result: MetricResult::Nil,
                metadata,
            };
        }
        Outcome::Value {
            result: statistic_of(&window, statistic)
                .map_or(MetricResult::Nil, |v| MetricResult::Vector(vec![v])),
            metadata,
        }
    }
}
