//! `flotilla demo`: seed 000's story on one machine. Four local clusters (agents with process
//! workloads of the demo service, each with its own dependency latency), load on each, the
//! controller daemon, and a new version rolled across the fleet in three waves while the live
//! view shows it. Ends with a summary and exits 0 only when the scenario's expected outcome was
//! reached. Every process it starts is stopped at the end, also on Ctrl-C.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use flotilla_agent::loadgen::{self, Target};
use flotilla_agent_backend::AgentClient;
use flotilla_agent_backend::wire::WindowQuery;
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::OperatorCommand;
use serde::Serialize;

use flotilla_runtime::demo::{self, NEW, OLD, SITES, Scenario, judge, outcome_of, settled};

use super::view;

/// The stories the demo tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Story {
    /// The new version's extra dependency calls hurt only the cluster far from the database
    /// (prod-us-east): it is rolled back alone, the clusters already validated keep it.
    #[default]
    RegionalRegression,
    /// A good release: every cluster promoted, wave after wave.
    Healthy,
    /// The new version fails everywhere: caught in wave 1, nothing beyond it is touched.
    GlobalRegression,
    /// A good release judged on each cluster's own Prometheus (Debian's `prometheus`, started
    /// by the demo); prod-us-east's is stopped as its canary's steps end and started again 25 s
    /// later: its promotion waits for current evidence, then completes.
    MetricsOutage,
}

/// The cluster whose Prometheus the metrics-outage story stops.
const OUTAGE_CLUSTER: &str = "prod-us-east";

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
    scenario: Story,
    /// Compress pauses, bake times and analysis intervals by this factor (1 to 10).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    output: DemoOutput,
    /// Requests per second sent to each cluster.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// Drive the demo from a Git repository created at DIR (absent or empty) and left there: a
    /// bare remote `DIR/fleet.git` the daemon reads, and a developer's clone `DIR/work` that
    /// releases by commit; the controller's rollback or pin commit is in `git log` afterwards.
    #[arg(long, value_name = "DIR")]
    gitops: Option<PathBuf>,
    /// After the story, keep every process running (agents, daemon, dashboard) until Ctrl-C,
    /// for a look around.
    #[arg(long)]
    hold: bool,
}

/// The metrics-outage story's outage of one cluster's Prometheus, driven from the live view.
#[derive(Default)]
struct Outage {
    /// When it went down.
    stopped: Option<Instant>,
    /// When it came back (ms since the epoch, the view's clock).
    restarted_at: Option<i64>,
    /// What the cluster said while its promotion waited.
    held_reason: Option<String>,
}

impl Outage {
    /// Stops the Prometheus once the cluster's canary is at its last step, starts it again
    /// 25 s later, and records the cluster's reason while it waits for evidence.
    async fn drive(
        &mut self,
        view: &flotilla_runtime::controller::record::FleetView,
        server: &mut demo::Prometheus,
        say: &impl Fn(&str),
    ) -> anyhow::Result<()> {
        let Some(cluster) = cluster_of(view, OUTAGE_CLUSTER) else {
            return Ok(());
        };
        let last_step = cluster.desired_weight == Some(50) && cluster.status == "Progressing";
        if self.stopped.is_none() && last_step {
            server.stop();
            self.stopped = Some(Instant::now());
            say(&format!(
                "{OUTAGE_CLUSTER}'s Prometheus ({}) is down",
                server.address()
            ));
        }
        if self.restarted_at.is_none()
            && cluster.status == "Paused"
            && cluster.reason.contains("waiting for evidence")
        {
            self.held_reason
                .get_or_insert_with(|| cluster.reason.clone());
        }
        if self.restarted_at.is_none()
            && self
                .stopped
                .is_some_and(|at| at.elapsed() >= Duration::from_secs(25))
        {
            tokio::task::block_in_place(|| server.start()).context("restarting the Prometheus")?;
            self.restarted_at = Some(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_millis() as i64,
            );
            say(&format!(
                "{OUTAGE_CLUSTER}'s Prometheus ({}) is back",
                server.address()
            ));
        }
        Ok(())
    }
}

fn cluster_of<'v>(
    view: &'v flotilla_runtime::controller::record::FleetView,
    name: &str,
) -> Option<&'v flotilla_runtime::controller::record::ClusterView> {
    view.waves
        .iter()
        .flat_map(|w| w.clusters.iter())
        .find(|c| c.name == name)
}

/// Runs git in `dir` as the demo's developer.
fn git(dir: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let developer = flotilla_git::Identity::new("Demo Developer", "developer@flotilla.demo");
    Ok(flotilla_git::cli::git(dir, args, &developer)?)
}

/// Creates the demo's repository at `dir`: the bare remote and the developer's clone holding
/// the fleet under `fleets/payments/`, one commit.
fn create_repository(dir: &std::path::Path, manifests: &str) -> anyhow::Result<()> {
    let work = dir.join("work");
    std::fs::create_dir_all(work.join("fleets/payments"))?;
    std::fs::write(work.join("fleets/payments/manifests.yaml"), manifests)?;
    git(&work, &["init", "-q", "-b", "main"])?;
    git(&work, &["add", "."])?;
    git(
        &work,
        &[
            "commit",
            "-q",
            "-m",
            &format!("payments fleet on payment-api:{OLD}"),
        ],
    )?;
    git(dir, &["init", "-q", "--bare", "-b", "main", "fleet.git"])?;
    git(&work, &["remote", "add", "origin", "../fleet.git"])?;
    git(&work, &["push", "-q", "origin", "main"])?;
    Ok(())
}

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
    /// The metrics-outage story: what the outage's cluster said while its promotion waited for
    /// evidence (absent in the other stories).
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_hold: Option<String>,
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
            let log =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
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

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if !(1.0..=10.0).contains(&args.speed) {
        bail!("--speed must be between 1 and 10, not {}", args.speed);
    }
    if !(1.0..=500.0).contains(&args.rate) {
        bail!(
            "--rate must be between 1 and 500 requests/s, not {}",
            args.rate
        );
    }
    if let Some(dir) = &args.gitops {
        let empty = match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => bail!("--gitops {}: {e}", dir.display()),
        };
        if !empty {
            bail!(
                "--gitops {}: the directory is not empty; give an absent or empty directory (the demo creates its repository there and leaves it)",
                dir.display()
            );
        }
        std::fs::create_dir_all(dir)?;
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
    let scenario = match args.scenario {
        Story::RegionalRegression => Scenario::RegionalRegression,
        Story::Healthy => Scenario::Healthy,
        Story::GlobalRegression => Scenario::GlobalRegression,
        Story::MetricsOutage => Scenario::MetricsOutage,
    };
    if scenario == Scenario::MetricsOutage && which("prometheus").is_none() {
        bail!(
            "the metrics-outage story runs a real Prometheus per cluster: install it (apt-get install -y --no-install-recommends prometheus)"
        );
    }
    say(&format!(
        "flotilla demo: scenario {:?}, 4 clusters in 3 waves, {} requests/s each",
        args.scenario, args.rate
    ));
    // The clusters, sharing one control API token with the daemon.
    demo::write_agent_token(&processes.dir)?;
    let mut agents = Vec::new();
    for (i, site) in SITES.iter().enumerate() {
        let path = processes.dir.join(format!("{}.yaml", site.name));
        std::fs::write(
            &path,
            demo::agent_config(site, scenario, &exe, 42 + i as u64, 0.002),
        )?;
        let line = processes.start(
            site.name,
            &["agent", "--config", &path.display().to_string()],
        )?;
        let event: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("unexpected output from agent {}: {line}", site.name))?;
        let router = format!("http://{}", event["router"].as_str().unwrap_or_default());
        let control = format!("http://{}", event["control"].as_str().unwrap_or_default());
        agents.push((router, control));
    }
    // Each cluster's Prometheus, scraping its agent (the metrics-outage story).
    let mut prometheus: Vec<demo::Prometheus> = Vec::new();
    if scenario == Scenario::MetricsOutage {
        for (site, (_, control)) in SITES.iter().zip(&agents) {
            let dir = processes.dir.join(format!("prometheus-{}", site.name));
            // On this (main) thread, never a pool thread: its parent-death signal follows the
            // thread that started it.
            let server = tokio::task::block_in_place(|| demo::Prometheus::start_new(dir, control))
                .with_context(|| format!("{}'s Prometheus", site.name))?;
            prometheus.push(server);
        }
        say(&format!(
            "each cluster's metrics come from its own Prometheus ({}); {OUTAGE_CLUSTER}'s goes down as its canary's steps end",
            prometheus
                .iter()
                .map(demo::Prometheus::address)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // The controller.
    let manifests_path = processes.dir.join("manifests.yaml");
    let controls: Vec<String> = agents.iter().map(|(_, c)| c.clone()).collect();
    let addresses: Vec<String> = prometheus.iter().map(demo::Prometheus::address).collect();
    let manifests = demo::manifests_for(scenario, &controls, &addresses, args.speed);
    let config_path = processes.dir.join("serve.yaml");
    let mut config = std::fs::File::create(&config_path)?;
    let gitops = match &args.gitops {
        Some(dir) => {
            let dir = std::fs::canonicalize(dir)?;
            create_repository(&dir, &manifests)?;
            say(&format!(
                "the desired state is the Git repository {}/fleet.git (a developer's clone in {}/work)",
                dir.display(),
                dir.display()
            ));
            writeln!(
                config,
                "listen: \"127.0.0.1:0\"\nstore: state.redb\ntick: 500ms\nagentTokenFile: {}\ngit: {{url: \"{}\", branch: main, path: fleets/payments, interval: 1s}}",
                demo::AGENT_TOKEN_FILE,
                dir.join("fleet.git").display()
            )?;
            Some(dir)
        }
        None => {
            std::fs::write(&manifests_path, &manifests)?;
            writeln!(
                config,
                "listen: \"127.0.0.1:0\"\nstore: state.redb\nmanifests: manifests.yaml\ntick: 500ms\nagentTokenFile: {}",
                demo::AGENT_TOKEN_FILE
            )?;
            None
        }
    };
    let line = processes.start(
        "serve",
        &["serve", "--config", &config_path.display().to_string()],
    )?;
    let event: serde_json::Value = serde_json::from_str(&line)
        .with_context(|| format!("unexpected output from serve: {line}"))?;
    let api = format!("http://{}", event["api"].as_str().unwrap_or_default());
    let token_path = processes.dir.join("state.redb.token");
    let token = std::fs::read_to_string(&token_path)?;
    let dashboard = format!("{api}/dashboard/");
    say(&format!(
        "dashboard: {dashboard} (reads are open; actions need the API token in {})",
        token_path.display()
    ));
    let client = ApiClient::new(&api, Some(token.trim().to_owned()));
    // Wait for every cluster's stable version to be ready (the first revision settles).
    let started = Instant::now();
    loop {
        let view = client.fleet("payment-api").await?;
        if view.phase == "Completed" {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "the fleet did not settle on {OLD} within 60 s:\n{}",
                view::render(&view)
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    say(&format!(
        "every cluster serves {OLD}; putting load on each and releasing {NEW}"
    ));
    // Load, in chunks so that the totals are known at the end.
    let targets: Vec<Target> = agents
        .iter()
        .map(|(router, _)| Target::new(format!("{router}/pay")))
        .collect();
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
    match &gitops {
        Some(dir) => {
            // The release is a developer's commit.
            let work = dir.join("work");
            let path = work.join("fleets/payments/manifests.yaml");
            let text = std::fs::read_to_string(&path)?;
            std::fs::write(
                &path,
                text.replace(&format!("payment-api:{OLD}"), &format!("payment-api:{NEW}")),
            )?;
            git(
                &work,
                &["commit", "-q", "-am", &format!("release payment-api {NEW}")],
            )?;
            git(&work, &["push", "-q", "origin", "main"])?;
            client.sync().await?;
        }
        None => {
            client
                .command(
                    "payment-api",
                    &OperatorCommand::SetImage {
                        container: None,
                        image: format!("payment-api:{NEW}"),
                    },
                )
                .await?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs((600.0 / args.speed) as u64 + 60);
    // The metrics-outage story: prod-us-east's Prometheus goes down when its canary reaches
    // its last step and comes back 25 s later; what the cluster said meanwhile.
    let outage_site = SITES.iter().position(|s| s.name == OUTAGE_CLUSTER);
    let mut outage = Outage::default();
    let mut last = String::new();
    let mut last_new: Option<flotilla_runtime::controller::record::FleetView> = None;
    let view = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let view = client.fleet("payment-api").await?;
        if view.revision.is_empty() || view.image != format!("payment-api:{NEW}") {
            // With Git, the durable rollback read back settles the fleet on the old image:
            // the release's outcome is the last view of it.
            if let Some(mut seen) = last_new.take()
                && gitops.is_some()
            {
                // Its last decisions are in the audit log (the view moved on with Git).
                for e in client.history("payment-api").await? {
                    if e.revision != seen.revision {
                        continue;
                    }
                    if e.kind == "fleet"
                        && let Some((_, rest)) = e.message.split_once(": fleet ")
                        && let Some((phase, message)) = rest.split_once(": ")
                    {
                        seen.phase = phase.to_owned();
                        seen.message = message.to_owned();
                    }
                    let status = match e.kind.as_str() {
                        "rollback" => "RolledBack",
                        "hold" => "Held",
                        "validate" => "Validated",
                        "pause" => "Paused",
                        "skip" => "Skipped",
                        "pin" => "Pinned",
                        _ => continue,
                    };
                    if let Some(c) = seen
                        .waves
                        .iter_mut()
                        .flat_map(|w| w.clusters.iter_mut())
                        .find(|c| Some(&c.name) == e.cluster.as_ref())
                    {
                        c.status = status.to_owned();
                        c.reason = e.message.clone();
                    }
                }
                break seen;
            }
            continue;
        }
        last_new = Some(view.clone());
        if let Some(server) = outage_site.and_then(|i| prometheus.get_mut(i)) {
            outage.drive(&view, server, &say).await?;
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
            bail!(
                "the rollout did not finish in time:\n{}",
                view::render(&view)
            );
        }
    };
    // With Git: the controller's durable change, once it is in the repository.
    if let Some(dir) = &gitops {
        let expects_commit = view.phase == "Halted"
            || view
                .waves
                .iter()
                .flat_map(|w| w.clusters.iter())
                .any(|c| c.status == "RolledBack");
        let until = Instant::now() + Duration::from_secs(20);
        while expects_commit && Instant::now() < until {
            let now = client.fleet("payment-api").await?;
            if now.git.as_deref().is_some_and(|g| g.contains("committed")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let work = dir.join("work");
        git(&work, &["pull", "-q", "--no-rebase", "origin", "main"])?;
        let log = git(&work, &["log", "--format=%h %an: %s"])?;
        say(&format!(
            "\nthe repository at {} (git -C {} log):\n{log}",
            dir.display(),
            work.display()
        ));
    }
    // Give the load a last chunk on the final configuration, then stop it.
    let _ = stop_tx.send(true);
    let load = load.await.unwrap_or_default();
    let (mut passed, expected) = judge(scenario, &view);
    if scenario == Scenario::MetricsOutage {
        let held = outage.held_reason.is_some();
        let after = outage.restarted_at.is_some_and(|restart| {
            cluster_of(&view, OUTAGE_CLUSTER)
                .and_then(|c| c.decided_at)
                .is_some_and(|decided| decided >= restart)
        });
        if !held {
            say(&format!(
                "{OUTAGE_CLUSTER} was never seen waiting for evidence during its Prometheus outage"
            ));
        }
        if !after {
            say(&format!(
                "{OUTAGE_CLUSTER} was not decided after its Prometheus came back"
            ));
        }
        if let Some(reason) = &outage.held_reason {
            say(&format!(
                "during the outage {OUTAGE_CLUSTER} said: {reason}"
            ));
        }
        passed &= held && after;
    }
    let mut clusters = Vec::new();
    for (wave, cluster) in view
        .waves
        .iter()
        .flat_map(|w| w.clusters.iter().map(move |c| (w.index, c)))
    {
        let i = SITES
            .iter()
            .position(|s| s.name == cluster.name)
            .unwrap_or(0);
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
                let stable = agent
                    .stats("stable", &window((decided / 1000) as u64 + 10))
                    .await?;
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
        evidence_hold: outage.held_reason.clone(),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("\n{}", summary_text(&summary));
    }
    if args.hold {
        say(&format!(
            "holding: every process keeps running; the dashboard is at {dashboard}; Ctrl-C stops them"
        ));
        std::future::pending::<()>().await;
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
