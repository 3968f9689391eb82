//! The load generator: open-loop, constant-rate HTTP load on loopback targets.
//!
//! Each target gets its own schedule (request k leaves at `start + k / rate`, whether or not the
//! earlier ones have been answered), bounded by a duration and a total request count. The report
//! gives the achieved rate, the status counts and latency quantiles (measured from the moment a
//! request is issued to the end of its response body). Only loopback targets are accepted.
//!
//! [`run_closed`] is the closed-loop counterpart for throughput: a fixed number of keep-alive
//! connections, each sending its next request as soon as the last one is answered;
//! [`run_closed_with`] also speaks HTTP/2 (h2c, prior knowledge) with several streams in flight
//! on each connection.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, Semaphore};

/// Requests allowed in flight at once; past it a scheduled request is counted as not sent.
const MAX_IN_FLIGHT: usize = 8192;
/// Keep-alive connections a closed-loop run may hold at once.
const MAX_CONNECTIONS: usize = 100_000;
/// HTTP/2 streams a closed-loop run may keep in flight on one connection.
const MAX_STREAMS: usize = 1_000;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// An `http://` URL on loopback.
    pub url: String,
    /// Requests per second for this target (the run's rate when absent).
    #[serde(default)]
    pub rate: Option<f64>,
    /// Headers added to every request.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
}

impl Target {
    /// A target with the run's rate and no extra headers.
    pub fn new(url: impl Into<String>) -> Target {
        Target {
            url: url.into(),
            rate: None,
            headers: Vec::new(),
        }
    }
}

/// Why a run cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// A target is not on loopback.
    #[error(
        "refusing to send load to {0}: the load generator only targets loopback \
         (127.0.0.0/8, ::1 or localhost)"
    )]
    NotLoopback(String),
    /// A target or setting is malformed.
    #[error("{0}")]
    Invalid(String),
}

/// Latency quantiles in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// What one target got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetReport {
    /// The target.
    pub url: String,
    /// The rate asked for.
    pub rate: f64,
    /// Requests sent.
    pub sent: u64,
    /// Requests that got a response.
    pub completed: u64,
    /// Requests with no response (connection error, timeout, broken body).
    pub failed: u64,
    /// Scheduled requests not sent because too many were in flight.
    pub not_sent: u64,
    /// Responses per second over the run.
    pub achieved_rate: f64,
    /// Responses by status code.
    pub status_counts: BTreeMap<u16, u64>,
    /// Latency of the responses.
    pub latency_ms: Quantiles,
    /// The first few transport errors, for the report.
    pub errors: Vec<String>,
}

/// What a run got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// How long the run took, seconds (until the last response).
    pub elapsed_seconds: f64,
    /// Requests sent.
    pub sent: u64,
    /// Requests that got a response.
    pub completed: u64,
    /// Requests with no response.
    pub failed: u64,
    /// Scheduled requests not sent.
    pub not_sent: u64,
    /// Responses per second.
    pub achieved_rate: f64,
    /// Responses by status code.
    pub status_counts: BTreeMap<u16, u64>,
    /// Latency of all responses.
    pub latency_ms: Quantiles,
    /// Per target.
    pub targets: Vec<TargetReport>,
}

/// Checks that a URL is `http://` on loopback.
pub fn check_loopback(url: &str) -> Result<Uri, LoadError> {
    let uri: Uri = url
        .parse()
        .map_err(|e| LoadError::Invalid(format!("target {url:?} is not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(LoadError::Invalid(format!(
            "target {url:?} must be an http:// URL"
        )));
    }
    let host = uri.host().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(LoadError::NotLoopback(url.to_owned()));
    }
    Ok(uri)
}

/// One target, checked.
struct Plan {
    url: String,
    uri: Uri,
    rate: f64,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Plan {
    fn request(&self) -> Request<Empty<Bytes>> {
        let mut request = Request::get(self.uri.clone())
            .body(Empty::new())
            .expect("a GET request");
        for (name, value) in &self.headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        request
    }
}

/// Checks the targets; `rate` is the run's rate (None for a closed-loop run, which has none).
fn plan(targets: &[Target], rate: Option<f64>) -> Result<Vec<Plan>, LoadError> {
    if targets.is_empty() {
        return Err(LoadError::Invalid("name at least one target".into()));
    }
    let mut plans = Vec::new();
    for target in targets {
        let uri = check_loopback(&target.url)?;
        let rate = match rate {
            Some(rate) => {
                let rate = target.rate.unwrap_or(rate);
                if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
                    return Err(LoadError::Invalid(format!(
                        "the rate for {} must be above 0 and at most 1000000 requests/s, not {rate}",
                        target.url
                    )));
                }
                rate
            }
            None => 0.0,
        };
        let mut headers = Vec::new();
        for (k, v) in &target.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| LoadError::Invalid(format!("{k:?} is not a header name")))?;
            let value = HeaderValue::from_str(v)
                .map_err(|_| LoadError::Invalid(format!("{v:?} is not a header value")))?;
            headers.push((name, value));
        }
        plans.push(Plan {
            url: target.url.clone(),
            uri,
            rate,
            headers,
        });
    }
    Ok(plans)
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// A client keeping at most `max_idle_per_host` idle connections per target; with `http2`,
/// one that speaks HTTP/2 only, with prior knowledge (h2c): one connection per target, every
/// request a stream on it.
fn client(max_idle_per_host: usize, http2: bool) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle_per_host)
        .http2_only(http2)
        .build(connector)
}

/// Sends one request and reads the whole response: its status, or why there is none.
async fn send(client: &HttpClient, request: Request<Empty<Bytes>>) -> Result<u16, String> {
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        let response = client
            .request(request)
            .await
            .map_err(|e| flotilla_agent_backend::client::error_chain(&e))?;
        let status = response.status().as_u16();
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the body: {e}"))?;
        Ok::<u16, String>(status)
    })
    .await
    .unwrap_or_else(|_| Err(format!("no response within {REQUEST_TIMEOUT:?}")))
}

struct Tally {
    report: TargetReport,
    histogram: Histogram<u64>,
}

impl Tally {
    fn new(url: &str, rate: f64) -> Tally {
        Tally {
            report: TargetReport {
                url: url.to_owned(),
                rate,
                ..TargetReport::default()
            },
            histogram: histogram(),
        }
    }

    fn record(&mut self, result: Result<u16, String>, latency: Duration) {
        self.report.sent += 1;
        match result {
            Ok(status) => {
                self.report.completed += 1;
                *self.report.status_counts.entry(status).or_default() += 1;
                let micros = (latency.as_micros() as u64).clamp(1, 600_000_000);
                let _ = self.histogram.record(micros);
            }
            Err(e) => {
                self.report.failed += 1;
                if self.report.errors.len() < 5 {
                    self.report.errors.push(e);
                }
            }
        }
    }

    /// Adds another tally of the same target.
    fn merge(&mut self, other: Tally) {
        let (mine, theirs) = (&mut self.report, other.report);
        mine.sent += theirs.sent;
        mine.completed += theirs.completed;
        mine.failed += theirs.failed;
        mine.not_sent += theirs.not_sent;
        for (code, n) in theirs.status_counts {
            *mine.status_counts.entry(code).or_default() += n;
        }
        for e in theirs.errors {
            if mine.errors.len() < 5 {
                mine.errors.push(e);
            }
        }
        let _ = self.histogram.add(&other.histogram);
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

fn quantiles(h: &Histogram<u64>) -> Quantiles {
    if h.is_empty() {
        return Quantiles::default();
    }
    let ms = |v: u64| v as f64 / 1000.0;
    Quantiles {
        p50: ms(h.value_at_quantile(0.5)),
        p90: ms(h.value_at_quantile(0.9)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    }
}

/// The report of a run that took `elapsed` seconds, from its targets' tallies.
fn report(tallies: Vec<Tally>, elapsed: f64) -> Report {
    let elapsed = elapsed.max(1e-9);
    let mut report = Report {
        elapsed_seconds: elapsed,
        ..Report::default()
    };
    let mut all = histogram();
    for mut t in tallies {
        let _ = all.add(&t.histogram);
        t.report.latency_ms = quantiles(&t.histogram);
        t.report.achieved_rate = t.report.completed as f64 / elapsed;
        report.sent += t.report.sent;
        report.completed += t.report.completed;
        report.failed += t.report.failed;
        report.not_sent += t.report.not_sent;
        for (code, n) in &t.report.status_counts {
            *report.status_counts.entry(*code).or_default() += n;
        }
        report.targets.push(t.report);
    }
    report.achieved_rate = report.completed as f64 / elapsed;
    report.latency_ms = quantiles(&all);
    report
}

/// Sends open-loop load: each target at its own rate (or `rate`), for at most `duration` and
/// at most `max_requests` requests in all; returns when every response is in.
pub async fn run(
    targets: &[Target],
    rate: f64,
    duration: Duration,
    max_requests: u64,
) -> Result<Report, LoadError> {
    run_until(
        targets,
        rate,
        duration,
        max_requests,
        std::future::pending(),
    )
    .await
}

/// [`run`], which also stops sending once `stop` completes: load that lasts exactly as long as
/// what it accompanies (a rollout under test), however slow the machine, and never longer than
/// `duration`.
pub async fn run_until(
    targets: &[Target],
    rate: f64,
    duration: Duration,
    max_requests: u64,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<Report, LoadError> {
    let plans = plan(targets, Some(rate))?;
    let stopped = Arc::new(AtomicBool::new(false));
    let stopper = {
        let stopped = stopped.clone();
        tokio::spawn(async move {
            stop.await;
            stopped.store(true, Ordering::Relaxed);
        })
    };
    let client = client(usize::MAX, false);
    let budget = Arc::new(AtomicU64::new(max_requests));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let start = Instant::now();
    let mut schedulers = Vec::new();
    let mut tallies = Vec::new();
    for plan in plans {
        let tally = Arc::new(Mutex::new(Tally::new(&plan.url, plan.rate)));
        let client = client.clone();
        let budget = budget.clone();
        let in_flight = in_flight.clone();
        let scheduler_tally = tally.clone();
        let stopped = stopped.clone();
        schedulers.push(tokio::spawn(async move {
            let tally = scheduler_tally;
            let interval = Duration::from_secs_f64(1.0 / plan.rate);
            let mut requests = Vec::new();
            let mut k: u32 = 0;
            loop {
                let due = start + interval * k;
                if due.duration_since(start) >= duration || stopped.load(Ordering::Relaxed) {
                    break;
                }
                if budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                    .is_err()
                {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                k += 1;
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    tally.lock().await.report.not_sent += 1;
                    continue;
                };
                let request = plan.request();
                let client = client.clone();
                let tally = tally.clone();
                requests.push(tokio::spawn(async move {
                    let issued = Instant::now();
                    let result = send(&client, request).await;
                    let latency = issued.elapsed();
                    drop(permit);
                    tally.lock().await.record(result, latency);
                }));
            }
            for r in requests {
                let _ = r.await;
            }
        }));
        tallies.push(tally);
    }
    for scheduler in schedulers {
        let _ = scheduler.await;
    }
    stopper.abort();
    let elapsed = start.elapsed().as_secs_f64();
    let mut done = Vec::new();
    for tally in tallies {
        let t = std::mem::replace(&mut *tally.lock().await, Tally::new("", 0.0));
        done.push(t);
    }
    Ok(report(done, elapsed))
}

/// How a closed-loop run talks to its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosedLoop {
    /// Keep-alive connections, spread round robin over the targets.
    pub connections: usize,
    /// Requests each connection keeps in flight: 1 for HTTP/1.1 (no pipelining), up to
    /// [`MAX_STREAMS`] for HTTP/2.
    pub streams: usize,
    /// HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1.
    pub http2: bool,
}

impl ClosedLoop {
    /// `connections` HTTP/1.1 keep-alive connections, one request in flight on each.
    pub fn http1(connections: usize) -> ClosedLoop {
        ClosedLoop {
            connections,
            streams: 1,
            http2: false,
        }
    }

    /// `connections` HTTP/2 connections with `streams` requests in flight on each.
    pub fn http2(connections: usize, streams: usize) -> ClosedLoop {
        ClosedLoop {
            connections,
            streams,
            http2: true,
        }
    }

    fn check(&self) -> Result<(), LoadError> {
        if self.connections == 0 || self.connections > MAX_CONNECTIONS {
            return Err(LoadError::Invalid(format!(
                "connections must be between 1 and {MAX_CONNECTIONS}, not {}",
                self.connections
            )));
        }
        let most = if self.http2 { MAX_STREAMS } else { 1 };
        if self.streams == 0 || self.streams > most {
            return Err(LoadError::Invalid(format!(
                "streams per connection must be between 1 and {most} for {}, not {}",
                if self.http2 { "HTTP/2" } else { "HTTP/1.1" },
                self.streams
            )));
        }
        Ok(())
    }
}

/// Sends closed-loop load, to measure the most a server sustains: `connections` workers spread
/// round-robin over the targets, each with its own keep-alive connection, each sending its next
/// request as soon as the last response is in, for `duration` and at most `max_requests`
/// requests in all. The targets' rates are ignored (reported as 0).
pub async fn run_closed(
    targets: &[Target],
    connections: usize,
    duration: Duration,
    max_requests: u64,
) -> Result<Report, LoadError> {
    run_closed_with(
        targets,
        ClosedLoop::http1(connections),
        duration,
        max_requests,
    )
    .await
}

/// [`run_closed`] with the protocol and the requests in flight per connection chosen: with
/// HTTP/2, each connection's `streams` workers share it, each sending its next request as soon
/// as its last response is in.
pub async fn run_closed_with(
    targets: &[Target],
    shape: ClosedLoop,
    duration: Duration,
    max_requests: u64,
) -> Result<Report, LoadError> {
    let plans = Arc::new(plan(targets, None)?);
    shape.check()?;
    let budget = Arc::new(AtomicU64::new(max_requests));
    let start = Instant::now();
    let deadline = start + duration;
    let mut workers = Vec::new();
    for connection in 0..shape.connections {
        let index = connection % plans.len();
        // One connection: a client of its own that keeps one idle connection (HTTP/1.1), or
        // that multiplexes every request on one (HTTP/2).
        let client = client(1, shape.http2);
        for _ in 0..shape.streams {
            let plans = plans.clone();
            let budget = budget.clone();
            let client = client.clone();
            workers.push(tokio::spawn(async move {
                let plan = &plans[index];
                let mut tally = Tally::new(&plan.url, 0.0);
                while Instant::now() < deadline
                    && budget
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                        .is_ok()
                {
                    let issued = Instant::now();
                    let result = send(&client, plan.request()).await;
                    tally.record(result, issued.elapsed());
                }
                (index, tally)
            }));
        }
    }
    let mut tallies: Vec<Tally> = plans.iter().map(|p| Tally::new(&p.url, 0.0)).collect();
    for worker in workers {
        if let Ok((index, tally)) = worker.await {
            tallies[index].merge(tally);
        }
    }
    Ok(report(tallies, start.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_targets_are_accepted() {
        for ok in [
            "http://127.0.0.1:80/x",
            "http://localhost:1/",
            "http://[::1]:8080/",
            "http://127.9.9.9/",
        ] {
            check_loopback(ok).unwrap();
        }
        for bad in [
            "http://10.0.0.1/",
            "http://example.com/",
            "http://0.0.0.0:80/",
        ] {
            let err = check_loopback(bad).unwrap_err();
            assert_eq!(err, LoadError::NotLoopback(bad.into()), "{bad}");
            assert!(err.to_string().contains("only targets loopback"));
        }
        assert!(matches!(
            check_loopback("https://127.0.0.1/"),
            Err(LoadError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn a_non_loopback_target_refuses_the_whole_run() {
        let targets = [
            Target::new("http://127.0.0.1:9/"),
            Target::new("http://192.0.2.1/"),
        ];
        let err = run(&targets, 10.0, Duration::from_secs(1), 10)
            .await
            .unwrap_err();
        assert!(matches!(err, LoadError::NotLoopback(_)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_loop_run_keeps_its_connections_busy_and_stops_at_its_budget() {
        let server = crate::demo_app::DemoServer::start(crate::demo_app::DemoConfig::default())
            .await
            .unwrap();
        let targets = [Target::new(format!("http://{}/x", server.local_addr()))];
        // The budget ends the run long before the duration does.
        let report = run_closed(&targets, 4, Duration::from_secs(60), 500)
            .await
            .unwrap();
        assert_eq!(report.sent, 500, "{report:?}");
        assert_eq!(report.status_counts.get(&200), Some(&500), "{report:?}");
        assert!(report.elapsed_seconds < 30.0, "{report:?}");
        assert_eq!(server.requests_served(), 500);
        assert_eq!(report.targets[0].rate, 0.0);
        let err = run_closed(&targets, 0, Duration::from_secs(1), 1)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("connections"), "{err}");
        server.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_http2_closed_loop_run_multiplexes_its_streams_on_its_connections() {
        let server = crate::demo_app::DemoServer::start(crate::demo_app::DemoConfig::default())
            .await
            .unwrap();
        let targets = [Target::new(format!("http://{}/x", server.local_addr()))];
        let report = run_closed_with(
            &targets,
            ClosedLoop::http2(2, 8),
            Duration::from_secs(60),
            400,
        )
        .await
        .unwrap();
        assert_eq!(report.sent, 400, "{report:?}");
        assert_eq!(report.status_counts.get(&200), Some(&400), "{report:?}");
        assert_eq!(server.requests_served(), 400);
        // HTTP/1.1 has no streams to multiplex; a run that asks for them is refused.
        let err = run_closed_with(
            &targets,
            ClosedLoop {
                streams: 2,
                ..ClosedLoop::http1(1)
            },
            Duration::from_secs(1),
            1,
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("HTTP/1.1"), "{err}");
        server.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_open_loop_run_stops_when_told_and_every_response_is_in() {
        let server = crate::demo_app::DemoServer::start(crate::demo_app::DemoConfig::default())
            .await
            .unwrap();
        let targets = [Target::new(format!("http://{}/x", server.local_addr()))];
        let (tell, told) = tokio::sync::oneshot::channel::<()>();
        let load = tokio::spawn(async move {
            run_until(&targets, 100.0, Duration::from_secs(60), u64::MAX, async {
                let _ = told.await;
            })
            .await
            .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        tell.send(()).unwrap();
        let report = tokio::time::timeout(Duration::from_secs(10), load)
            .await
            .expect("the run stops well before its 60 s")
            .unwrap();
        assert!(report.sent >= 20 && report.sent <= 200, "{report:?}");
        assert_eq!(report.completed, report.sent, "{report:?}");
        assert_eq!(report.failed, 0, "{report:?}");
        assert_eq!(server.requests_served(), report.sent);
        server.shutdown().await;
    }
}
