//! Argo's `web` provider: one HTTP request whose JSON answer, at `jsonPath`, is the result.
//!
//! Argo evaluates `jsonPath` with Kubernetes' JSONPath templates (`{$.data.ok}`); Flotilla strips
//! the braces and evaluates the inside as RFC 9535 JSONPath, which covers the forms Argo's users
//! write (`$.a.b`, `.a.b`, `$.items[0]`, `$..x`, filters).

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::analysis::{MetricResult, Outcome};
use flotilla_core::spec::analysis::WebMetric;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde_json::Value;
use serde_json_path::JsonPath;

use crate::http;

/// Upstream's default timeout.
const DEFAULT_TIMEOUT_SECS: u64 = 10;
/// Largest response read; a bigger one is an error rather than a memory spike.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Runs one web measurement.
pub(crate) async fn measure(transport: http::Transport<'_>, metric: &WebMetric) -> Outcome {
    match run(transport, metric).await {
        Ok(result) => Outcome::Value {
            result,
            metadata: BTreeMap::new(),
        },
        Err(message) => Outcome::Error(message),
    }
}

async fn run(transport: http::Transport<'_>, metric: &WebMetric) -> Result<MetricResult, String> {
    let method = match metric.method.as_deref().unwrap_or("GET") {
        "" | "GET" => Method::GET,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        other => {
            return Err(format!(
                "web method {other:?} is not supported: use GET, POST or PUT"
            ));
        }
    };
    let url = http::parse_http_url(&metric.url, "web url")?;
    let path = parse_json_path(metric.json_path.as_deref())?;
    let body = match (metric.body.as_deref(), &metric.json_body) {
        (Some(text), Some(_)) if !text.is_empty() => {
            return Err(
                "use either body or jsonBody; both cannot exist for a web metric payload".into(),
            );
        }
        (Some(text), _) if !text.is_empty() => Some(text.as_bytes().to_vec()),
        (_, Some(json)) => Some(json.to_string().into_bytes()),
        _ => None,
    };
    if body.is_some() && method == Method::GET {
        return Err("body/jsonBody can only be used with the POST or PUT web methods".into());
    }
    let timeout = match metric.timeout_seconds {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        _ => Duration::from_secs(DEFAULT_TIMEOUT_SECS),
    };
    let mut headers = http::header_map(&metric.headers)?;
    if metric.json_body.is_some() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let basic_auth = http::basic_auth(metric.authentication.as_ref(), "web")?;

    let shown = http::shown_endpoint(&url);
    let verb = method.as_str().to_owned();
    let mut builder = transport
        .client
        .request(method, url)
        .headers(headers)
        .timeout(timeout);
    if let Some((username, password)) = basic_auth {
        builder = builder.basic_auth(username, Some(password));
    }
    if let Some(body) = body {
        builder = builder.body(body);
    }
    let mut response = transport.send(builder, &verb, &shown, timeout).await?;
    let status = response.status();
    let bytes = http::read_body(&mut response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| e.describe(&verb, &shown, timeout))?;
    if !status.is_success() {
        return Err(format!(
            "{verb} {shown}: received non 2xx response code: {status}: {}",
            http::quote_body(&bytes)
        ));
    }
    select(&path, &bytes, metric.json_path.as_deref().unwrap_or("{$}"))
}

/// Turns Argo's Kubernetes-style template (`{$.data.ok}`, `{.data.ok}`) into RFC 9535 JSONPath.
fn parse_json_path(template: Option<&str>) -> Result<JsonPath, String> {
    let template = template.map(str::trim).filter(|t| !t.is_empty());
    let text = template.unwrap_or("{$}");
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(text)
        .trim();
    let path = if inner.starts_with('.') || inner.starts_with('[') {
        format!("${inner}")
    } else {
        inner.to_owned()
    };
    JsonPath::parse(&path).map_err(|e| format!("invalid web jsonPath {text:?}: {e}"))
}

/// Picks the result: the first match of the path in a JSON body, or (as Argo) a non-JSON body as
/// a string.
fn select(path: &JsonPath, body: &[u8], shown_path: &str) -> Result<MetricResult, String> {
    let Ok(document) = serde_json::from_slice::<Value>(body) else {
        return Ok(MetricResult::Json(Value::String(
            String::from_utf8_lossy(body).into_owned(),
        )));
    };
    let found =
        path.query(&document).first().cloned().ok_or_else(|| {
            format!("could not find JSONPath {shown_path:?} in the response body")
        })?;
    Ok(match found {
        Value::Number(n) => match n.as_f64() {
            Some(v) => MetricResult::Scalar(v),
            None => MetricResult::Json(Value::Number(n)),
        },
        other => MetricResult::Json(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pick(path: Option<&str>, body: &str) -> Result<MetricResult, String> {
        select(
            &parse_json_path(path)?,
            body.as_bytes(),
            path.unwrap_or("{$}"),
        )
    }

    #[test]
    fn kubernetes_style_paths_select_as_argo_does() {
        let body = r#"{"data":{"ok":true,"rate":0.5,"items":[{"n":1},{"n":2}]}}"#;
        assert_eq!(
            pick(Some("{$.data.rate}"), body),
            Ok(MetricResult::Scalar(0.5))
        );
        assert_eq!(
            pick(Some("{.data.ok}"), body),
            Ok(MetricResult::Json(json!(true)))
        );
        assert_eq!(
            pick(Some("{$.data.items[1].n}"), body),
            Ok(MetricResult::Scalar(2.0))
        );
        assert_eq!(
            pick(Some("{$.data.items[?(@.n == 2)]}"), body),
            Ok(MetricResult::Json(json!({"n": 2})))
        );
        assert_eq!(pick(None, "[1,2]"), Ok(MetricResult::Json(json!([1, 2]))));
        assert_eq!(
            pick(Some("$.data.rate"), body),
            Ok(MetricResult::Scalar(0.5))
        );
    }

    #[test]
    fn missing_paths_and_bad_paths_are_errors_and_text_bodies_are_strings() {
        let err = pick(Some("{$.data.missing}"), r#"{"data":{}}"#).unwrap_err();
        assert!(err.contains("could not find JSONPath"), "{err}");
        let err = pick(Some("{$.data[}"), "{}").unwrap_err();
        assert!(err.contains("invalid web jsonPath"), "{err}");
        assert_eq!(
            pick(Some("{$.x}"), "all good"),
            Ok(MetricResult::Json(json!("all good")))
        );
    }
}
