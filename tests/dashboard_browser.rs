//! The dashboard end to end, in a real headless Chromium (Debian's `chromium`, driven through
//! Debian's `chromedriver` over WebDriver with `fantoccini`), against `flotilla demo --hold`:
//! the regional-regression story on four local clusters with their agents, load and the daemon.
//! Every wait is on a condition of the page (or of the API), polled with a deadline; none is a
//! fixed sleep. Screenshots of the fleet and cluster views land in `target/dashboard/`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};

use common::flotilla;

const FLEET: &str = "payment-api";

/// The demo, stopped when the test ends, however it ends: asked first (on SIGINT it stops
/// every process it started), killed if it has not within 10 s.
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads a child's stdout lines until one starts with `prefix`; the rest is drained.
fn line_starting(child: &mut Child, prefix: &str, within: Duration) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = prefix.to_owned();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let mut sent = false;
        let mut seen = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            if !sent {
                seen.push_str(&line);
                if line.starts_with(&wanted) {
                    let _ = tx.send(Ok(line.trim_end().to_owned()));
                    sent = true;
                }
            }
            line.clear();
        }
        if !sent {
            let _ = tx.send(Err(seen));
        }
    });
    match rx.recv_timeout(within) {
        Ok(Ok(line)) => line,
        Ok(Err(seen)) => panic!("the child ended without a line starting {prefix:?}:\n{seen}"),
        Err(_) => panic!("no line starting {prefix:?} within {within:?}"),
    }
}

/// Polls a JavaScript condition of the page until it holds (or fails the test at `within`).
async fn until(client: &Client, what: &str, script: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let value = client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if value.as_bool() == Some(true) {
            return;
        }
        if Instant::now() > deadline {
            let body = client
                .execute("return document.body.innerText", Vec::new())
                .await
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            panic!("{what}: not within {within:?}; the page says:\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn text(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

async fn screenshot(client: &Client, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, client.screenshot().await.unwrap()).unwrap();
    path
}

async fn cluster_status(api: &str, cluster: &str) -> serde_json::Value {
    reqwest::get(format!("{api}/v1/fleets/{FLEET}/clusters/{cluster}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[test]
fn the_dashboard_follows_a_release_live_and_acts_only_with_the_token() {
    // The demo, held after its story.
    let mut demo = flotilla()
        .args([
            "demo",
            "--scenario",
            "regional-regression",
            "--speed",
            "2",
            "--hold",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let line = line_starting(&mut demo, "dashboard: ", Duration::from_secs(120));
    let demo = Demo(demo);
    // `dashboard: URL (reads are open; actions need the API token in PATH)`
    let url = line
        .strip_prefix("dashboard: ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    let token_path = line
        .rsplit(" in ")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .to_owned();
    let token = std::fs::read_to_string(&token_path)
        .unwrap()
        .trim()
        .to_owned();
    let api = url.trim_end_matches("/dashboard/").to_owned();

    common::runtime().block_on(async {
        let browser = common::browser::start().await;
        let client = &browser.client;

        // The list.
        client.goto(&url).await.unwrap();
        until(
            client,
            "the fleet in the list",
            &format!("return document.getElementById('f-{FLEET}') !== null"),
            Duration::from_secs(30),
        )
        .await;

        // The fleet view: marked, so that a reload would show.
        client.goto(&format!("{url}fleets/{FLEET}")).await.unwrap();
        client
            .execute("window.flotillaMark = 42; return true", Vec::new())
            .await
            .unwrap();
        // Without a token: read-only, no action offered.
        assert!(text(client, "#mode").await.contains("read-only"));
        // Read in one script: the live page may re-render its buttons between two WebDriver
        // calls (a found element then goes stale).
        let shown = client
            .execute(
                "return Array.from(document.querySelectorAll('button.action')).map(b => b.checkVisibility({visibilityProperty: true, opacityProperty: true}))",
                Vec::new(),
            )
            .await
            .unwrap();
        let shown: Vec<bool> = serde_json::from_value(shown).unwrap();
        assert!(!shown.is_empty());
        assert!(
            shown.iter().all(|s| !s),
            "an action is offered without a token: {shown:?}"
        );
        // A forged request is refused, on the dashboard's path as on the API's.
        let http = reqwest::Client::new();
        for path in [
            format!("{url}api/fleets/{FLEET}/commands"),
            format!("{api}/v1/fleets/{FLEET}/commands"),
        ] {
            let none = http
                .post(&path)
                .json(&serde_json::json!({"command": "abort"}))
                .send()
                .await
                .unwrap();
            assert_eq!(none.status(), 401, "{path}");
            let forged = http
                .post(&path)
                .bearer_auth("forged-token")
                .json(&serde_json::json!({"command": "abort"}))
                .send()
                .await
                .unwrap();
            assert_eq!(forged.status(), 403, "{path}");
        }
        // A wrong token: a clear message, still read-only.
        let input = client.find(Locator::Id("token")).await.unwrap();
        input.send_keys("not-the-token").await.unwrap();
        client.find(Locator::Id("token-use")).await.unwrap().click().await.unwrap();
        until(
            client,
            "the wrong token refused",
            "const n = document.getElementById('notice'); \
             return n.className === 'bad' && n.textContent.includes('refused this token')",
            Duration::from_secs(10),
        )
        .await;
        assert!(text(client, "#mode").await.contains("read-only"));
        // The real one: actions offered.
        let input = client.find(Locator::Id("token")).await.unwrap();
        input.clear().await.unwrap();
        input.send_keys(&token).await.unwrap();
        client.find(Locator::Id("token-use")).await.unwrap().click().await.unwrap();
        until(
            client,
            "actions enabled",
            "return document.body.classList.contains('can-act')",
            Duration::from_secs(10),
        )
        .await;

        // The waves advance on the page, without a reload: the release of 1.9.0 (the demo first
        // settles every cluster on 1.8.3).
        until(
            client,
            "the release of 1.9.0",
            "return document.getElementById('fleet-image').textContent === 'payment-api:1.9.0'",
            Duration::from_secs(120),
        )
        .await;
        for wave in ["2", "3"] {
            until(
                client,
                &format!("wave {wave} shown"),
                &format!("return document.getElementById('fleet-wave').textContent === '{wave}'"),
                Duration::from_secs(240),
            )
            .await;
        }
        until(
            client,
            "prod-ap-south in flight",
            "const r = document.getElementById('c-prod-ap-south'); \
             return r !== null && ['Progressing','Paused'].includes(r.dataset.status)",
            Duration::from_secs(120),
        )
        .await;
        let mark = client
            .execute("return window.flotillaMark === 42", Vec::new())
            .await
            .unwrap();
        assert_eq!(mark, serde_json::json!(true), "the page was reloaded");
        let seq: u64 = client
            .execute("return Number(document.body.dataset.seq)", Vec::new())
            .await
            .unwrap()
            .as_u64()
            .unwrap();
        assert!(seq > 1, "no live update was applied (seq {seq})");
        let shot = screenshot(client, "fleet-wave3.png").await;
        eprintln!("fleet view in wave 3: {}", shot.display());

        // The regressed cluster: its latency plot has points above its threshold.
        client
            .goto(&format!("{url}fleets/{FLEET}/clusters/prod-us-east"))
            .await
            .unwrap();
        until(
            client,
            "prod-us-east rolled back, on its page",
            "return document.getElementById('cluster-status').textContent === 'RolledBack'",
            Duration::from_secs(240),
        )
        .await;
        let above = client
            .execute(
                "const fig = document.querySelector('figure[data-series=\"metric-latency-p95\"]'); \
                 if (!fig) return 'no latency plot'; \
                 const line = fig.querySelector('line.threshold[data-failure=\"true\"]'); \
                 if (!line) return 'no failure threshold drawn'; \
                 const y = Number(line.getAttribute('y1')); \
                 const t = Number(line.dataset.value); \
                 const failed = [...fig.querySelectorAll('circle.failed')]; \
                 const above = failed.filter(c => Number(c.getAttribute('cy')) < y && Number(c.dataset.value) > t); \
                 return above.length;",
                Vec::new(),
            )
            .await
            .unwrap();
        assert!(
            above.as_u64().is_some_and(|n| n >= 1),
            "failed points above the threshold: {above}"
        );
        let shot = screenshot(client, "cluster.png").await;
        eprintln!("cluster view: {}", shot.display());

        // Abort prod-ap-south from its page, confirming what it will do. The fleet halted on
        // prod-us-east's failure, so prod-ap-south (its wave's other cluster, two pauses from
        // done when prod-us-east fails at its first step) is paused in flight.
        let view = cluster_status(&api, "prod-ap-south").await;
        assert_eq!(
            view["cluster"]["status"], "Paused",
            "prod-ap-south is not in flight when prod-us-east failed: {view:#}"
        );
        client
            .goto(&format!("{url}fleets/{FLEET}/clusters/prod-ap-south"))
            .await
            .unwrap();
        // The page's body is refreshed on the cluster's events: a button found may be replaced
        // before the click lands, then it is found again.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let clicked = async {
                let abort = client.find(Locator::Css("button.action")).await?;
                assert!(abort.is_displayed().await?, "the abort is not offered");
                abort.click().await
            }
            .await;
            match clicked {
                Ok(()) => break,
                Err(e) if Instant::now() < deadline => eprintln!("again: {e}"),
                Err(e) => panic!("the abort button: {e}"),
            }
        }
        until(
            client,
            "the confirmation",
            "const d = document.getElementById('confirm'); \
             return d.open && d.textContent.includes('Abort prod-ap-south')",
            Duration::from_secs(10),
        )
        .await;
        client.find(Locator::Id("confirm-yes")).await.unwrap().click().await.unwrap();
        until(
            client,
            "the abort accepted",
            "const n = document.getElementById('notice'); \
             return n.className === 'ok' && n.textContent.includes('accepted')",
            Duration::from_secs(10),
        )
        .await;
        // Through the API: that cluster rolled back.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let view = cluster_status(&api, "prod-ap-south").await;
            if view["cluster"]["status"] == "RolledBack" {
                assert_eq!(view["abort"], true, "{view:#}");
                break;
            }
            if Instant::now() > deadline {
                let history: serde_json::Value =
                    reqwest::get(format!("{api}/v1/fleets/{FLEET}/history"))
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                let lines: Vec<String> = history
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| format!("{} {} {}", e["kind"], e["cluster"], e["message"]))
                    .collect();
                panic!(
                    "prod-ap-south not rolled back: {view:#}\nhistory:\n{}",
                    lines.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        // The audit timeline: the decisions, the operator's abort among them.
        client.goto(&format!("{url}fleets/{FLEET}/audit")).await.unwrap();
        until(
            client,
            "the audit timeline",
            "return document.querySelector('tr.kind-rollback') !== null && \
             [...document.querySelectorAll('tr.kind-command')].some(r => r.textContent.includes('abort'))",
            Duration::from_secs(10),
        )
        .await;

        // The fleet after the story: halted, prod-us-east and the aborted prod-ap-south rolled
        // back, the eu-west clusters on the new version.
        client.goto(&format!("{url}fleets/{FLEET}")).await.unwrap();
        until(
            client,
            "the fleet's final state",
            "const r = document.getElementById('c-prod-ap-south'); \
             return document.body.dataset.seq !== undefined && r !== null && r.dataset.status === 'RolledBack'",
            Duration::from_secs(30),
        )
        .await;
        let shot = screenshot(client, "fleet.png").await;
        eprintln!("fleet view: {}", shot.display());

        // Names that are not there: a clear page.
        client.goto(&format!("{url}fleets/nope")).await.unwrap();
        assert!(
            text(client, "#missing")
                .await
                .contains("There is no fleet rollout named \"nope\"")
        );
        client
            .goto(&format!("{url}fleets/{FLEET}/clusters/nope"))
            .await
            .unwrap();
        assert!(
            text(client, "#missing")
                .await
                .contains("has no cluster named \"nope\"")
        );
        client.clone().close().await.unwrap();
    });
    drop(demo);
}
