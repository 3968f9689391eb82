//! Process workloads: each subset runs N replicas of its revision as local processes.
//!
//! A replica gets its own free loopback port, runs the command template in its own process
//! group, and joins routing once its HTTP readiness probe passes. A replica that exits is taken
//! out of routing at once and restarted with exponential backoff. Scaling down or replacing a
//! version takes a replica out of routing first, waits the drain delay, then sends SIGTERM to its
//! group and SIGKILL after the grace period. A new version surges: the old replicas keep serving
//! until as many new ones are ready.
//!
//! Children die with the agent: they are started through `setpriv --pdeathsig KILL` from one
//! long-lived spawner thread (the parent-death signal follows the thread that forked), their
//! groups are killed when their handles drop, and a clean shutdown stops them gracefully.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::WorkloadTemplate;
use crate::router::Router;

/// What a subset should run.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The version (`{{version}}`).
    pub version: String,
    /// How many replicas.
    pub replicas: u32,
    /// How to run one (required when `replicas > 0`).
    pub template: Option<WorkloadTemplate>,
}

/// Why a workload change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The subset does not exist.
    #[error("unknown subset {subset:?}; the subsets are {known}")]
    UnknownSubset {
        /// What was asked.
        subset: String,
        /// The subsets there are.
        known: String,
    },
    /// The subset routes to fixed endpoints.
    #[error("subset {0:?} routes to fixed endpoints; it has no processes to scale")]
    FixedEndpoints(String),
    /// The subset has no workload template.
    #[error("subset {0:?} has no workload template (set workload in the agent configuration)")]
    NoTemplate(String),
    /// Replicas without a version.
    #[error("a version is required to run replicas")]
    NoVersion,
    /// A version outside the allowed characters or length.
    #[error("{0}")]
    InvalidVersion(String),
}

/// The phase of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Started, readiness not yet passed.
    Starting,
    /// Passing its readiness probe and in routing (unless stopping).
    Ready,
    /// Was ready, now failing its probe.
    NotReady,
    /// Exited or failed to start; waiting to restart.
    Crashed,
    /// Being stopped.
    Stopping,
}

/// One replica's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The replica's number within the agent.
    pub id: u64,
    /// The version it runs.
    pub version: String,
    /// Its phase.
    pub phase: Phase,
    /// Its port (of the current process).
    pub port: Option<u16>,
    /// Its process id (of the current process).
    pub pid: Option<u32>,
    /// How many times it was restarted.
    pub restarts: u32,
    /// How the last process ended, if one did.
    pub last_exit: Option<String>,
}

/// One subset's workload state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubsetStatus {
    /// The subset.
    pub subset: String,
    /// The desired version.
    pub version: String,
    /// The desired number of replicas.
    pub desired_replicas: u32,
    /// Replicas in routing (any version).
    pub ready_replicas: u32,
    /// Ready replicas of the desired version.
    pub available_replicas: u32,
    /// Replicas of the desired version that are not being stopped.
    pub updated_replicas: u32,
    /// The endpoints in routing.
    pub endpoints: Vec<String>,
    /// Whether the subset routes to fixed endpoints instead of processes.
    pub fixed_endpoints: bool,
    /// Every replica.
    pub replicas: Vec<ReplicaStatus>,
}

/// The workloads of every subset.
pub struct Workloads {
    router: Arc<Router>,
    spawner: Arc<Spawner>,
    subsets: Mutex<BTreeMap<String, SubsetHandle>>,
    next_id: Arc<Mutex<u64>>,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads").finish_non_exhaustive()
    }
}

enum SubsetHandle {
    Fixed(Vec<SocketAddr>),
    Processes {
        desired: watch::Sender<Desired>,
        shutdown: watch::Sender<bool>,
        state: Arc<Mutex<Vec<ReplicaStatus>>>,
        routed: Arc<Mutex<Vec<SocketAddr>>>,
        task: JoinHandle<()>,
    },
}

impl Workloads {
    /// Workloads that publish ready endpoints to `router`. Must be called inside a tokio
    /// runtime.
    pub fn new(router: Arc<Router>) -> Workloads {
        Workloads {
            router,
            spawner: Arc::new(Spawner::start()),
            subsets: Mutex::new(BTreeMap::new()),
            next_id: Arc::new(Mutex::new(0)),
        }
    }

    /// Makes a subset route to fixed endpoints (stopping its processes, if it had any).
    pub fn set_fixed(&self, subset: &str, endpoints: Vec<SocketAddr>) {
        let mut subsets = self.subsets.lock().expect("workloads lock");
        if let Some(SubsetHandle::Processes {
            desired, shutdown, ..
        }) = subsets.get(subset)
        {
            desired.send_modify(|d| d.replicas = 0);
            let _ = shutdown.send(true);
        }
        self.router.set_endpoints(subset, endpoints.clone());
        subsets.insert(subset.to_owned(), SubsetHandle::Fixed(endpoints));
    }

    /// Sets what a subset runs, starting its supervisor when it has none.
    pub fn set_desired(&self, subset: &str, want: Desired) -> Result<(), WorkloadError> {
        if !self.router.has_subset(subset) {
            return Err(WorkloadError::UnknownSubset {
                subset: subset.to_owned(),
                known: self.router.subsets().join(", "),
            });
        }
        if want.replicas > 0 {
            if want.template.is_none() {
                return Err(WorkloadError::NoTemplate(subset.to_owned()));
            }
            if want.version.trim().is_empty() {
                return Err(WorkloadError::NoVersion);
            }
        }
        // It becomes a replica's command line: nothing a process cannot take.
        if !want.version.is_empty() {
            crate::config::check_version(&want.version).map_err(WorkloadError::InvalidVersion)?;
        }
        let mut subsets = self.subsets.lock().expect("workloads lock");
        match subsets.get(subset) {
            Some(SubsetHandle::Processes { desired, .. }) => {
                desired.send_replace(want);
            }
            _ => {
                let (desired, desired_rx) = watch::channel(want);
                let (shutdown, shutdown_rx) = watch::channel(false);
                let state = Arc::new(Mutex::new(Vec::new()));
                let routed = Arc::new(Mutex::new(Vec::new()));
                let supervisor = Supervisor {
                    subset: subset.to_owned(),
                    router: self.router.clone(),
                    spawner: self.spawner.clone(),
                    next_id: self.next_id.clone(),
                    replicas: Vec::new(),
                    notify: Arc::new(Notify::new()),
                    state: state.clone(),
                    routed: routed.clone(),
                };
                let task = tokio::spawn(supervisor.run(desired_rx, shutdown_rx));
                subsets.insert(
                    subset.to_owned(),
                    SubsetHandle::Processes {
                        desired,
                        shutdown,
                        state,
                        routed,
                        task,
                    },
                );
            }
        }
        Ok(())
    }

    /// Scales a subset to `replicas` of `version`, keeping its template.
    pub fn scale(&self, subset: &str, version: &str, replicas: u32) -> Result<(), WorkloadError> {
        let template = {
            let subsets = self.subsets.lock().expect("workloads lock");
            match subsets.get(subset) {
                Some(SubsetHandle::Fixed(_)) => {
                    return Err(WorkloadError::FixedEndpoints(subset.to_owned()));
                }
                Some(SubsetHandle::Processes { desired, .. }) => desired.borrow().template.clone(),
                None => None,
            }
        };
        self.set_desired(
            subset,
            Desired {
                version: version.to_owned(),
                replicas,
                template,
            },
        )
    }

    /// The desired state of a subset run as processes.
    pub fn desired(&self, subset: &str) -> Option<Desired> {
        match self.subsets.lock().expect("workloads lock").get(subset) {
            Some(SubsetHandle::Processes { desired, .. }) => Some(desired.borrow().clone()),
            _ => None,
        }
    }

    /// The state of a subset.
    pub fn status(&self, subset: &str) -> Result<SubsetStatus, WorkloadError> {
        if !self.router.has_subset(subset) {
            return Err(WorkloadError::UnknownSubset {
                subset: subset.to_owned(),
                known: self.router.subsets().join(", "),
            });
        }
        let subsets = self.subsets.lock().expect("workloads lock");
        let endpoints: Vec<String> = self
            .router
            .ready_endpoints(subset)
            .iter()
            .map(ToString::to_string)
            .collect();
        Ok(match subsets.get(subset) {
            Some(SubsetHandle::Fixed(fixed)) => SubsetStatus {
                subset: subset.to_owned(),
                version: String::new(),
                desired_replicas: fixed.len() as u32,
                ready_replicas: endpoints.len() as u32,
                available_replicas: endpoints.len() as u32,
                updated_replicas: fixed.len() as u32,
                endpoints,
                fixed_endpoints: true,
                replicas: Vec::new(),
            },
            Some(SubsetHandle::Processes { desired, state, .. }) => {
                let desired = desired.borrow().clone();
                let replicas = state.lock().expect("state lock").clone();
                let current =
                    |r: &&ReplicaStatus| r.version == desired.version && r.phase != Phase::Stopping;
                SubsetStatus {
                    subset: subset.to_owned(),
                    version: desired.version.clone(),
                    desired_replicas: desired.replicas,
                    ready_replicas: endpoints.len() as u32,
                    available_replicas: replicas
                        .iter()
                        .filter(current)
                        .filter(|r| r.phase == Phase::Ready)
                        .count() as u32,
                    updated_replicas: replicas.iter().filter(current).count() as u32,
                    endpoints,
                    fixed_endpoints: false,
                    replicas,
                }
            }
            None => SubsetStatus {
                subset: subset.to_owned(),
                version: String::new(),
                desired_replicas: 0,
                ready_replicas: 0,
                available_replicas: 0,
                updated_replicas: 0,
                endpoints,
                fixed_endpoints: false,
                replicas: Vec::new(),
            },
        })
    }

    /// Stops every replica gracefully and waits until all are gone.
    pub async fn shutdown(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut subsets = self.subsets.lock().expect("workloads lock");
            std::mem::take(&mut *subsets)
                .into_values()
                .filter_map(|h| match h {
                    SubsetHandle::Processes {
                        shutdown,
                        task,
                        routed,
                        ..
                    } => {
                        let _ = shutdown.send(true);
                        drop(routed);
                        Some(task)
                    }
                    SubsetHandle::Fixed(_) => None,
                })
                .collect()
        };
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// One subset's supervisor: reconciles replicas to the desired state and publishes the ready
/// endpoints.
struct Supervisor {
    subset: String,
    router: Arc<Router>,
    spawner: Arc<Spawner>,
    next_id: Arc<Mutex<u64>>,
    replicas: Vec<Replica>,
    notify: Arc<Notify>,
    state: Arc<Mutex<Vec<ReplicaStatus>>>,
    routed: Arc<Mutex<Vec<SocketAddr>>>,
}

struct Replica {
    id: u64,
    version: String,
    template: WorkloadTemplate,
    shared: Arc<Mutex<ReplicaStatus>>,
    stop: watch::Sender<bool>,
    stopping: bool,
    task: JoinHandle<()>,
}

impl Replica {
    fn phase(&self) -> Phase {
        self.shared.lock().expect("replica lock").phase
    }

    fn ready_addr(&self) -> Option<SocketAddr> {
        let s = self.shared.lock().expect("replica lock");
        (s.phase == Phase::Ready && !self.stopping)
            .then(|| s.port.map(|p| SocketAddr::from(([127, 0, 0, 1], p))))
            .flatten()
    }
}

impl Supervisor {
    async fn run(
        mut self,
        mut desired: watch::Receiver<Desired>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            if *shutdown.borrow() {
                break;
            }
            let want = desired.borrow().clone();
            self.reconcile(&want);
            tokio::select! {
                changed = desired.changed() => if changed.is_err() { break },
                _ = shutdown.changed() => {},
                () = self.notify.notified() => {},
                _ = tick.tick() => {},
            }
        }
        // Shut down: out of routing, then stop everything and wait.
        for replica in &mut self.replicas {
            replica.stopping = true;
        }
        self.publish();
        for replica in &self.replicas {
            let _ = replica.stop.send(true);
        }
        for replica in self.replicas.drain(..) {
            let _ = replica.task.await;
        }
        self.publish();
    }

    fn reconcile(&mut self, want: &Desired) {
        self.replicas.retain(|r| !r.task.is_finished());
        let is_current =
            |r: &Replica| r.version == want.version && Some(&r.template) == want.template.as_ref();
        let current: Vec<usize> = (0..self.replicas.len())
            .filter(|&i| !self.replicas[i].stopping && is_current(&self.replicas[i]))
            .collect();
        let wanted = want.replicas as usize;
        if current.len() < wanted
            && let Some(template) = &want.template
        {
            for _ in current.len()..wanted {
                self.start(&want.version, template.clone());
            }
        } else if current.len() > wanted {
            // Stop the surplus, the least useful first: not ready, then the newest.
            let mut surplus = current.clone();
            surplus.sort_by_key(|&i| {
                (
                    self.replicas[i].phase() == Phase::Ready,
                    std::cmp::Reverse(self.replicas[i].id),
                )
            });
            for &i in surplus.iter().take(current.len() - wanted) {
                self.replicas[i].stopping = true;
            }
        }
        let current_ready = self
            .replicas
            .iter()
            .filter(|r| !r.stopping && is_current(r) && r.phase() == Phase::Ready)
            .count();
        let replaced = current_ready >= wanted;
        for replica in &mut self.replicas {
            if !replica.stopping
                && !is_current(replica)
                && (replaced || replica.phase() != Phase::Ready)
            {
                replica.stopping = true;
            }
        }
        // Out of routing first, then the stop signal (the replica waits its drain delay).
        self.publish();
        for replica in &self.replicas {
            if replica.stopping {
                let _ = replica.stop.send(true);
            }
        }
    }

    fn publish(&self) {
        let ready: Vec<SocketAddr> = self
            .replicas
            .iter()
            .filter_map(Replica::ready_addr)
            .collect();
        let mut routed = self.routed.lock().expect("routed lock");
        if *routed != ready {
            self.router.set_endpoints(&self.subset, ready.clone());
            *routed = ready;
        }
        let mut state = self.state.lock().expect("state lock");
        *state = self
            .replicas
            .iter()
            .map(|r| {
                let mut s = r.shared.lock().expect("replica lock").clone();
                if r.stopping {
                    s.phase = Phase::Stopping;
                }
                s
            })
            .collect();
    }

    fn start(&mut self, version: &str, template: WorkloadTemplate) {
        let id = {
            let mut next = self.next_id.lock().expect("id lock");
            *next += 1;
            *next
        };
        let shared = Arc::new(Mutex::new(ReplicaStatus {
            id,
            version: version.to_owned(),
            phase: Phase::Starting,
            port: None,
            pid: None,
            restarts: 0,
            last_exit: None,
        }));
        let (stop, stop_rx) = watch::channel(false);
        let runner = ReplicaRunner {
            version: version.to_owned(),
            template: template.clone(),
            shared: shared.clone(),
            notify: self.notify.clone(),
            spawner: self.spawner.clone(),
        };
        let task = tokio::spawn(runner.run(stop_rx));
        self.replicas.push(Replica {
            id,
            version: version.to_owned(),
            template,
            shared,
            stop,
            stopping: false,
            task,
        });
    }
}

/// Runs one replica: start, probe, restart on exit, stop when told.
struct ReplicaRunner {
    version: String,
    template: WorkloadTemplate,
    shared: Arc<Mutex<ReplicaStatus>>,
    notify: Arc<Notify>,
    spawner: Arc<Spawner>,
}

enum Ended {
    Exited(String),
    Stopped,
}

impl ReplicaRunner {
    fn update(&self, change: impl FnOnce(&mut ReplicaStatus)) {
        change(&mut self.shared.lock().expect("replica lock"));
        self.notify.notify_one();
    }

    async fn run(self, mut stop: watch::Receiver<bool>) {
        let backoff = self.template.restart_backoff;
        let mut delay = Duration::from_millis(backoff.initial_ms);
        loop {
            if *stop.borrow() {
                return;
            }
            let started = Instant::now();
            let (ended, was_ready_for) = self.run_once(&mut stop).await;
            match ended {
                Ended::Stopped => return,
                Ended::Exited(how) => {
                    self.update(|s| {
                        s.phase = Phase::Crashed;
                        s.pid = None;
                        s.last_exit = Some(how);
                    });
                }
            }
            if was_ready_for >= Duration::from_secs(10)
                || started.elapsed() >= Duration::from_secs(60)
            {
                delay = Duration::from_millis(backoff.initial_ms);
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stop.changed() => return,
            }
            delay = (delay * 2).min(Duration::from_millis(backoff.max_ms));
            self.update(|s| s.restarts += 1);
        }
    }

    /// Starts the process and follows it until it exits or is stopped. Returns how it ended
    /// and how long it had been ready.
    async fn run_once(&self, stop: &mut watch::Receiver<bool>) -> (Ended, Duration) {
        let port = match free_port() {
            Ok(port) => port,
            Err(e) => return (Ended::Exited(format!("no free port: {e}")), Duration::ZERO),
        };
        let argv = self.template.argv(&self.version, port);
        let env = self.template.env_for(&self.version, port);
        let mut child = match self.spawner.spawn(argv.clone(), env).await {
            Ok(child) => child,
            Err(e) => {
                return (
                    Ended::Exited(format!("cannot start {:?}: {e}", argv[0])),
                    Duration::ZERO,
                );
            }
        };
        let pid = child.id();
        let group = pid.map(|pid| GroupGuard(Pid::from_raw(pid as i32)));
        self.update(|s| {
            s.phase = Phase::Starting;
            s.port = Some(port);
            s.pid = pid;
        });
        let readiness = &self.template.readiness;
        let url = format!("http://127.0.0.1:{port}{}", readiness.path);
        let period = Duration::from_millis(readiness.period_ms);
        let timeout = Duration::from_millis(readiness.timeout_ms);
        let mut failures = 0u32;
        let mut ready_since: Option<Instant> = None;
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            tokio::select! {
                status = child.wait() => {
                    break Ended::Exited(match status {
                        Ok(status) => describe_exit(status),
                        Err(e) => format!("cannot wait for the process: {e}"),
                    });
                }
                _ = stop.changed() => break Ended::Stopped,
                _ = tick.tick() => {
                    let ok = probe(&url, timeout).await;
                    if ok {
                        failures = 0;
                        if ready_since.is_none() {
                            ready_since = Some(Instant::now());
                            self.update(|s| s.phase = Phase::Ready);
                        }
                    } else {
                        failures += 1;
                        if ready_since.is_some() && failures >= readiness.failure_threshold {
                            ready_since = None;
                            self.update(|s| s.phase = Phase::NotReady);
                        }
                    }
                }
            }
        };
        let ready_for = ready_since.map(|t| t.elapsed()).unwrap_or_default();
        match ended {
            Ended::Stopped => {
                self.update(|s| s.phase = Phase::Stopping);
                tokio::time::sleep(Duration::from_millis(self.template.drain_delay_ms)).await;
                if let Some(group) = &group {
                    group.signal(Signal::SIGTERM);
                }
                let exited = tokio::time::timeout(self.template.grace(), child.wait()).await;
                if exited.is_err() {
                    if let Some(group) = &group {
                        group.signal(Signal::SIGKILL);
                    }
                    let _ = child.wait().await;
                }
                // Whatever the main process left in its group goes too.
                drop(group);
                self.update(|s| {
                    s.pid = None;
                    s.last_exit = Some("stopped".into());
                });
                (Ended::Stopped, ready_for)
            }
            Ended::Exited(how) => {
                drop(group);
                (Ended::Exited(how), ready_for)
            }
        }
    }
}

fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        _ => "exited".into(),
    }
}

/// Kills a replica's process group (SIGKILL) when dropped.
struct GroupGuard(Pid);

impl GroupGuard {
    fn signal(&self, signal: Signal) {
        // ESRCH once everything has exited is expected.
        let _ = killpg(self.0, signal);
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// A free loopback port (free when asked; a replica that loses the race crashes and restarts
/// on another).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn probe_client() -> &'static Client<HttpConnector, Empty<Bytes>> {
    static CLIENT: OnceLock<Client<HttpConnector, Empty<Bytes>>> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(HttpConnector::new())
    })
}

async fn probe(url: &str, timeout: Duration) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match tokio::time::timeout(timeout, probe_client().get(uri)).await {
        Ok(Ok(response)) => {
            let s = response.status();
            s.is_success() || s.is_redirection()
        }
        _ => false,
    }
}

/// What the spawner thread is asked.
struct SpawnRequest {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    reply: oneshot::Sender<std::io::Result<Child>>,
}

/// Starts children from one long-lived thread, so that their parent-death signal (which
/// follows the forking thread) fires when the agent dies, not when a worker thread retires.
struct Spawner {
    requests: Mutex<std::sync::mpsc::Sender<SpawnRequest>>,
}

impl Spawner {
    fn start() -> Spawner {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
        let runtime = tokio::runtime::Handle::current();
        let setpriv = find_setpriv();
        std::thread::Builder::new()
            .name("flotilla-spawner".into())
            .spawn(move || {
                let _context = runtime.enter();
                for request in rx {
                    let _ = request.reply.send(spawn_now(
                        setpriv.as_ref(),
                        &request.argv,
                        &request.env,
                    ));
                }
            })
            .expect("start the spawner thread");
        Spawner {
            requests: Mutex::new(tx),
        }
    }

    async fn spawn(&self, argv: Vec<String>, env: Vec<(String, String)>) -> std::io::Result<Child> {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .requests
            .lock()
            .expect("spawner lock")
            .send(SpawnRequest { argv, env, reply });
        if sent.is_err() {
            return Err(std::io::Error::other("the spawner thread is gone"));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the spawner thread is gone")))
    }
}

fn find_setpriv() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("setpriv"))
        .find(|p| p.is_file())
}

fn spawn_now(
    setpriv: Option<&PathBuf>,
    argv: &[String],
    env: &[(String, String)],
) -> std::io::Result<Child> {
    let mut command = match setpriv {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--"]).args(argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    // The agent's stdout carries its own events; children write to its stderr.
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    command
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true);
    command.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_described() {
        assert_eq!(
            describe_exit(ExitStatus::from_raw(1 << 8)),
            "exited with code 1"
        );
        assert_eq!(describe_exit(ExitStatus::from_raw(9)), "killed by SIGKILL");
    }
}
