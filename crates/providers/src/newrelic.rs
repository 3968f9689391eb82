//! Argo's `newRelic` provider: an NRQL query through New Relic's NerdGraph (GraphQL) API, with the
//! account settings Argo reads from the `profile` Secret (`personal-api-key`, `account-id`,
//! optional `region` and `base-url-nerdgraph`).
//!
//! One result row is `result` as an object (`result.successRate`); several rows are a list
//! (`result[0].count`); no row is an Error measurement, as in Argo.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::analysis::{MeasureRequest, MetricResult, Outcome, SecretStore};
use flotilla_core::spec::analysis::NewRelicMetric;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use serde_json::{Value, json};

use crate::{Providers, http};

/// The Secret Argo reads when the metric names no `profile`.
const DEFAULT_PROFILE: &str = "newrelic";
/// Upstream's NRQL timeout (seconds) when the metric sets none.
const DEFAULT_NRQL_TIMEOUT_SECS: i64 = 5;
/// The HTTP timeout: New Relic's client default.
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest response read.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// The query Argo sends (variables: the NRQL, the account id and the timeout).
const NRQL_QUERY: &str = "query (
  $query: Nrql!, 
  $accountId: Int!,
  $timeout: Seconds!
)
{
  actor {
    account(id: $accountId) {
      nrql(query: $query, timeout: $timeout) {
        results
      }
    }
  }
}
";

/// NerdGraph's address per region, as New Relic's Go client knows them.
fn region_url(region: &str) -> Option<&'static str> {
    match region.to_ascii_lowercase().as_str() {
        "us" => Some("https://api.newrelic.com/graphql"),
        "eu" => Some("https://api.eu.newrelic.com/graphql"),
        "staging" => Some("https://staging-api.newrelic.com/graphql"),
        "local" => Some("http://localhost:3000/graphql"),
        _ => None,
    }
}

/// Runs one New Relic measurement.
pub(crate) async fn measure(
    providers: &Providers,
    metric: &NewRelicMetric,
    _request: &MeasureRequest,
) -> Outcome {
    match run(providers, metric).await {
        Ok((result, metadata)) => Outcome::Value { result, metadata },
        Err(message) => Outcome::Error(format!("newRelic: {message}")),
    }
}

/// The account a query runs in and where NerdGraph is.
struct Account {
    api_key: String,
    account_id: i64,
    url: String,
}

fn account(secrets: &dyn SecretStore, metric: &NewRelicMetric) -> Result<Account, String> {
    let profile = metric
        .profile
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or(DEFAULT_PROFILE);
    let api_key = secrets.read(profile, "personal-api-key")?;
    let account_id = secrets.read(profile, "account-id")?;
    if api_key.is_empty() || account_id.is_empty() {
        return Err(format!(
            "secret {profile}: account-id or personal-api-key is empty"
        ));
    }
    let account_id: i64 = account_id
        .trim()
        .parse()
        .map_err(|e| format!("secret {profile}: could not parse account-id: {e}"))?;
    let url = match secrets
        .read(profile, "base-url-nerdgraph")
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => url,
        None => {
            let region = secrets
                .read(profile, "region")
                .ok()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "us".to_owned());
            region_url(&region)
                .ok_or_else(|| {
                    format!("secret {profile}: region {region:?} is not us, eu or staging")
                })?
                .to_owned()
        }
    };
    Ok(Account {
        api_key,
        account_id,
        url,
    })
}

async fn run(
    providers: &Providers,
    metric: &NewRelicMetric,
) -> Result<(MetricResult, BTreeMap<String, String>), String> {
    let timeout = metric.timeout.unwrap_or(DEFAULT_NRQL_TIMEOUT_SECS);
    if timeout < 0 {
        return Err("timeout value needs to be a positive value".into());
    }
    let account = account(providers.secrets.as_ref(), metric)?;
    let url = http::parse_http_url(&account.url, "NerdGraph address")?;
    let shown = http::shown_endpoint(&url);
    let mut key = HeaderValue::from_str(&account.api_key)
        .map_err(|_| "the personal-api-key is not a valid HTTP header value".to_owned())?;
    key.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert(HeaderName::from_static("api-key"), key);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("flotilla/", env!("CARGO_PKG_VERSION"))),
    );
    let body = json!({
        "query": NRQL_QUERY,
        "variables": {
            "accountId": account.account_id,
            "query": metric.query,
            "timeout": timeout,
        }
    });
    let mut response = providers
        .client(None)
        .post(url)
        .headers(headers)
        .timeout(HTTP_TIMEOUT)
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| http::describe_error("POST", &shown, e, HTTP_TIMEOUT))?;
    let status = response.status();
    let bytes = http::read_body(&mut response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| e.describe("POST", &shown, HTTP_TIMEOUT))?;
    let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
    if let Some(errors) = parsed.as_ref().and_then(graphql_errors) {
        return Err(format!("POST {shown}: {status}: {errors}"));
    }
    if !status.is_success() {
        return Err(format!(
            "POST {shown}: received non 2xx response code: {status}: {}",
            http::quote_body(&bytes)
        ));
    }
    let document = parsed.ok_or_else(|| {
        format!(
            "POST {shown}: the answer is not JSON: {}",
            http::quote_body(&bytes)
        )
    })?;
    let results = document
        .pointer("/data/actor/account/nrql/results")
        .cloned()
        .unwrap_or(Value::Null);
    let result = process(results).map_err(|e| format!("POST {shown}: {e}"))?;
    let mut metadata = BTreeMap::new();
    metadata.insert("ResolvedNewRelicQuery".to_owned(), metric.query.clone());
    Ok((result, metadata))
}

/// GraphQL's `errors`, joined as New Relic's client joins them.
fn graphql_errors(document: &Value) -> Option<String> {
    let errors = document.get("errors")?.as_array()?;
    let messages: Vec<&str> = errors
        .iter()
        .filter_map(|e| e.get("message").and_then(Value::as_str))
        .filter(|m| !m.is_empty())
        .collect();
    (!errors.is_empty()).then(|| {
        if messages.is_empty() {
            "the query failed".to_owned()
        } else {
            messages.join(", ")
        }
    })
}

/// Argo's reading of the rows: one non-empty row is the object, several are the list.
fn process(results: Value) -> Result<MetricResult, String> {
    let rows = match results {
        Value::Array(rows) => rows,
        Value::Null => Vec::new(),
        other => return Err(format!("the NRQL results are not a list: {other}")),
    };
    match rows.len() {
        0 => Err("no results returned from NRQL query".into()),
        1 => {
            let row = rows.into_iter().next().expect("one row");
            if row.as_object().is_some_and(|o| o.is_empty()) || row.is_null() {
                return Err("no results returned from NRQL query".into());
            }
            Ok(MetricResult::Json(row))
        }
        _ => Ok(MetricResult::Json(Value::Array(rows))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_is_the_object_several_are_the_list_none_is_an_error() {
        assert_eq!(
            process(json!([{"successRate": 0.99}])),
            Ok(MetricResult::Json(json!({"successRate": 0.99})))
        );
        assert_eq!(
            process(json!([{"a": 1}, {"a": 2}])),
            Ok(MetricResult::Json(json!([{"a": 1}, {"a": 2}])))
        );
        assert!(process(json!([])).unwrap_err().contains("no results"));
        assert!(process(json!([{}])).unwrap_err().contains("no results"));
        assert!(process(Value::Null).unwrap_err().contains("no results"));
    }

    #[test]
    fn regions_name_nerdgraph_as_the_go_client_does() {
        assert_eq!(
            region_url("EU"),
            Some("https://api.eu.newrelic.com/graphql")
        );
        assert_eq!(region_url("us"), Some("https://api.newrelic.com/graphql"));
        assert_eq!(region_url("mars"), None);
    }

    #[test]
    fn graphql_errors_are_joined() {
        let doc = json!({"errors": [{"message": "NRQL Syntax Error"}, {"message": "again"}]});
        assert_eq!(
            graphql_errors(&doc).as_deref(),
            Some("NRQL Syntax Error, again")
        );
        assert_eq!(graphql_errors(&json!({"data": {}})), None);
    }
}
