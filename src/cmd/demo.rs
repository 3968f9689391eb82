//! `flotilla demo`: seed 000's story on one machine. Four local clusters (agents with process
//! workloads of the demo service, each with its own dependency latency), load on each, the
//! controller daemon, and a new version rolled across the fleet in three waves while the live
//! view shows it. Ends with a summary and exits 0 only when the scenario's expected outcome was
//! reached. Every process it starts is stopped at the end, also on Ctrl-C.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use flotilla_agent::AgentClient;
use flotilla_agent::control::WindowQuery;
use flotilla_agent::loadgen::{self, Target};
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::{FleetView, OperatorCommand};
use serde::Serialize;

use super::view;

/// The stories the demo tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Scenario {
    /// The new version's extra dependency calls hurt only the cluster far from the database
    /// (prod-us-east): it is rolled back alone, the clusters already validated keep it.
    #[default]
    RegionalRegression,
    /// A good release: every cluster promoted, wave after wave.
    Healthy,
    /// The new version fails everywhere: caught in wave 1, nothing beyond it is touched.
    GlobalRegression,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum DemoOutput {
    /// The live view, then the summary.
    #[default]
    Text,
    /// Only the summary as JSON on stdout (the live view goes to stderr when it is a terminal).
    Json,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Which story.
    #[arg(long, value_enum, default_value_t)]
    scenario: Scenario,
    /// Compress pauses, bake times and analysis intervals by this factor (1 to 10).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    output: DemoOutput,
    /// Requests per second sent to each cluster.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
}

/// One cluster of seed 000's layout.
struct Site {
    name: &'static str,
    region: &'static str,
    wave: u32,
    /// Latency of one call to the database from this cluster (ms).
    dependency_ms: u32,
    /// The p95 this cluster is held to (seconds): its own, not a global threshold.
    max_p95: &'static str,
}

const SITES: [Site; 4] = [
    Site { name: "canary-eu-west", region: "eu-west", wave: 1, dependency_ms: 4, max_p95: "0.12" },
    Site { name: "prod-eu-west", region: "eu-west", wave: 2, dependency_ms: 4, max_p95: "0.12" },
    Site { name: "prod-us-east", region: "us-east", wave: 3, dependency_ms: 45, max_p95: "0.20" },
    Site { name: "prod-ap-south", region: "ap-south", wave: 3, dependency_ms: 12, max_p95: "0.16" },
];

const OLD: &str = "1.8.3";
const NEW: &str = "1.9.0";

/// The summary: the same cluster fields as `flotilla simulate`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    scenario: String,
    outcome: String,
    message: String,
    expected: String,
    passed: bool,
    seconds: f64,
    clusters: Vec<ClusterSummary>,
    load: LoadSummary,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterSummary {
    name: String,
    wave: usize,
    outcome: String,
    started_at: Option<f64>,
    decided_at: Option<f64>,
    reason: String,
    failure: Option<FailureSummary>,
    /// The new version's requests answered 5xx.
    bad_requests: u64,
    /// Requests the new version served.
    new_version_requests: u64,
    /// The latest value of each metric.
    metrics: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
struct FailureSummary {
    metric: String,
    value: String,
    message: String,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct LoadSummary {
    sent: u64,
    completed: u64,
    /// Requests with no response at all (connection reset, timeout): what a data-plane change
    /// must never cause.
    failed: u64,
    status_counts: BTreeMap<u16, u64>,
}

/// The processes the demo started; stopped on drop (SIGTERM, then SIGKILL).
struct Processes {
    children: Vec<(String, Child)>,
    dir: PathBuf,
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in self.children.iter().rev() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for (_, child) in self.children.iter_mut() {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Processes {
    /// Starts `flotilla ARGS…` (through `setpriv --pdeathsig KILL` when available, so that it
    /// dies with the demo even on SIGKILL) and returns its first stdout line.
    fn start(&mut self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        let exe = std::env::current_exe().context("cannot find the flotilla executable")?;
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let mut command = match which("setpriv") {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let mut child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        self.children.push((name.to_owned(), child));
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        // Keep draining, so that the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        if line.trim().is_empty() {
            let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                .unwrap_or_default();
            bail!("{name} did not start:\n{log}");
        }
        Ok(line)
    }
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn seconds(d: f64, speed: f64) -> String {
    format!("{}ms", ((d * 1000.0) / speed).round().max(100.0) as u64)
}

fn agent_config(site: &Site, scenario: Scenario, exe: &Path, seed: u64) -> String {
    let profile = match scenario {
        Scenario::Healthy => format!("{NEW}:calls=1"),
        Scenario::RegionalRegression => format!("{NEW}:calls=6"),
        Scenario::GlobalRegression => format!("{NEW}:error-rate=0.12"),
    };
    format!(
        r#"cluster: {name}
router: {{listen: "127.0.0.1:0"}}
control: {{listen: "127.0.0.1:0"}}
seed: {seed}
workload:
  command: ["{exe}", demo-app, --version, "{{{{version}}}}", --port, "{{{{port}}}}",
            --base-latency-ms, "15,35", --error-rate, "0.002",
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

fn manifests(agents: &[(String, String)], speed: f64) -> String {
    let clusters: String = SITES
        .iter()
        .zip(agents)
        .map(|(s, (_, control))| {
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

fn outcome_of(status: &str) -> &'static str {
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
fn judge(scenario: Scenario, view: &FleetView) -> (bool, &'static str) {
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

fn settled(view: &FleetView) -> bool {
    matches!(view.phase.as_str(), "Completed" | "Halted" | "Aborted")
        && view.waves.iter().flat_map(|w| w.clusters.iter()).all(|c| {
            c.status != "Progressing"
                && (c.status != "RolledBack" || c.weights.is_some_and(|(canary, _)| canary == 0))
        })
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if !(1.0..=10.0).contains(&args.speed) {
        bail!("--speed must be between 1 and 10, not {}", args.speed);
    }
    if !(1.0..=500.0).contains(&args.rate) {
        bail!("--rate must be between 1 and 500 requests/s, not {}", args.rate);
    }
    let dir = std::env::temp_dir().join(format!("flotilla-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut processes = Processes {
        children: Vec::new(),
        dir: dir.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The body runs on this (main) thread, so the children's parent-death signal follows the
    // process's lifetime.
    let result = runtime.block_on(async {
        tokio::select! {
            r = demo(&args, &mut processes) => r,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\ninterrupted: stopping every process the demo started");
                Ok(ExitCode::from(130))
            }
        }
    });
    drop(processes);
    result
}

async fn demo(args: &DemoArgs, processes: &mut Processes) -> anyhow::Result<ExitCode> {
    let json = args.output == DemoOutput::Json;
    let live_terminal = if json {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let say = |text: &str| {
        if json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    let exe = std::env::current_exe()?;
    say(&format!(
        "flotilla demo: scenario {:?}, 4 clusters in 3 waves, {} requests/s each",
        args.scenario, args.rate
    ));
    // The clusters.
    let mut agents = Vec::new();
    for (i, site) in SITES.iter().enumerate() {
        let path = processes.dir.join(format!("{}.yaml", site.name));
        std::fs::write(&path, agent_config(site, args.scenario, &exe, 42 + i as u64))?;
        let line = processes.start(site.name, &["agent", "--config", &path.display().to_string()])?;
        let event: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("unexpected output from agent {}: {line}", site.name))?;
        let router = format!("http://{}", event["router"].as_str().unwrap_or_default());
        let control = format!("http://{}", event["control"].as_str().unwrap_or_default());
        agents.push((router, control));
    }
    // The controller.
    let manifests_path = processes.dir.join("manifests.yaml");
    std::fs::write(&manifests_path, manifests(&agents, args.speed))?;
    let config_path = processes.dir.join("serve.yaml");
    let mut config = std::fs::File::create(&config_path)?;
    writeln!(
        config,
        "listen: \"127.0.0.1:0\"\nstore: state.redb\nmanifests: manifests.yaml\ntick: 500ms"
    )?;
    let line = processes.start("serve", &["serve", "--config", &config_path.display().to_string()])?;
    let event: serde_json::Value =
        serde_json::from_str(&line).with_context(|| format!("unexpected output from serve: {line}"))?;
    let api = format!("http://{}", event["api"].as_str().unwrap_or_default());
    let token = std::fs::read_to_string(processes.dir.join("state.redb.token"))?;
    let client = ApiClient::new(&api, Some(token.trim().to_owned()));
    // Wait for every cluster's stable version to be ready (the first revision settles).
    let started = Instant::now();
    loop {
        let view = client.fleet("payment-api").await?;
        if view.phase == "Completed" {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the fleet did not settle on {OLD} within 60 s:\n{}", view::render(&view));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    say(&format!("every cluster serves {OLD}; putting load on each and releasing {NEW}"));
    // Load, in chunks so that the totals are known at the end.
    let targets: Vec<Target> = agents.iter().map(|(router, _)| Target::new(format!("{router}/pay"))).collect();
    let rate = args.rate;
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let load = tokio::spawn(async move {
        let mut total = LoadSummary::default();
        while !*stop_rx.borrow() {
            match loadgen::run(&targets, rate, Duration::from_secs(5), u64::MAX).await {
                Ok(report) => {
                    total.sent += report.sent;
                    total.completed += report.completed;
                    total.failed += report.failed;
                    for (code, n) in report.status_counts {
                        *total.status_counts.entry(code).or_default() += n;
                    }
                }
                Err(e) => {
                    eprintln!("load generator: {e}");
                    break;
                }
            }
            if stop_rx.has_changed().unwrap_or(true) && *stop_rx.borrow_and_update() {
                break;
            }
        }
        total
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let release = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    client
        .command(
            "payment-api",
            &OperatorCommand::SetImage {
                container: None,
                image: format!("payment-api:{NEW}"),
            },
        )
        .await?;
    let deadline = Instant::now() + Duration::from_secs((600.0 / args.speed) as u64 + 60);
    let mut last = String::new();
    let view = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let view = client.fleet("payment-api").await?;
        if view.revision.is_empty() || view.image != format!("payment-api:{NEW}") {
            continue;
        }
        let text = view::render(&view);
        if text != last {
            if live_terminal {
                let frame = format!("\x1b[H\x1b[2J{text}");
                if json {
                    eprint!("{frame}");
                } else {
                    print!("{frame}");
                }
            } else if !json {
                println!("{text}");
            }
            last = text;
        }
        if settled(&view) {
            break view;
        }
        if Instant::now() > deadline {
            bail!("the rollout did not finish in time:\n{}", view::render(&view));
        }
    };
    // Give the load a last chunk on the final configuration, then stop it.
    let _ = stop_tx.send(true);
    let load = load.await.unwrap_or_default();
    let (passed, expected) = judge(args.scenario, &view);
    let mut clusters = Vec::new();
    for (wave, cluster) in view.waves.iter().flat_map(|w| w.clusters.iter().map(move |c| (w.index, c))) {
        let i = SITES.iter().position(|s| s.name == cluster.name).unwrap_or(0);
        let agent = AgentClient::new(agents[i].1.clone())?;
        let now = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs())
            + 10;
        let from = (release / 1000) as u64;
        let window = |start: u64| WindowQuery {
            start: Some(start),
            end: Some(now),
            ..WindowQuery::default()
        };
        // The canary subset served only the new version during the rollout; the stable subset
        // serves it from the cluster's promotion on.
        let mut served = 0;
        let mut bad = 0;
        if cluster.started_at.is_some() {
            let canary = agent.stats("canary", &window(from)).await?;
            served += canary.requests;
            bad += canary.errors;
            if cluster.status == "Validated"
                && let Some(decided) = cluster.decided_at
            {
                let stable = agent.stats("stable", &window((decided / 1000) as u64 + 10)).await?;
                served += stable.requests;
                bad += stable.errors;
            }
        }
        let since = |t: Option<i64>| t.map(|t| (t - release) as f64 / 1000.0);
        clusters.push(ClusterSummary {
            name: cluster.name.clone(),
            wave,
            outcome: outcome_of(&cluster.status).into(),
            started_at: since(cluster.started_at),
            decided_at: since(cluster.decided_at),
            reason: cluster.reason.clone(),
            failure: cluster.failure.as_ref().map(|f| FailureSummary {
                metric: f.metric.clone(),
                value: f.value.clone(),
                message: f.message.clone(),
            }),
            bad_requests: bad,
            new_version_requests: served,
            metrics: cluster
                .analysis
                .iter()
                .flat_map(|r| r.metrics.iter())
                .filter_map(|m| m.value.clone().map(|v| (m.name.clone(), v)))
                .collect(),
        });
    }
    let summary = Summary {
        scenario: format!("{:?}", args.scenario),
        outcome: view.phase.clone(),
        message: view.message.clone(),
        expected: expected.into(),
        passed,
        seconds: ((std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64
            - release) as f64
            / 1000.0)
            .round(),
        clusters,
        load,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("\n{}", summary_text(&summary));
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn summary_text(s: &Summary) -> String {
    let mut out = format!(
        "Outcome: {} after {} s: {}\nExpected: {} -> {}\n\n{:<16} {:<5} {:<11} {:>8} {:>8} {:>9} {:>6}  WHY\n",
        s.outcome,
        s.seconds,
        s.message,
        s.expected,
        if s.passed { "reached" } else { "NOT reached" },
        "CLUSTER",
        "WAVE",
        "OUTCOME",
        "START s",
        "DECIDE s",
        "NEW REQS",
        "5XX"
    );
    let time = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.0}"));
    for c in &s.clusters {
        let why = match &c.failure {
            Some(f) => format!("{} = {} ({})", f.metric, f.value, f.message),
            None => c.reason.clone(),
        };
        out.push_str(&format!(
            "{:<16} {:<5} {:<11} {:>8} {:>8} {:>9} {:>6}  {}\n",
            c.name,
            c.wave,
            c.outcome,
            time(c.started_at),
            time(c.decided_at),
            c.new_version_requests,
            c.bad_requests,
            why
        ));
        if !c.metrics.is_empty() {
            let values: Vec<String> = c.metrics.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("{:<16} last values: {}\n", "", values.join("  ")));
        }
    }
    out.push_str(&format!(
        "\nLoad: {} requests sent, {} answered, {} without an answer; status codes {:?}\n",
        s.load.sent, s.load.completed, s.load.failed, s.load.status_counts
    ));
    out
}
