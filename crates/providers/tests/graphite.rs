//! The Graphite provider against a real Graphite: Debian's graphite-carbon (`carbon-cache`, fed
//! through its plaintext protocol) and graphite-web (`graphite-manage runserver`), both started
//! by the test on loopback in a temporary directory and killed when it ends. Covered: a pass and
//! a fail template through the core's run machine, Argo's reads (first series only, nulls
//! skipped, the `%f` value string), whitespace in the query, a backtest instant, an empty target
//! ("no values found") and a Graphite-side error (HTTP 400 quoting Graphite's body). A second
//! test serves what a real Graphite does not answer (a 500, a non-JSON body) on loopback.
//!
//! Needs `carbon-cache` and `graphite-manage` on PATH: `apt-get install -y
//! --no-install-recommends graphite-carbon graphite-web` (`.ci/run` installs them); without them
//! the real-Graphite test prints one `SKIPPED` line and returns.
//!
//! graphite-web runs as `graphite-manage runserver --noreload 127.0.0.1:PORT` (Django's server,
//! no autoreloader child) with `GRAPHITE_SETTINGS_MODULE=flotilla_graphite_settings` and
//! `PYTHONPATH` set to the temporary directory holding that module: Debian's
//! `graphite/settings.py` imports the module it names instead of `/etc/graphite/local_settings.py`,
//! so storage, logs and the SQLite database all point into the temporary directory.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Reply, poll_until, request, serve};
use flotilla_core::analysis::{MeasureRequest, Measurer, MetricResult, Outcome};
use flotilla_core::spec::analysis::AnalysisPhase;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// How long Graphite may take to start, and data to become visible.
const STARTUP: Duration = Duration::from_secs(60);

/// A child process whose output goes to a log file; killed and reaped on drop.
struct Process {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts `program` (through `setpriv --pdeathsig KILL` when there is one, so it dies with
    /// the test's thread even if the test is killed).
    fn spawn(
        name: &'static str,
        program: &Path,
        configure: impl FnOnce(&mut Command),
        log: PathBuf,
    ) -> Process {
        let mut command = match on_path("setpriv") {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(program);
                c
            }
            None => Command::new(program),
        };
        configure(&mut command);
        let output = std::fs::File::create(&log).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Process {
            name,
            child: Some(child),
            log,
        }
    }

    /// Panics with the process's log if it has exited.
    fn assert_running(&mut self) {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            panic!(
                "{} exited ({status}):\n{}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An executable named `name` in a PATH directory.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `n` distinct loopback ports nothing listens on (all bound at once, then released).
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

/// carbon-cache and graphite-web sharing one whisper directory. Fields drop in order: the
/// processes are killed before the directory is removed.
struct Graphite {
    carbon: Process,
    web: Process,
    line_port: u16,
    address: String,
    _dir: tempfile::TempDir,
}

impl Graphite {
    fn start(carbon_cache: &Path, manage: &Path) -> Graphite {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let [line_port, cache_port, web_port] = free_ports::<3>();
        for sub in ["carbon", "storage/whisper", "log", "web"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let storage = root.join("storage");
        let whisper = storage.join("whisper");
        // The line receiver and the cache query port (graphite-web's carbonlink) on loopback;
        // pickle, UDP, tagging (which would call graphite-web) and carbon's own metrics off.
        std::fs::write(
            root.join("carbon/carbon.conf"),
            format!(
                "[cache]\n\
                 STORAGE_DIR = {storage}\n\
                 LOCAL_DATA_DIR = {whisper}\n\
                 WHITELISTS_DIR = {storage}/lists\n\
                 LOG_DIR = {root}/log\n\
                 PID_DIR = {root}\n\
                 USER =\n\
                 DATABASE = whisper\n\
                 ENABLE_TAGS = False\n\
                 CARBON_METRIC_INTERVAL = 0\n\
                 MAX_CACHE_SIZE = inf\n\
                 MAX_UPDATES_PER_SECOND = 10000\n\
                 MAX_CREATES_PER_MINUTE = 10000\n\
                 LINE_RECEIVER_INTERFACE = 127.0.0.1\n\
                 LINE_RECEIVER_PORT = {line_port}\n\
                 ENABLE_UDP_LISTENER = False\n\
                 PICKLE_RECEIVER_PORT = 0\n\
                 CACHE_QUERY_INTERFACE = 127.0.0.1\n\
                 CACHE_QUERY_PORT = {cache_port}\n\
                 LOG_UPDATES = False\n\
                 LOG_CREATES = True\n",
                storage = storage.display(),
                whisper = whisper.display(),
                root = root.display(),
            ),
        )
        .unwrap();
        // Ten-second points kept for an hour.
        std::fs::write(
            root.join("carbon/storage-schemas.conf"),
            "[all]\npattern = .*\nretentions = 10s:1h\n",
        )
        .unwrap();
        let path = |p: PathBuf| format!("{:?}", p.display().to_string());
        std::fs::write(
            root.join("web/flotilla_graphite_settings.py"),
            format!(
                "SECRET_KEY = 'flotilla-graphite-test'\n\
                 STORAGE_DIR = {storage}\n\
                 WHISPER_DIR = {whisper}\n\
                 CERES_DIR = {ceres}\n\
                 RRD_DIR = {rrd}\n\
                 INDEX_FILE = {index}\n\
                 LOG_DIR = {log}\n\
                 CONF_DIR = {conf}\n\
                 LOG_ROTATION = False\n\
                 LOG_FILE_INFO = LOG_FILE_EXCEPTION = LOG_FILE_CACHE = LOG_FILE_RENDERING = '-'\n\
                 CARBONLINK_HOSTS = ['127.0.0.1:{cache_port}']\n\
                 DATABASES = {{'default': {{'NAME': {db}, 'ENGINE': 'django.db.backends.sqlite3'}}}}\n",
                storage = path(storage.clone()),
                whisper = path(whisper.clone()),
                ceres = path(storage.join("ceres")),
                rrd = path(storage.join("rrd")),
                index = path(storage.join("index")),
                log = path(root.join("log")),
                conf = path(root.join("web")),
                db = path(root.join("graphite.db")),
            ),
        )
        .unwrap();

        let carbon_conf = root.join("carbon/carbon.conf");
        let pidfile = root.join("carbon-cache.pid");
        let carbon = Process::spawn(
            "carbon-cache",
            carbon_cache,
            |c| {
                c.arg(format!("--config={}", carbon_conf.display()))
                    .arg(format!("--pidfile={}", pidfile.display()))
                    .args(["--nodaemon", "--debug", "start"])
                    .env_remove("PYTHONPATH")
                    .env_remove("PYTHONHOME")
                    .env("PYTHONDONTWRITEBYTECODE", "1");
            },
            root.join("carbon.log"),
        );
        let web_dir = root.join("web");
        let web = Process::spawn(
            "graphite-web",
            manage,
            |c| {
                c.args(["runserver", "--noreload", &format!("127.0.0.1:{web_port}")])
                    .current_dir(&web_dir)
                    .env("PYTHONPATH", &web_dir)
                    .env_remove("PYTHONHOME")
                    .env("PYTHONDONTWRITEBYTECODE", "1")
                    .env("DJANGO_SETTINGS_MODULE", "graphite.settings")
                    .env("GRAPHITE_SETTINGS_MODULE", "flotilla_graphite_settings");
            },
            root.join("web.log"),
        );
        Graphite {
            carbon,
            web,
            line_port,
            address: format!("http://127.0.0.1:{web_port}"),
            _dir: dir,
        }
    }

    /// Waits until carbon accepts connections and graphite-web renders an empty answer.
    async fn ready(&mut self) {
        let probe = reqwest::Client::new();
        let render = format!("{}/render?format=json", self.address);
        let line = format!("127.0.0.1:{}", self.line_port);
        poll_until(STARTUP, "carbon-cache and graphite-web", || {
            self.carbon.assert_running();
            self.web.assert_running();
            let (probe, render, line) = (probe.clone(), render.clone(), line.clone());
            async move {
                tokio::net::TcpStream::connect(&line).await.ok()?;
                let response = probe.get(&render).send().await.ok()?;
                (response.status().is_success() && response.text().await.ok()? == "[]")
                    .then_some(())
            }
        })
        .await;
    }

    /// Sends `(path, value, timestamp)` points through carbon's plaintext protocol.
    async fn feed(&self, points: &[(&str, f64, i64)]) {
        let mut text = String::new();
        for (path, value, timestamp) in points {
            text.push_str(&format!("{path} {value} {timestamp}\n"));
        }
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.line_port))
            .await
            .unwrap();
        stream.write_all(text.as_bytes()).await.unwrap();
        stream.shutdown().await.unwrap();
    }
}

/// carbon-cache and graphite-manage, when both are installed.
fn graphite_tools() -> Option<(PathBuf, PathBuf)> {
    Some((on_path("carbon-cache")?, on_path("graphite-manage")?))
}

fn graphite(address: &str, query: &str) -> MeasureRequest {
    request(json!({"graphite": {"address": address, "query": query}}))
}

fn value(outcome: Outcome) -> (MetricResult, BTreeMap<String, String>) {
    match outcome {
        Outcome::Value { result, metadata } => (result, metadata),
        other => panic!("expected a Value, got {other:?}"),
    }
}

fn error(outcome: Outcome) -> String {
    match outcome {
        Outcome::Error(message) => message,
        other => panic!("expected an Error, got {other:?}"),
    }
}

/// Runs a one-metric template to completion through the core's run machine (real
/// measurements, virtual schedule starting at the wall clock).
async fn run_template(
    providers: &flotilla_providers::Providers,
    address: &str,
    query: &str,
    success: &str,
) -> flotilla_core::analysis::run::Run {
    let template: flotilla_core::spec::analysis::AnalysisTemplateSpec =
        serde_json::from_value(json!({
            "metrics": [{
                "name": "canary", "interval": "10s", "count": 2,
                "successCondition": success,
                "provider": {"graphite": {"address": address, "query": query}}
            }]
        }))
        .unwrap();
    let plan = flotilla_core::analysis::plan::resolve(&template, &BTreeMap::new()).unwrap();
    let mut now = common::now_ms();
    let mut run = flotilla_core::analysis::run::Run::new(&plan, now);
    for _ in 0..10 {
        for request in run.poll_due(&plan, now) {
            let outcome = providers.measure(&request).await;
            run.handle_outcome(&plan, request.metric_index, now, outcome);
        }
        run.assess(&plan, now);
        if run.is_completed() {
            break;
        }
        now = run
            .next_due(&plan)
            .expect("a running run has a next measurement");
    }
    assert!(run.is_completed(), "{run:#?}");
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphite_measurements_against_a_real_graphite() {
    let Some((carbon_cache, manage)) = graphite_tools() else {
        eprintln!(
            "SKIPPED graphite_measurements_against_a_real_graphite: `carbon-cache` or \
             `graphite-manage` is not on PATH. Install them with: apt-get install -y \
             --no-install-recommends graphite-carbon graphite-web"
        );
        return;
    };
    let started = Instant::now();
    let providers = common::providers();
    let mut server = Graphite::start(&carbon_cache, &manage);
    server.ready().await;
    let ready_after = started.elapsed();
    let address = server.address.clone();

    // Two request counters and an error counter, at two ten-second slots a minute ago.
    let now_s = common::now_ms() / 1000;
    let base = now_s - now_s % 10;
    let (early, late) = (base - 60, base - 40);
    server
        .feed(&[
            ("flotilla.web.a.count", 6.0, early),
            ("flotilla.web.b.count", 4.0, early),
            ("flotilla.web.a.count", 2.0, late),
            ("flotilla.web.b.count", 3.0, late),
            ("flotilla.web.errors", 40.0, early),
            ("flotilla.web.errors", 60.0, late),
        ])
        .await;
    let sum = "target=sumSeries(flotilla.web.*.count)&from=-2min";
    poll_until(STARTUP, "the fed points in render", || {
        let request = graphite(&address, sum);
        let providers = providers.clone();
        async move {
            match providers.measure(&request).await {
                Outcome::Value {
                    result: MetricResult::Vector(values),
                    ..
                } if values.len() == 2 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    let data_after = started.elapsed();

    // The sum over both counters: nulls (the empty slots of the window) skipped, Argo's value.
    let (result, metadata) = value(providers.measure(&graphite(&address, sum)).await);
    assert_eq!(result, MetricResult::Vector(vec![10.0, 5.0]));
    assert_eq!(metadata["value"], "[10.000000,5.000000]");
    assert_eq!(metadata["query"], sum);
    assert!(
        !metadata.contains_key("now"),
        "a live measurement leaves now to Graphite"
    );

    // Whitespace anywhere in the template's query is removed before the request.
    let spaced = "target = sumSeries( flotilla.web.*.count )\n  & from = -2min\n";
    let (result, metadata) = value(providers.measure(&graphite(&address, spaced)).await);
    assert_eq!(result, MetricResult::Vector(vec![10.0, 5.0]));
    assert_eq!(metadata["query"], sum);

    // A wildcard without an aggregate answers two series; Argo reads the first (sorted by name).
    let (result, _) = value(
        providers
            .measure(&graphite(
                &address,
                "target=flotilla.web.*.count&from=-2min",
            ))
            .await,
    );
    assert_eq!(result, MetricResult::Vector(vec![6.0, 2.0]));

    // A series whose points are all outside the window: only nulls, so an empty list (Argo
    // evaluates it), not "no values found".
    let (result, metadata) = value(
        providers
            .measure(&graphite(&address, "target=flotilla.web.errors&from=-15s"))
            .await,
    );
    assert_eq!(result, MetricResult::Vector(vec![]));
    assert_eq!(metadata["value"], "[]");

    // A backtest instant between the two slots: Graphite's now is pinned, so the window
    // [-2min, now] holds the early slot only.
    let mut past = graphite(&address, sum);
    past.at = (base - 50) * 1000;
    let (result, metadata) = value(providers.measure(&past).await);
    assert_eq!(result, MetricResult::Vector(vec![10.0]));
    assert_eq!(metadata["now"], (base - 50).to_string());

    // A target that matches nothing: Graphite answers [], an Error naming provider and address.
    let message = error(
        providers
            .measure(&graphite(
                &address,
                "target=flotilla.nothing.here&from=-2min",
            ))
            .await,
    );
    assert_eq!(
        message,
        format!("graphite: GET {address}/render: no values found")
    );

    // An unknown function: Graphite's 400, its body quoted.
    let message = error(
        providers
            .measure(&graphite(
                &address,
                "target=noSuchFunction(flotilla.web.*.count)&from=-2min",
            ))
            .await,
    );
    assert!(
        message.starts_with(&format!(
            "graphite: GET {address}/render: error response (HTTP 400 Bad Request): "
        )),
        "{message}"
    );
    assert!(
        message.contains("unknown function: noSuchFunction"),
        "{message}"
    );

    // Whole runs through the core: the request sum stays under 20 (Successful), the error
    // counter does not (Failed).
    let pass = run_template(&providers, &address, sum, "all(result, {# <= 20})").await;
    assert_eq!(pass.phase, AnalysisPhase::Successful, "{pass:#?}");
    assert_eq!(pass.metrics[0].successful, 2, "{pass:#?}");
    let recorded = &pass.metrics[0].measurements[0];
    assert_eq!(recorded.metadata["value"], "[10.000000,5.000000]");
    let errors = "target=flotilla.web.errors&from=-2min";
    let fail = run_template(&providers, &address, errors, "all(result, {# <= 20})").await;
    assert_eq!(fail.phase, AnalysisPhase::Failed, "{fail:#?}");
    assert_eq!(
        fail.metrics[0].measurements[0].metadata["value"],
        "[40.000000,60.000000]"
    );

    eprintln!(
        "graphite ready after {ready_after:?}, data visible after {data_after:?}, done after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphite_error_answers_and_the_request_as_sent() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let server = serve(move |received| {
        log.lock().unwrap().push(received.path.clone());
        async move {
            if received.path.contains("broken") {
                Reply::text(500, "carbonlink: connection refused\n")
            } else if received.path.contains("html") {
                Reply::text(200, "<html>proxy login</html>")
            } else {
                Reply::json(
                    200,
                    json!([{"target": "x", "datapoints": [[null, 1], ["2.5", "2"], [7, 3.0]]}]),
                )
            }
        }
    })
    .await;
    let address = format!("http://user:s3cret@{server}/graphite/");
    let shown = format!("http://user:xxxxx@{server}/graphite/render");
    let providers = common::providers();

    let (result, metadata) = value(
        providers
            .measure(&graphite(&address, " target=alias(x.y,'a b')&from=-5min "))
            .await,
    );
    assert_eq!(result, MetricResult::Vector(vec![2.5, 7.0]));
    assert_eq!(metadata["value"], "[2.500000,7.000000]");
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        "/graphite/render?format=json&from=-5min&target=alias%28x.y%2C%27ab%27%29"
    );

    let message = error(
        providers
            .measure(&graphite(&address, "target=broken.series"))
            .await,
    );
    assert_eq!(
        message,
        format!(
            "graphite: GET {shown}: error response (HTTP 500 Internal Server Error): carbonlink: \
             connection refused"
        )
    );
    let message = error(providers.measure(&graphite(&address, "target=html")).await);
    assert!(
        message.starts_with(&format!(
            "graphite: GET {shown}: the response is not Graphite's JSON"
        )),
        "{message}"
    );
    let message = error(providers.measure(&graphite(&address, "target=a;b")).await);
    assert!(
        message.contains("semicolon") && message.contains(&shown),
        "{message}"
    );
    let message = error(providers.measure(&graphite(&address, "  ")).await);
    assert_eq!(
        message,
        format!("graphite: GET {shown}: the metric has no query")
    );
    let requests = seen.lock().unwrap().len();
    assert_eq!(requests, 3, "refused queries are never sent");

    let closed = format!("http://127.0.0.1:{}", common::closed_port());
    let message = error(providers.measure(&graphite(&closed, "target=x")).await);
    assert!(
        message.starts_with(&format!("graphite: GET {closed}/render: ")),
        "{message}"
    );
    let message = error(providers.measure(&graphite("", "target=x")).await);
    assert_eq!(message, "graphite: address is not configured");
}
