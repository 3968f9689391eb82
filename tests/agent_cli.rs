//! `flotilla agent` and `flotilla demo-app` as processes: replicas run as real child processes,
//! get killed, restarted and replaced; bad configurations and busy ports fail clearly; and after
//! every test no child of the agent is left (a zombie counts as gone: PID 1 here never reaps).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_agent::AgentClient;
use flotilla_agent::client::ClientError;
use flotilla_agent::loadgen::{self, Target};
use flotilla_agent::workload::{Phase, SubsetStatus};

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
    client: AgentClient,
    router: String,
    runtime: tokio::runtime::Runtime,
    seen: Vec<u32>,
}

fn start(path: &Path) -> Running {
    let mut child = Command::new(BIN)
        .args(["agent", "--config"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let event: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the agent's first line {line:?}: {e}"));
    let control = event["control"].as_str().unwrap();
    Running {
        child,
        client: AgentClient::new(format!("http://{control}")).unwrap(),
        router: format!("http://{}", event["router"].as_str().unwrap()),
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
