//! Test-only Kubernetes environment: real clusters on loopback for Flotilla's tests.
//!
//! [`TestEnv::start`] runs `tools/k8s-testenv/start.sh`, which starts one etcd and N clusters
//! sharing it (per cluster a kube-apiserver with its own `--etcd-prefix`, port and admin token,
//! a kube-controller-manager, a kube-scheduler and kwok), writes a kubeconfig per cluster and
//! installs the given CRDs. Every binary is upstream's, built from the Go module proxy by
//! `tools/k8s-testenv/build.sh` into a cache outside the work tree the first time it is needed
//! (slow once, then cached): a missing binary is built, never skipped.
//!
//! The one stand-in is the kubelet: kwok fakes the Nodes and marks the Pods the scheduler bound
//! Running and Ready with a `status.podIP`, as a kubelet would; no container runs. With
//! [`Options::pod_network`], the fake Pods also get a network, as part of that stand-in: each API
//! server reaches the cluster network through a CONNECT proxy ([`PodNetwork`]) that takes every
//! pod IP for this machine's loopback, so a Pod at `10.64.0.5:P` is the test's server on
//! `127.0.0.1:P` (nothing leaves loopback).
//!
//! Teardown: dropping the [`TestEnv`] (also while unwinding from a panic) stops every process;
//! if the test process dies outright, `setpriv --pdeathsig` kills them. Start the environment on
//! the test's own thread (not in `spawn_blocking`): the death signal follows the thread that
//! spawned the script.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What can go wrong while building or running the environment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A process could not be spawned or a file could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `tools/k8s-testenv/build.sh` failed (its output went to stderr).
    #[error("building the Kubernetes test environment failed: {0}")]
    Build(String),
    /// `start.sh` exited or timed out before the clusters were ready.
    #[error("starting the Kubernetes test environment failed: {0}")]
    Start(String),
    /// A kubeconfig could not be turned into a client configuration.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// The underlying error.
        source: kube::config::KubeconfigError,
    },
    /// A kube client could not be created.
    #[error("kube client: {0}")]
    Client(#[from] kube::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// `tools/k8s-testenv/` in this repository.
pub fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/k8s-testenv")
}

/// The directory holding the built binaries (`kube-apiserver`, `kube-controller-manager`,
/// `kube-scheduler`, `etcd`, `kwok`, `rollouts-controller`, `kubectl-argo-rollouts`), built by
/// `build.sh` first if missing (its progress goes to stderr). Cached for the process.
pub fn bin_dir() -> Result<PathBuf, Error> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| run_build(&[]).map(PathBuf::from))
        .clone()
        .map_err(Error::Build)
}

/// The source of a Go module of the wrapper module's graph, from the Go module cache (e.g.
/// `github.com/argoproj/argo-rollouts`).
pub fn module_dir(module: &str) -> Result<PathBuf, Error> {
    run_build(&["--module-dir", module])
        .map(PathBuf::from)
        .map_err(Error::Build)
}

/// The podhash helper (`tools/k8s-testenv/podhash`: Argo Rollouts' own pod-template hash of
/// given templates, and the Go type graph of a PodTemplateSpec), built first if missing.
pub fn podhash() -> Result<PathBuf, Error> {
    run_build(&["--podhash"])
        .map(PathBuf::from)
        .map_err(Error::Build)
}

/// Argo Rollouts' CRDs (Rollout, AnalysisTemplate, ClusterAnalysisTemplate, AnalysisRun,
/// Experiment) from the Argo Rollouts module the binaries were built from.
pub fn argo_rollouts_crds() -> Result<Vec<PathBuf>, Error> {
    let dir = module_dir("github.com/argoproj/argo-rollouts")?.join("manifests/crds");
    let mut crds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(io(format!("reading {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("-crd.yaml"))
        .collect();
    crds.sort();
    if crds.is_empty() {
        return Err(Error::Build(format!("no *-crd.yaml in {}", dir.display())));
    }
    Ok(crds)
}

/// Where the module cache holds a module of `tools/k8s-testenv/crds/go.mod` (the CRDs of Gateway
/// API and Istio), downloaded from the module proxy if needed.
pub fn crd_module_dir(module: &str) -> Result<PathBuf, Error> {
    run_build(&["--crd-module-dir", module])
        .map(PathBuf::from)
        .map_err(Error::Build)
}

/// Gateway API's standard-channel CRDs (HTTPRoute, GRPCRoute, Gateway, GatewayClass,
/// ReferenceGrant, BackendTLSPolicy), one file each, from the `sigs.k8s.io/gateway-api` module
/// `crds/go.mod` pins: the API server then checks every route write against Gateway API's own
/// schema and CEL rules.
pub fn gateway_api_crds() -> Result<Vec<PathBuf>, Error> {
    let dir = crd_module_dir("sigs.k8s.io/gateway-api")?.join("config/crd/standard");
    let mut crds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(io(format!("reading {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("gateway.networking.k8s.io_") && n.ends_with(".yaml")
            })
        })
        .collect();
    crds.sort();
    if crds.is_empty() {
        return Err(Error::Build(format!(
            "no gateway.networking.k8s.io_*.yaml in {}",
            dir.display()
        )));
    }
    Ok(crds)
}

/// Istio's CRDs for the kinds Flotilla edits (VirtualService, DestinationRule), from the
/// `istio.io/api` module `crds/go.mod` pins: Istio ships them in one file
/// (`kubernetes/customresourcedefinitions.gen.yaml`), so each is written once to a file of its
/// own in the cache beside the binaries. The API server then checks every write against Istio's
/// schema and CEL rules.
pub fn istio_crds() -> Result<Vec<PathBuf>, Error> {
    const KINDS: [&str; 2] = [
        "destinationrules.networking.istio.io",
        "virtualservices.networking.istio.io",
    ];
    let module = crd_module_dir("istio.io/api")?;
    let version = module
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split_once('@'))
        .map_or("unknown", |(_, v)| v)
        .to_owned();
    let source = module.join("kubernetes/customresourcedefinitions.gen.yaml");
    let text =
        std::fs::read_to_string(&source).map_err(io(format!("reading {}", source.display())))?;
    let out = bin_dir()?
        .parent()
        .map_or_else(std::env::temp_dir, Path::to_path_buf)
        .join(format!("crds/istio-{version}"));
    std::fs::create_dir_all(&out).map_err(io(format!("creating {}", out.display())))?;
    let mut files = Vec::new();
    for kind in KINDS {
        let marker = format!("\n  name: {kind}\n");
        let document = text
            .split("\n---\n")
            .find(|doc| doc.contains(&marker))
            .ok_or_else(|| Error::Build(format!("no CRD {kind} in {}", source.display())))?;
        let file = out.join(format!("{kind}.yaml"));
        if std::fs::read_to_string(&file).ok().as_deref() != Some(document) {
            // Written beside, then renamed: tests starting at once never read half a file.
            let partial = out.join(format!("{kind}.yaml.{}", std::process::id()));
            std::fs::write(&partial, document)
                .map_err(io(format!("writing {}", partial.display())))?;
            std::fs::rename(&partial, &file)
                .map_err(io(format!("renaming to {}", file.display())))?;
        }
        files.push(file);
    }
    Ok(files)
}

/// Runs build.sh with `args`; its last stdout line is the answer.
fn run_build(args: &[&str]) -> Result<String, String> {
    let script = tools_dir().join("build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last() {
        Some(line) if out.status.success() && !line.trim().is_empty() => Ok(line.trim().into()),
        _ => Err(format!(
            "{} {:?} exited with {}",
            script.display(),
            args,
            out.status
        )),
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// Number of clusters (one kube-apiserver, controller-manager, scheduler, kwok each).
    pub clusters: usize,
    /// Fake Nodes per cluster.
    pub nodes: usize,
    /// CRD manifests (one CRD per file) installed in every cluster before it counts as ready.
    pub crds: Vec<PathBuf>,
    /// How long start.sh may take once the binaries exist.
    pub timeout: Duration,
    /// A kubeconfig naming a token webhook (TokenReview v1) every API server asks about bearer
    /// tokens it does not know (EKS's authenticator, in the EKS tests).
    pub token_webhook: Option<PathBuf>,
    /// Gives the fake Pods a network the API servers reach (their service, pod and node
    /// proxies): see [`PodNetwork`].
    pub pod_network: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            clusters: 1,
            nodes: 2,
            crds: Vec::new(),
            timeout: Duration::from_secs(180),
            token_webhook: None,
            pod_network: false,
        }
    }
}

/// One cluster of a running [`TestEnv`].
#[derive(Debug, Clone)]
pub struct Cluster {
    /// `cluster-<i>`.
    pub name: String,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// The admin bearer token (group `system:masters`).
    pub token: String,
    /// A kubeconfig for the admin, with the environment's CA.
    pub kubeconfig: PathBuf,
}

impl Cluster {
    /// A kube-rs client for this cluster's admin (installs rustls' ring provider if none is).
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let err = |source| Error::Kubeconfig {
            path: self.kubeconfig.clone(),
            source,
        };
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).map_err(err)?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(err)?;
        Ok(kube::Client::try_from(config)?)
    }
}

/// A running environment; dropping it stops every process and removes its directory (kept when
/// `FLOTILLA_K8S_KEEP` is set, for debugging).
#[derive(Debug)]
pub struct TestEnv {
    script: Child,
    clusters: Vec<Cluster>,
    bin_dir: PathBuf,
    startup: Duration,
    pod_network: Option<PodNetwork>,
    dir: Option<tempfile::TempDir>,
}

impl TestEnv {
    /// Builds the binaries if missing, then starts the environment and waits until every
    /// cluster is ready (API served, Nodes Ready, default ServiceAccount, CRDs Established).
    pub fn start(options: &Options) -> Result<TestEnv, Error> {
        let bin_dir = bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("flotilla-k8s-")
            .tempdir()
            .map_err(io("creating the environment directory"))?;
        let log_path = dir.path().join("start.log");
        let log = File::create(&log_path).map_err(io("creating start.log"))?;
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--", "bash"])
            .arg(tools_dir().join("start.sh"))
            .arg("--dir")
            .arg(dir.path())
            .args(["--clusters", &options.clusters.to_string()])
            .args(["--nodes", &options.nodes.to_string()])
            .args(["--timeout", &options.timeout.as_secs().to_string()])
            .arg("--bin-dir")
            .arg(&bin_dir);
        for crd in &options.crds {
            cmd.arg("--crd").arg(crd);
        }
        if let Some(webhook) = &options.token_webhook {
            cmd.arg("--token-webhook").arg(webhook);
        }
        let pod_network = if options.pod_network {
            let network = PodNetwork::start(&dir.path().join("pod-network.sock"))?;
            cmd.arg("--egress-uds").arg(&network.socket);
            Some(network)
        } else {
            None
        };
        let started = Instant::now();
        let mut script = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(io("spawning setpriv (util-linux) with start.sh"))?;
        let stdout = script.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // start.sh enforces options.timeout itself; this is the backstop.
        let deadline = started + options.timeout + Duration::from_secs(30);
        let mut env = TestEnv {
            script,
            clusters: Vec::new(),
            bin_dir,
            startup: Duration::ZERO,
            pod_network,
            dir: Some(dir),
        };
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(line) if line.starts_with("k8s-testenv: ready") => break,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(e) => {
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    let reason = match e {
                        mpsc::RecvTimeoutError::Timeout => "timed out",
                        mpsc::RecvTimeoutError::Disconnected => "start.sh exited",
                    };
                    return Err(Error::Start(format!("{reason}:\n{log}")));
                }
            }
        }
        env.startup = started.elapsed();
        let root = env.dir().to_path_buf();
        for i in 0..options.clusters {
            let c = root.join(format!("cluster-{i}"));
            let read = |name: &str| {
                std::fs::read_to_string(c.join(name))
                    .map(|s| s.trim().to_string())
                    .map_err(io(format!("reading {}/{name}", c.display())))
            };
            env.clusters.push(Cluster {
                name: format!("cluster-{i}"),
                server: format!("https://127.0.0.1:{}", read("port")?),
                token: read("token")?,
                kubeconfig: c.join("kubeconfig"),
            });
        }
        Ok(env)
    }

    /// The clusters, in order.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// Cluster `i`.
    pub fn cluster(&self, i: usize) -> &Cluster {
        &self.clusters[i]
    }

    /// Argo Rollouts' own controller against cluster `i` (all namespaces, no leader election,
    /// metrics and health on free loopback ports), until dropped.
    pub fn spawn_argo_controller(&self, i: usize) -> Result<Process, Error> {
        let free = || -> Result<String, Error> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(io("finding a free port"))?
                .port()
                .to_string())
        };
        let (metrics, healthz) = (free()?, free()?);
        let kubeconfig = self.clusters[i].kubeconfig.display().to_string();
        self.spawn(
            "rollouts-controller",
            "rollouts-controller",
            &[
                "--kubeconfig",
                &kubeconfig,
                "--leader-elect=false",
                "--metricsport",
                &metrics,
                "--healthzPort",
                &healthz,
            ],
        )
    }

    /// Kills cluster `i`'s kube-apiserver with SIGKILL and keeps it down until
    /// [`TestEnv::restore_apiserver`] (its controller-manager, scheduler and kwok keep running
    /// and retry, as beside a crashed control plane).
    pub fn kill_apiserver(&self, i: usize) -> Result<(), Error> {
        let dir = self.dir().join(format!("cluster-{i}/apiserver"));
        std::fs::write(dir.join("down"), b"").map_err(io("marking the API server down"))?;
        let pid =
            std::fs::read_to_string(dir.join("pid")).map_err(io("reading the API server's pid"))?;
        let status = Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .map_err(io("running kill"))?;
        if !status.success() {
            return Err(Error::Start(format!(
                "kill -KILL {} exited with {status}",
                pid.trim()
            )));
        }
        Ok(())
    }

    /// Starts cluster `i`'s kube-apiserver again (same port, same etcd data) and waits until it
    /// accepts connections (at most 60 s).
    pub fn restore_apiserver(&self, i: usize) -> Result<(), Error> {
        let dir = self.dir().join(format!("cluster-{i}/apiserver"));
        std::fs::remove_file(dir.join("down")).map_err(io("marking the API server up"))?;
        let address = self.clusters[i]
            .server
            .trim_start_matches("https://")
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(&address).is_err() {
            if Instant::now() > deadline {
                return Err(Error::Start(format!(
                    "cluster-{i}'s API server did not come back on {address}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Where the binaries are.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The environment's directory (logs under `logs/`, one `cluster-<i>/` per cluster).
    pub fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("dir lives as long as the env")
            .path()
    }

    /// The addresses (`IP:PORT`) the API servers asked the pod network for, in order (empty
    /// without [`Options::pod_network`]).
    pub fn pod_network_dials(&self) -> Vec<String> {
        self.pod_network
            .as_ref()
            .map(|n| n.dials.lock().expect("dials lock").clone())
            .unwrap_or_default()
    }

    /// How long start.sh took to report every cluster ready.
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// Starts one of the built binaries (e.g. `rollouts-controller`) with `args`, its output in
    /// `logs/<name>.log`; it is killed when the returned [`Process`] is dropped or this test
    /// process dies.
    pub fn spawn(&self, name: &str, binary: &str, args: &[&str]) -> Result<Process, Error> {
        let log_path = self.dir().join("logs").join(format!("{name}.log"));
        let log = File::create(&log_path).map_err(io(format!("creating {name}.log")))?;
        let err_log = log.try_clone().map_err(io("cloning a log handle"))?;
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .arg(self.bin_dir.join(binary))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(io(format!("spawning {binary}")))?;
        Ok(Process { child, log_path })
    }

    /// Runs one of the built binaries to completion and returns its stdout, or an error with
    /// its stderr if it failed.
    pub fn run(&self, binary: &str, args: &[&str]) -> Result<String, Error> {
        let out = Command::new(self.bin_dir.join(binary))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(io(format!("running {binary}")))?;
        if !out.status.success() {
            return Err(Error::Start(format!(
                "{binary} {args:?} exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // SIGTERM lets start.sh stop its components and reap them; SIGKILL if it does not.
        let _ = Command::new("kill")
            .args(["-TERM", &self.script.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.script.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.script.kill();
        let _ = self.script.wait();
        if std::env::var_os("FLOTILLA_K8S_KEEP").is_some()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("k8s-testenv: kept {}", dir.keep().display());
        }
    }
}

/// A process started by [`TestEnv::spawn`]; killed on drop.
#[derive(Debug)]
pub struct Process {
    child: Child,
    log_path: PathBuf,
}

impl Process {
    /// Its process id (`setpriv` execs the program: the same process).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fake Pods' network, part of the kubelet stand-in (no container runs, so no pod network
/// exists): an HTTP CONNECT proxy on a Unix socket that every API server's egress selector uses
/// for the `cluster` network (its service, pod and node proxies), as a konnectivity server
/// carries that traffic in clusters whose control plane sits apart from their nodes. It takes
/// every pod IP for this machine's loopback: `CONNECT 10.64.0.5:P` is a connection to
/// `127.0.0.1:P`, so a Service whose Pods' `targetPort` is P reaches the test's server on that
/// port. Stopped with the environment.
#[derive(Debug)]
pub struct PodNetwork {
    socket: PathBuf,
    dials: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PodNetwork {
    fn start(socket: &Path) -> Result<PodNetwork, Error> {
        let listener = std::os::unix::net::UnixListener::bind(socket)
            .map_err(io(format!("binding {}", socket.display())))?;
        let network = PodNetwork {
            socket: socket.to_path_buf(),
            dials: Default::default(),
            stop: Default::default(),
        };
        let (dials, stop) = (network.dials.clone(), network.stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let dials = dials.clone();
                std::thread::spawn(move || {
                    let _ = tunnel(stream, &dials);
                });
            }
        });
        Ok(network)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accepting thread so that it sees the flag.
        let _ = std::os::unix::net::UnixStream::connect(&self.socket);
    }
}

/// One CONNECT: reads the request head, connects to loopback at the asked port, answers 200 (or
/// 502), then copies both ways until either side closes.
fn tunnel(
    mut client: std::os::unix::net::UnixStream,
    dials: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 || head.len() > 8192 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let target = head
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("CONNECT "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    let port = target
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok());
    dials.lock().expect("dials lock").push(target);
    let upstream = match port.map(|p| std::net::TcpStream::connect(("127.0.0.1", p))) {
        Some(Ok(upstream)) => upstream,
        _ => {
            client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")?;
            return Ok(());
        }
    };
    client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    let (mut client_read, mut upstream_write) = (client.try_clone()?, upstream.try_clone()?);
    let forward = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_read, &mut upstream_write);
        let _ = upstream_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut upstream_read, mut client_write) = (upstream, client);
    let _ = std::io::copy(&mut upstream_read, &mut client_write);
    let _ = client_write.shutdown(std::net::Shutdown::Write);
    let _ = forward.join();
    Ok(())
}
