//! `flotilla agent` and `flotilla demo-app` as processes: replicas run as real child processes,
//! get killed, restarted and replaced; bad configurations and busy ports fail clearly; and after
//! every test no child of the agent is left (a zombie counts as gone: PID 1 here never reaps).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_agent::loadgen::{self, Target};
use flotilla_agent_backend::wire::{Phase, SubsetStatus};
use flotilla_agent_backend::{AgentClient, ClientError};

const BIN: &str = env!("CARGO_BIN_EXE_flotilla");

/// Sends a signal with kill(1) (the binary's tests have no signal crate of their own).
fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args(["-s", name, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -s {name} {pid}");
}

/// A fresh directory for one test's files, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("flotilla-agent-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(stable_replicas: u32, extra: &str) -> String {
    format!(
        r#"cluster: local-a
router: {{listen: "127.0.0.1:0"}}
control: {{listen: "127.0.0.1:0"}}
seed: 7
workload:
  command: ["{BIN}", demo-app, --version, "{{{{version}}}}", --port, "{{{{port}}}}"]
  readiness: {{path: /healthz, periodMs: 100}}
  drainDelayMs: 100
  terminationGracePeriodSeconds: 5
  restartBackoff: {{initialMs: 200}}
subsets:
  stable: {{version: "1.0", replicas: {stable_replicas}}}
  canary: {{version: "2.0", replicas: 1}}
{extra}"#
    )
}

struct Running {
    child: Child,
    /// A client with the agent's token (from its token file).
    client: AgentClient,
    control: String,
    router: String,
    /// The token file the agent named (None: the token is from the environment).
    token_file: Option<String>,
    runtime: tokio::runtime::Runtime,
    seen: Vec<u32>,
}

/// Starts an agent; its client carries the token from the file the agent names on its first
/// line (none when the token comes from the environment).
fn start(path: &Path) -> Running {
    start_with_env(path, None)
}

fn start_with_env(path: &Path, token: Option<&str>) -> Running {
    let mut command = Command::new(BIN);
    command
        .args(["agent", "--config"])
        .arg(path)
        .env_remove("FLOTILLA_AGENT_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(token) = token {
        command.env("FLOTILLA_AGENT_TOKEN", token);
    }
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let event: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the agent's first line {line:?}: {e}"));
    let control = event["control"].as_str().unwrap();
    let mut client = AgentClient::new(format!("http://{control}")).unwrap();
    if let Some(file) = event["tokenFile"].as_str() {
        client = client.with_token(std::fs::read_to_string(file).unwrap());
    }
    Running {
        child,
        client,
        control: format!("http://{control}"),
        router: format!("http://{}", event["router"].as_str().unwrap()),
        token_file: event["tokenFile"].as_str().map(str::to_owned),
        runtime: flotilla_agent::runtime().unwrap(),
        seen: Vec::new(),
    }
}

impl Running {
    fn subset(&mut self, name: &str) -> SubsetStatus {
        let status = self.runtime.block_on(self.client.subset(name)).unwrap();
        for r in &status.replicas {
            if let Some(pid) = r.pid
                && !self.seen.contains(&pid)
            {
                self.seen.push(pid);
            }
        }
        status
    }

    /// Polls a subset until `check` holds (60 s at most: a loaded machine is slow to start
    /// processes).
    fn wait_for(
        &mut self,
        name: &str,
        what: &str,
        check: impl Fn(&SubsetStatus) -> bool,
    ) -> SubsetStatus {
        let start = Instant::now();
        loop {
            let status = self.subset(name);
            if check(&status) {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what}: {status:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn load(&self, rate: f64, requests: u64) -> loadgen::Report {
        self.runtime
            .block_on(loadgen::run(
                &[Target::new(format!("{}/work", self.router))],
                rate,
                Duration::from_secs(10),
                requests,
            ))
            .unwrap()
    }

    /// SIGTERM, then wait (bounded) for a clean exit, then check every child is gone.
    fn stop(mut self) {
        signal(self.child.id(), "TERM");
        let seen = std::mem::take(&mut self.seen);
        let status = wait_bounded(&mut self.child, Duration::from_secs(60));
        assert!(status.success(), "the agent exited with {status}");
        assert_all_gone(&seen);
    }
}

impl Drop for Running {
    /// A test that failed half-way still takes its agent (and, through the parent-death
    /// signal, the agent's children) with it.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("the process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pid is gone when /proc has no entry for it, or it is a zombie.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn assert_all_gone(pids: &[u32]) {
    assert!(!pids.is_empty());
    let start = Instant::now();
    while !pids.iter().all(|p| gone(*p)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "children still running: {:?}",
            pids.iter().filter(|p| !gone(**p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process group of a pid (field 5 of /proc/<pid>/stat).
fn process_group(pid: u32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

fn ready(n: u32) -> impl Fn(&SubsetStatus) -> bool {
    move |s| s.available_replicas == n && s.endpoints.len() == n as usize
}

#[test]
fn a_killed_replica_leaves_routing_and_restarts_and_versions_are_replaced() {
    let dir = TempDir::new("killed");
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, config(2, "")).unwrap();
    let mut agent = start(&path);
    let stable = agent.wait_for("stable", "two ready stable replicas", ready(2));
    agent.wait_for("canary", "a ready canary replica", ready(1));
    for r in &stable.replicas {
        let pid = r.pid.unwrap();
        assert_eq!(
            process_group(pid),
            pid as i32,
            "each replica leads its own group"
        );
    }

    // Kill one replica: it leaves routing, is restarted on a new process, and rejoins.
    let victim = stable.replicas[0].clone();
    let victim_pid = victim.pid.unwrap();
    let victim_addr = format!("127.0.0.1:{}", victim.port.unwrap());
    signal(victim_pid, "KILL");
    let after = agent.wait_for("stable", "the killed replica to be restarted", |s| {
        s.replicas.iter().any(|r| {
            r.id == victim.id
                && r.restarts >= 1
                && r.phase == Phase::Ready
                && r.pid != Some(victim_pid)
        }) && s.endpoints.len() == 2
    });
    assert!(!after.endpoints.contains(&victim_addr), "{after:#?}");
    let restarted = after.replicas.iter().find(|r| r.id == victim.id).unwrap();
    assert_eq!(restarted.last_exit.as_deref(), Some("killed by SIGKILL"));
    assert!(gone(victim_pid));

    // Traffic flows on the ready replicas.
    let report = agent.load(200.0, 200);
    assert_eq!(report.status_counts.get(&200), Some(&200), "{report:?}");

    // Scale the canary to a new version: old replicas are replaced once new ones are ready.
    let old_canary: Vec<u32> = agent
        .subset("canary")
        .replicas
        .iter()
        .filter_map(|r| r.pid)
        .collect();
    agent
        .runtime
        .block_on(agent.client.scale("canary", "2.1", 2))
        .unwrap();
    agent.wait_for("canary", "two ready 2.1 replicas and no 2.0", |s| {
        ready(2)(s) && s.replicas.iter().all(|r| r.version == "2.1")
    });
    assert_all_gone(&old_canary);
    agent
        .runtime
        .block_on(agent.client.set_weights(100))
        .unwrap();
    let report = agent.load(200.0, 100);
    assert_eq!(report.status_counts.get(&200), Some(&100), "{report:?}");
    // Scale to zero: 503 naming the subset.
    agent
        .runtime
        .block_on(agent.client.scale("canary", "2.1", 0))
        .unwrap();
    agent.wait_for("canary", "no canary replica", |s| s.replicas.is_empty());
    let report = agent.load(100.0, 20);
    assert_eq!(report.status_counts.get(&503), Some(&20), "{report:?}");
    agent.stop();
}

/// `router.threads` is what serves: the agent runs exactly that many router threads, and
/// traffic spread over several connections (handed to them round robin) is all answered.
#[test]
fn the_router_serves_on_its_configured_threads() {
    let dir = TempDir::new("threads");
    let path = dir.path().join("agent.yaml");
    let text = config(2, "").replace(
        "router: {listen: \"127.0.0.1:0\"}",
        "router: {listen: \"127.0.0.1:0\", threads: 3}",
    );
    assert!(text.contains("threads: 3"));
    std::fs::write(&path, text).unwrap();
    let mut agent = start(&path);
    agent.wait_for("stable", "two ready stable replicas", ready(2));
    agent.wait_for("canary", "a ready canary replica", ready(1));
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", agent.child.id()))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("router-"))
        .collect();
    names.sort();
    assert_eq!(names, ["router-0", "router-1", "router-2"]);
    let report = agent.runtime.block_on(loadgen::run_closed(
        &[Target::new(format!("{}/work", agent.router))],
        6,
        Duration::from_secs(30),
        600,
    ));
    let report = report.unwrap();
    assert_eq!(report.status_counts.get(&200), Some(&600), "{report:?}");
    agent.stop();
}

#[test]
fn children_die_with_an_agent_killed_by_sigkill() {
    let dir = TempDir::new("sigkill");
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, config(2, "")).unwrap();
    let mut agent = start(&path);
    agent.wait_for("stable", "two ready stable replicas", ready(2));
    agent.wait_for("canary", "a ready canary replica", ready(1));
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    assert_all_gone(&agent.seen);
}

#[test]
fn a_bad_reload_keeps_the_running_configuration() {
    let dir = TempDir::new("reload");
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, config(1, "")).unwrap();
    let mut agent = start(&path);
    agent.wait_for("stable", "a ready stable replica", ready(1));
    let before = agent.runtime.block_on(agent.client.status()).unwrap();

    std::fs::write(
        &path,
        config(
            3,
            "routes:\n  - {name: beta, subset: canry, header: {name: x-beta, exact: \"1\"}}\n",
        ),
    )
    .unwrap();
    let err = agent
        .runtime
        .block_on(agent.client.reload_config())
        .unwrap_err();
    let ClientError::Api {
        status, message, ..
    } = err
    else {
        panic!("{err}")
    };
    assert_eq!(status, 400);
    assert!(
        message.contains("agent.yaml:15:") && message.contains("unknown subset \"canry\""),
        "{message}"
    );
    // SIGHUP reloads the same bad file: the agent keeps running and keeps its configuration.
    signal(agent.child.id(), "HUP");
    let report = agent.load(100.0, 50);
    assert_eq!(report.status_counts.get(&200), Some(&50), "{report:?}");
    let after = agent.runtime.block_on(agent.client.status()).unwrap();
    assert_eq!(after.weights, before.weights);
    let stable = agent.subset("stable");
    assert_eq!(stable.desired_replicas, 1);
    assert!(agent.child.try_wait().unwrap().is_none());

    // A good file applies.
    std::fs::write(&path, config(2, "")).unwrap();
    agent
        .runtime
        .block_on(agent.client.reload_config())
        .unwrap();
    agent.wait_for("stable", "two ready stable replicas", ready(2));
    agent.stop();
}

#[test]
fn bad_configurations_and_busy_ports_are_clear_errors() {
    let dir = TempDir::new("bad");
    let run = |text: &str| {
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, text).unwrap();
        let mut child = Command::new(BIN)
            .args(["agent", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = wait_bounded(&mut child, Duration::from_secs(60));
        let output = child.wait_with_output().unwrap();
        (
            status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // A version a process cannot take (a NUL crash-looped a replica), and more replicas than
    // maxReplicas: file, line and field.
    let (code, stderr) = run(&config(1, "").replace("version: \"2.0\"", "version: \"2.0\\u0000\""));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("agent.yaml:13:")
            && stderr.contains("subsets.canary.version: version \"2.0\\0\""),
        "{stderr}"
    );
    let (code, stderr) = run(&config(33, ""));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("agent.yaml:12:")
            && stderr
                .contains("subsets.stable.replicas: 33 replicas is more than maxReplicas (32)"),
        "{stderr}"
    );
    // A token file that is empty, or open to every user, is refused by name.
    let token = dir.path().join("agent.token");
    let with_token_file = config(1, "").replace(
        "control: {listen: \"127.0.0.1:0\"}",
        "control: {listen: \"127.0.0.1:0\", tokenFile: agent.token}",
    );
    for (text, mode, needle) in [
        ("\n", 0o600, "is empty"),
        (
            "0123456789abcdef",
            0o644,
            "is open to every user (mode 644)",
        ),
    ] {
        std::fs::write(&token, text).unwrap();
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
        let (code, stderr) = run(&with_token_file);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "the token file {} (control.tokenFile) {needle}",
                token.display()
            )),
            "{stderr}"
        );
    }

    let (code, stderr) = run(&config(
        1,
        "mirrors:\n  - {name: shadow, subset: canry, percentage: 10}\n",
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("agent.yaml:15:")
            && stderr.contains("mirrors[0].subset: unknown subset \"canry\""),
        "{stderr}"
    );

    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let text = config(1, "").replacen(
        "router: {listen: \"127.0.0.1:0\"}",
        &format!("router: {{listen: \"127.0.0.1:{port}\"}}"),
        1,
    );
    let (code, stderr) = run(&text);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port} for the router"))
            && stderr.contains("another process holds this port"),
        "{stderr}"
    );

    // The demo service refuses bad flags the same way.
    let output = Command::new(BIN)
        .args([
            "demo-app",
            "--version",
            "1",
            "--port",
            "0",
            "--error-rate",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("error rate"));
}

/// Issue 15: the control API's changes need the agent's token (created 0600 next to the
/// configuration at first start, or `FLOTILLA_AGENT_TOKEN`); a version with a NUL and more
/// replicas than `maxReplicas` are refused with nothing changed; and the GET whose series
/// arithmetic wrapped is a 400 that leaves the agent alive and routing.
#[test]
fn changes_need_the_token_bad_scales_change_nothing_and_a_hostile_query_is_a_400() {
    let dir = TempDir::new("token");
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, config(1, "")).unwrap();
    let mut agent = start(&path);
    let token_file = dir.path().join("agent.yaml.token");
    assert_eq!(
        agent.token_file.as_deref(),
        Some(token_file.to_str().unwrap())
    );
    let meta = std::fs::metadata(&token_file).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(token.trim().len(), 64, "{token}");
    agent.wait_for("stable", "a ready stable replica", ready(1));
    agent.wait_for("canary", "a ready canary replica", ready(1));

    let api = |e: ClientError| match e {
        ClientError::Api {
            status, message, ..
        } => (status, message),
        other => panic!("{other}"),
    };
    let anonymous = AgentClient::new(&agent.control).unwrap();
    let wrong = AgentClient::new(&agent.control)
        .unwrap()
        .with_token("0".repeat(64));
    let (status, _) = api(agent
        .runtime
        .block_on(anonymous.set_weights(100))
        .unwrap_err());
    assert_eq!(status, 401);
    let (status, _) = api(agent
        .runtime
        .block_on(wrong.scale("canary", "6.6", 3))
        .unwrap_err());
    assert_eq!(status, 403);
    let weights = agent.runtime.block_on(anonymous.weights()).unwrap();
    assert_eq!(weights.canary, 0, "reads are open; the weight is unchanged");

    // With the token: a NUL in the version, or too many replicas, is a 400 naming it.
    let (status, message) = api(agent
        .runtime
        .block_on(agent.client.scale("canary", "2.1\u{0}", 1))
        .unwrap_err());
    assert_eq!(status, 400);
    assert!(
        message.starts_with("version: version \"2.1\\0\""),
        "{message}"
    );
    let (status, message) = api(agent
        .runtime
        .block_on(agent.client.scale("canary", "2.1", 33))
        .unwrap_err());
    assert_eq!(status, 400);
    assert!(message.contains("maxReplicas is 32"), "{message}");
    let canary = agent.subset("canary");
    assert_eq!(
        (canary.version.as_str(), canary.desired_replicas),
        ("2.0", 1),
        "nothing changed"
    );
    assert!(
        canary
            .replicas
            .iter()
            .all(|r| r.version == "2.0" && r.restarts == 0)
    );

    // The hostile GET: a 400, and the agent lives, answers and routes.
    let hostile = format!(
        "{}/v1/subsets/stable/series?start=18446744073709551610&end=18446744073709551615&step=10s",
        agent.control
    );
    let (status, body) = agent.runtime.block_on(async {
        let response = reqwest::get(&hostile).await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    });
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"error\""), "{body}");
    assert!(agent.child.try_wait().unwrap().is_none(), "the agent died");
    let health = agent.runtime.block_on(async {
        reqwest::get(format!("{}/healthz", agent.control))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    assert_eq!(health, "ok\n");
    let report = agent.load(100.0, 50);
    assert_eq!(report.status_counts.get(&200), Some(&50), "{report:?}");

    // A right change is accepted.
    agent
        .runtime
        .block_on(agent.client.set_weights(100))
        .unwrap();
    agent.stop();

    // FLOTILLA_AGENT_TOKEN overrides the file: the file's token is now the wrong one.
    let mut agent = start_with_env(&path, Some("env-token-0123456789"));
    assert_eq!(agent.token_file, None);
    agent.wait_for("stable", "a ready stable replica", ready(1));
    let from_file = AgentClient::new(&agent.control).unwrap().with_token(&token);
    let (status, _) = api(agent
        .runtime
        .block_on(from_file.set_weights(0))
        .unwrap_err());
    assert_eq!(status, 403);
    let from_env = AgentClient::new(&agent.control)
        .unwrap()
        .with_token("env-token-0123456789");
    assert_eq!(
        agent
            .runtime
            .block_on(from_env.set_weights(0))
            .unwrap()
            .canary,
        0
    );
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), token);
    agent.stop();
}
