//! Argo's `datadog` provider: a v1 timeseries query (`GET /api/v1/query`) or a v2 scalar query
//! (`POST /api/v2/query/scalar`, named `queries` combined by a `formula`), with the API and
//! application keys Argo reads (a `secretRef`, else `DD_API_KEY`/`DD_APP_KEY`/`DD_ADDRESS`, else
//! the `datadog` Secret).
//!
//! One deliberate difference: a null point (Datadog's "no data in this bucket") is no result at
//! all, where Argo's Go decoding reads it as 0 and could pass `result < 0.05` on no evidence.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::analysis::{MeasureRequest, MetricResult, Outcome, SecretStore};
use flotilla_core::spec::analysis::DatadogMetric;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::{Providers, http};

/// Datadog's public API, when neither the Secret nor the environment names an address.
const DEFAULT_ADDRESS: &str = "https://api.datadoghq.com";
/// The Secret Argo reads when the metric names none.
const DEFAULT_SECRET: &str = "datadog";
/// Upstream's request timeout when `requestTimeout` is not set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's query window when `interval` is not set.
const DEFAULT_INTERVAL_SECS: u64 = 5 * 60;
/// Largest response read.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Where the keys are sent and what they are.
struct Credentials {
    address: String,
    api_key: String,
    app_key: String,
}

/// Runs one Datadog measurement.
pub(crate) async fn measure(
    providers: &Providers,
    metric: &DatadogMetric,
    request: &MeasureRequest,
) -> Outcome {
    match run(providers, metric, request).await {
        Ok((result, metadata)) => Outcome::Value { result, metadata },
        Err(message) => Outcome::Error(format!("datadog: {message}")),
    }
}

async fn run(
    providers: &Providers,
    metric: &DatadogMetric,
    request: &MeasureRequest,
) -> Result<(MetricResult, BTreeMap<String, String>), String> {
    flotilla_core::analysis::provider_checks::datadog(metric)?;
    let credentials = credentials(providers.secrets.as_ref(), metric, |name| {
        std::env::var(name).ok()
    })?;
    // Argo's CRD defaults apiVersion to v1.
    let v2 = metric.api_version.as_deref() == Some("v2");
    let interval = match &metric.interval {
        Some(d) => d
            .as_secs()
            .ok_or_else(|| format!("interval {d:?} is not a duration"))?,
        None => DEFAULT_INTERVAL_SECS,
    };
    let timeout = match &metric.request_timeout {
        Some(d) => Duration::from_millis(
            d.as_millis()
                .ok_or_else(|| format!("requestTimeout {d:?} is not a duration"))?,
        ),
        None => DEFAULT_TIMEOUT,
    };
    let to = request.at.div_euclid(1000);
    let from = to - interval as i64;
    let base = http::parse_http_url(&credentials.address, "address")?;
    let (method, url, body) = if v2 {
        let url = endpoint(&base, "/api/v2/query/scalar")?;
        let body = v2_body(metric, from, to);
        (Method::POST, url, Some(body.to_string()))
    } else {
        let mut url = endpoint(&base, "/api/v1/query")?;
        // Go's url.Values.Encode sorts by key: from, query, to.
        url.query_pairs_mut()
            .append_pair("from", &from.to_string())
            .append_pair("query", metric.query.as_deref().unwrap_or_default())
            .append_pair("to", &to.to_string());
        (Method::GET, url, None)
    };
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        HeaderName::from_static("dd-api-key"),
        sensitive(&credentials.api_key, "api-key")?,
    );
    headers.insert(
        HeaderName::from_static("dd-application-key"),
        sensitive(&credentials.app_key, "app-key")?,
    );
    let shown = http::shown_endpoint(&url);
    let verb = method.as_str().to_owned();
    let mut builder = providers
        .client(None)
        .request(method, url)
        .headers(headers)
        .timeout(timeout);
    if let Some(body) = body {
        builder = builder.body(body);
    }
    let mut response = builder
        .send()
        .await
        .map_err(|e| http::describe_error(&verb, &shown, e, timeout))?;
    let status = response.status();
    let bytes = http::read_body(&mut response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| e.describe(&verb, &shown, timeout))?;
    if status.as_u16() == 401 || status.as_u16() == 403 {
        return Err(format!(
            "{verb} {shown}: received authentication error response code: {status}: {}",
            http::quote_body(&bytes)
        ));
    }
    if status.as_u16() != 200 {
        return Err(format!(
            "{verb} {shown}: received non 2xx response code: {status}: {}",
            http::quote_body(&bytes)
        ));
    }
    let result = if v2 {
        parse_v2(&bytes)
    } else {
        parse_v1(&bytes)
    }
    .map_err(|e| format!("{verb} {shown}: {e}"))?;
    let mut metadata = BTreeMap::new();
    metadata.insert("endpoint".to_owned(), shown);
    Ok((result, metadata))
}

/// Where Argo finds the keys: the named Secret alone; else the three `DD_*` variables (all of
/// them); else the `datadog` Secret. The address is optional in a Secret.
fn credentials(
    secrets: &dyn SecretStore,
    metric: &DatadogMetric,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Credentials, String> {
    let reference = metric.secret_ref.as_ref();
    let named = reference
        .and_then(|r| r.name.as_deref())
        .filter(|n| !n.is_empty());
    if reference.and_then(|r| r.namespaced) == Some(true) && named.is_none() {
        return Err("secretRef.name is required for namespaced credentials".into());
    }
    let from_secret = |name: &str| -> Result<Credentials, String> {
        let api_key = secrets.read(name, "api-key")?;
        let app_key = secrets.read(name, "app-key")?;
        if api_key.is_empty() || app_key.is_empty() {
            return Err(format!("secret {name}: api-key or app-key is empty"));
        }
        let address = secrets
            .read(name, "address")
            .ok()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| DEFAULT_ADDRESS.to_owned());
        Ok(Credentials {
            address,
            api_key,
            app_key,
        })
    };
    if let Some(name) = named {
        return from_secret(name)
            .map_err(|e| format!("failed to find the credentials for datadog: {e}"));
    }
    if let (Some(api_key), Some(app_key), Some(address)) =
        (env("DD_API_KEY"), env("DD_APP_KEY"), env("DD_ADDRESS"))
        && !api_key.is_empty()
        && !app_key.is_empty()
    {
        let address = if address.is_empty() {
            DEFAULT_ADDRESS.to_owned()
        } else {
            address
        };
        return Ok(Credentials {
            address,
            api_key,
            app_key,
        });
    }
    from_secret(DEFAULT_SECRET).map_err(|e| {
        format!(
            "failed to find the credentials for datadog (DD_API_KEY, DD_APP_KEY and DD_ADDRESS \
             are not all set, and the {DEFAULT_SECRET} secret: {e})"
        )
    })
}

/// A header value that is never printed.
fn sensitive(value: &str, what: &str) -> Result<HeaderValue, String> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| format!("the {what} is not a valid HTTP header value"))?;
    header.set_sensitive(true);
    Ok(header)
}

/// The address with Argo's route appended to its path.
fn endpoint(base: &Url, route: &str) -> Result<Url, String> {
    let text = format!("{}{}", base.as_str().trim_end_matches('/'), route);
    Url::parse(&text).map_err(|e| format!("address {:?}: {e}", http::redact(base)))
}

/// The v2 scalar request: `query` becomes the one query named `query`; the aggregator defaults
/// to `last`; timestamps in milliseconds.
fn v2_body(metric: &DatadogMetric, from: i64, to: i64) -> Value {
    let aggregator = metric
        .aggregator
        .as_deref()
        .filter(|a| !a.is_empty())
        .unwrap_or("last");
    let mut queries: BTreeMap<&str, &str> = metric
        .queries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if let Some(query) = metric.query.as_deref().filter(|q| !q.is_empty()) {
        queries = BTreeMap::from([("query", query)]);
    }
    let queries: Vec<Value> = queries
        .into_iter()
        .map(|(name, query)| {
            json!({
                "aggregator": aggregator,
                "data_source": "metrics",
                "name": name,
                "query": query,
            })
        })
        .collect();
    let formulas: Vec<Value> = match metric.formula.as_deref().filter(|f| !f.is_empty()) {
        Some(formula) => vec![json!({ "formula": formula })],
        None => Vec::new(),
    };
    json!({
        "data": {
            "attributes": {
                "from": from * 1000,
                "to": to * 1000,
                "queries": queries,
                "formulas": formulas,
            },
            "type": "scalar_request",
        }
    })
}

#[derive(Deserialize)]
struct ResponseV1 {
    #[serde(default)]
    series: Option<Vec<SeriesV1>>,
}

#[derive(Deserialize)]
struct SeriesV1 {
    #[serde(default)]
    pointlist: Option<Vec<Vec<Option<f64>>>>,
}

/// v1: the last point of the first series; no series or no points is no result.
fn parse_v1(body: &[u8]) -> Result<MetricResult, String> {
    let response: ResponseV1 =
        serde_json::from_slice(body).map_err(|e| format!("could not parse JSON body: {e}"))?;
    let Some(points) = response
        .series
        .unwrap_or_default()
        .into_iter()
        .next()
        .and_then(|s| s.pointlist)
        .filter(|p| !p.is_empty())
    else {
        return Ok(MetricResult::Nil);
    };
    let last = points.last().expect("not empty");
    if last.len() != 2 {
        return Err("datapoint does not have 2 values".into());
    }
    Ok(match last[1] {
        Some(value) => MetricResult::Scalar(value),
        None => MetricResult::Nil,
    })
}

#[derive(Deserialize)]
struct ResponseV2 {
    #[serde(default)]
    data: Option<DataV2>,
    /// Datadog's top-level errors (e.g. a 200 with `{"errors": [...]}` never happens, but a
    /// malformed answer may carry them).
    #[serde(default)]
    errors: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct DataV2 {
    #[serde(default)]
    attributes: Option<AttributesV2>,
    #[serde(default)]
    errors: Option<String>,
}

#[derive(Deserialize)]
struct AttributesV2 {
    #[serde(default)]
    columns: Option<Vec<ColumnV2>>,
}

#[derive(Deserialize)]
struct ColumnV2 {
    #[serde(default)]
    values: Option<Vec<Option<f64>>>,
}

/// v2: the first value of the first column; no column, no value or a null value is no result;
/// `data.errors` is an error.
fn parse_v2(body: &[u8]) -> Result<MetricResult, String> {
    let response: ResponseV2 =
        serde_json::from_slice(body).map_err(|e| format!("could not parse JSON body: {e}"))?;
    if let Some(errors) = response.errors.filter(|e| !e.is_empty()) {
        return Err(format!(
            "there were errors in your query: {}",
            errors.join("; ")
        ));
    }
    let Some(data) = response.data else {
        return Ok(MetricResult::Nil);
    };
    if let Some(errors) = data.errors.filter(|e| !e.is_empty()) {
        return Err(format!("there were errors in your query: {errors}"));
    }
    let first = data
        .attributes
        .and_then(|a| a.columns)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.values)
        .and_then(|v| v.into_iter().next())
        .flatten();
    Ok(match first {
        Some(value) => MetricResult::Scalar(value),
        None => MetricResult::Nil,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::spec::analysis::DatadogSecretRef;

    #[derive(Debug)]
    struct Map(BTreeMap<(String, String), String>);

    impl SecretStore for Map {
        fn read(&self, name: &str, key: &str) -> Result<String, String> {
            self.0
                .get(&(name.to_owned(), key.to_owned()))
                .cloned()
                .ok_or_else(|| format!("secret {name}/{key} not found"))
        }
    }

    fn secrets(entries: &[(&str, &str, &str)]) -> Map {
        Map(entries
            .iter()
            .map(|(s, k, v)| ((s.to_string(), k.to_string()), v.to_string()))
            .collect())
    }

    fn metric(yaml: Value) -> DatadogMetric {
        serde_json::from_value(yaml).unwrap()
    }

    #[test]
    fn credentials_come_from_the_named_secret_then_the_environment_then_the_datadog_secret() {
        let store = secrets(&[
            ("datadog", "api-key", "A"),
            ("datadog", "app-key", "B"),
            ("mine", "api-key", "C"),
            ("mine", "app-key", "D"),
            ("mine", "address", "http://127.0.0.1:1"),
        ]);
        let no_env = |_: &str| None;
        let named = metric(json!({"query": "x", "secretRef": {"name": "mine"}}));
        let c = credentials(&store, &named, no_env).unwrap();
        assert_eq!(
            (c.api_key.as_str(), c.address.as_str()),
            ("C", "http://127.0.0.1:1")
        );
        let plain = metric(json!({"query": "x"}));
        let c = credentials(&store, &plain, no_env).unwrap();
        assert_eq!(
            (c.api_key.as_str(), c.address.as_str()),
            ("A", DEFAULT_ADDRESS)
        );
        // All three variables, or none of them counts.
        let env = |name: &str| match name {
            "DD_API_KEY" => Some("E".to_owned()),
            "DD_APP_KEY" => Some("F".to_owned()),
            "DD_ADDRESS" => Some("http://127.0.0.1:2".to_owned()),
            _ => None,
        };
        let c = credentials(&store, &plain, env).unwrap();
        assert_eq!(
            (c.app_key.as_str(), c.address.as_str()),
            ("F", "http://127.0.0.1:2")
        );
        let partial = |name: &str| (name == "DD_API_KEY").then(|| "E".to_owned());
        assert_eq!(credentials(&store, &plain, partial).unwrap().api_key, "A");
        // A named secret is not backed by the environment or the default secret.
        let missing = DatadogMetric {
            secret_ref: Some(DatadogSecretRef {
                name: Some("absent".into()),
                namespaced: None,
            }),
            ..plain.clone()
        };
        let err = credentials(&store, &missing, env).err().unwrap();
        assert!(err.contains("absent/api-key"), "{err}");
        let namespaced = metric(json!({"query": "x", "secretRef": {"namespaced": true}}));
        assert!(credentials(&store, &namespaced, no_env).is_err());
        let err = credentials(&secrets(&[]), &plain, no_env).err().unwrap();
        assert!(
            err.contains("DD_API_KEY") && err.contains("datadog/api-key"),
            "{err}"
        );
    }

    #[test]
    fn a_v2_query_is_one_query_named_query_and_aggregates_last_by_default() {
        let body = v2_body(
            &metric(json!({"apiVersion": "v2", "query": "sum:x{*}"})),
            100,
            400,
        );
        assert_eq!(
            body,
            json!({"data": {"type": "scalar_request", "attributes": {
                "from": 100_000, "to": 400_000, "formulas": [],
                "queries": [{"aggregator": "last", "data_source": "metrics", "name": "query", "query": "sum:x{*}"}]
            }}})
        );
        let body = v2_body(
            &metric(
                json!({"apiVersion": "v2", "queries": {"b": "y", "a": "x"}, "formula": "a/b", "aggregator": "avg"}),
            ),
            0,
            60,
        );
        let queries = &body["data"]["attributes"]["queries"];
        assert_eq!(queries[0]["name"], "a");
        assert_eq!(queries[1]["aggregator"], "avg");
        assert_eq!(
            body["data"]["attributes"]["formulas"],
            json!([{"formula": "a/b"}])
        );
    }

    #[test]
    fn responses_decode_as_argo_reads_them_except_that_a_null_point_is_no_result() {
        let v1 = br#"{"series":[{"pointlist":[[1,0.5],[2,0.25]]}]}"#;
        assert_eq!(parse_v1(v1), Ok(MetricResult::Scalar(0.25)));
        assert_eq!(parse_v1(br#"{"series":[]}"#), Ok(MetricResult::Nil));
        assert_eq!(
            parse_v1(br#"{"series":[{"pointlist":[]}]}"#),
            Ok(MetricResult::Nil)
        );
        assert_eq!(
            parse_v1(br#"{"series":[{"pointlist":[[1,null]]}]}"#),
            Ok(MetricResult::Nil)
        );
        assert!(
            parse_v1(br#"{"series":[{"pointlist":[[1]]}]}"#)
                .unwrap_err()
                .contains("2 values")
        );
        assert!(parse_v1(b"<html>").is_err());
        let v2 = br#"{"data":{"type":"scalar_response","attributes":{"columns":[{"name":"a","values":[0.0123]}]}}}"#;
        assert_eq!(parse_v2(v2), Ok(MetricResult::Scalar(0.0123)));
        assert_eq!(
            parse_v2(br#"{"data":{"attributes":{"columns":[]}}}"#),
            Ok(MetricResult::Nil)
        );
        assert_eq!(
            parse_v2(br#"{"data":{"attributes":{"columns":[{"values":[null]}]}}}"#),
            Ok(MetricResult::Nil)
        );
        let err = parse_v2(br#"{"data":{"errors":"unknown metric"}}"#).unwrap_err();
        assert!(err.contains("unknown metric"), "{err}");
    }
}
