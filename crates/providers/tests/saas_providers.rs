//! Datadog, New Relic and InfluxDB 2 against protocol fixtures.
//!
//! None of these services runs here (Datadog and New Relic are SaaS; Debian's InfluxDB is 1.6,
//! without Flux), so each test starts a local HTTP server that is a **protocol fixture, not the
//! service**: it checks every request exactly as the service's public API documents it (method,
//! path, query, headers, JSON body) and answers with bodies shaped as documented (Datadog's
//! `/api/v1/query` and `/api/v2/query/scalar`, NerdGraph's `data.actor.account.nrql.results`,
//! InfluxDB's annotated CSV). A request the fixture does not accept is answered 400 with the
//! reason, which the provider reports and the test shows.

mod common;

use std::sync::{Arc, Mutex};

use common::{Received, Reply, request, serve, with_secrets};
use flotilla_core::analysis::{Measurer, MetricResult, Outcome};
use serde_json::{Value, json};

/// The seed-004 template's Datadog query (v2, one query, `{{args.service-name}}` resolved).
const SEED_QUERY: &str = "sum:trace.http.request.errors{service:checkout}.as_count()\n/\nsum:trace.http.request.hits{service:checkout}.as_count()\n";

fn header<'a>(r: &'a Received, name: &str) -> &'a str {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn query_pairs(path: &str) -> Vec<(String, String)> {
    let url = url::Url::parse(&format!("http://x{path}")).unwrap();
    url.query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn value(outcome: Outcome) -> MetricResult {
    match outcome {
        Outcome::Value { result, .. } => result,
        other => panic!("expected a value, got {other:?}"),
    }
}

fn error(outcome: Outcome) -> String {
    match outcome {
        Outcome::Error(message) => message,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A Datadog fixture answering `answer` to requests that carry the keys `A`/`B`.
async fn datadog(answer: Value, seen: Arc<Mutex<Vec<Received>>>) -> String {
    let address = serve(move |r: Received| {
        let answer = answer.clone();
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(r.clone());
            if header(&r, "dd-api-key") != "A" || header(&r, "dd-application-key") != "B" {
                return Reply::json(403, json!({"errors": ["Forbidden"]}));
            }
            if header(&r, "content-type") != "application/json" {
                return Reply::text(400, "content-type must be application/json");
            }
            let path = r.path.split('?').next().unwrap_or_default().to_owned();
            match (r.method.as_str(), path.as_str()) {
                ("GET", "/api/v1/query") => {
                    let q = query_pairs(&r.path);
                    let names: Vec<&str> = q.iter().map(|(k, _)| k.as_str()).collect();
                    if names != ["from", "query", "to"] {
                        return Reply::text(400, format!("query parameters {names:?}"));
                    }
                    Reply::json(200, answer)
                }
                ("POST", "/api/v2/query/scalar") => {
                    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
                        return Reply::text(400, "body is not JSON");
                    };
                    let attributes = &body["data"]["attributes"];
                    if body["data"]["type"] != "scalar_request"
                        || !attributes["from"].is_i64()
                        || !attributes["to"].is_i64()
                        || !attributes["queries"].is_array()
                    {
                        return Reply::text(400, format!("not a scalar request: {body}"));
                    }
                    Reply::json(200, answer)
                }
                _ => Reply::text(404, "no such route"),
            }
        }
    })
    .await;
    format!("http://{address}")
}

#[tokio::test]
async fn datadog_v2_runs_the_seed_template_query_and_reads_the_first_value() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    // Shaped as Datadog documents a scalar response: one number column per query/formula.
    let answer = json!({"data": {"type": "scalar_response", "attributes": {"columns": [
        {"name": "query", "type": "number", "values": [0.0123], "meta": {"unit": null}}
    ]}}});
    let address = datadog(answer, seen.clone()).await;
    let providers = with_secrets(&[
        ("datadog", "api-key", "A"),
        ("datadog", "app-key", "B"),
        ("datadog", "address", &address),
    ]);
    let req =
        request(json!({"datadog": {"apiVersion": "v2", "interval": "5m", "query": SEED_QUERY}}));
    let result = value(providers.measure(&req).await);
    assert_eq!(result, MetricResult::Scalar(0.0123));
    let received = seen.lock().unwrap()[0].clone();
    let body: Value = serde_json::from_slice(&received.body).unwrap();
    let attributes = &body["data"]["attributes"];
    let to = req.at / 1000 * 1000;
    assert_eq!(attributes["to"], json!(to));
    assert_eq!(attributes["from"], json!(to - 300_000));
    assert_eq!(
        attributes["queries"],
        json!([{"aggregator": "last", "data_source": "metrics", "name": "query", "query": SEED_QUERY}])
    );
    assert_eq!(attributes["formulas"], json!([]));
}

#[tokio::test]
async fn datadog_v2_formulas_combine_named_queries() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let answer = json!({"data": {"type": "scalar_response", "attributes": {"columns": [
        {"name": "a/b", "type": "number", "values": [0.2]}
    ]}}});
    let address = datadog(answer, seen.clone()).await;
    let providers = with_secrets(&[
        ("dd-keys", "api-key", "A"),
        ("dd-keys", "app-key", "B"),
        ("dd-keys", "address", &address),
    ]);
    let req = request(json!({"datadog": {
        "apiVersion": "v2", "aggregator": "avg", "formula": "a/b",
        "queries": {"a": "sum:errors{*}.as_count()", "b": "sum:hits{*}.as_count()"},
        "secretRef": {"name": "dd-keys"}
    }}));
    assert_eq!(
        value(providers.measure(&req).await),
        MetricResult::Scalar(0.2)
    );
    let body: Value = serde_json::from_slice(&seen.lock().unwrap()[0].body).unwrap();
    assert_eq!(
        body["data"]["attributes"]["formulas"],
        json!([{"formula": "a/b"}])
    );
    assert_eq!(body["data"]["attributes"]["queries"][1]["name"], "b");
    assert_eq!(
        body["data"]["attributes"]["queries"][1]["aggregator"],
        "avg"
    );
}

#[tokio::test]
async fn datadog_v1_reads_the_last_point_and_no_series_is_no_result() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    // Shaped as Datadog documents `GET /api/v1/query`.
    let answer = json!({
        "status": "ok", "res_type": "time_series", "from_date": 1_700_000_000_000_i64,
        "to_date": 1_700_000_300_000_i64, "query": "avg:errors{*}",
        "series": [{"metric": "errors", "display_name": "errors", "aggr": "avg", "scope": "*",
            "expression": "avg:errors{*}", "interval": 60, "length": 2,
            "pointlist": [[1_700_000_000_000.0_f64, 0.5], [1_700_000_060_000.0_f64, 0.04]]}]
    });
    let address = datadog(answer, seen.clone()).await;
    let providers = with_secrets(&[
        ("datadog", "api-key", "A"),
        ("datadog", "app-key", "B"),
        ("datadog", "address", &address),
    ]);
    let req = request(json!({"datadog": {"query": "avg:errors{*}", "interval": "10m"}}));
    assert_eq!(
        value(providers.measure(&req).await),
        MetricResult::Scalar(0.04)
    );
    let q = query_pairs(&seen.lock().unwrap()[0].path);
    let to = req.at / 1000;
    assert_eq!(
        q,
        vec![
            ("from".to_owned(), (to - 600).to_string()),
            ("query".to_owned(), "avg:errors{*}".to_owned()),
            ("to".to_owned(), to.to_string()),
        ]
    );

    let empty = datadog(json!({"status": "ok", "series": []}), Arc::default()).await;
    let providers = with_secrets(&[
        ("datadog", "api-key", "A"),
        ("datadog", "app-key", "B"),
        ("datadog", "address", &empty),
    ]);
    let req = request(json!({"datadog": {"query": "avg:errors{*}"}}));
    assert_eq!(value(providers.measure(&req).await), MetricResult::Nil);
}

#[tokio::test]
async fn datadog_errors_name_the_provider_and_endpoint_and_never_the_keys() {
    let address = datadog(json!({}), Arc::default()).await;
    let providers = with_secrets(&[
        ("datadog", "api-key", "wrong-key-value"),
        ("datadog", "app-key", "B"),
        ("datadog", "address", &address),
    ]);
    let req = request(json!({"datadog": {"apiVersion": "v2", "query": "x"}}));
    let message = error(providers.measure(&req).await);
    assert!(message.starts_with("datadog: POST "), "{message}");
    assert!(
        message.contains(&address) && message.contains("authentication error"),
        "{message}"
    );
    assert!(!message.contains("wrong-key-value"), "{message}");
    // Missing credentials name where they were looked for.
    let message = error(common::providers().measure(&req).await);
    assert!(message.contains("datadog/api-key"), "{message}");
    // An unreachable address.
    let closed = format!("http://127.0.0.1:{}", common::closed_port());
    let providers = with_secrets(&[
        ("datadog", "api-key", "A"),
        ("datadog", "app-key", "B"),
        ("datadog", "address", &closed),
    ]);
    let message = error(providers.measure(&req).await);
    assert!(message.contains(&closed), "{message}");
}

/// A NerdGraph fixture: checks the GraphQL request Argo sends and answers `rows`.
async fn nerdgraph(rows: Value, seen: Arc<Mutex<Vec<Received>>>) -> String {
    let address = serve(move |r: Received| {
        let rows = rows.clone();
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(r.clone());
            if r.method != "POST" || r.path != "/graphql" {
                return Reply::text(404, "no such route");
            }
            if header(&r, "api-key") != "NRAK-TEST" {
                // NerdGraph's answer to a bad key.
                return Reply::json(
                    200,
                    json!({"errors": [{"message": "Invalid API key", "extensions": {"errorClass": "UNAUTHORIZED"}}]}),
                );
            }
            let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
                return Reply::text(400, "body is not JSON");
            };
            let query = body["query"].as_str().unwrap_or_default();
            let vars = &body["variables"];
            if !query.contains("nrql(query: $query, timeout: $timeout)")
                || vars["accountId"] != json!(1234567)
                || !vars["query"].is_string()
                || !vars["timeout"].is_i64()
            {
                return Reply::text(400, format!("not Argo's NRQL request: {body}"));
            }
            if vars["query"].as_str().unwrap().contains("SELEC ") {
                return Reply::json(
                    200,
                    json!({"data": {"actor": {"account": {"nrql": null}}},
                           "errors": [{"message": "NRQL Syntax Error: Error at line 1 position 1", "path": ["actor", "account", "nrql"]}]}),
                );
            }
            Reply::json(
                200,
                json!({"data": {"actor": {"account": {"nrql": {"results": rows}}}}}),
            )
        }
    })
    .await;
    format!("http://{address}/graphql")
}

#[tokio::test]
async fn new_relic_runs_nrql_through_nerdgraph() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = nerdgraph(json!([{"successRate": 0.995}]), seen.clone()).await;
    let providers = with_secrets(&[
        ("newrelic", "personal-api-key", "NRAK-TEST"),
        ("newrelic", "account-id", "1234567"),
        ("newrelic", "base-url-nerdgraph", &url),
    ]);
    let nrql = "SELECT percentage(count(*), WHERE httpResponseCode < 500) AS successRate FROM Transaction SINCE 5 minutes ago";
    let req = request(json!({"newRelic": {"query": nrql, "timeout": 10}}));
    match providers.measure(&req).await {
        Outcome::Value { result, metadata } => {
            assert_eq!(result, MetricResult::Json(json!({"successRate": 0.995})));
            assert_eq!(metadata["ResolvedNewRelicQuery"], nrql);
        }
        other => panic!("{other:?}"),
    }
    let body: Value = serde_json::from_slice(&seen.lock().unwrap()[0].body).unwrap();
    assert_eq!(body["variables"]["query"], nrql);
    assert_eq!(body["variables"]["timeout"], 10);

    // Several rows are a list; none is an error.
    let url = nerdgraph(json!([{"count": 1}, {"count": 2}]), Arc::default()).await;
    let providers = with_secrets(&[
        ("nr", "personal-api-key", "NRAK-TEST"),
        ("nr", "account-id", "1234567"),
        ("nr", "base-url-nerdgraph", &url),
    ]);
    let req = request(
        json!({"newRelic": {"profile": "nr", "query": "SELECT count(*) FROM T FACET host"}}),
    );
    assert_eq!(
        value(providers.measure(&req).await),
        MetricResult::Json(json!([{"count": 1}, {"count": 2}]))
    );
    let url = nerdgraph(json!([]), Arc::default()).await;
    let providers = with_secrets(&[
        ("newrelic", "personal-api-key", "NRAK-TEST"),
        ("newrelic", "account-id", "1234567"),
        ("newrelic", "base-url-nerdgraph", &url),
    ]);
    let req = request(json!({"newRelic": {"query": "SELECT count(*) FROM T"}}));
    assert!(error(providers.measure(&req).await).contains("no results returned from NRQL query"));
}

#[tokio::test]
async fn new_relic_errors_carry_nerdgraphs_message_and_never_the_key() {
    let url = nerdgraph(json!([]), Arc::default()).await;
    let providers = with_secrets(&[
        ("newrelic", "personal-api-key", "NRAK-WRONG"),
        ("newrelic", "account-id", "1234567"),
        ("newrelic", "base-url-nerdgraph", &url),
    ]);
    let req = request(json!({"newRelic": {"query": "SELECT count(*) FROM T"}}));
    let message = error(providers.measure(&req).await);
    assert!(
        message.starts_with("newRelic: POST ") && message.contains("Invalid API key"),
        "{message}"
    );
    assert!(
        message.contains(&url) && !message.contains("NRAK-WRONG"),
        "{message}"
    );
    let providers = with_secrets(&[
        ("newrelic", "personal-api-key", "NRAK-TEST"),
        ("newrelic", "account-id", "1234567"),
        ("newrelic", "base-url-nerdgraph", &url),
    ]);
    let req = request(json!({"newRelic": {"query": "SELEC count(*) FROM T"}}));
    assert!(error(providers.measure(&req).await).contains("NRQL Syntax Error"));
    let providers = with_secrets(&[
        ("newrelic", "personal-api-key", "NRAK-TEST"),
        ("newrelic", "account-id", "not-a-number"),
    ]);
    assert!(error(providers.measure(&req).await).contains("account-id"));
}

/// An InfluxDB 2 fixture: checks the Flux query request the Go client sends and answers `csv`.
async fn influx(csv: &'static str, seen: Arc<Mutex<Vec<Received>>>) -> String {
    let address = serve(move |r: Received| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(r.clone());
            if r.method != "POST" || !r.path.starts_with("/api/v2/query?") {
                return Reply::text(404, "no such route");
            }
            if header(&r, "authorization") != "Token influx-token" {
                return Reply::json(401, json!({"code": "unauthorized", "message": "unauthorized access"}));
            }
            if query_pairs(&r.path) != vec![("org".to_owned(), "shop".to_owned())] {
                return Reply::json(400, json!({"code": "invalid", "message": "missing org"}));
            }
            let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
                return Reply::json(400, json!({"code": "invalid", "message": "body is not JSON"}));
            };
            if body["type"] != "flux"
                || body["dialect"]["annotations"] != json!(["datatype", "group", "default"])
                || body["dialect"]["header"] != true
            {
                return Reply::json(400, json!({"code": "invalid", "message": format!("not a Flux query: {body}")}));
            }
            if body["query"].as_str().unwrap_or_default().contains("bucket: \"missing\"") {
                return Reply::json(404, json!({"code": "not found", "message": "failed to initialize execute state: could not find bucket \"missing\""}));
            }
            Reply {
                status: 200,
                content_type: "text/csv; charset=utf-8",
                body: csv.as_bytes().to_vec(),
            }
        }
    })
    .await;
    format!("http://{address}")
}

/// Shaped as InfluxDB documents a Flux answer in annotated CSV.
const ERROR_RATES: &str = "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,double,string,string\r\n\
#group,false,false,true,true,false,false,true,true\r\n\
#default,_result,,,,,,,\r\n\
,result,table,_start,_stop,_time,_value,_field,_measurement\r\n\
,,0,2026-12-04T00:00:00Z,2026-12-04T00:05:00Z,2026-12-04T00:01:00Z,0.012,error_rate,http\r\n\
,,0,2026-12-04T00:00:00Z,2026-12-04T00:05:00Z,2026-12-04T00:02:00Z,0.02,error_rate,http\r\n\
\r\n";

#[tokio::test]
async fn influxdb_runs_flux_and_lists_every_value() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let address = influx(ERROR_RATES, seen.clone()).await;
    let providers = with_secrets(&[
        ("influxdb", "address", &address),
        ("influxdb", "authToken", "influx-token"),
        ("influxdb", "org", "shop"),
    ]);
    let flux = "from(bucket: \"app\") |> range(start: -5m) |> filter(fn: (r) => r._field == \"error_rate\")";
    let req = request(json!({"influxdb": {"query": flux}}));
    assert_eq!(
        value(providers.measure(&req).await),
        MetricResult::Vector(vec![0.012, 0.02])
    );
    let body: Value = serde_json::from_slice(&seen.lock().unwrap()[0].body).unwrap();
    assert_eq!(body["query"], flux);

    let empty = influx("\r\n", Arc::default()).await;
    let providers = with_secrets(&[
        ("p", "address", &empty),
        ("p", "authToken", "influx-token"),
        ("p", "org", "shop"),
    ]);
    let req = request(json!({"influxdb": {"profile": "p", "query": flux}}));
    assert!(error(providers.measure(&req).await).contains("no results returned from flux query"));
}

#[tokio::test]
async fn influxdb_errors_carry_the_servers_message_and_never_the_token() {
    let address = influx(ERROR_RATES, Arc::default()).await;
    let providers = with_secrets(&[
        ("influxdb", "address", &address),
        ("influxdb", "authToken", "wrong-token"),
        ("influxdb", "org", "shop"),
    ]);
    let req = request(json!({"influxdb": {"query": "from(bucket: \"app\")"}}));
    let message = error(providers.measure(&req).await);
    assert!(
        message.starts_with("influxdb: POST ") && message.contains("unauthorized access"),
        "{message}"
    );
    assert!(!message.contains("wrong-token"), "{message}");
    let providers = with_secrets(&[
        ("influxdb", "address", &address),
        ("influxdb", "authToken", "influx-token"),
        ("influxdb", "org", "shop"),
    ]);
    let req = request(json!({"influxdb": {"query": "from(bucket: \"missing\")"}}));
    let message = error(providers.measure(&req).await);
    assert!(message.contains("could not find bucket"), "{message}");
    let providers = with_secrets(&[("influxdb", "address", &address)]);
    assert!(error(providers.measure(&req).await).contains("influxdb/authToken"));
}
