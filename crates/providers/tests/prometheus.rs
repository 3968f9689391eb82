//! The Prometheus provider against a real Prometheus (Debian's `prometheus` package) scraping a
//! real exporter served by this test: ratios, quantiles, errors, empty and NaN results, range
//! queries, and a server that went away.
//!
//! Needs the `prometheus` binary on PATH:
//! `apt-get install -y --no-install-recommends prometheus`.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Reply, poll_until, request, serve};
use flotilla_core::analysis::{
    Condition, MeasureRequest, Measurer, MetricResult, Outcome, compare,
};
use flotilla_core::spec::analysis::AnalysisPhase;
use serde_json::json;

/// Latency buckets (seconds) and how many of each tick's 100 requests fall in each.
const BUCKETS: [(f64, u64); 4] = [(0.1, 60), (0.25, 25), (0.5, 12), (1.0, 3)];
/// Each tick serves 98 successes and 2 errors: the error ratio is 0.02 exactly.
const OK_PER_TICK: u64 = 98;
const ERRORS_PER_TICK: u64 = 2;
const ERROR_RATIO: f64 = 0.02;
/// The 95th percentile of that distribution, as `histogram_quantile` interpolates it: rank 95
/// falls in (0.25, 0.5], which holds ranks 86..=97: 0.25 + 0.25 × (95 − 85) / 12.
const P95: f64 = 0.25 + 0.25 * 10.0 / 12.0;

/// The exporter's counters.
#[derive(Debug, Default)]
struct Traffic {
    ok: u64,
    errors: u64,
    buckets: [u64; 4],
    sum: f64,
    count: u64,
}

impl Traffic {
    /// Serves one tick's worth of requests.
    fn tick(&mut self) {
        self.ok += OK_PER_TICK;
        self.errors += ERRORS_PER_TICK;
        for (i, (upper, n)) in BUCKETS.iter().enumerate() {
            self.buckets[i] += n;
            // Each request in a bucket took 80% of its upper bound.
            self.sum += *n as f64 * upper * 0.8;
            self.count += n;
        }
    }

    /// The Prometheus text exposition format.
    fn exposition(&self) -> String {
        let mut text = String::new();
        text.push_str("# HELP http_requests_total Requests served.\n");
        text.push_str("# TYPE http_requests_total counter\n");
        let _ = writeln!(text, "http_requests_total{{code=\"200\"}} {}", self.ok);
        let _ = writeln!(text, "http_requests_total{{code=\"500\"}} {}", self.errors);
        text.push_str("# HELP http_request_duration_seconds Request latency.\n");
        text.push_str("# TYPE http_request_duration_seconds histogram\n");
        let mut cumulative = 0;
        for (i, (upper, _)) in BUCKETS.iter().enumerate() {
            cumulative += self.buckets[i];
            let _ = writeln!(
                text,
                "http_request_duration_seconds_bucket{{le=\"{upper}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            text,
            "http_request_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(text, "http_request_duration_seconds_sum {}", self.sum);
        let _ = writeln!(text, "http_request_duration_seconds_count {}", self.count);
        text
    }
}

/// A Prometheus child process, killed (and its data removed) however the test ends.
struct PrometheusProcess {
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl PrometheusProcess {
    fn start(binary: &Path, exporter: &str, port: u16) -> PrometheusProcess {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: exporter\n    \
                 static_configs: [{{targets: [\"{exporter}\"]}}]\n"
            ),
        )
        .unwrap();
        let log = dir.path().join("prometheus.log");
        let output = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        PrometheusProcess {
            child: Some(child),
            log,
            _dir: dir,
        }
    }

    /// Panics with Prometheus' log if it has exited.
    fn assert_running(&mut self) {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            panic!(
                "prometheus exited ({status}):\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }

    /// Waits (up to a minute) until Prometheus at `address` answers `/-/ready`.
    async fn ready(&mut self, address: &str) {
        let probe = reqwest::Client::new();
        let ready = format!("{address}/-/ready");
        poll_until(Duration::from_secs(60), "prometheus /-/ready", || {
            self.assert_running();
            let probe = probe.clone();
            let ready = ready.clone();
            async move {
                let response = probe.get(&ready).send().await.ok()?;
                response.status().is_success().then_some(())
            }
        })
        .await;
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrometheusProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `prometheus` binary, or a failure saying how to install it.
fn prometheus_binary() -> PathBuf {
    let found = Command::new("which")
        .arg("prometheus")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|p| !p.is_empty());
    match found {
        Some(path) => PathBuf::from(path),
        None => panic!(
            "the `prometheus` binary is not on PATH; this test runs a real Prometheus. Install \
             it with: apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
             --no-install-recommends prometheus"
        ),
    }
}

fn query_at(address: &str, query: &str) -> MeasureRequest {
    request(json!({"prometheus": {"address": address, "query": query}}))
}

fn value(outcome: Outcome) -> (MetricResult, std::collections::BTreeMap<String, String>) {
    match outcome {
        Outcome::Value { result, metadata } => (result, metadata),
        other => panic!("expected a Value, got {other:?}"),
    }
}

fn single(result: &MetricResult) -> f64 {
    match result {
        MetricResult::Vector(values) if values.len() == 1 => values[0],
        other => panic!("expected a one-element vector, got {other:?}"),
    }
}

fn holds(condition: &str, result: &MetricResult) -> bool {
    Condition::compile(condition)
        .unwrap()
        .evaluate(result)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_measurements_against_a_real_server() {
    let binary = prometheus_binary();
    let started = Instant::now();
    let providers = common::providers();

    // The exporter: real counters and a histogram, advanced by a traffic loop.
    let traffic = Arc::new(Mutex::new(Traffic::default()));
    let exposed = traffic.clone();
    let exporter = serve(move |_| {
        let text = exposed.lock().unwrap().exposition();
        async move { Reply::text(200, text) }
    })
    .await;
    let ticking = traffic.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(50));
        loop {
            every.tick().await;
            ticking.lock().unwrap().tick();
        }
    });

    let port = common::closed_port();
    let address = format!("http://127.0.0.1:{port}");
    let mut prometheus = PrometheusProcess::start(&binary, &exporter.to_string(), port);

    prometheus.ready(&address).await;
    let ready_after = started.elapsed();

    let total_rate = "sum(rate(http_requests_total[10s]))";
    poll_until(Duration::from_secs(60), "a first non-empty rate()", || {
        let request = query_at(&address, total_rate);
        let providers = providers.clone();
        async move {
            match providers.measure(&request).await {
                Outcome::Value {
                    result: MetricResult::Vector(values),
                    ..
                } if values.first().is_some_and(|v| *v > 0.0) => Some(()),
                _ => None,
            }
        }
    })
    .await;
    let data_after = started.elapsed();

    // An error ratio: a one-element vector, judged by conditions.
    let ratio_query = "sum(rate(http_requests_total{code=\"500\"}[10s])) \
                       / sum(rate(http_requests_total[10s]))";
    let (ratio, metadata) = value(providers.measure(&query_at(&address, ratio_query)).await);
    assert!(
        (single(&ratio) - ERROR_RATIO).abs() < 1e-9,
        "ratio {ratio:?}, expected {ERROR_RATIO}"
    );
    assert_eq!(metadata.get("query").map(String::as_str), Some(ratio_query));
    assert!(holds("result[0] < 0.05", &ratio));
    assert!(!holds("result[0] < 0.01", &ratio));

    // A latency percentile from the histogram.
    let p95_query =
        "histogram_quantile(0.95, sum by (le) (rate(http_request_duration_seconds_bucket[10s])))";
    let (p95, _) = value(providers.measure(&query_at(&address, p95_query)).await);
    assert!(
        (single(&p95) - P95).abs() < 1e-9,
        "p95 {p95:?}, expected {P95}"
    );
    assert!(holds("result[0] <= 0.5", &p95));
    assert!(!holds("result[0] <= 0.3", &p95));

    // A scalar stays a scalar.
    let (scalar, _) = value(
        providers
            .measure(&query_at(&address, &format!("scalar({ratio_query})")))
            .await,
    );
    assert!(
        matches!(scalar, MetricResult::Scalar(v) if (v - ERROR_RATIO).abs() < 1e-9),
        "{scalar:?}"
    );

    // A malformed query: Prometheus' own bad_data message.
    match providers.measure(&query_at(&address, "sum(rate(")).await {
        Outcome::Error(message) => {
            assert!(message.starts_with("bad_data: "), "{message}");
            assert!(message.contains("parse error"), "{message}");
        }
        other => panic!("expected an Error, got {other:?}"),
    }

    // No data: an empty vector, which is not evidence.
    let (empty, _) = value(
        providers
            .measure(&query_at(&address, "http_requests_total{code=\"404\"}"))
            .await,
    );
    assert_eq!(empty, MetricResult::Vector(vec![]));
    assert!(!empty.is_evidence());

    // 0/0: NaN, as a vector element and as a scalar.
    let (nan, _) = value(
        providers
            .measure(&query_at(&address, "vector(0) / vector(0)"))
            .await,
    );
    assert!(single(&nan).is_nan(), "{nan:?}");
    let (nan_scalar, _) = value(
        providers
            .measure(&query_at(&address, "scalar(vector(0) / vector(0))"))
            .await,
    );
    assert!(matches!(nan_scalar, MetricResult::Scalar(v) if v.is_nan()));

    // A window turns the query into a range query whose matrix is flattened.
    let mut windowed = query_at(&address, ratio_query);
    windowed.window = Some(5_000);
    let (series, _) = value(providers.measure(&windowed).await);
    match &series {
        MetricResult::Vector(values) => {
            assert!(!values.is_empty() && values.len() <= 6, "{values:?}");
            assert!(
                values.iter().all(|v| (v - ERROR_RATIO).abs() < 1e-9),
                "{values:?}"
            );
        }
        other => panic!("expected a vector, got {other:?}"),
    }
    // So does rangeQuery, with Argo's now() - duration() bounds.
    let ranged = request(json!({"prometheus": {
        "address": address,
        "query": total_rate,
        "rangeQuery": {"start": "now() - duration(\"3s\")", "end": "now()", "step": "1s"}
    }}));
    let (series, _) = value(providers.measure(&ranged).await);
    assert!(
        matches!(&series, MetricResult::Vector(v) if !v.is_empty() && v.len() <= 4 && v.iter().all(|x| *x > 0.0)),
        "{series:?}"
    );

    // Headers and basic auth are sent (this Prometheus ignores them) and never echoed.
    let with_secrets = request(json!({"prometheus": {
        "address": address,
        "query": "vector(1)",
        "headers": [{"key": "Authorization", "value": "Bearer tok-s3cret"}],
        "authentication": {"basicAuth": {"username": "flotilla", "password": "pw-s3cret"}}
    }}));
    let (one, metadata) = value(providers.measure(&with_secrets).await);
    assert_eq!(one, MetricResult::Vector(vec![1.0]));
    assert!(!format!("{metadata:?}").contains("s3cret"));

    // A whole AnalysisRun through the core's machine: real measurements, virtual schedule. The
    // error-rate and latency metrics pass; then Prometheus stops mid-run, measurements become
    // Errors, and past the consecutive error limit the run is Error, naming address and cause.
    let template: flotilla_core::spec::analysis::AnalysisTemplateSpec = serde_json::from_value(json!({
        "args": [{"name": "max-p95"}],
        "metrics": [
            {"name": "error-rate", "interval": "1m",
             "successCondition": "len(result) > 0 && result[0] < 0.05",
             "provider": {"prometheus": {"query": "sum(rate(http_requests_total{code=\"500\"}[10s])) / sum(rate(http_requests_total[10s]))"}}},
            {"name": "latency-p95", "interval": "1m",
             "successCondition": "len(result) > 0 && result[0] <= {{args.max-p95}}",
             "provider": {"prometheus": {"query": "histogram_quantile(0.95, sum by (le) (rate(http_request_duration_seconds_bucket[10s])))"}}}
        ]
    }))
    .unwrap();
    let mut args = std::collections::BTreeMap::new();
    args.insert(
        "max-p95".to_owned(),
        flotilla_core::analysis::plan::ArgValue::plain("0.5"),
    );
    args.insert(
        "metrics-address".to_owned(),
        flotilla_core::analysis::plan::ArgValue::plain(address.clone()),
    );
    let plan = flotilla_core::analysis::plan::resolve(&template, &args).unwrap();
    // Virtual time starts at the wall clock, so the first round queries the present.
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut run = flotilla_core::analysis::run::Run::new(&plan, start);
    let mut now = start;
    let mut errors_seen = 0;
    for step in 0..20 {
        if step == 1 {
            // Stopped mid-run, after one successful round.
            prometheus.kill();
        }
        for request in run.poll_due(&plan, now) {
            let outcome = providers.measure(&request).await;
            if matches!(outcome, Outcome::Error(_)) {
                errors_seen += 1;
            }
            run.handle_outcome(&plan, request.metric_index, now, outcome);
        }
        run.assess(&plan, now);
        if step == 0 {
            assert_eq!(run.metrics[0].successful, 1, "{run:#?}");
            assert_eq!(run.metrics[1].successful, 1, "{run:#?}");
        }
        if run.is_completed() {
            break;
        }
        now = run
            .next_due(&plan)
            .expect("a running run has a next measurement");
    }
    assert_eq!(
        run.phase,
        flotilla_core::spec::analysis::AnalysisPhase::Error,
        "{run:#?}"
    );
    assert!(errors_seen >= 5, "{errors_seen}");
    assert!(
        run.message
            .contains("consecutiveErrors (5) > consecutiveErrorLimit (4)"),
        "{}",
        run.message
    );
    assert!(
        run.message.contains(&format!("127.0.0.1:{port}")),
        "the run names the address: {}",
        run.message
    );
    assert!(
        run.message.to_lowercase().contains("connection refused"),
        "and the cause: {}",
        run.message
    );
    // The retries came 10 s apart on the virtual clock, whatever the 1 m interval.
    let error_times: Vec<i64> = run.metrics[0]
        .measurements
        .iter()
        .filter(|m| m.phase == flotilla_core::spec::analysis::AnalysisPhase::Error)
        .map(|m| m.started_at)
        .collect();
    assert!(
        error_times.windows(2).all(|w| w[1] - w[0] == 10_000),
        "{error_times:?}"
    );

    // Prometheus is gone: an Error naming the address and the cause, with no secret in it.
    prometheus.kill();
    match providers.measure(&with_secrets).await {
        Outcome::Error(message) => {
            assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
            assert!(
                message.to_lowercase().contains("connection refused"),
                "{message}"
            );
            assert!(!message.contains("s3cret"), "{message}");
        }
        other => panic!("expected an Error, got {other:?}"),
    }
    eprintln!(
        "prometheus ready after {ready_after:?}, first rate() after {data_after:?}, \
         test done after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn misconfigured_prometheus_metrics_are_errors() {
    let providers = common::providers();
    let cases = [
        (
            json!({"query": "up"}),
            "prometheus address is not configured",
        ),
        (json!({"address": "127.0.0.1:9090", "query": "up"}), "not"),
        (json!({"address": "http://127.0.0.1:9"}), "has no query"),
        (
            json!({"address": "http://127.0.0.1:9", "query": "up", "timeout": -1}),
            "should not be negative",
        ),
        (
            json!({"address": "http://127.0.0.1:9", "query": "up",
                   "rangeQuery": {"start": "yesterday", "end": "now()", "step": "1m"}}),
            "failed to parse rangeQuery.start as time",
        ),
        (
            json!({"address": "http://127.0.0.1:9", "query": "up",
                   "authentication": {"sigv4": {"region": "eu-west-1"}}}),
            "sigv4 is not supported",
        ),
    ];
    for (metric, expected) in cases {
        match providers
            .measure(&request(json!({ "prometheus": metric })))
            .await
        {
            Outcome::Error(message) => assert!(message.contains(expected), "{message}"),
            other => panic!("expected an Error for {metric}, got {other:?}"),
        }
    }
}

/// Latency gauges per version, moved by a deterministic ±2% wobble each tick: `stable` and
/// `same` around 0.20 s, `slow` around 0.30 s, and `stepped` at 0.20 s until `step_at`
/// (milliseconds since the epoch), 0.30 s after.
fn latency_exposition(tick: u64, now: i64, step_at: i64) -> String {
    let wobble = |phase: u64| 1.0 + 0.02 * (((tick * 7 + phase * 3) % 11) as f64 / 5.0 - 1.0);
    let stepped = if now < step_at { 0.20 } else { 0.30 };
    let mut text = String::from("# TYPE latency_p95_seconds gauge\n");
    for (i, (version, level)) in [
        ("stable", 0.20),
        ("same", 0.20),
        ("slow", 0.30),
        ("stepped", stepped),
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            text,
            "latency_p95_seconds{{version=\"{version}\"}} {}",
            level * wobble(i as u64)
        );
    }
    text
}

/// A `compare` metric (the judge over two series) whose series are Prometheus range queries:
/// a slower canary against its concurrent stable fails with the judge's statistics, an equal
/// one passes, and a canary slower than its own reference window before the run fails too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comparison_judges_prometheus_range_queries() {
    let binary = prometheus_binary();
    let providers = common::providers();
    let tick = Arc::new(Mutex::new(0u64));
    let step_at = Arc::new(Mutex::new(i64::MAX));
    let (exposed, step) = (tick.clone(), step_at.clone());
    let exporter = serve(move |_| {
        let text = {
            let mut t = exposed.lock().unwrap();
            *t += 1;
            latency_exposition(*t, common::now_ms(), *step.lock().unwrap())
        };
        async move { Reply::text(200, text) }
    })
    .await;
    let port = common::closed_port();
    let address = format!("http://127.0.0.1:{port}");
    let mut prometheus = PrometheusProcess::start(&binary, &exporter.to_string(), port);
    prometheus.ready(&address).await;
    let compare = |canary: &str, baseline: &str, reference: serde_json::Value| {
        let mut c = json!({
            "canary": {"prometheus": {"address": address, "query": format!("latency_p95_seconds{{version=\"{canary}\"}}")}},
            "baseline": {"prometheus": {"address": address, "query": format!("latency_p95_seconds{{version=\"{baseline}\"}}")}},
            "window": "10s", "step": "1s", "minPoints": 8, "direction": "increase",
        });
        if !reference.is_null() {
            c["reference"] = reference;
        }
        request(json!({ "compare": c }))
    };
    // Ten seconds of scraped data: the first comparison that is not deferred for thin series.
    let healthy = poll_until(Duration::from_secs(90), "ten seconds of data", || {
        prometheus.assert_running();
        let request = compare("same", "stable", serde_json::Value::Null);
        let providers = providers.clone();
        async move {
            match compare::measure(&providers, &request).await {
                Outcome::Deferred(_) => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    None
                }
                other => Some(other),
            }
        }
    })
    .await;
    *step_at.lock().unwrap() = common::now_ms();
    let started = common::now_ms();
    let (phase, value, message, metadata) = judged(healthy);
    assert_eq!(
        (phase, value.as_str()),
        (AnalysisPhase::Successful, "Pass"),
        "{message}"
    );
    assert!(message.contains("baseline n="), "{message}");
    assert!(metadata["canaryPoints"].parse::<u32>().unwrap() >= 8);
    let slow = compare("slow", "stable", serde_json::Value::Null);
    let (phase, value, message, metadata) = judged(compare::measure(&providers, &slow).await);
    assert_eq!(
        (phase, value.as_str()),
        (AnalysisPhase::Failed, "High"),
        "{message}"
    );
    assert!(message.contains("canary higher"), "{message}");
    assert!(message.contains("concurrent"), "{message}");
    let ratio: f64 = metadata["effectSize"].parse().unwrap();
    assert!((ratio - 1.5).abs() < 0.05, "mean ratio {ratio}");
    assert!(metadata.contains_key("ci") && metadata.contains_key("estimate"));
    // The stepped version against its own ten seconds before the run started.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut own = compare("stepped", "stepped", json!({"beforeStart": "10s"}));
    own.not_before = Some(started);
    let (phase, value, message, metadata) = judged(compare::measure(&providers, &own).await);
    assert_eq!(
        (phase, value.as_str()),
        (AnalysisPhase::Failed, "High"),
        "{message}"
    );
    assert!(message.contains("before the run started"), "{message}");
    assert!(metadata["reference"].contains("before the run started"));
}

/// A judged comparison's phase, value (the classification), message and metadata.
fn judged(
    outcome: Outcome,
) -> (
    AnalysisPhase,
    String,
    String,
    std::collections::BTreeMap<String, String>,
) {
    match outcome {
        Outcome::Decided {
            phase,
            value,
            message,
            metadata,
        } => (phase, value, message, metadata),
        other => panic!("expected a judged comparison, got {other:?}"),
    }
}
