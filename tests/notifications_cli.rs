//! End-to-end test of Argo Rollouts' notification configuration under `flotilla serve`: seed
//! 004's `argo-rollouts-notification-configmap` beside the manifests, a Rollout subscribed with
//! `notifications.argoproj.io/subscribe.on-rollout-aborted.slack`, one real agent whose canary
//! regresses, and a local HTTP server playing Slack's Web API. The abort reaches the channel
//! once, naming the failing cluster and metric, and a restarted daemon sends it no second time.
//!
//! Light on purpose (one agent, one cluster, one wave): the fleet behaviour itself is
//! `tests/controller_cli.rs`'s.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{first_line, flotilla, json_field};
use flotilla_agent::loadgen::{self, Target};
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::{FleetView, OperatorCommand};
use flotilla_runtime::demo::{self, NEW, SITES, Scenario};

/// The Slack channel the Rollout subscribes.
const CHANNEL: &str = "flotilla-alerts";
/// The bot token, read from Flotilla's secret sources as `argo-rollouts-notification-secret`'s
/// `slack-token`.
const TOKEN: &str = "xoxb-flotilla-e2e";

/// Seed 004's ConfigMap, as the seed writes it.
fn seed_004_config_map() -> String {
    let seed = std::fs::read_to_string("../shared/seeds/004_19319f4b8bef9823.txt")
        .expect("seed 004 beside the repository (../shared/seeds)");
    let start = seed
        .find("apiVersion: v1\nkind: ConfigMap\n")
        .expect("seed 004 has the ConfigMap");
    let text = &seed[start..];
    let end = text
        .find("\n\n")
        .expect("the ConfigMap ends with a blank line");
    let config_map = format!("{}\n", &text[..end]);
    assert!(
        config_map.contains("trigger.on-rollout-aborted")
            && config_map.contains("when: rollout.status.abort == true")
            && config_map.contains("{{.rollout.metadata.name}}"),
        "{config_map}"
    );
    config_map
}

/// A form body (`application/x-www-form-urlencoded`) decoded.
fn form(body: &str) -> BTreeMap<String, String> {
    let decode = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8(out).unwrap()
    };
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// A local HTTP server playing Slack's Web API (a protocol fixture, not Slack): it records
/// every `chat.postMessage` (content type and form) and answers as Slack does.
async fn slack_fixture() -> (String, Arc<Mutex<Vec<(String, BTreeMap<String, String>)>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/api/chat.postMessage",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let fields = form(&body);
                let mut all = kept.lock().unwrap();
                all.push((content_type, fields));
                axum::Json(serde_json::json!({
                    "ok": true,
                    "channel": "C0FLOTILLA",
                    "ts": format!("1767225600.{:06}", all.len()),
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/api/"), received)
}

/// The demo's manifests for its first cluster alone (one wave), the Rollout subscribed to
/// `on-rollout-aborted` on Slack.
fn manifests(control: &str, speed: f64) -> String {
    let others: Vec<&str> = SITES[1..].iter().map(|s| s.name).collect();
    let text = demo::manifests(&[control.to_owned()], speed);
    let mut kept = Vec::new();
    let mut skip_next = false;
    for line in text.lines() {
        if skip_next {
            skip_next = false;
            continue;
        }
        if others.iter().any(|o| line.contains(o)) {
            // A cluster override is two lines: the cluster, then its args.
            skip_next = line.trim_start().starts_with("- cluster:");
            continue;
        }
        kept.push(line);
    }
    let text = kept.join("\n") + "\n";
    let subscribed = text.replace(
        "kind: Rollout\nmetadata: {name: payment-api}\n",
        &format!(
            "kind: Rollout\nmetadata:\n  name: payment-api\n  annotations:\n    notifications.argoproj.io/subscribe.on-rollout-aborted.slack: {CHANNEL}\n"
        ),
    );
    assert_ne!(subscribed, text, "the Rollout is annotated");
    subscribed
}

/// One agent, the manifests with the notification ConfigMap, and the daemon.
struct Lab {
    dir: tempfile::TempDir,
    agent: Child,
    router: String,
    serve: Option<Child>,
    api: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut serve) = self.serve.take() {
            let _ = serve.kill();
            let _ = serve.wait();
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.agent.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.agent.wait();
    }
}

impl Lab {
    fn new(slack_api: &str, speed: f64) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        demo::write_agent_token(dir.path()).unwrap();
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_flotilla"));
        let agent_file = dir.path().join("agent.yaml");
        std::fs::write(
            &agent_file,
            demo::agent_config(&SITES[0], Scenario::GlobalRegression, &exe, 7, 0.0),
        )
        .unwrap();
        let mut agent = flotilla()
            .args(["agent", "--config"])
            .arg(&agent_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let line = first_line(&mut agent);
        let router = format!("http://{}", json_field(&line, "router"));
        let control = format!("http://{}", json_field(&line, "control"));
        wait_stable_ready(&control);
        let manifests_dir = dir.path().join("manifests");
        std::fs::create_dir(&manifests_dir).unwrap();
        std::fs::write(manifests_dir.join("fleet.yaml"), manifests(&control, speed)).unwrap();
        // Seed 004's ConfigMap, its template naming Flotilla's failing cluster and metric too,
        // and the Slack service at the fixture.
        let config_map = seed_004_config_map().replace(
            "Check the failing AnalysisRun.\n",
            "Check the failing AnalysisRun.\n      Failing: {{.flotilla.cluster}} {{.flotilla.metric}} = {{.flotilla.value}}\n      {{.rollout.status.message}}\n",
        ) + &format!("  service.slack: |\n    token: $slack-token\n    apiURL: {slack_api}\n");
        std::fs::write(manifests_dir.join("notifications.yaml"), config_map).unwrap();
        std::fs::write(
            dir.path().join("serve.yaml"),
            format!(
                "listen: \"127.0.0.1:0\"\nstore: state.redb\nmanifests: manifests\ntick: 300ms\nagentTokenFile: {}\n",
                demo::AGENT_TOKEN_FILE
            ),
        )
        .unwrap();
        let mut lab = Lab {
            dir,
            agent,
            router,
            serve: None,
            api: String::new(),
        };
        lab.start_serve();
        lab
    }

    fn start_serve(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("serve.log"))
            .unwrap();
        let mut child = flotilla()
            .args(["serve", "--config"])
            .arg(self.dir.path().join("serve.yaml"))
            .env(
                "FLOTILLA_SECRET_ARGO_ROLLOUTS_NOTIFICATION_SECRET_SLACK_TOKEN",
                TOKEN,
            )
            .stdout(Stdio::piped())
            .stderr(log)
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

    async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&FleetView) -> bool,
    ) -> FleetView {
        let deadline = Instant::now() + limit;
        loop {
            let view = self.client().fleet("payment-api").await.unwrap();
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

    async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.api))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Blocks until the agent at `control` reports its stable replicas ready.
fn wait_stable_ready(control: &str) {
    use std::io::{Read, Write};
    let addr = control.trim_start_matches("http://");
    let deadline = Instant::now() + Duration::from_secs(60);
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
            Instant::now() < deadline,
            "the agent at {control} never had its stable replicas ready: {answer}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Seed 004's subscription: an abort sends one Slack message naming the failing cluster and
/// metric; after a `kill -9` and a restart of the daemon, no second message for that event.
#[test]
fn seed_004s_slack_subscription_gets_one_message_per_abort_across_a_restart() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (slack_api, received) = slack_fixture().await;
        let mut lab = Lab::new(&slack_api, 2.0);
        lab.wait_for("the first revision to settle", Duration::from_secs(60), |v| {
            v.phase == "Completed"
        })
        .await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let targets = vec![Target::new(format!("{}/pay", lab.router))];
        let load = tokio::spawn(async move {
            loadgen::run_until(&targets, 40.0, Duration::from_secs(300), u64::MAX, async {
                let _ = stopped.await;
            })
            .await
        });
        lab.client()
            .command(
                "payment-api",
                &OperatorCommand::SetImage {
                    container: None,
                    image: format!("payment-api:{NEW}"),
                },
            )
            .await
            .unwrap();
        let view = lab
            .wait_for("the canary's abort", Duration::from_secs(90), |v| {
                v.phase == "Halted"
            })
            .await;
        let _ = stop.send(());
        let _ = load.await;
        let cluster = &view.waves[0].clusters[0];
        assert_eq!(
            (cluster.name.as_str(), cluster.status.as_str()),
            ("canary-eu-west", "RolledBack"),
            "{view:#?}"
        );
        // The message arrives once; its delivery is counted before it leaves the outbox.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let metrics = lab.metrics().await;
            if metrics
                .contains("flotilla_notifications_total{sink=\"argo/slack\",result=\"delivered\"} 1")
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no Slack delivery counted: {:?}\n{metrics}\n{}",
                received.lock().unwrap(),
                lab.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let messages = received.lock().unwrap().clone();
        assert_eq!(messages.len(), 1, "{messages:#?}\n{}", lab.log());
        let (content_type, fields) = &messages[0];
        assert_eq!(content_type, "application/x-www-form-urlencoded");
        assert_eq!(fields["token"], TOKEN);
        assert_eq!(fields["channel"], CHANNEL);
        let text = &fields["text"];
        assert!(
            text.starts_with(
                "\u{1F6A8} Rollout payment-api ABORTED in default.\nReverted to stable. Check the failing AnalysisRun.\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Failing: canary-eu-west error-rate = ["),
            "{text}"
        );
        assert!(
            text.contains("RolloutAborted: Rollout aborted update to revision")
                && text.contains("Metric \"error-rate\" assessed Failed"),
            "{text}"
        );
        // The sending is in the audit log (committed with the tick after it).
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let history = lab.client().history("payment-api").await.unwrap();
            if history
                .iter()
                .any(|e| e.kind.as_str() == "notification" && e.message.contains("sent: Argo slack"))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no notification in the audit log: {history:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A daemon killed and restarted: the event is delivered already, nothing is sent again.
        lab.kill_serve();
        lab.start_serve();
        let view = lab
            .wait_for("the restarted daemon", Duration::from_secs(30), |v| {
                v.phase == "Halted"
            })
            .await;
        assert_eq!(view.waves[0].clusters[0].status, "RolledBack");
        // Several ticks and outbox passes (300 ms and 1 s).
        tokio::time::sleep(Duration::from_secs(4)).await;
        let messages = received.lock().unwrap().clone();
        assert_eq!(messages.len(), 1, "{messages:#?}\n{}", lab.log());
        assert!(
            lab.log()
                .contains("Argo Rollouts notifications: ")
        );
    });
}

/// A notification configuration that cannot be used refuses the daemon's start like a bad
/// configuration: exit 2, the error naming the file, the key and the cause, nothing created.
#[test]
fn a_bad_notification_configuration_is_refused_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    demo::write_agent_token(dir.path()).unwrap();
    let manifests_dir = dir.path().join("manifests");
    std::fs::create_dir(&manifests_dir).unwrap();
    std::fs::write(
        manifests_dir.join("fleet.yaml"),
        manifests("http://127.0.0.1:9", 1.0),
    )
    .unwrap();
    let bad = seed_004_config_map().replace("send: [rollout-aborted]", "send: [rollout-abort]");
    std::fs::write(manifests_dir.join("notifications.yaml"), &bad).unwrap();
    std::fs::write(
        dir.path().join("serve.yaml"),
        format!(
            "listen: \"127.0.0.1:0\"\nstore: state.redb\nmanifests: manifests\nagentTokenFile: {}\n",
            demo::AGENT_TOKEN_FILE
        ),
    )
    .unwrap();
    let mut child = flotilla()
        .args(["serve", "--config"])
        .arg(dir.path().join("serve.yaml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A daemon that started anyway would run forever: stopped after 20 s, and the test fails.
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let line = bad
        .lines()
        .position(|l| l.contains("trigger.on-rollout-aborted"))
        .unwrap()
        + 1;
    assert!(
        stderr.contains(&format!(
            "notifications.yaml:{line}:3: ConfigMap argo-rollouts-notification-configmap: trigger.on-rollout-aborted: [0].send: template \"rollout-abort\" is not defined"
        )),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
    assert!(!dir.path().join("state.redb").exists());
    assert!(!dir.path().join("state.redb.token").exists());
}
