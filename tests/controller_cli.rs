//! End-to-end tests of the controller with real processes on loopback: `flotilla demo` in each
//! scenario, and `flotilla serve` driving four real agents (each running the demo service as
//! process workloads) under load: `kill -9` mid-wave, an abort accepted just before a crash,
//! authentication, a webhook receiver, and bad configurations. Nothing is mocked.
//!
//! The tests that start fleets take one of two slots, so that at most two fleets share the
//! machine's two cores at once (their latency objectives are real; each fleet is light: four
//! agents under 40 requests/s each, one daemon, the demo's process workloads).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{first_line, flotilla, json_field, runtime};
use flotilla_agent::loadgen::{self, Target};
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::{FleetView, OperatorCommand};
use flotilla_runtime::demo::{self, NEW, SITES, Scenario};

/// How many fleets run at once.
const FLEETS_AT_ONCE: usize = 2;
/// The fleets running, and a wakeup when one ends.
static MACHINE: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// One of the [`FLEETS_AT_ONCE`] slots, given back when dropped.
struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        let (running, ended) = &MACHINE;
        *running.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        ended.notify_one();
    }
}

/// Waits for a slot (a test that panicked gives its slot back as it unwinds).
fn fleet_slot() -> Slot {
    let (running, ended) = &MACHINE;
    let mut n = running.lock().unwrap_or_else(|e| e.into_inner());
    while *n >= FLEETS_AT_ONCE {
        n = ended.wait(n).unwrap_or_else(|e| e.into_inner());
    }
    *n += 1;
    Slot
}

fn git(dir: &Path, args: &[&str]) -> String {
    flotilla_git::cli::git(
        dir,
        args,
        &flotilla_git::Identity::new("Dev", "dev@example.test"),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Load at 40 requests/s that lasts until [`Load::finish`] (at most ten minutes): as long as the
/// rollout it accompanies, however slow the machine. A load of a fixed length could end before
/// the last wave, whose analysis then rightly sees no evidence.
struct Load {
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<loadgen::Report>,
}

impl Load {
    fn start(targets: Vec<Target>) -> Load {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(async move {
            loadgen::run_until(&targets, 40.0, Duration::from_secs(600), u64::MAX, async {
                let _ = stopped.await;
            })
            .await
            .unwrap()
        });
        Load { stop, run }
    }

    async fn finish(self) -> loadgen::Report {
        let _ = self.stop.send(());
        self.run.await.unwrap()
    }
}

/// Four agents and a daemon over one temporary directory.
struct Lab {
    dir: tempfile::TempDir,
    agents: Vec<Child>,
    routers: Vec<String>,
    controls: Vec<String>,
    serve: Option<Child>,
    api: String,
    /// Each cluster's Prometheus ([`Scenario::MetricsOutage`]).
    prometheus: Vec<demo::Prometheus>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut serve) = self.serve.take() {
            let _ = serve.kill();
            let _ = serve.wait();
        }
        for agent in &self.agents {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(agent.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        for agent in self.agents.iter_mut() {
            let _ = agent.wait();
        }
    }
}

impl Lab {
    /// Starts the agents, writes the manifests and the daemon's configuration, and starts the
    /// daemon.
    fn new(scenario: Scenario, speed: f64, extra_config: &str) -> Lab {
        let mut lab = Lab::prepare(scenario, speed, extra_config);
        lab.start_serve();
        lab
    }

    /// [`Lab::new`] without starting the daemon.
    fn prepare(scenario: Scenario, speed: f64, extra_config: &str) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        demo::write_agent_token(dir.path()).unwrap();
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_flotilla"));
        let mut agents = Vec::new();
        let mut routers = Vec::new();
        let mut controls = Vec::new();
        for (i, site) in SITES.iter().enumerate() {
            let path = dir.path().join(format!("{}.yaml", site.name));
            std::fs::write(
                &path,
                demo::agent_config(site, scenario, &exe, 7 + i as u64, 0.0),
            )
            .unwrap();
            let mut child = flotilla()
                .args(["agent", "--config"])
                .arg(&path)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let line = first_line(&mut child);
            routers.push(format!("http://{}", json_field(&line, "router")));
            controls.push(format!("http://{}", json_field(&line, "control")));
            agents.push(child);
        }
        // Traffic must find the stable version ready: a load started while the agents' first
        // replicas still come up would see the router's honest 503s.
        for control in &controls {
            wait_stable_ready(control);
        }
        let prometheus: Vec<demo::Prometheus> = if scenario == Scenario::MetricsOutage {
            SITES
                .iter()
                .zip(&controls)
                .map(|(site, control)| {
                    demo::Prometheus::start_new(
                        dir.path().join(format!("prometheus-{}", site.name)),
                        control,
                    )
                    .expect("prometheus (apt-get install prometheus)")
                })
                .collect()
        } else {
            Vec::new()
        };
        let addresses: Vec<String> = prometheus.iter().map(demo::Prometheus::address).collect();
        let manifests = demo::manifests_for(scenario, &controls, &addresses, speed);
        let controls_kept = controls.clone();
        let source = if extra_config.contains("git:") {
            // The desired state in a bare repository under fleets/payments/.
            let work = dir.path().join("work");
            std::fs::create_dir_all(work.join("fleets/payments")).unwrap();
            std::fs::write(work.join("fleets/payments/manifests.yaml"), &manifests).unwrap();
            git(&work, &["init", "-q", "-b", "main"]);
            git(&work, &["add", "."]);
            git(&work, &["commit", "-q", "-m", "payments fleet"]);
            git(
                dir.path(),
                &["init", "-q", "--bare", "-b", "main", "fleet.git"],
            );
            git(&work, &["push", "-q", "../fleet.git", "main"]);
            git(&work, &["remote", "add", "origin", "../fleet.git"]);
            String::new()
        } else {
            std::fs::write(dir.path().join("manifests.yaml"), &manifests).unwrap();
            "manifests: manifests.yaml\n".to_owned()
        };
        std::fs::write(
            dir.path().join("serve.yaml"),
            format!(
                "listen: \"127.0.0.1:0\"\nstore: state.redb\n{source}tick: 300ms\nagentTokenFile: {}\n{extra_config}",
                demo::AGENT_TOKEN_FILE
            ),
        )
        .unwrap();
        Lab {
            dir,
            agents,
            routers,
            controls: controls_kept,
            serve: None,
            api: String::new(),
            prometheus,
        }
    }

    /// Restarts one agent gracefully on the same ports: it comes back as its configuration file
    /// says (the stable version, no canary, weight 0), as a restarted data plane does.
    fn restart_agent(&mut self, site: usize) {
        let agent = &mut self.agents[site];
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(agent.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        agent.wait().unwrap();
        let path = self.dir.path().join(format!("{}.yaml", SITES[site].name));
        let config = std::fs::read_to_string(&path).unwrap();
        let router = self.routers[site].trim_start_matches("http://").to_owned();
        let control = self.controls[site].trim_start_matches("http://").to_owned();
        let config =
            config
                .replacen("127.0.0.1:0", &router, 1)
                .replacen("127.0.0.1:0", &control, 1);
        std::fs::write(&path, config).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut child = flotilla()
                .args(["agent", "--config"])
                .arg(&path)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let line = first_line(&mut child);
            if !line.is_empty() {
                self.agents[site] = child;
                break;
            }
            // The ports may still be held for a moment.
            let _ = child.wait();
            assert!(Instant::now() < deadline, "the agent did not come back");
            std::thread::sleep(Duration::from_millis(200));
        }
        wait_stable_ready(&self.controls[site]);
    }

    fn start_serve(&mut self) {
        let mut child = flotilla()
            .args(["serve", "--config"])
            .arg(self.dir.path().join("serve.yaml"))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.dir.path().join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let line = first_line(&mut child);
        assert!(!line.is_empty(), "serve did not start: {}", self.log());
        self.api = format!("http://{}", json_field(&line, "api"));
        self.serve = Some(child);
    }

    fn kill_serve(&mut self) {
        let mut serve = self.serve.take().expect("serve runs");
        serve.kill().unwrap(); // SIGKILL
        serve.wait().unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    fn client(&self) -> ApiClient {
        let token = std::fs::read_to_string(self.dir.path().join("state.redb.token")).unwrap();
        ApiClient::new(&self.api, Some(token.trim().to_owned()))
    }

    async fn fleet(&self) -> FleetView {
        self.client().fleet("payment-api").await.unwrap()
    }

    async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&FleetView) -> bool,
    ) -> FleetView {
        let deadline = Instant::now() + limit;
        loop {
            let view = self.fleet().await;
            if done(&view) {
                return view;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {view:#?}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits (at most `limit`) for the fleet to complete with every cluster validated on the
    /// release ([`NEW`]), and returns that view.
    async fn wait_released_everywhere(&self, what: &str, limit: Duration) -> FleetView {
        let done = self.wait_for(what, limit, |v| v.phase == "Completed").await;
        for site in SITES {
            let c = cluster(&done, site.name);
            assert_eq!(
                (c.status.as_str(), c.stable_version.as_deref()),
                ("Validated", Some(NEW)),
                "{c:#?}"
            );
        }
        done
    }

    async fn release(&self) {
        self.wait_for(
            "the first revision to settle",
            Duration::from_secs(60),
            |v| v.phase == "Completed",
        )
        .await;
        self.client()
            .command(
                "payment-api",
                &OperatorCommand::SetImage {
                    container: None,
                    image: format!("payment-api:{NEW}"),
                },
            )
            .await
            .unwrap();
        self.wait_for("the new revision", Duration::from_secs(10), |v| {
            v.image.ends_with(NEW)
        })
        .await;
    }

    fn targets(&self) -> Vec<Target> {
        self.routers
            .iter()
            .map(|r| Target::new(format!("{r}/pay")))
            .collect()
    }
}

fn cluster<'a>(
    view: &'a FleetView,
    name: &str,
) -> &'a flotilla_runtime::controller::record::ClusterView {
    view.waves
        .iter()
        .flat_map(|w| w.clusters.iter())
        .find(|c| c.name == name)
        .unwrap()
}

/// Blocks until the agent at `control` reports its stable subset's replicas all ready (a plain
/// HTTP/1.0 request: the labs are built inside the tests' runtimes).
fn wait_stable_ready(control: &str) {
    use std::io::{Read, Write};
    let addr = control.trim_start_matches("http://");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut answer = String::new();
        if let Ok(mut stream) = std::net::TcpStream::connect(addr) {
            let _ = write!(
                stream,
                "GET /v1/subsets/stable HTTP/1.0\r\nHost: {addr}\r\n\r\n"
            );
            let _ = stream.read_to_string(&mut answer);
        }
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
        if let Ok(status) = serde_json::from_str::<serde_json::Value>(body)
            && let (Some(desired), Some(ready)) = (
                status["desiredReplicas"].as_u64(),
                status["readyReplicas"].as_u64(),
            )
            && desired > 0
            && ready >= desired
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent at {control} never had its stable replicas ready: {answer}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `flotilla demo` reaches each scenario's expected outcome, exits 0, and no request of its
/// load goes unanswered.
#[test]
fn every_demo_scenario_reaches_its_expected_outcome() {
    let _slot = fleet_slot();
    // regional-regression runs through every wave in
    // a_regional_regression_pins_only_that_cluster_through_an_outage_and_a_restart (judged with
    // the same `demo::judge`); global-regression runs here from a Git repository (`--gitops`).
    let repo = tempfile::tempdir().unwrap();
    let gitops = repo.path().join("fleet");
    // metrics-outage is the healthy release with prod-us-east's Prometheus down as its canary
    // ends.
    for scenario in ["metrics-outage", "global-regression"] {
        let mut command = flotilla();
        command.args([
            "demo",
            "--scenario",
            scenario,
            "--speed",
            "2",
            "--output",
            "json",
        ]);
        if scenario == "global-regression" {
            command.arg("--gitops").arg(&gitops);
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{scenario}: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["passed"], true, "{scenario}: {summary:#}");
        assert_eq!(summary["load"]["failed"], 0, "{scenario}: {summary:#}");
        let clusters = summary["clusters"].as_array().unwrap();
        assert_eq!(clusters.len(), 4);
        for c in clusters {
            for field in [
                "name",
                "wave",
                "outcome",
                "startedAt",
                "decidedAt",
                "reason",
                "failure",
                "badRequests",
            ] {
                assert!(c.get(field).is_some(), "{scenario}: {field} missing in {c}");
            }
        }
        if scenario == "metrics-outage" {
            assert!(
                clusters.iter().all(|c| c["outcome"] == "Promoted"),
                "{summary:#}"
            );
            let hold = summary["evidenceHold"].as_str().unwrap_or_default();
            assert!(
                hold.starts_with("waiting for evidence: metric"),
                "{summary:#}"
            );
        }
        if scenario == "global-regression" {
            let canary = clusters
                .iter()
                .find(|c| c["name"] == "canary-eu-west")
                .unwrap();
            assert_eq!(canary["outcome"], "RolledBack", "{canary}");
            // The demo's repository is left behind with the controller's rollback in its log.
            let log = git(&gitops.join("work"), &["log", "--format=%an: %s"]);
            assert!(
                log.starts_with(
                    "flotilla-controller: flotilla: roll payment-api back to payment-api:1.8.3\nDemo Developer: release payment-api 1.9.0"
                ),
                "{log}"
            );
            let message = git(&gitops.join("fleet.git"), &["log", "-1", "--format=%B"]);
            assert!(
                message.contains("Flotilla-Cluster: canary-eu-west")
                    && message.contains("Flotilla-Metric: error-rate="),
                "{message}"
            );
        }
    }
    // A directory that is not empty is refused before anything starts.
    let output = flotilla()
        .args(["demo", "--gitops"])
        .arg(&gitops)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `kill -9` of the daemon in the middle of wave 2 under load: the agents keep serving (no
/// request fails), and after a restart the fleet completes with the same outcome and no wave
/// runs again.
#[test]
fn a_killed_daemon_resumes_where_it_was_and_traffic_never_notices() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let mut lab = Lab::new(Scenario::Healthy, 2.0, "");
        let targets = lab.targets();
        let load = Load::start(targets);
        lab.release().await;
        let before = lab
            .wait_for("wave 2 in progress", Duration::from_secs(60), |v| {
                v.wave == 2 && cluster(v, "prod-eu-west").status == "Progressing"
            })
            .await;
        lab.kill_serve();
        tokio::time::sleep(Duration::from_secs(3)).await;
        lab.start_serve();
        let after = lab
            .wait_for("completion", Duration::from_secs(120), |v| {
                v.phase == "Completed"
            })
            .await;
        for name in [
            "canary-eu-west",
            "prod-eu-west",
            "prod-us-east",
            "prod-ap-south",
        ] {
            assert_eq!(
                cluster(&after, name).status,
                "Validated",
                "{name}: {after:#?}"
            );
        }
        // Wave 1 was not run again: same start and completion.
        assert_eq!(after.waves[0].started_at, before.waves[0].started_at);
        assert_eq!(after.waves[0].completed_at, before.waves[0].completed_at);
        assert_eq!(
            cluster(&after, "prod-eu-west").started_at,
            cluster(&before, "prod-eu-west").started_at
        );
        let history: Vec<_> = lab
            .client()
            .history("payment-api")
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.revision == after.revision)
            .collect();
        let wave1 = history
            .iter()
            .filter(|e| e.kind == "wave" && e.message.contains("wave 1 completed"))
            .count();
        assert_eq!(wave1, 1, "{history:#?}");
        let starts = history
            .iter()
            .filter(|e| e.kind == "advance" && e.message.starts_with("prod-eu-west starts"))
            .count();
        assert_eq!(starts, 1, "{history:#?}");
        let report = load.finish().await;
        assert_eq!(report.failed, 0, "{report:#?}");
        assert_eq!(
            report.status_counts.keys().copied().collect::<Vec<_>>(),
            vec![200],
            "{report:#?}"
        );
    });
}

/// An abort answered 202 and followed at once by `kill -9` is in effect after the restart; the
/// webhook receiver gets the notifications; mutating calls without the token are refused.
#[test]
fn an_accepted_abort_survives_a_crash_and_calls_need_the_token() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let received = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
        let hook = {
            let received = received.clone();
            let app = axum::Router::new().route(
                "/hook",
                axum::routing::post(move |body: axum::Json<serde_json::Value>| {
                    let received = received.clone();
                    async move {
                        received.lock().unwrap().push(body.0);
                        "ok"
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            address
        };
        let mut lab = Lab::new(
            Scenario::Healthy,
            3.0,
            &format!("notifications:\n  - {{name: test, url: \"http://{hook}/hook\"}}\n"),
        );
        lab.release().await;
        // Reads are open; mutations need the token.
        let anonymous = ApiClient::new(&lab.api, None);
        anonymous.fleet("payment-api").await.unwrap();
        let refused = anonymous
            .command("payment-api", &OperatorCommand::Abort { cluster: None })
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("Bearer"), "{refused}");
        let wrong = ApiClient::new(&lab.api, Some("wrong".into()));
        let refused = wrong
            .command("payment-api", &OperatorCommand::Pause)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("token is wrong"), "{refused}");
        let unknown = lab
            .client()
            .command(
                "payment-api",
                &OperatorCommand::Abort {
                    cluster: Some("nowhere".into()),
                },
            )
            .await
            .unwrap_err();
        assert!(unknown.to_string().contains("not a target"), "{unknown}");
        assert_eq!(lab.fleet().await.phase, "Progressing");
        // The CLI verbs against the same daemon.
        let token_file = lab.dir.path().join("state.redb.token");
        let cli = |args: &[&str]| {
            let output = flotilla()
                .args(args)
                .env("FLOTILLA_SERVER", &lab.api)
                .env("FLOTILLA_TOKEN_FILE", &token_file)
                .output()
                .unwrap();
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        };
        let (code, out, err) = cli(&["list", "-o", "json"]);
        assert_eq!(code, Some(0), "{err}");
        let list: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(list[0]["name"], "payment-api");
        let (code, out, _) = cli(&["get", "fleet", "payment-api"]);
        assert_eq!(code, Some(0));
        assert!(
            out.contains("wave 3") && out.contains("prod-ap-south"),
            "{out}"
        );
        let (code, out, _) = cli(&["get", "fleet", "payment-api", "-o", "json"]);
        assert_eq!(code, Some(0));
        let fleet: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(fleet["waves"].as_array().unwrap().len(), 3);
        let (code, out, _) = cli(&[
            "get",
            "rollout",
            "payment-api",
            "--cluster",
            "prod-us-east",
            "-o",
            "json",
        ]);
        assert_eq!(code, Some(0));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&out).unwrap()["cluster"]["name"],
            "prod-us-east"
        );
        let (code, _, err) = cli(&["get", "rollout", "payment-api", "--cluster", "nowhere"]);
        assert_eq!(code, Some(2));
        assert!(err.contains("not a target"), "{err}");
        let (code, out, err) = cli(&["pause", "payment-api"]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(out.trim(), "fleet rollout 'payment-api' pause accepted");
        lab.wait_for("the pause", Duration::from_secs(10), |v| v.paused)
            .await;
        let (code, _, err) = cli(&["resume", "payment-api"]);
        assert_eq!(code, Some(0), "{err}");
        let (code, out, _) = cli(&["status", "payment-api", "--timeout", "1"]);
        assert_eq!(code, Some(3), "{out}");
        let (code, out, _) = cli(&["history", "payment-api", "-o", "json"]);
        assert_eq!(code, Some(0));
        let history: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(
            history
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["message"] == "pause"),
            "{out}"
        );
        let metrics = reqwest::get(format!("{}/metrics", lab.api))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("flotilla_reconcile_duration_seconds_count"),
            "{metrics}"
        );
        assert!(
            metrics.contains("flotilla_decisions_total{kind=\"command\"}"),
            "{metrics}"
        );
        // Decisions stream as server-sent events.
        let mut events = reqwest::get(format!("{}/v1/events", lab.api))
            .await
            .unwrap();
        lab.client()
            .command("payment-api", &OperatorCommand::Pause)
            .await
            .unwrap();
        let mut seen = String::new();
        while !seen.contains("event: command") {
            let chunk = tokio::time::timeout(Duration::from_secs(10), events.chunk())
                .await
                .expect("an event within 10 s")
                .unwrap()
                .expect("the stream stays open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert!(seen.contains("\"operator\""), "{seen}");
        lab.client()
            .command("payment-api", &OperatorCommand::Resume)
            .await
            .unwrap();
        lab.wait_for("wave 1 in progress", Duration::from_secs(30), |v| {
            cluster(v, "canary-eu-west").status == "Progressing"
        })
        .await;
        let message = lab
            .client()
            .command("payment-api", &OperatorCommand::Abort { cluster: None })
            .await
            .unwrap();
        assert!(message.contains("abort accepted"), "{message}");
        lab.kill_serve();
        lab.start_serve();
        let view = lab
            .wait_for("the abort", Duration::from_secs(30), |v| {
                v.phase == "Aborted"
            })
            .await;
        assert_eq!(cluster(&view, "prod-us-east").status, "Held");
        lab.wait_for(
            "the canary back on its stable",
            Duration::from_secs(30),
            |v| cluster(v, "canary-eu-west").weights == Some((0, 100)),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let events: Vec<String> = received
                .lock()
                .unwrap()
                .iter()
                .map(|n| n["event"].as_str().unwrap_or_default().to_owned())
                .collect();
            if events.iter().any(|e| e == "fleet-aborted") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no fleet-aborted notification: {events:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let history = lab.client().history("payment-api").await.unwrap();
        assert!(
            history
                .iter()
                .any(|e| e.kind == "command" && e.message == "abort" && e.operator.is_some()),
            "{history:#?}"
        );
    });
}

/// A failing analysis reaches the webhook receiver as `rollout-aborted` naming the cluster,
/// the failing metric and its value (Slack-compatible body included).
#[test]
fn the_webhook_names_the_failing_metric() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let received = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
        let app = {
            let received = received.clone();
            axum::Router::new().route(
                "/{sink}",
                axum::routing::post(
                    move |axum::extract::Path(sink): axum::extract::Path<String>,
                          body: axum::Json<serde_json::Value>| {
                        let received = received.clone();
                        async move {
                            received.lock().unwrap().push(serde_json::json!({"sink": sink, "body": body.0}));
                            "ok"
                        }
                    },
                ),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hook = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let lab = Lab::new(
            Scenario::GlobalRegression,
            2.0,
            &format!(
                "notifications:\n  - {{name: generic, url: \"http://{hook}/generic\"}}\n  - {{name: slack, url: \"http://{hook}/slack\", format: slack, events: [rollout-aborted]}}\n"
            ),
        );
        let targets = lab.targets();
        let load = Load::start(targets);
        lab.release().await;
        lab.wait_for("the halt", Duration::from_secs(60), |v| v.phase == "Halted").await;
        let deadline = Instant::now() + Duration::from_secs(20);
        let (generic, slack) = loop {
            let all = received.lock().unwrap().clone();
            let generic = all.iter().find(|n| n["sink"] == "generic" && n["body"]["event"] == "rollout-aborted").cloned();
            let slack = all.iter().find(|n| n["sink"] == "slack").cloned();
            if let (Some(g), Some(s)) = (generic, slack) {
                break (g, s);
            }
            assert!(Instant::now() < deadline, "notifications: {all:#?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(generic["body"]["cluster"], "canary-eu-west", "{generic}");
        assert_eq!(generic["body"]["metric"], "error-rate", "{generic}");
        assert!(generic["body"]["value"].as_str().is_some_and(|v| v.starts_with('[')), "{generic}");
        let text = slack["body"]["text"].as_str().unwrap();
        assert!(text.contains("error-rate") && text.contains("canary-eu-west"), "{text}");
        load.finish().await;
    });
}

/// A bad configuration or bad manifests: a precise error, exit 2, and nothing started (no
/// store, no token, no listener).
#[test]
fn a_bad_configuration_is_refused_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let serve = |config: &Path| {
        flotilla()
            .args(["serve", "--config"])
            .arg(config)
            .output()
            .unwrap()
    };
    // The daemon's own file: an unknown field.
    let config = write(
        "serve.yaml",
        "store: s.redb\nmanifests: m.yaml\nlisten: \"127.0.0.1:0\"\ntick: 1s\nnotification: []\n",
    );
    let output = serve(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("serve.yaml:5:1") && stderr.contains("unknown field `notification`"),
        "{stderr}"
    );
    // The manifests: a setWeight out of range, named by file, line and field path.
    let manifests = demo::manifests(&vec!["http://127.0.0.1:1".to_owned(); 4], 1.0)
        .replace("setWeight: 50", "setWeight: 150");
    write("m.yaml", &manifests);
    let config = write(
        "serve.yaml",
        "store: s.redb\nmanifests: m.yaml\nlisten: \"127.0.0.1:0\"\n",
    );
    let output = serve(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("m.yaml:") && stderr.contains("steps[2].setWeight"),
        "{stderr}"
    );
    // A cluster the daemon cannot drive: one without an endpoint.
    let manifests = demo::manifests(&vec!["http://127.0.0.1:1".to_owned(); 4], 1.0).replacen(
        "endpoint: {agent: \"http://127.0.0.1:1\"}",
        "endpoint: {}",
        1,
    );
    write("m.yaml", &manifests);
    let output = serve(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("spec.clusters[0].endpoint") && stderr.contains("has no endpoint"),
        "{stderr}"
    );
    assert!(!dir.path().join("s.redb").exists(), "a store was created");
    assert!(
        !dir.path().join("s.redb.token").exists(),
        "a token was created"
    );
    // A store that exists but is empty (`: > state.redb` while stopped) is refused: it must
    // never look like a first start, which would deploy the manifests everywhere at once.
    write(
        "m.yaml",
        &demo::manifests(&vec!["http://127.0.0.1:1".to_owned(); 4], 1.0),
    );
    let config = write(
        "serve.yaml",
        "store: s.redb\nmanifests: m.yaml\nlisten: \"127.0.0.1:0\"\n",
    );
    write("s.redb", "");
    let output = serve(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("s.redb")
            && stderr.contains("empty (0 bytes)")
            && stderr.contains("--init-store"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("s.redb")).unwrap().len(),
        0
    );
    assert!(
        !dir.path().join("s.redb.token").exists(),
        "a token was created"
    );
    // A garbled one: refused with the reason, never a panic (exit 101).
    write("s.redb", &"garbage ".repeat(4096));
    let output = serve(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("s.redb") && stderr.contains("not a readable Flotilla store"),
        "{stderr}"
    );
    // `--init-store` creates one over the empty file, and says so.
    write("s.redb", "");
    let mut child = flotilla()
        .args(["serve", "--init-store", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = first_line(&mut child);
    assert!(line.contains("listening"), "{line}");
    // It runs with 2 malloc arenas (it ran itself again with them: the same process).
    let environ = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|v| v == b"MALLOC_ARENA_MAX=2"),
        "{}",
        String::from_utf8_lossy(&environ)
    );
    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("created a new store"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(std::fs::metadata(dir.path().join("s.redb")).unwrap().len() > 0);
    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    write(
        "m.yaml",
        &demo::manifests(&vec!["http://127.0.0.1:1".to_owned(); 4], 1.0),
    );
    let config = write(
        "serve.yaml",
        &format!(
            "store: s.redb\nmanifests: m.yaml\nlisten: \"{}\"\n",
            taken.local_addr().unwrap()
        ),
    );
    let output = serve(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
}

/// A frozen cluster (its agent stopped with SIGSTOP: connections accepted, nothing answered)
/// never stalls the others: waves 1 and 2 complete on time while it is reported unreachable, and
/// it is never counted validated.
#[test]
fn a_frozen_cluster_never_stalls_the_others() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let lab = Lab::new(Scenario::Healthy, 2.0, "");
        let targets: Vec<Target> = lab.targets().into_iter().take(2).collect();
        let load = Load::start(targets);
        lab.wait_for(
            "the first revision to settle",
            Duration::from_secs(60),
            |v| v.phase == "Completed",
        )
        .await;
        let frozen = nix::unistd::Pid::from_raw(lab.agents[2].id() as i32); // prod-us-east
        nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGSTOP).unwrap();
        lab.release().await;
        let started = Instant::now();
        let view = lab
            .wait_for("wave 2 to complete", Duration::from_secs(90), |v| {
                v.waves[1].completed_at.is_some()
            })
            .await;
        let elapsed = started.elapsed();
        nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGCONT).unwrap();
        let us = cluster(&view, "prod-us-east");
        assert!(!us.reachable, "{us:#?}");
        assert_ne!(us.status, "Validated");
        assert_eq!(cluster(&view, "canary-eu-west").status, "Validated");
        assert_eq!(cluster(&view, "prod-eu-west").status, "Validated");
        assert!(
            elapsed < Duration::from_secs(80),
            "waves 1 and 2 took {elapsed:?}"
        );
        load.finish().await;
    });
}

/// A long outage of one cluster's Prometheus in the middle of its canary, with the desired state
/// in Git: the cluster's canary is aborted without a rejection (its analysis errored, which is
/// no verdict on the version), the fleet is not halted, nothing is committed to Git; once the
/// Prometheus is back, `retry` completes the cluster, and the fleet completes on the release.
#[test]
fn a_long_metrics_outage_is_no_verdict_changes_nothing_in_git_and_retry_completes() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let mut lab = Lab::prepare(
            Scenario::MetricsOutage,
            4.0,
            "git: {url: fleet.git, branch: main, path: fleets/payments, interval: 1s}\n",
        );
        // Tolerate 2 consecutive errors (not the demo's 30): the outage aborts the canary.
        let work = lab.dir.path().join("work");
        let path = work.join("fleets/payments/manifests.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("consecutiveErrorLimit: 30"));
        std::fs::write(
            &path,
            text.replace("consecutiveErrorLimit: 30", "consecutiveErrorLimit: 2"),
        )
        .unwrap();
        git(&work, &["commit", "-q", "-am", "tolerate 2 errors"]);
        git(&work, &["push", "-q", "origin", "main"]);
        lab.start_serve();
        let bare = lab.dir.path().join("fleet.git");
        lab.wait_for(
            "the first revision to settle",
            Duration::from_secs(60),
            |v| v.phase == "Completed",
        )
        .await;
        let load = Load::start(lab.targets());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replace("payment-api:1.8.3", "payment-api:1.9.0"),
        )
        .unwrap();
        git(&work, &["commit", "-q", "-am", "release 1.9.0"]);
        git(&work, &["push", "-q", "origin", "main"]);
        let released = git(&bare, &["rev-parse", "main"]);
        // prod-us-east's canary takes traffic: its Prometheus goes down.
        let site = SITES.iter().position(|s| s.name == "prod-us-east").unwrap();
        lab.wait_for("prod-us-east's canary", Duration::from_secs(120), |v| {
            cluster(v, "prod-us-east")
                .weights
                .is_some_and(|(canary, _)| canary > 0)
        })
        .await;
        lab.prometheus[site].stop();
        let aborted = lab
            .wait_for(
                "prod-us-east aborted on its analysis errors",
                Duration::from_secs(90),
                |v| cluster(v, "prod-us-east").status == "RolledBack",
            )
            .await;
        let us = cluster(&aborted, "prod-us-east");
        assert!(
            us.reason.starts_with("aborted without rejection"),
            "{us:#?}"
        );
        assert_ne!(aborted.phase, "Halted", "{aborted:#?}");
        // Its traffic is back on its stable, and the rest of the fleet goes on.
        let settled = lab
            .wait_for(
                "the rest of wave 3, and prod-us-east back on its stable",
                Duration::from_secs(90),
                |v| {
                    cluster(v, "prod-ap-south").status == "Validated"
                        && cluster(v, "prod-us-east")
                            .weights
                            .is_some_and(|(c, _)| c == 0)
                },
            )
            .await;
        assert!(
            settled.message.contains("retry starts it again"),
            "{}",
            settled.message
        );
        // No verdict, so nothing durable: Git is exactly as the developer left it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(git(&bare, &["rev-parse", "main"]), released);
        assert!(
            !lab.fleet()
                .await
                .git
                .unwrap_or_default()
                .contains("committed"),
            "{:?}",
            lab.fleet().await.git
        );
        // The Prometheus is back; retry completes the cluster and the fleet.
        lab.prometheus[site].start().unwrap();
        lab.client()
            .command("payment-api", &OperatorCommand::Retry)
            .await
            .unwrap();
        lab.wait_released_everywhere("the fleet to complete", Duration::from_secs(120))
            .await;
        assert_eq!(git(&bare, &["rev-parse", "main"]), released);
        let report = load.finish().await;
        assert_eq!(report.failed, 0, "{report:?}");
    });
}

/// GitOps end to end: a developer's commit releases 1.9.0 from a real repository; it fails in
/// wave 1; the controller rolls the canary back and commits the durable rollback (trailers
/// naming the cluster and the metric) without force; Git then agrees, nothing new starts, and
/// nothing beyond wave 1 ever ran 1.9.0. A later commit with 1.9.1 fixes forward; a commit with
/// 1.9.2 landing while 1.9.1 is in wave 2 supersedes it, and 1.9.2 goes through every wave.
#[test]
fn git_is_the_intent_and_a_failed_release_is_reverted_by_a_commit() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let lab = Lab::new(
            Scenario::GlobalRegression,
            2.0,
            "git: {url: fleet.git, branch: main, path: fleets/payments, interval: 1s}\n",
        );
        let work = lab.dir.path().join("work");
        let bare = lab.dir.path().join("fleet.git");
        lab.wait_for(
            "the first revision to settle",
            Duration::from_secs(60),
            |v| v.phase == "Completed",
        )
        .await;
        let targets = lab.targets();
        let load = Load::start(targets);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let release = |image: &str, from: &str| {
            let path = work.join("fleets/payments/manifests.yaml");
            git(&work, &["pull", "-q", "--no-rebase", "origin", "main"]);
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace(from, image)).unwrap();
            git(&work, &["commit", "-q", "-am", &format!("release {image}")]);
            git(&work, &["push", "-q", "origin", "main"]);
            git(&work, &["rev-parse", "HEAD"])
        };
        let commit = release("payment-api:1.9.0", "payment-api:1.8.3");
        lab.wait_for("the commit's revision", Duration::from_secs(15), |v| {
            v.image.ends_with(NEW)
        })
        .await;
        let settled = lab
            .wait_for(
                "Git to agree with the rollback",
                Duration::from_secs(90),
                |v| v.image.ends_with("1.8.3") && v.phase == "Completed",
            )
            .await;
        for c in settled.waves.iter().flat_map(|w| w.clusters.iter()) {
            assert_eq!(c.stable_version.as_deref(), Some("1.8.3"), "{c:#?}");
        }
        // The rejected canary is gone from the canary cluster: no weight, no replicas.
        let site = SITES
            .iter()
            .position(|s| s.name == "canary-eu-west")
            .unwrap();
        let agent = flotilla_agent_backend::AgentClient::new(lab.controls[site].clone()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let status = agent.status().await.unwrap();
            let canary = status.subsets.iter().find(|s| s.subset == "canary");
            if status.weights.canary == 0 && canary.is_none_or(|c| c.desired_replicas == 0) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the rejected canary still runs: {status:#?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // The durable rollback in Git: a fast-forward on top of the developer's commit.
        assert_eq!(git(&bare, &["rev-parse", "main~1"]), commit);
        let message = git(&bare, &["log", "-1", "--format=%B", "main"]);
        assert!(
            message.contains("Flotilla-Cluster: canary-eu-west"),
            "{message}"
        );
        assert!(
            message.contains("Flotilla-Metric: error-rate=["),
            "{message}"
        );
        assert_eq!(
            git(&bare, &["log", "-1", "--format=%an", "main"]),
            "flotilla-controller"
        );
        let manifests = git(&bare, &["show", "main:fleets/payments/manifests.yaml"]);
        assert!(
            manifests.contains("payment-api:1.8.3") && !manifests.contains("payment-api:1.9.0")
        );
        // Re-reading Git starts nothing new.
        let before = lab.fleet().await;
        lab.client().sync().await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = lab.fleet().await;
        assert_eq!(
            (after.revision.as_str(), after.phase.as_str()),
            (before.revision.as_str(), "Completed")
        );
        let history = lab.client().history("payment-api").await.unwrap();
        let count = |kind: &str, text: &str| {
            history
                .iter()
                .filter(|e| e.kind == kind && e.message.contains(text))
                .count()
        };
        assert_eq!(count("sync", &commit[..12]), 1, "{history:#?}");
        assert_eq!(
            count("gitops", "durable rollback committed to main"),
            1,
            "{history:#?}"
        );
        assert_eq!(count("sync", "Git agrees"), 1, "{history:#?}");
        // Fix forward: 1.9.1, then mid-rollout (wave 2) a commit with 1.9.2, which supersedes
        // it: the canary in flight is aborted, wave 1 keeps what it promoted, and 1.9.2 goes
        // through every wave from wave 1.
        release("payment-api:1.9.1", "payment-api:1.8.3");
        let fixing = lab
            .wait_for("the fix to reach wave 2", Duration::from_secs(120), |v| {
                v.image.ends_with("1.9.1") && cluster(v, "prod-eu-west").status == "Progressing"
            })
            .await;
        assert_eq!(
            cluster(&fixing, "canary-eu-west").stable_version.as_deref(),
            Some("1.9.1")
        );
        release("payment-api:1.9.2", "payment-api:1.9.1");
        let done = lab
            .wait_for("the newer fix to roll out", Duration::from_secs(180), |v| {
                v.image.ends_with("1.9.2") && v.phase == "Completed"
            })
            .await;
        for c in done.waves.iter().flat_map(|w| w.clusters.iter()) {
            assert_eq!(
                (c.status.as_str(), c.stable_version.as_deref()),
                ("Validated", Some("1.9.2")),
                "{c:#?}"
            );
        }
        let history = lab.client().history("payment-api").await.unwrap();
        assert!(
            history.iter().any(|e| e.kind == "sync"
                && e.message.contains("1.9.2")
                && e.message
                    .contains(&format!("supersedes {}, progressing", fixing.revision))),
            "{history:#?}"
        );
        // A supersede is not a failure: the controller committed nothing more.
        assert_eq!(git(&bare, &["rev-list", "--count", "main"]), "5");
        // 1.9.1 never reached the clusters after prod-eu-west.
        assert!(
            !history.iter().any(|e| e.revision == fixing.revision
                && e.kind == "advance"
                && ["prod-us-east", "prod-ap-south"]
                    .iter()
                    .any(|c| e.cluster.as_deref() == Some(c))),
            "{history:#?}"
        );
        let report = load.finish().await;
        assert_eq!(report.failed, 0, "{report:#?}");
    });
}

/// Issue #9's fine-grained durable rollback, end to end against a bare repository: a regression
/// in prod-us-east (wave 3) pins only that cluster in `clusters/prod-us-east.yaml` (the
/// validated clusters keep 1.9.0, nothing is reverted for the fleet); the remote is unreachable
/// when the fleet halts, so the pin is retried with backoff (a clear error in the status and the
/// log, the clusters' rollback kept) and pushed once the remote is back; drift of the pinned
/// cluster to the rejected version is corrected back to its pin; and a controller restart deploys
/// nothing new.
#[test]
fn a_regional_regression_pins_only_that_cluster_through_an_outage_and_a_restart() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let mut lab = Lab::new(
            Scenario::RegionalRegression,
            2.0,
            "git: {url: fleet.git, branch: main, path: fleets/payments, interval: 1s, correctDrift: true}\n",
        );
        let work = lab.dir.path().join("work");
        let bare = lab.dir.path().join("fleet.git");
        let away = lab.dir.path().join("fleet.git.away");
        lab.wait_for(
            "the first revision to settle",
            Duration::from_secs(60),
            |v| v.phase == "Completed",
        )
        .await;
        let targets = lab.targets();
        let load = Load::start(targets);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let path = work.join("fleets/payments/manifests.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("payment-api:1.8.3", "payment-api:1.9.0")).unwrap();
        git(&work, &["commit", "-q", "-am", "release 1.9.0"]);
        git(&work, &["push", "-q", "origin", "main"]);
        let released = git(&bare, &["rev-parse", "main"]);
        // The remote goes away once wave 3 is under way.
        lab.wait_for("wave 3", Duration::from_secs(120), |v| {
            cluster(v, "prod-us-east").status == "Progressing"
        })
        .await;
        std::fs::rename(&bare, &away).unwrap();
        let halted = lab
            .wait_for(
                "the pin to fail while the remote is away",
                Duration::from_secs(120),
                |v| v.phase == "Halted" && v.git.as_deref().is_some_and(|g| g.contains("not in Git yet")),
            )
            .await;
        assert_eq!(cluster(&halted, "prod-us-east").status, "RolledBack");
        assert!(lab.log().contains("not in Git yet"), "{}", lab.log());
        tokio::time::sleep(Duration::from_secs(2)).await;
        std::fs::rename(&away, &bare).unwrap();
        let pinned = lab
            .wait_for("the pin to be pushed", Duration::from_secs(60), |v| {
                v.git.as_deref().is_some_and(|g| g.contains("pin committed to main"))
            })
            .await;
        assert_eq!(pinned.phase, "Halted");
        let (passed, expected) = demo::judge(Scenario::RegionalRegression, &pinned);
        assert!(passed, "{expected}: {pinned:#?}");
        assert_eq!(
            cluster(&pinned, "prod-us-east").failure.as_ref().map(|f| f.metric.as_str()),
            Some("latency-p95")
        );
        // One commit on top of the release: only prod-us-east, pinned in its overlay.
        assert_eq!(git(&bare, &["rev-parse", "main~1"]), released);
        let message = git(&bare, &["log", "-1", "--format=%B", "main"]);
        assert!(message.contains("Flotilla-Cluster: prod-us-east"), "{message}");
        assert_eq!(message.matches("Flotilla-Cluster:").count(), 1, "{message}");
        assert!(message.contains("Flotilla-Metric: latency-p95="), "{message}");
        assert!(message.contains("flotilla-controller"), "{message}");
        let overlay = git(&bare, &["show", "main:fleets/payments/clusters/prod-us-east.yaml"]);
        assert!(
            overlay.contains(&format!("rejects: \"{}\"", pinned.revision))
                && overlay.contains("image: \"payment-api:1.8.3\""),
            "{overlay}"
        );
        let manifests = git(&bare, &["show", "main:fleets/payments/manifests.yaml"]);
        assert!(manifests.contains("payment-api:1.9.0"), "the fleet keeps 1.9.0");
        for name in ["canary-eu-west", "prod-eu-west"] {
            let c = cluster(&pinned, name);
            assert_eq!((c.status.as_str(), c.stable_version.as_deref()), ("Validated", Some(NEW)), "{c:#?}");
        }
        // Someone puts the rejected version on prod-us-east by hand: drift, corrected to its pin.
        let us_east = SITES.iter().position(|s| s.name == "prod-us-east").unwrap();
        let agent = flotilla_agent_backend::AgentClient::new(lab.controls[us_east].clone())
            .unwrap()
            .with_token(demo::read_agent_token(lab.dir.path()).unwrap());
        agent.scale("stable", NEW, 2).await.unwrap();
        let stable = |status: &flotilla_agent_backend::wire::AgentStatus| {
            status
                .subsets
                .iter()
                .find(|s| s.subset == "stable")
                .map(|s| s.version.clone())
        };
        // The controller reconciles continuously: the pinned cluster is put back on its pin,
        // and the repair is in the audit log.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let history = lab.client().history("payment-api").await.unwrap();
            let repaired = history.iter().any(|e| {
                e.kind == "repair"
                    && e.cluster.as_deref() == Some("prod-us-east")
                    && e.message.contains(&format!("runs {NEW}, not 1.8.3"))
            });
            if repaired && stable(&agent.status().await.unwrap()).as_deref() == Some("1.8.3") {
                break;
            }
            assert!(Instant::now() < deadline, "never repaired: {history:#?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        lab.wait_for("the drift to be gone", Duration::from_secs(60), |v| {
            cluster(v, "prod-us-east").drift.is_none()
        })
        .await;
        // A restart deploys nothing: the same revision, still halted, no other commit.
        let before = lab.fleet().await;
        lab.kill_serve();
        lab.start_serve();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = lab.fleet().await;
        assert_eq!(
            (after.revision.as_str(), after.phase.as_str()),
            (before.revision.as_str(), "Halted")
        );
        for site in SITES {
            let (b, a) = (cluster(&before, site.name), cluster(&after, site.name));
            assert_eq!((&b.status, &b.stable_version), (&a.status, &a.stable_version), "{}", site.name);
        }
        assert_eq!(cluster(&after, "prod-us-east").stable_version.as_deref(), Some("1.8.3"));
        assert_eq!(git(&bare, &["rev-list", "--count", "main"]), "3");
        let history = lab.client().history("payment-api").await.unwrap();
        assert!(history.iter().any(|e| e.kind == "repair"), "{history:#?}");
        let report = load.finish().await;
        assert_eq!(report.failed, 0, "{report:#?}");
    });
}

/// What every agent runs, sampled all along a test: a violation is a canary subset running the
/// previous version (a resume re-creating what the settled state no longer needs).
struct Watch {
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<Vec<String>>,
}

impl Watch {
    fn start(controls: &[String]) -> Watch {
        let agents: Vec<(String, flotilla_agent_backend::AgentClient)> = SITES
            .iter()
            .zip(controls)
            .map(|(site, c)| {
                (
                    site.name.to_owned(),
                    flotilla_agent_backend::AgentClient::with_timeout(
                        c.clone(),
                        Duration::from_secs(2),
                    )
                    .unwrap(),
                )
            })
            .collect();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(async move {
            let mut violations = Vec::new();
            loop {
                for (name, agent) in &agents {
                    let Ok(status) = agent.status().await else {
                        continue;
                    };
                    for subset in &status.subsets {
                        if subset.subset == "canary"
                            && subset.version == demo::OLD
                            && subset.desired_replicas > 0
                        {
                            violations.push(format!(
                                "{name}: the canary subset runs {} x{}",
                                subset.version, subset.desired_replicas
                            ));
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = &mut stopped => return violations,
                }
            }
        });
        Watch { stop, run }
    }

    async fn finish(self) -> Vec<String> {
        let _ = self.stop.send(());
        self.run.await.unwrap()
    }
}

/// Checks the audit log of one revision: every cluster serving the new version was validated on
/// evidence; no cluster of a later wave started before the wave before it completed; no cluster
/// started twice.
fn assert_nothing_deployed_without_evidence(
    view: &FleetView,
    history: &[flotilla_runtime::controller::record::AuditEntry],
) {
    let history: Vec<_> = history
        .iter()
        .filter(|e| e.revision == view.revision)
        .collect();
    for (w, wave) in view.waves.iter().enumerate() {
        for c in &wave.clusters {
            if c.stable_version.as_deref() == Some(NEW) {
                let validated = history.iter().find(|e| {
                    e.kind == "validate" && e.cluster.as_deref() == Some(c.name.as_str())
                });
                let validated = validated
                    .unwrap_or_else(|| panic!("{} serves {NEW} unvalidated: {history:#?}", c.name));
                assert!(
                    !validated.evidence.is_empty(),
                    "{} validated without evidence: {validated:#?}",
                    c.name
                );
            }
            let starts: Vec<_> = history
                .iter()
                .filter(|e| {
                    e.kind == "advance" && e.message.starts_with(&format!("{} starts", c.name))
                })
                .collect();
            assert!(
                starts.len() <= 1,
                "{} started {} times: {starts:#?}",
                c.name,
                starts.len()
            );
            if w > 0
                && let Some(start) = starts.first()
            {
                let previous = history
                    .iter()
                    .find(|e| {
                        e.kind == "wave" && e.message.contains(&format!("wave {w} completed"))
                    })
                    .unwrap_or_else(|| panic!("{} started before wave {w} completed", c.name));
                assert!(
                    start.time >= previous.time,
                    "{} started before wave {w} completed",
                    c.name
                );
            }
        }
    }
}

/// Chaos: the daemon is killed (SIGKILL) at seeded random moments across a whole fleet rollout,
/// once for sure in wave 1's bake, under load. The outcome is the uninterrupted run's (the
/// scenario's expected outcome, which `every_demo_scenario…` and the regional test reach
/// without kills), nothing is deployed without evidence, a resume never re-creates the previous
/// version in a canary subset, and no request fails. `FLOTILLA_CHAOS_SEED` picks another seed.
#[test]
fn kills_at_random_moments_change_no_outcome_and_deploy_nothing_without_evidence() {
    let _slot = fleet_slot();
    let seed: u64 = std::env::var("FLOTILLA_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f10c);
    // xorshift64*: the test's only randomness, reproducible from the seed.
    let mut state = seed | 1;
    let mut next = move |below: u64| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d) % below
    };
    let rt = runtime();
    rt.block_on(async {
        let mut lab = Lab::new(Scenario::RegionalRegression, 2.0, "");
        let load = Load::start(lab.targets());
        let watch = Watch::start(&lab.controls);
        lab.release().await;
        // Once in wave 1's bake: canary-eu-west validated, wave 2 not started.
        lab.wait_for("wave 1's bake", Duration::from_secs(90), |v| {
            cluster(v, "canary-eu-west").status == "Validated" && v.waves[1].started_at.is_none()
        })
        .await;
        lab.kill_serve();
        lab.start_serve();
        let mut kills = 1;
        let settled = loop {
            let pause = Duration::from_millis(2_000 + next(8_000));
            let deadline = Instant::now() + pause;
            let mut view = lab.fleet().await;
            while Instant::now() < deadline && !demo::settled(&view) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                view = lab.fleet().await;
            }
            if demo::settled(&view) || kills >= 6 {
                break lab
                    .wait_for(
                        "the fleet to settle",
                        Duration::from_secs(240),
                        demo::settled,
                    )
                    .await;
            }
            lab.kill_serve();
            tokio::time::sleep(Duration::from_millis(next(1_500))).await;
            lab.start_serve();
            kills += 1;
        };
        let (passed, expected) = demo::judge(Scenario::RegionalRegression, &settled);
        assert!(
            passed,
            "seed {seed}, {kills} kills: expected {expected}: {settled:#?}\n{}",
            lab.log()
        );
        let history = lab.client().history("payment-api").await.unwrap();
        assert_nothing_deployed_without_evidence(&settled, &history);
        assert!(
            !history.iter().any(|e| e.kind == "validate"
                && e.cluster.as_deref() == Some("prod-us-east")
                && e.revision == settled.revision),
            "the regressed cluster was validated: {history:#?}"
        );
        let violations = watch.finish().await;
        assert!(violations.is_empty(), "seed {seed}: {violations:#?}");
        let report = load.finish().await;
        assert_eq!(report.failed, 0, "seed {seed}: {report:#?}");
    });
}

/// Fail closed, as an operator meets it: a first start on a fleet already serving 1.8.3 with
/// manifests that say 1.9.0 adopts what runs and rolls 1.9.0 out in waves, on evidence; an agent
/// restarted mid-canary (it comes back as its file says: no canary) is repaired before its
/// rollout goes on; an invalid edit of the manifests before a restart leaves the fleet running
/// its last valid state, with the error shown.
#[test]
fn first_start_adopts_a_restarted_agent_is_repaired_and_a_bad_edit_keeps_the_fleet_running() {
    let _slot = fleet_slot();
    let rt = runtime();
    rt.block_on(async {
        let mut lab = Lab::prepare(Scenario::Healthy, 2.0, "");
        let path = lab.dir.path().join("manifests.yaml");
        let manifests = std::fs::read_to_string(&path).unwrap();
        let released = manifests.replace(
            &format!("payment-api:{}", demo::OLD),
            &format!("payment-api:{NEW}"),
        );
        assert_ne!(released, manifests);
        std::fs::write(&path, &released).unwrap();
        let watch = Watch::start(&lab.controls);
        let load = Load::start(lab.targets());
        lab.start_serve();
        // Wave 1 runs; the later waves' clusters still serve 1.8.3 alone.
        let view = lab
            .wait_for("wave 1's canary", Duration::from_secs(60), |v| {
                cluster(v, "canary-eu-west").status == "Progressing"
            })
            .await;
        for name in ["prod-eu-west", "prod-us-east", "prod-ap-south"] {
            let c = cluster(&view, name);
            assert_eq!(c.status, "NotStarted", "{name}: {c:#?}");
        }
        for (i, site) in SITES.iter().enumerate().skip(1) {
            let agent = flotilla_agent_backend::AgentClient::new(lab.controls[i].clone()).unwrap();
            let status = agent.status().await.unwrap();
            for subset in &status.subsets {
                assert!(
                    subset.version == demo::OLD || subset.desired_replicas == 0,
                    "{}: {subset:#?}",
                    site.name
                );
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let history = loop {
            let history = lab.client().history("payment-api").await.unwrap();
            if history.iter().filter(|e| e.kind == "adopt").count() >= 4 {
                break history;
            }
            assert!(
                Instant::now() < deadline,
                "not every cluster adopted: {history:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let adopted: Vec<_> = history.iter().filter(|e| e.kind == "adopt").collect();
        assert_eq!(adopted.len(), 4, "{history:#?}");
        for entry in &adopted {
            assert!(
                entry
                    .message
                    .contains(&format!("runs {}: adopted on it", demo::OLD)),
                "{entry:#?}"
            );
        }
        // prod-eu-west's agent restarts mid-canary.
        lab.wait_for("prod-eu-west mid-canary", Duration::from_secs(120), |v| {
            let c = cluster(v, "prod-eu-west");
            c.status == "Progressing" && c.weights.is_some_and(|(canary, _)| canary > 0)
        })
        .await;
        let eu_west = SITES.iter().position(|s| s.name == "prod-eu-west").unwrap();
        lab.restart_agent(eu_west);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let history = lab.client().history("payment-api").await.unwrap();
            if history
                .iter()
                .any(|e| e.kind == "repair" && e.cluster.as_deref() == Some("prod-eu-west"))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no repair: {history:#?}\n{}",
                lab.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Wave 3 in progress: the daemon is stopped, the manifests get a typo, it starts again.
        lab.wait_for("wave 3", Duration::from_secs(120), |v| v.wave == 3)
            .await;
        lab.kill_serve();
        std::fs::write(&path, released.replacen("bakeTime:", "bakeTme:", 1)).unwrap();
        lab.start_serve();
        let view = lab.fleet().await;
        assert!(
            view.errors
                .iter()
                .any(|e| e.contains("manifests.yaml:") && e.contains("bakeTme")),
            "{view:#?}"
        );
        let done = lab
            .wait_released_everywhere(
                "completion on the last valid state",
                Duration::from_secs(180),
            )
            .await;
        assert!(!done.errors.is_empty(), "the error is still shown");
        let history = lab.client().history("payment-api").await.unwrap();
        assert!(history.iter().any(|e| e.kind == "invalid"), "{history:#?}");
        assert_nothing_deployed_without_evidence(&done, &history);
        let violations = watch.finish().await;
        assert!(violations.is_empty(), "{violations:#?}");
        load.finish().await;
    });
}

/// An in-flight rollout survives an upgrade of Flotilla: each of `tests/fixtures/upgrade-0.1/`
/// (commit ff17bc2, before the store's schema version) and `upgrade-0.2/` (commit f38e965,
/// before typed decisions) holds a store written by that release with the demo's healthy
/// release of 1.9.0 in wave 2 (canary-eu-west validated, prod-eu-west mid-canary), and that
/// release's view of it. This release opens each, resumes the same revision at the same wave
/// (wave 1 is not run again), repairs the fresh agents to what the record says they run, and
/// completes.
#[test]
fn an_in_flight_rollout_of_the_previous_release_resumes_after_an_upgrade() {
    for fixture in ["upgrade-0.1", "upgrade-0.2"] {
        resumes_after_an_upgrade(fixture);
    }
}

fn resumes_after_an_upgrade(fixture: &str) {
    let _slot = fleet_slot();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let before: FleetView =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("view.json")).unwrap()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let mut lab = Lab::prepare(Scenario::Healthy, 2.0, "");
        std::fs::copy(
            fixture.join("state.redb"),
            lab.dir.path().join("state.redb"),
        )
        .unwrap();
        let load = Load::start(lab.targets());
        let upgraded_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        lab.start_serve();
        let resumed = lab.fleet().await;
        assert_eq!(resumed.revision, before.revision, "{resumed:#?}");
        assert_eq!(resumed.image, format!("payment-api:{NEW}"));
        assert_eq!(resumed.wave, 2, "{resumed:#?}");
        assert_eq!(resumed.waves[0].completed_at, before.waves[0].completed_at);
        assert_eq!(cluster(&resumed, "canary-eu-west").status, "Validated");
        assert_eq!(
            cluster(&resumed, "prod-eu-west").started_at,
            cluster(&before, "prod-eu-west").started_at,
            "prod-eu-west resumes its canary, not a new one"
        );
        lab.wait_released_everywhere("completion after the upgrade", Duration::from_secs(180))
            .await;
        let history = lab.client().history("payment-api").await.unwrap();
        // The fixture's own log may hold its release's first start; this release adopts
        // nothing.
        assert!(
            !history
                .iter()
                .any(|e| e.kind == "adopt" && e.time >= upgraded_at),
            "not a first start: {history:#?}"
        );
        let wave1 = history
            .iter()
            .filter(|e| {
                e.revision == before.revision
                    && e.kind == "wave"
                    && e.message.contains("wave 1 completed")
            })
            .count();
        assert_eq!(
            wave1, 1,
            "wave 1 completed before the upgrade, never again: {history:#?}"
        );
        // The data plane, not only the record: every agent serves 1.9.0 from its stable subset.
        for (site, control) in SITES.iter().zip(&lab.controls) {
            let status = flotilla_agent_backend::AgentClient::new(control.clone())
                .unwrap()
                .status()
                .await
                .unwrap();
            let stable = status
                .subsets
                .iter()
                .find(|s| s.subset == "stable")
                .unwrap();
            assert_eq!(stable.version, NEW, "{}: {status:#?}", site.name);
        }
        load.finish().await;
    });
}

/// `flotilla install`: bad options are named and print nothing (exit 2); a spoke's manifests
/// are the documented Role in the namespace asked for, naming only the Secrets asked for.
#[test]
fn install_names_a_bad_option_and_prints_a_spokes_role() {
    let out = flotilla()
        .args([
            "install",
            "--namespace",
            "Payments_Prod",
            "--image",
            "flotilla:1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--namespace \"Payments_Prod\""), "{stderr}");
    // The hub's Deployment needs an image: clap refuses without one.
    let out = flotilla().args(["install"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--image"));
    let docs = common::installed(&[
        "--spoke",
        "--namespace",
        "payments",
        "--secret",
        "prom-auth",
    ]);
    let yaml = format!("{docs:#?}");
    assert_eq!(docs.len(), 3, "{yaml}");
    assert!(
        docs.iter()
            .all(|d| d["metadata"]["namespace"] == "payments"),
        "{yaml}"
    );
    let role = docs.iter().find(|d| d["kind"] == "Role").unwrap();
    let secrets: Vec<_> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"][0] == "secrets")
        .collect();
    assert_eq!(secrets.len(), 1);
    assert_eq!(
        secrets[0]["resourceNames"],
        serde_json::json!(["prom-auth"])
    );
}
