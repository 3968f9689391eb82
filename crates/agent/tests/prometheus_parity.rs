//! A real Prometheus (Debian's `prometheus` package, started by this test on loopback) scraping
//! the agent's `/metrics` every second gives the same stable error rate as the `builtin`
//! provider for the same window, within 0.5 percentage points.
//!
//! Everything here is real: an in-process agent routing over loopback to an in-process upstream
//! that answers 500 to every Nth request, the open-loop load generator, a Prometheus child
//! process, and both providers as the analysis engine runs them (`flotilla-providers`'
//! `prometheus`, the agent's `builtin`). The test is skipped, saying so, only when `prometheus`
//! is not on PATH (CI installs it: `.ci/run`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use flotilla_agent::loadgen::{self, Target};
use flotilla_agent::{Agent, AgentConfig};
use flotilla_agent_backend::AgentClient;
use flotilla_agent_backend::builtin::BuiltinProvider;
use flotilla_agent_backend::wire::BUCKET_SECONDS;
use flotilla_core::analysis::{MeasureRequest, Measurer, MetricResult, Outcome};
use flotilla_core::spec::analysis::MetricProvider;
use flotilla_providers::Providers;
use serde_json::json;

/// The window both providers read, seconds: six of the agent's 10-second buckets.
const WINDOW: u64 = 60;
/// Requests per second through the router.
const RATE: f64 = 200.0;
/// Error shares (every Nth request answers 500): outside the window, in its first half, in its
/// second half. The window's true error rate is the mean of the two halves, 7.5%; a window one
/// bucket off in either direction would take in 10 s of the 25% outside it and read ≈ 10%.
const OUTSIDE_EVERY: u64 = 4;
const FIRST_HALF_EVERY: u64 = 20;
const SECOND_HALF_EVERY: u64 = 10;
const EXPECTED: f64 = (1.0 / FIRST_HALF_EVERY as f64 + 1.0 / SECOND_HALF_EVERY as f64) / 2.0;
/// The acceptance bound, as a fraction: 0.5 percentage points.
const TOLERANCE: f64 = 0.005;

/// An upstream that answers 500 to every `every`-th request it serves and 200 otherwise.
#[derive(Debug)]
struct EveryNth {
    served: AtomicU64,
    every: AtomicU64,
}

async fn upstream(share: Arc<EveryNth>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new()
        .fallback(
            |axum::extract::State(share): axum::extract::State<Arc<EveryNth>>| async move {
                let n = share.served.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(share.every.load(Ordering::Relaxed)) {
                    (StatusCode::INTERNAL_SERVER_ERROR, "injected failure\n")
                } else {
                    (StatusCode::OK, "ok\n")
                }
            },
        )
        .with_state(share);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, task)
}

/// `prometheus` on PATH, if installed.
fn find_prometheus() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("prometheus"))
        .find(|p| p.is_file())
}

/// A Prometheus child that scrapes one target every second; killed and reaped on drop.
struct Prometheus {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(binary: &Path, target: SocketAddr, port: u16) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: agent\n    \
                 static_configs: [{{targets: [\"{target}\"]}}]\n"
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
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        Prometheus {
            child,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills and reaps the child; true when its pid is gone afterwards.
    fn stop(&mut self) -> bool {
        let _ = self.child.kill();
        let _ = self.child.wait();
        !Path::new(&format!("/proc/{}", self.child.id())).exists()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// Sleeps until the wall clock reads `unix_seconds`.
async fn sleep_until_unix(unix_seconds: u64) {
    let target = Duration::from_secs(unix_seconds);
    let now = unix_now();
    if target > now {
        tokio::time::sleep(target - now).await;
    }
}

fn measure_request(provider: serde_json::Value, at_seconds: u64) -> MeasureRequest {
    MeasureRequest {
        metric_index: 0,
        metric: "error-rate".into(),
        provider: Arc::new(serde_json::from_value::<MetricProvider>(provider).unwrap()),
        at: (at_seconds * 1000) as i64,
        window: None,
        not_before: None,
        step: None,
        baseline: None,
        reference: None,
        last: false,
    }
}

fn single(outcome: &Outcome, what: &str) -> f64 {
    match outcome {
        Outcome::Value {
            result: MetricResult::Vector(values),
            ..
        } if values.len() == 1 => values[0],
        other => panic!("{what}: expected a one-element vector, got {other:?}"),
    }
}

/// The comparison and why it is fair:
///
/// - **Alignment.** The window is `[T − 60 s, T)` with `T` on a 10-second boundary, so it is
///   exactly six of the agent's buckets (the builtin provider reads a past window by its start
///   and end, and a bucket holds the requests answered in its 10 seconds). Both providers are
///   asked at the same instant `T`, after `T + 15 s` so that the builtin provider reads the
///   window by its bounds rather than "the last minute".
/// - **Extrapolation.** Prometheus' `increase(x[60s])` at `T` takes the samples scraped in the
///   window (one a second, so the first lands within a second after `T − 60 s` and the last
///   within a second before `T`) and scales their difference out to the whole window. Every
///   series of the agent is scraped at the same instants, so the 5xx and the total series are
///   scaled by the same factor and the ratio is the ratio of the requests answered between the
///   first and the last scrape: the window less up to a second at each edge. The load is
///   constant-rate and the 500s are deterministic (every Nth), so those edge seconds carry the
///   window's own error share; the gap left is a few requests in 12,000.
/// - **Sensitivity.** The error share changes at the window's edges (25% outside, 5% then 10%
///   inside), so a window shifted by a bucket, or a Prometheus exposition that counted the
///   wrong requests, reads about 10% instead of 7.5%: both providers are also checked against
///   the known 7.5%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scraping_metrics_agrees_with_the_builtin_error_rate() {
    let Some(binary) = find_prometheus() else {
        eprintln!(
            "SKIPPED prometheus_scraping_metrics_agrees_with_the_builtin_error_rate: the \
             `prometheus` binary is not on PATH. Install it with: apt-get install -y \
             --no-install-recommends prometheus"
        );
        return;
    };

    let share = Arc::new(EveryNth {
        served: AtomicU64::new(0),
        every: AtomicU64::new(OUTSIDE_EVERY),
    });
    let (upstream_addr, upstream_task) = upstream(share.clone()).await;
    let config = AgentConfig::parse(
        &format!(
            r#"
cluster: parity
router: {{listen: "127.0.0.1:0"}}
control: {{listen: "127.0.0.1:0"}}
seed: 7
weights: {{canary: 0}}
subsets:
  stable: {{endpoints: ["{upstream_addr}"]}}
  canary: {{endpoints: []}}
"#
        ),
        "parity.yaml",
    )
    .unwrap();
    let agent = Agent::start(config, None).await.unwrap();
    let client = AgentClient::new(format!("http://{}", agent.control_addr()))
        .unwrap()
        .with_token(agent.control_token().secret());

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("http://127.0.0.1:{port}");
    let mut prometheus = Prometheus::start(&binary, agent.control_addr(), port);
    let http = reqwest::Client::new();
    let ready_by = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = prometheus.child.try_wait() {
            panic!("prometheus exited ({status}):\n{}", prometheus.log());
        }
        let up = http
            .get(format!("{address}/api/v1/query?query=up"))
            .send()
            .await;
        if let Ok(response) = up
            && let Ok(body) = response.json::<serde_json::Value>().await
            && body["data"]["result"][0]["value"][1] == "1"
        {
            break;
        }
        assert!(
            Instant::now() < ready_by,
            "prometheus never scraped the agent:\n{}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The window: the first bucket boundary at least 5 s away (a few scrapes of warm-up, so
    // that the 5xx series exists before the window opens).
    let start = (unix_now().as_secs() + 5).div_ceil(BUCKET_SECONDS) * BUCKET_SECONDS;
    let end = start + WINDOW;
    let load_seconds = (end + 2).saturating_sub(unix_now().as_secs());
    let load = tokio::spawn({
        let url = format!("http://{}/parity", agent.router_addr());
        async move {
            loadgen::run(
                &[Target::new(url)],
                RATE,
                Duration::from_secs(load_seconds),
                (RATE as u64) * (load_seconds + 1),
            )
            .await
            .unwrap()
        }
    });
    for (at, every) in [
        (start, FIRST_HALF_EVERY),
        (start + WINDOW / 2, SECOND_HALF_EVERY),
        (end, OUTSIDE_EVERY),
    ] {
        sleep_until_unix(at).await;
        share.every.store(every, Ordering::Relaxed);
    }
    let report = load.await.unwrap();
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(report.not_sent, 0, "{report:?}");
    // A measurement at least 15 s in the past reads its window by its bounds.
    sleep_until_unix(end + 16).await;

    let builtin = BuiltinProvider::new(client.clone(), || unix_now().as_millis() as i64);
    let builtin_outcome = builtin
        .measure(&measure_request(
            json!({"builtin": {"metric": "error-rate", "subset": "stable", "window": format!("{WINDOW}s")}}),
            end,
        ))
        .await;
    let builtin_rate = single(&builtin_outcome, "builtin");
    let Outcome::Value { metadata, .. } = &builtin_outcome else {
        unreachable!("single() accepted it")
    };
    assert_eq!(
        metadata.get("window").map(String::as_str),
        Some(format!("{start}..{end}").as_str())
    );
    let requests: u64 = metadata["requests"].parse().unwrap();

    let providers = Providers::new(Arc::new(NoSecrets)).unwrap();
    let query = format!(
        "sum(increase(http_requests_total{{subset=\"stable\",code=~\"5..\"}}[{WINDOW}s])) \
         / sum(increase(http_requests_total{{subset=\"stable\"}}[{WINDOW}s]))"
    );
    let prometheus_outcome = providers
        .measure(&measure_request(
            json!({"prometheus": {"address": address, "query": query}}),
            end,
        ))
        .await;
    let prometheus_rate = single(&prometheus_outcome, "prometheus");
    let scrapes = single(
        &providers
            .measure(&measure_request(
                json!({"prometheus": {"address": address,
                    "query": format!("count_over_time(up{{job=\"agent\"}}[{WINDOW}s])")}}),
                end,
            ))
            .await,
        "scrape count",
    );

    eprintln!(
        "window {start}..{end}: builtin {:.3}% over {requests} requests, prometheus {:.3}% \
         ({scrapes} scrapes), expected {:.3}%",
        builtin_rate * 100.0,
        prometheus_rate * 100.0,
        EXPECTED * 100.0
    );
    // About RATE × WINDOW requests: the window holds the traffic of its own 60 seconds.
    let planned = RATE * WINDOW as f64;
    assert!(
        (requests as f64 - planned).abs() < planned * 0.05,
        "{requests} requests in the window, planned {planned}"
    );
    assert!(
        scrapes >= (WINDOW - 5) as f64,
        "Prometheus scraped {scrapes} times in {WINDOW} s; the comparison needs one a second"
    );
    assert!(
        (builtin_rate - EXPECTED).abs() < TOLERANCE,
        "builtin {builtin_rate} vs the window's true {EXPECTED}"
    );
    assert!(
        (prometheus_rate - builtin_rate).abs() < TOLERANCE,
        "prometheus {prometheus_rate} vs builtin {builtin_rate}: more than 0.5 pp apart"
    );

    assert!(prometheus.stop(), "the prometheus child is still there");
    agent.shutdown().await;
    upstream_task.abort();
    let _ = upstream_task.await;
}

/// The parity test's queries read no secrets.
#[derive(Debug)]
struct NoSecrets;

impl flotilla_core::analysis::SecretStore for NoSecrets {
    fn read(&self, name: &str, key: &str) -> Result<String, String> {
        Err(format!("secret {name}/{key}: this test has no secrets"))
    }
}
