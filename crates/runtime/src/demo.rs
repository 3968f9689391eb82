//! The demo fleet of seed 000 as data: four clusters in three waves, each with its own
//! dependency latency and p95 objective, the agents' configurations and the manifests the
//! controller runs, and the one token the agents' control APIs and the daemon share. Shared by
//! `flotilla demo` and the end-to-end tests.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::controller::record::FleetView;

/// The stories the demo tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scenario {
    /// The new version's extra dependency calls hurt only the cluster far from the database
    /// (prod-us-east): it is rolled back alone, the clusters already validated keep it.
    #[default]
    RegionalRegression,
    /// A good release: every cluster promoted, wave after wave.
    Healthy,
    /// The new version fails everywhere: caught in wave 1, nothing beyond it is touched.
    GlobalRegression,
    /// A good release, judged on each cluster's own Prometheus; prod-us-east's Prometheus is
    /// down as its canary's steps end: its promotion waits for current evidence, and goes on
    /// once the Prometheus answers again.
    MetricsOutage,
}

/// One cluster of seed 000's layout.
#[derive(Debug)]
pub struct Site {
    /// The cluster.
    pub name: &'static str,
    /// Its region.
    pub region: &'static str,
    /// Its wave.
    pub wave: u32,
    /// Latency of one call to the database from this cluster (ms).
    pub dependency_ms: u32,
    /// The p95 this cluster is held to (seconds): its own, not a global threshold.
    pub max_p95: &'static str,
}

/// Seed 000's clusters: prod-us-east sits far from the database.
pub const SITES: [Site; 4] = [
    Site {
        name: "canary-eu-west",
        region: "eu-west",
        wave: 1,
        dependency_ms: 4,
        max_p95: "0.12",
    },
    Site {
        name: "prod-eu-west",
        region: "eu-west",
        wave: 2,
        dependency_ms: 4,
        max_p95: "0.12",
    },
    Site {
        name: "prod-us-east",
        region: "us-east",
        wave: 3,
        dependency_ms: 45,
        max_p95: "0.20",
    },
    Site {
        name: "prod-ap-south",
        region: "ap-south",
        wave: 3,
        dependency_ms: 12,
        max_p95: "0.16",
    },
];

/// The version every cluster runs at first.
pub const OLD: &str = "1.8.3";
/// The version the demo releases.
pub const NEW: &str = "1.9.0";

fn seconds(d: f64, speed: f64) -> String {
    format!("{}ms", ((d * 1000.0) / speed).round().max(100.0) as u64)
}

/// The file, in the demo's directory, holding the token of every agent's control API: each
/// agent's `control.tokenFile` and the daemon's `agentTokenFile`.
pub const AGENT_TOKEN_FILE: &str = "agents.token";

/// Writes a new random token to `dir/agents.token` (mode 0600) and returns it.
pub fn write_agent_token(dir: &Path) -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let path = agent_token_path(dir);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(format!("{token}\n").as_bytes())?;
    Ok(token)
}

/// `dir/agents.token`.
pub fn agent_token_path(dir: &Path) -> PathBuf {
    dir.join(AGENT_TOKEN_FILE)
}

/// The token [`write_agent_token`] wrote in `dir`.
pub fn read_agent_token(dir: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(agent_token_path(dir))?
        .trim()
        .to_owned())
}

/// One agent's configuration: the demo service as its workload (one template for every
/// version; the story's new-version behaviour comes from `--profile`), both subsets on the old
/// version, the router and control API on free loopback ports, the control API's token in
/// [`AGENT_TOKEN_FILE`] next to the configuration.
pub fn agent_config(
    site: &Site,
    scenario: Scenario,
    exe: &Path,
    seed: u64,
    base_error_rate: f64,
) -> String {
    let profile = match scenario {
        Scenario::Healthy | Scenario::MetricsOutage => format!("{NEW}:calls=1"),
        Scenario::RegionalRegression => format!("{NEW}:calls=6"),
        Scenario::GlobalRegression => format!("{NEW}:error-rate=0.12"),
    };
    format!(
        r#"cluster: {name}
router: {{listen: "127.0.0.1:0"}}
control: {{listen: "127.0.0.1:0", tokenFile: {AGENT_TOKEN_FILE}}}
seed: {seed}
workload:
  command: ["{exe}", demo-app, --version, "{{{{version}}}}", --port, "{{{{port}}}}",
            --base-latency-ms, "15,35", --error-rate, "{base_error_rate}",
            --dependency-latency-ms, "{dep}", --dependency-calls, "1", --profile, "{profile}"]
  readiness: {{path: /healthz, periodMs: 200, timeoutMs: 1000, failureThreshold: 2}}
  terminationGracePeriodSeconds: 5
  drainDelayMs: 300
subsets:
  stable: {{version: "{OLD}", replicas: 2}}
  canary: {{version: "{OLD}", replicas: 0}}
"#,
        name = site.name,
        exe = exe.display(),
        dep = site.dependency_ms,
    )
}

/// The manifests: seed 000's Fleet (the agents' control APIs), the FleetRollout (three waves,
/// each cluster held to its own p95), the Rollout and two builtin-metric templates; pauses,
/// bake and intervals divided by `speed`.
pub fn manifests(controls: &[String], speed: f64) -> String {
    let clusters: String = SITES
        .iter()
        .zip(controls)
        .map(|(s, control)| {
            format!(
                "    - {{name: {}, region: {}, endpoint: {{agent: \"{control}\"}}}}\n",
                s.name, s.region
            )
        })
        .collect();
    let waves: String = SITES
        .iter()
        .map(|s| format!("      - {{cluster: {}, wave: {}}}\n", s.name, s.wave))
        .collect();
    let overrides: String = SITES
        .iter()
        .map(|s| {
            format!(
                "    - cluster: {}\n      args: [{{name: max-p95, value: \"{}\"}}]\n",
                s.name, s.max_p95
            )
        })
        .collect();
    let pause = seconds(15.0, speed);
    let interval = seconds(5.0, speed);
    let bake = seconds(5.0, speed);
    format!(
        r#"apiVersion: flotilla.dev/v1alpha1
kind: Fleet
metadata: {{name: payments}}
spec:
  clusters:
{clusters}---
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {{name: payment-api}}
spec:
  fleet: payments
  rollout: payment-api
  waves:
    list:
{waves}  bakeTime: {bake}
  clusterOverrides:
{overrides}  failurePolicy: {{rollbackScope: failed}}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {{name: payment-api}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: payment-api}}}}
  template:
    metadata: {{labels: {{app: payment-api}}}}
    spec:
      containers: [{{name: payment-api, image: "payment-api:{OLD}"}}]
  strategy:
    canary:
      trafficRouting: {{plugins: {{flotilla/agent: {{}}}}}}
      analysis:
        templates: [{{templateName: error-rate}}, {{templateName: latency-p95}}]
      steps:
        - setWeight: 25
        - pause: {{duration: {pause}}}
        - setWeight: 50
        - pause: {{duration: {pause}}}
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: error-rate}}
spec:
  metrics:
    - name: error-rate
      initialDelay: {interval}
      interval: {interval}
      failureLimit: 1
      failureCondition: len(result) > 0 && result[0] >= 0.03
      provider:
        builtin: {{metric: error-rate, subset: canary, window: 20s, minRequests: 30}}
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: latency-p95}}
spec:
  args: [{{name: max-p95}}]
  metrics:
    - name: latency-p95
      initialDelay: {interval}
      interval: {interval}
      failureLimit: 1
      failureCondition: len(result) > 0 && result[0] > {{{{args.max-p95}}}}
      provider:
        builtin: {{metric: latency, quantile: 0.95, subset: canary, window: 20s, minRequests: 30}}
"#
    )
}

/// The demo's manifests for `scenario`: for [`Scenario::MetricsOutage`], each cluster's metrics
/// come from its own Prometheus (`prometheus[i]`, the Fleet's `metrics.address`), else from the
/// agents (`builtin`).
pub fn manifests_for(
    scenario: Scenario,
    controls: &[String],
    prometheus: &[String],
    speed: f64,
) -> String {
    let builtin = manifests(controls, speed);
    if scenario != Scenario::MetricsOutage {
        return builtin;
    }
    let mut text = builtin;
    for (control, address) in controls.iter().zip(prometheus) {
        text = text.replace(
            &format!("endpoint: {{agent: \"{control}\"}}}}"),
            &format!("endpoint: {{agent: \"{control}\"}}, metrics: {{address: \"{address}\"}}}}"),
        );
    }
    let templates = text
        .find("---\napiVersion: argoproj.io/v1alpha1\nkind: AnalysisTemplate")
        .expect("the manifests end with the templates");
    text.truncate(templates);
    text.push_str(&prometheus_templates(speed));
    text
}

/// The analysis templates of [`Scenario::MetricsOutage`]: the same judgement as the builtin
/// ones, as PromQL over the agent's `/metrics` scraped by the cluster's own Prometheus
/// (`{{args.metrics-address}}` and `{{args.cluster}}` are injected per cluster). A window
/// without canary traffic is an empty result, which the condition cannot read: an Error, not a
/// pass without evidence. The templates tolerate 30 consecutive errors (a Prometheus restart),
/// and a measurement is current for its interval plus the 5 s timeout.
fn prometheus_templates(speed: f64) -> String {
    let interval = seconds(5.0, speed);
    let selector = r#"cluster="{{args.cluster}}",subset="canary""#;
    format!(
        r#"---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: error-rate}}
spec:
  args: [{{name: metrics-address}}, {{name: cluster}}]
  metrics:
    - name: error-rate
      initialDelay: {interval}
      interval: {interval}
      failureLimit: 1
      consecutiveErrorLimit: 30
      successCondition: result[0] < 0.03
      provider:
        prometheus:
          address: "{{{{args.metrics-address}}}}"
          timeout: 5
          query: '(sum(increase(http_requests_total{{{selector},code=~"5.."}}[20s])) or vector(0)) / (sum(increase(http_requests_total{{{selector}}}[20s])) > 0)'
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: latency-p95}}
spec:
  args: [{{name: max-p95}}, {{name: metrics-address}}, {{name: cluster}}]
  metrics:
    - name: latency-p95
      initialDelay: {interval}
      interval: {interval}
      failureLimit: 1
      consecutiveErrorLimit: 30
      successCondition: result[0] <= {{{{args.max-p95}}}}
      provider:
        prometheus:
          address: "{{{{args.metrics-address}}}}"
          timeout: 5
          query: 'histogram_quantile(0.95, sum by (le) (rate(http_request_duration_seconds_bucket{{{selector}}}[20s]))) > 0'
"#
    )
}

/// The configuration of cluster `site`'s Prometheus: it scrapes the agent's `/metrics` (at
/// `control`, host:port) every second.
pub fn prometheus_config(control: &str) -> String {
    format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}}\n\
         scrape_configs:\n  - job_name: agent\n    static_configs: [{{targets: [\"{control}\"]}}]\n"
    )
}

/// One cluster's Prometheus (Debian's `prometheus` on PATH) for [`Scenario::MetricsOutage`]:
/// it scrapes the agent's `/metrics` every second on a fixed loopback port, with its data kept
/// across a restart (as a real one's is). Killed and reaped on drop; started through `setpriv
/// --pdeathsig KILL` when available, so it dies with its parent — the parent *thread*: start it
/// from a thread that lives as long as it should (never a pool thread that may exit idle).
pub struct Prometheus {
    dir: PathBuf,
    port: u16,
    child: Option<std::process::Child>,
}

impl Prometheus {
    /// Prepares one in `dir` for the agent whose control API is `control` (`http://host:port`
    /// or `host:port`), on a free port, and starts it.
    pub fn start_new(dir: PathBuf, control: &str) -> std::io::Result<Prometheus> {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("prometheus.yml"),
            prometheus_config(control.trim_start_matches("http://")),
        )?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut server = Prometheus {
            dir,
            port,
            child: None,
        };
        server.start()?;
        Ok(server)
    }

    /// Its HTTP address.
    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts it (again) and waits until it answers `/-/ready`, at most 30 s.
    pub fn start(&mut self) -> std::io::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("prometheus.log"))?;
        let setpriv = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("setpriv"))
                .find(|p| p.is_file())
        });
        let mut command = match setpriv {
            Some(setpriv) => {
                let mut c = std::process::Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--", "prometheus"]);
                c
            }
            None => std::process::Command::new("prometheus"),
        };
        let child = command
            .arg(format!(
                "--config.file={}",
                self.dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if self.ready() {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(std::process::Child::try_wait) {
                return Err(std::io::Error::other(format!(
                    "prometheus exited ({status}):\n{}",
                    self.log()
                )));
            }
            if std::time::Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "prometheus on port {} was not ready within 30 s:\n{}",
                    self.port,
                    self.log()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Whether it answers `GET /-/ready` with 200 (one plain HTTP/1.0 exchange on loopback).
    fn ready(&self) -> bool {
        use std::io::Read as _;
        let exchange = || -> std::io::Result<bool> {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
            stream.set_read_timeout(Some(std::time::Duration::from_secs(1)))?;
            stream.write_all(b"GET /-/ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut head = [0u8; 12];
            stream.read_exact(&mut head)?;
            Ok(head.ends_with(b" 200"))
        };
        exchange().unwrap_or(false)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// Stops it (SIGKILL: an outage, not a shutdown) and reaps it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fleet status as `flotilla simulate` names the cluster outcome.
pub fn outcome_of(status: &str) -> &'static str {
    match status {
        "Validated" => "Promoted",
        "RolledBack" => "RolledBack",
        "Paused" | "Progressing" => "Paused",
        "Held" => "Held",
        "Skipped" => "Skipped",
        _ => "NotStarted",
    }
}

/// Whether the scenario's expected outcome was reached, and what was expected.
pub fn judge(scenario: Scenario, view: &FleetView) -> (bool, &'static str) {
    let outcome = |name: &str| {
        view.waves
            .iter()
            .flat_map(|w| w.clusters.iter())
            .find(|c| c.name == name)
            .map(|c| outcome_of(&c.status))
            .unwrap_or("NotStarted")
    };
    match scenario {
        Scenario::Healthy => (
            view.phase == "Completed" && SITES.iter().all(|s| outcome(s.name) == "Promoted"),
            "Completed: every cluster promoted",
        ),
        // The demo also checks that prod-us-east waited for evidence through the outage.
        Scenario::MetricsOutage => (
            view.phase == "Completed" && SITES.iter().all(|s| outcome(s.name) == "Promoted"),
            "Completed: every cluster promoted, prod-us-east only after its promotion waited for evidence through its Prometheus outage",
        ),
        Scenario::RegionalRegression => (
            view.phase == "Halted"
                && outcome("prod-us-east") == "RolledBack"
                && outcome("canary-eu-west") == "Promoted"
                && outcome("prod-eu-west") == "Promoted"
                && matches!(outcome("prod-ap-south"), "Promoted" | "Paused"),
            "Halted: prod-us-east rolled back alone; the eu-west clusters keep the new version; prod-ap-south promoted or paused",
        ),
        Scenario::GlobalRegression => (
            view.phase == "Halted"
                && outcome("canary-eu-west") == "RolledBack"
                && ["prod-eu-west", "prod-us-east", "prod-ap-south"]
                    .iter()
                    .all(|c| outcome(c) == "Held"),
            "Halted in wave 1: canary-eu-west rolled back, every other cluster held",
        ),
    }
}

/// Whether the fleet reached a final phase and nothing is still moving toward it.
pub fn settled(view: &FleetView) -> bool {
    matches!(
        view.phase.as_str(),
        "Completed" | "CompletedWithSkips" | "Halted" | "Aborted"
    ) && view.waves.iter().flat_map(|w| w.clusters.iter()).all(|c| {
        c.status != "Progressing"
            && (c.status != "RolledBack" || c.weights.is_some_and(|(canary, _)| canary == 0))
    })
}
