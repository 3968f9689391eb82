//! What the integration tests share: a real HTTP server on 127.0.0.1 (hyper, an ephemeral port),
//! requests built the way the engine builds them, and polling with a deadline.

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flotilla_core::analysis::MeasureRequest;
use flotilla_core::spec::analysis::MetricProvider;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderMap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// What the server answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(status: u16, value: serde_json::Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: value.to_string().into_bytes(),
        }
    }

    pub fn text(status: u16, text: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: "text/plain; version=0.0.4",
            body: text.into().into_bytes(),
        }
    }
}

/// Serves `handler` on 127.0.0.1 until the test's runtime shuts down; returns the address.
pub async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Received) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes().to_vec())
                            .unwrap_or_default();
                        let reply = handler(Received {
                            method: parts.method.to_string(),
                            path: parts
                                .uri
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default(),
                            headers: parts.headers,
                            body,
                        })
                        .await;
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(reply.status)
                                .header("content-type", reply.content_type)
                                .body(Full::new(Bytes::from(reply.body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// A loopback port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Now, in milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A request for one measurement now.
pub fn request(provider: serde_json::Value) -> MeasureRequest {
    MeasureRequest {
        metric_index: 0,
        metric: "test".into(),
        provider: std::sync::Arc::new(serde_json::from_value::<MetricProvider>(provider).unwrap()),
        at: now_ms(),
        window: None,
        not_before: None,
        step: None,
        baseline: None,
        reference: None,
        last: false,
    }
}

/// Polls `probe` every 50 ms until it yields a value or `limit` passes (then panics with `what`).
pub async fn poll_until<T, Fut>(limit: Duration, what: &str, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {limit:?} waiting for {what}"
        );
    }
}

/// Secrets the tests hand the providers: `(secret, key) -> value`, nothing else.
#[derive(Debug, Default, Clone)]
pub struct TestSecrets(pub std::collections::BTreeMap<(String, String), String>);

impl TestSecrets {
    /// The given `(secret, key, value)` triples.
    pub fn of(entries: &[(&str, &str, &str)]) -> TestSecrets {
        TestSecrets(
            entries
                .iter()
                .map(|(s, k, v)| ((s.to_string(), k.to_string()), v.to_string()))
                .collect(),
        )
    }
}

impl flotilla_core::analysis::SecretStore for TestSecrets {
    fn read(&self, name: &str, key: &str) -> Result<String, String> {
        self.0
            .get(&(name.to_owned(), key.to_owned()))
            .cloned()
            .ok_or_else(|| format!("secret {name}/{key} not found"))
    }
}

/// Providers with no secrets.
pub fn providers() -> flotilla_providers::Providers {
    with_secrets(&[])
}

/// Providers reading the given `(secret, key, value)` triples.
pub fn with_secrets(entries: &[(&str, &str, &str)]) -> flotilla_providers::Providers {
    flotilla_providers::Providers::new(std::sync::Arc::new(TestSecrets::of(entries))).unwrap()
}
