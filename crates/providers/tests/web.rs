//! The web provider against a real HTTP server on 127.0.0.1: JSONPath selection, bodies and
//! headers reaching the server, error answers, timeouts, and secrets kept out of messages.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Received, Reply, closed_port, request, serve};
use flotilla_core::analysis::{Measurer, MetricResult, Outcome};
use serde_json::json;

/// A server that records every request and answers by path.
async fn server() -> (String, Arc<Mutex<Vec<Received>>>) {
    let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
    let log = seen.clone();
    let address = serve(move |received: Received| {
        let log = log.clone();
        async move {
            let path = received.path.clone();
            log.lock().unwrap().push(received);
            match path.as_str() {
                "/status" => Reply::json(
                    200,
                    json!({"data": {"successRate": 0.97, "healthy": {"ok": true, "pods": 3}}}),
                ),
                "/echo" => Reply::json(200, json!({"ok": true})),
                "/broken" => Reply::text(500, "database is on fire"),
                "/plain" => Reply::text(200, "all good"),
                "/slow" => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Reply::json(200, json!({}))
                }
                _ => Reply::text(404, "no such page"),
            }
        }
    })
    .await;
    (format!("http://{address}"), seen)
}

fn error(outcome: Outcome) -> String {
    match outcome {
        Outcome::Error(message) => message,
        other => panic!("expected an Error, got {other:?}"),
    }
}

fn value(outcome: Outcome) -> MetricResult {
    match outcome {
        Outcome::Value { result, .. } => result,
        other => panic!("expected a Value, got {other:?}"),
    }
}

#[tokio::test]
async fn get_selects_a_number_as_a_scalar_and_an_object_as_json() {
    let providers = common::providers();
    let (base, seen) = server().await;
    let number = providers
        .measure(&request(json!({"web": {
            "url": format!("{base}/status"),
            "jsonPath": "{$.data.successRate}"
        }})))
        .await;
    assert_eq!(value(number), MetricResult::Scalar(0.97));
    let object = providers
        .measure(&request(json!({"web": {
            "url": format!("{base}/status"),
            "jsonPath": "{$.data.healthy}"
        }})))
        .await;
    assert_eq!(
        value(object),
        MetricResult::Json(json!({"ok": true, "pods": 3}))
    );
    let whole = providers
        .measure(&request(json!({"web": {"url": format!("{base}/status")}})))
        .await;
    assert!(matches!(value(whole), MetricResult::Json(v) if v["data"]["successRate"] == 0.97));
    let text = providers
        .measure(&request(json!({"web": {"url": format!("{base}/plain")}})))
        .await;
    assert_eq!(value(text), MetricResult::Json(json!("all good")));
    assert!(seen.lock().unwrap().iter().all(|r| r.method == "GET"));
}

#[tokio::test]
async fn post_sends_the_json_body_and_headers_reach_the_server() {
    let providers = common::providers();
    let (base, seen) = server().await;
    let outcome = providers
        .measure(&request(json!({"web": {
            "url": format!("{base}/echo"),
            "method": "POST",
            "headers": [
                {"key": "Authorization", "value": "Bearer token-123"},
                {"key": "X-Team", "value": "checkout"}
            ],
            "jsonBody": {"service": "checkout", "window": 5},
            "jsonPath": "{$.ok}"
        }})))
        .await;
    assert_eq!(value(outcome), MetricResult::Json(json!(true)));
    let seen = seen.lock().unwrap();
    let received = seen.last().unwrap();
    assert_eq!(received.method, "POST");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&received.body).unwrap(),
        json!({"service": "checkout", "window": 5})
    );
    assert_eq!(received.headers["content-type"], "application/json");
    assert_eq!(received.headers["authorization"], "Bearer token-123");
    assert_eq!(received.headers["x-team"], "checkout");
}

#[tokio::test]
async fn put_sends_a_raw_body() {
    let providers = common::providers();
    let (base, seen) = server().await;
    let outcome = providers
        .measure(&request(json!({"web": {
            "url": format!("{base}/echo"),
            "method": "PUT",
            "body": "raw=1",
            "jsonPath": "{.ok}"
        }})))
        .await;
    assert_eq!(value(outcome), MetricResult::Json(json!(true)));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.last().unwrap().method, "PUT");
    assert_eq!(seen.last().unwrap().body, b"raw=1");
}

#[tokio::test]
async fn a_server_error_is_an_error_with_status_and_body() {
    let providers = common::providers();
    let (base, _) = server().await;
    let message = error(
        providers
            .measure(&request(json!({"web": {"url": format!("{base}/broken")}})))
            .await,
    );
    assert!(message.contains("500"), "{message}");
    assert!(message.contains("database is on fire"), "{message}");
    assert!(message.contains(&base), "{message}");
}

#[tokio::test]
async fn a_slow_server_times_out_after_timeout_seconds() {
    let providers = common::providers();
    let (base, seen) = server().await;
    let started = Instant::now();
    let message = error(
        providers
            .measure(&request(json!({"web": {
                "url": format!("{base}/slow"),
                "timeoutSeconds": 1
            }})))
            .await,
    );
    let elapsed = started.elapsed();
    assert!(message.contains("timed out"), "{message}");
    assert!(message.contains(&format!("{base}/slow")), "{message}");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn bad_or_missing_json_paths_are_errors() {
    let providers = common::providers();
    let (base, seen) = server().await;
    let bad = error(
        providers
            .measure(&request(json!({"web": {
                "url": format!("{base}/status"),
                "jsonPath": "{$.data[}"
            }})))
            .await,
    );
    assert!(bad.contains("invalid web jsonPath"), "{bad}");
    // A path that cannot parse is refused before any request is sent.
    assert!(seen.lock().unwrap().is_empty());
    let missing = error(
        providers
            .measure(&request(json!({"web": {
                "url": format!("{base}/status"),
                "jsonPath": "{$.data.latency}"
            }})))
            .await,
    );
    assert!(missing.contains("could not find JSONPath"), "{missing}");
}

#[tokio::test]
async fn invalid_requests_are_refused_before_sending() {
    let providers = common::providers();
    let (base, seen) = server().await;
    for (web, expected) in [
        (
            json!({"url": format!("{base}/echo"), "method": "DELETE"}),
            "not supported",
        ),
        (
            json!({"url": format!("{base}/echo"), "body": "x"}),
            "POST or PUT",
        ),
        (
            json!({"url": format!("{base}/echo"), "method": "POST", "body": "x", "jsonBody": {}}),
            "either body or jsonBody",
        ),
        (json!({"url": "not a url"}), "not a URL"),
        (
            json!({"url": format!("{base}/echo"), "authentication": {"oauth2": {"tokenUrl": "http://idp/token"}}}),
            "oauth2 is not supported",
        ),
    ] {
        let message = error(providers.measure(&request(json!({ "web": web }))).await);
        assert!(message.contains(expected), "{message}");
    }
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_is_named_and_secrets_stay_out_of_the_message() {
    let providers = common::providers();
    let port = closed_port();
    let message = error(
        providers
            .measure(&request(json!({"web": {
                "url": format!("http://user:pass-s3cret@127.0.0.1:{port}/health?x=1"),
                "headers": [{"key": "Authorization", "value": "Bearer tok-s3cret"}],
                "authentication": {"basicAuth": {"username": "u", "password": "basic-s3cret"}}
            }})))
            .await,
    );
    assert!(
        message.contains(&format!("127.0.0.1:{port}/health")),
        "{message}"
    );
    assert!(
        message.to_lowercase().contains("connection refused"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
}

#[tokio::test]
async fn providers_flotilla_does_not_run_are_errors() {
    let providers = common::providers();
    let message = error(
        providers
            .measure(&request(json!({"wavefront": {"query": "ts(x)"}})))
            .await,
    );
    assert_eq!(
        message,
        "the wavefront provider is not supported by Flotilla yet"
    );
    assert_eq!(
        flotilla_providers::SUPPORTED,
        [
            "prometheus",
            "web",
            "job",
            "datadog",
            "newRelic",
            "influxdb",
            "graphite",
            "cloudWatch"
        ]
    );
}
