//! What each SaaS and time-series provider block must hold before it can run (Argo's own checks,
//! where Argo has them, else what the backend's API requires), and where its credentials come
//! from, and what an address they send to must be ([`http_url`]). Lint reports them; the
//! providers apply the same checks before sending anything.

use crate::spec::analysis::{
    CloudWatchMetric, DatadogMetric, GraphiteMetric, InfluxdbMetric, MetricProvider, NewRelicMetric,
};

/// Why an address is not one an HTTP provider sends to.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpUrlError {
    /// It does not parse as an absolute URL.
    #[error("is not a URL: {0}")]
    NotAUrl(url::ParseError),
    /// Another scheme (`file:`, `ftp:`…), or no host.
    #[error("is not an http or https URL")]
    NotHttp,
}

/// Parses an address, refusing anything but an absolute http(s) URL with a host: the rule every
/// HTTP provider applies before sending, and lint before the template runs.
pub fn http_url(text: &str) -> Result<url::Url, HttpUrlError> {
    let url = url::Url::parse(text.trim()).map_err(HttpUrlError::NotAUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(HttpUrlError::NotHttp);
    }
    Ok(url)
}

/// An address written in the manifest that [`http_url`] refuses, as `(field, message)`; one
/// with an argument placeholder (`{{args.…}}`) is known only when the run resolves it.
fn literal_address(field: &str, what: &str, text: Option<&str>) -> Option<(String, String)> {
    let text = text.filter(|t| !t.contains("{{") && !t.trim().is_empty())?;
    let error = http_url(text).err()?;
    Some((field.to_owned(), format!("the {what} {error}")))
}

/// Problems of the provider block, as `(field path under provider, message)`.
pub fn problems(provider: &MetricProvider) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(metric) = &provider.web {
        out.extend(literal_address("web.url", "web url", Some(&metric.url)));
    }
    if let Some(metric) = &provider.prometheus {
        out.extend(literal_address(
            "prometheus.address",
            "Prometheus address",
            metric.address.as_deref(),
        ));
    }
    if let Some(metric) = &provider.datadog
        && let Err(message) = datadog(metric)
    {
        out.push(("datadog".to_owned(), message));
    }
    let mut add = |block: &str, found: Vec<(String, String)>| {
        out.extend(found.into_iter().map(|(field, message)| {
            if field.is_empty() {
                (block.to_owned(), message)
            } else {
                (format!("{block}.{field}"), message)
            }
        }));
    };
    if let Some(metric) = &provider.new_relic {
        add("newRelic", new_relic(metric).into_iter().collect());
    }
    if let Some(metric) = &provider.influxdb {
        add("influxdb", influxdb(metric).into_iter().collect());
    }
    if let Some(metric) = &provider.graphite {
        add("graphite", graphite(metric));
    }
    if let Some(metric) = &provider.cloud_watch {
        add("cloudWatch", cloud_watch(metric));
    }
    out
}

/// Where the provider block reads its credentials, for a reader who must provision them
/// (None: the provider reads none, or not from Secrets).
pub fn credentials(provider: &MetricProvider) -> Option<(String, String)> {
    if let Some(metric) = &provider.datadog {
        let named = metric
            .secret_ref
            .as_ref()
            .and_then(|r| r.name.as_deref())
            .filter(|n| !n.is_empty());
        let text = match named {
            Some(name) => format!(
                "datadog reads its keys from the secret {name:?}: api-key and app-key (address optional)"
            ),
            None => "datadog reads its keys from DD_API_KEY, DD_APP_KEY and DD_ADDRESS (all three), else from the secret \"datadog\": api-key and app-key (address optional)".to_owned(),
        };
        return Some(("datadog".to_owned(), text));
    }
    if let Some(metric) = &provider.new_relic {
        let profile = profile(metric.profile.as_deref(), "newrelic");
        return Some((
            "newRelic".to_owned(),
            format!(
                "newRelic reads the secret {profile:?}: personal-api-key and account-id (region, base-url-nerdgraph optional)"
            ),
        ));
    }
    if let Some(metric) = &provider.influxdb {
        let profile = profile(metric.profile.as_deref(), "influxdb");
        return Some((
            "influxdb".to_owned(),
            format!("influxdb reads the secret {profile:?}: address, authToken and org"),
        ));
    }
    if provider.cloud_watch.is_some() {
        return Some((
            "cloudWatch".to_owned(),
            "cloudWatch uses the standard AWS credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, web identity, AWS_PROFILE) and AWS_REGION".to_owned(),
        ));
    }
    None
}

fn profile<'a>(profile: Option<&'a str>, default: &'a str) -> &'a str {
    profile.filter(|p| !p.is_empty()).unwrap_or(default)
}

/// Argo's checks of a Datadog block (`validateIncomingProps`), plus the API version itself.
pub fn datadog(metric: &DatadogMetric) -> Result<(), String> {
    let query = metric.query.as_deref().unwrap_or_default();
    // Argo's CRD defaults apiVersion to v1.
    let v1 = matches!(metric.api_version.as_deref(), None | Some("v1"));
    if let Some(version) = metric.api_version.as_deref()
        && version != "v1"
        && version != "v2"
    {
        return Err(format!("apiVersion {version:?} is not v1 or v2"));
    }
    if query.is_empty() && metric.queries.is_empty() {
        return Err("must have either a query or queries".into());
    }
    if !query.is_empty() && !metric.queries.is_empty() {
        return Err("cannot have both a query and queries".into());
    }
    if v1 && query.is_empty() {
        return Err(
            "API version v1 only supports the query field (queries need apiVersion: v2)".into(),
        );
    }
    let formula = metric.formula.as_deref().unwrap_or_default();
    if !formula.is_empty() && metric.queries.is_empty() {
        return Err("formula is only valid when queries are set".into());
    }
    if formula.is_empty() && metric.queries.len() > 1 {
        return Err("when multiple queries are provided you must include a formula".into());
    }
    if v1 && metric.aggregator.as_deref().is_some_and(|a| !a.is_empty()) {
        return Err("aggregator is not supported in v1".into());
    }
    if let Some(timeout) = &metric.request_timeout {
        match timeout {
            crate::spec::Duration::Millis(0) => {
                return Err("request timeout must be a positive duration (e.g. 30s)".into());
            }
            crate::spec::Duration::Millis(_) | crate::spec::Duration::Templated(_) => {}
        }
    }
    if metric.secret_ref.as_ref().and_then(|r| r.namespaced) == Some(true)
        && metric
            .secret_ref
            .as_ref()
            .and_then(|r| r.name.as_deref())
            .is_none_or(str::is_empty)
    {
        return Err("secretRef.name is required for namespaced credentials".into());
    }
    Ok(())
}

fn new_relic(metric: &NewRelicMetric) -> Option<(String, String)> {
    if metric.query.trim().is_empty() {
        return Some(("query".into(), "the NRQL query is empty".into()));
    }
    if metric.timeout.is_some_and(|t| t < 0) {
        return Some((
            "timeout".into(),
            "timeout value needs to be a positive value".into(),
        ));
    }
    None
}

fn influxdb(metric: &InfluxdbMetric) -> Option<(String, String)> {
    metric
        .query
        .as_deref()
        .is_none_or(|q| q.trim().is_empty())
        .then(|| {
            (
                at_field_or_block("query", metric.query.is_some()),
                "the Flux query is missing".into(),
            )
        })
}

fn graphite(metric: &GraphiteMetric) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if metric
        .address
        .as_deref()
        .is_none_or(|a| a.trim().is_empty())
    {
        out.push((
            at_field_or_block("address", metric.address.is_some()),
            "the Graphite address is missing".into(),
        ));
    }
    out.extend(literal_address(
        "address",
        "Graphite address",
        metric.address.as_deref(),
    ));
    if metric.query.as_deref().is_none_or(|q| q.trim().is_empty()) {
        out.push((
            at_field_or_block("query", metric.query.is_some()),
            "the render query is missing (e.g. target=sumSeries(app.errors)&from=-5min)".into(),
        ));
    }
    out
}

/// What GetMetricData requires of each query: an id (a lower-case letter first, then letters,
/// digits and `_`), exactly one of `metricStat` and `expression`, and a metric name, a period
/// and a statistic for a `metricStat`. A missing field is reported at its block.
fn cloud_watch(metric: &CloudWatchMetric) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if metric.metric_data_queries.is_empty() {
        out.push((
            "metricDataQueries".into(),
            "at least one query is required".into(),
        ));
    }
    for (i, query) in metric.metric_data_queries.iter().enumerate() {
        let at = format!("metricDataQueries[{i}]");
        match query.id.as_deref() {
            None => out.push((at.clone(), "every query needs an id".into())),
            Some(id) if !id.contains("{{") && !valid_id(id) => out.push((
                format!("{at}.id"),
                format!(
                    "id {id:?} must start with a lower-case letter and hold only letters, digits and _"
                ),
            )),
            Some(_) => {}
        }
        match (&query.metric_stat, &query.expression) {
            (Some(_), Some(_)) => out.push((
                at.clone(),
                "set exactly one of metricStat and expression, not both".into(),
            )),
            (None, None) => out.push((
                at.clone(),
                "set exactly one of metricStat and expression".into(),
            )),
            (Some(stat), None) => {
                let name = stat.metric.as_ref().and_then(|m| m.metric_name.as_deref());
                if name.is_none_or(str::is_empty) {
                    out.push((
                        format!("{at}.metricStat"),
                        "metric.metricName is missing".into(),
                    ));
                }
                if stat.period.is_none() {
                    out.push((
                        format!("{at}.metricStat"),
                        "period (seconds) is missing".into(),
                    ));
                }
                if stat.stat.as_deref().is_none_or(str::is_empty) {
                    out.push((
                        format!("{at}.metricStat"),
                        "stat (the statistic, e.g. Average, Sum, p99) is missing".into(),
                    ));
                }
            }
            (None, Some(_)) => {}
        }
    }
    out
}

/// A present field is reported at itself; a missing one at its block, which has a location.
fn at_field_or_block(field: &str, present: bool) -> String {
    if present {
        field.to_owned()
    } else {
        String::new()
    }
}

fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn provider(value: serde_json::Value) -> MetricProvider {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn argo_datadog_rules_hold() {
        let ok = [
            json!({"query": "avg:errors{*}"}),
            json!({"apiVersion": "v2", "query": "avg:errors{*}"}),
            json!({"apiVersion": "v2", "queries": {"a": "x", "b": "y"}, "formula": "a/b"}),
            json!({"apiVersion": "v2", "queries": {"a": "x"}}),
            json!({"query": "x", "requestTimeout": "30s"}),
        ];
        for m in ok {
            let metric: DatadogMetric = serde_json::from_value(m.clone()).unwrap();
            assert_eq!(datadog(&metric), Ok(()), "{m}");
        }
        let bad = [
            (json!({}), "either a query or queries"),
            (
                json!({"apiVersion": "v2", "query": "x", "queries": {"a": "y"}}),
                "both",
            ),
            (json!({"queries": {"a": "y"}}), "v1 only supports the query"),
            (
                json!({"apiVersion": "v2", "query": "x", "formula": "a"}),
                "formula is only valid",
            ),
            (
                json!({"apiVersion": "v2", "queries": {"a": "x", "b": "y"}}),
                "must include a formula",
            ),
            (
                json!({"query": "x", "aggregator": "avg"}),
                "not supported in v1",
            ),
            (json!({"query": "x", "requestTimeout": "0s"}), "positive"),
            (json!({"apiVersion": "v3", "query": "x"}), "not v1 or v2"),
            (
                json!({"query": "x", "secretRef": {"namespaced": true}}),
                "secretRef.name",
            ),
        ];
        for (m, expected) in bad {
            let metric: DatadogMetric = serde_json::from_value(m.clone()).unwrap();
            let err = datadog(&metric).unwrap_err();
            assert!(err.contains(expected), "{m}: {err}");
        }
    }

    #[test]
    fn each_provider_names_the_missing_field() {
        let cases = [
            (json!({"newRelic": {"query": " "}}), "newRelic.query"),
            (
                json!({"newRelic": {"query": "SELECT 1", "timeout": -1}}),
                "newRelic.timeout",
            ),
            (json!({"influxdb": {"profile": "p"}}), "influxdb"),
            (json!({"influxdb": {"query": ""}}), "influxdb.query"),
            (json!({"graphite": {"query": "target=x"}}), "graphite"),
            (
                json!({"graphite": {"address": "http://g", "query": " "}}),
                "graphite.query",
            ),
            (
                json!({"cloudWatch": {"metricDataQueries": []}}),
                "cloudWatch.metricDataQueries",
            ),
            (
                json!({"cloudWatch": {"metricDataQueries": [{"id": "Bad-Id", "expression": "a"}]}}),
                "cloudWatch.metricDataQueries[0].id",
            ),
            (
                json!({"cloudWatch": {"metricDataQueries": [{"id": "a"}]}}),
                "cloudWatch.metricDataQueries[0]",
            ),
            (
                json!({"cloudWatch": {"metricDataQueries": [{"id": "a", "metricStat": {"metric": {"metricName": "E"}, "stat": "Sum"}}]}}),
                "cloudWatch.metricDataQueries[0].metricStat",
            ),
        ];
        for (block, field) in cases {
            let found = problems(&provider(block.clone()));
            assert!(found.iter().any(|(f, _)| f == field), "{block}: {found:?}");
        }
        let fine = [
            json!({"newRelic": {"query": "SELECT 1"}}),
            json!({"influxdb": {"query": "from(bucket: \"b\")"}}),
            json!({"graphite": {"address": "http://g", "query": "target=x"}}),
            json!({"cloudWatch": {"metricDataQueries": [
                {"id": "errors", "metricStat": {"metric": {"namespace": "Shop", "metricName": "E"}, "period": 60, "stat": "Sum"}},
                {"id": "rate_1", "expression": "errors / 60"}
            ]}}),
        ];
        for block in fine {
            assert_eq!(problems(&provider(block.clone())), vec![], "{block}");
        }
    }

    #[test]
    fn credentials_name_the_secret_and_keys() {
        let (_, text) = credentials(&provider(json!({"influxdb": {"query": "q"}}))).unwrap();
        assert!(
            text.contains("\"influxdb\"") && text.contains("authToken"),
            "{text}"
        );
        let (_, text) = credentials(&provider(
            json!({"newRelic": {"profile": "nr", "query": "q"}}),
        ))
        .unwrap();
        assert!(
            text.contains("\"nr\"") && text.contains("personal-api-key"),
            "{text}"
        );
        let (_, text) = credentials(&provider(
            json!({"datadog": {"query": "q", "secretRef": {"name": "dd"}}}),
        ))
        .unwrap();
        assert!(
            text.contains("\"dd\"") && text.contains("app-key"),
            "{text}"
        );
        assert_eq!(
            credentials(&provider(json!({"web": {"url": "http://x"}}))),
            None
        );
    }
}
